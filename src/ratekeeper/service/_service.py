"""The service's shared state: the live policies (`PolicyHolder`) and `Service`.

`PolicyHolder` owns the policies file. `reload()` parses it into a new immutable snapshot and,
only if the whole file is valid, swaps it in with one attribute assignment; a bad file is
logged (every error, with its location) and the old snapshot stays. Checks read the snapshot
once, so a check never sees half of one policy set and half of another. `poll()` reloads when
the file's modification time, size or inode changed (the optional ``--watch``); SIGHUP calls
`reload()` (see `_server`).

`Service` is what the transports share: the engine, the holder, the stats, the body limit and
the "stopping" flag that turns ``/readyz`` and ``/healthz`` to 503 during a graceful shutdown.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path

from ..stores._base import AsyncStore
from ._config import Policies, PolicyError, load_policies
from ._engine import Engine
from ._stats import NullStats, Stats

__all__ = ["PolicyHolder", "Service"]

log = logging.getLogger("ratekeeper.service")

#: Default limit on an HTTP request body or a gRPC message (a check is a few hundred bytes).
DEFAULT_MAX_BODY = 64 * 1024


class PolicyHolder:
    """The live `Policies`, loaded from `path`; call it to get the current snapshot.

    The first load raises `PolicyError` (a service must not start without valid policies);
    later loads (`reload`, `poll`) report problems and keep the old snapshot.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        stats: Stats | None = None,
        loader: Callable[[Path], Policies] = load_policies,
    ) -> None:
        self.path = Path(path)
        self.stats: Stats = NullStats() if stats is None else stats
        self._loader = loader
        self._signature = self._stat()
        self.current: Policies = dataclasses.replace(loader(self.path), generation=1)
        self.last_error: str | None = None
        self.stats.reload(True, 1)

    def __call__(self) -> Policies:
        return self.current

    def __repr__(self) -> str:
        return f"PolicyHolder({str(self.path)!r}, generation={self.current.generation})"

    def reload(self) -> bool:
        """Load the file again; True if a new snapshot is live (or the file is unchanged)."""
        signature = self._stat()
        old = self.current
        try:
            new = self._loader(self.path)
        except PolicyError as e:
            self._signature = signature
            self.last_error = str(e)
            self.stats.reload(False, old.generation)
            # The errors in the message too: a text log shows no structured fields.
            log.error(
                "policies NOT reloaded: %d error(s) in %s; generation %d stays live:%s",
                len(e.issues), self.path, old.generation,
                "".join(f"\n  {i}" for i in e.issues),
                extra={"event": "reload_failed", "path": str(self.path),
                       "errors": [str(i) for i in e.issues], "generation": old.generation},
            )
            return False
        self._signature = signature
        self.last_error = None
        if new.sha256 and new.sha256 == old.sha256:
            log.info("policies unchanged (generation %d)", old.generation,
                     extra={"event": "reload_unchanged", "generation": old.generation})
            return True
        gen = old.generation + 1
        self.current = dataclasses.replace(new, generation=gen)
        self.stats.reload(True, gen)
        log.info("policies reloaded: generation %d, %s", gen, new.summary(),
                 extra={"event": "reloaded", "generation": gen, "sha256": new.sha256,
                        "path": str(self.path)})
        return True

    def changed(self) -> bool:
        """Whether the file's mtime, size or inode differ from the last load attempt."""
        return self._stat() != self._signature

    def poll(self) -> bool | None:
        """Reload if the file changed: None if unchanged, else what `reload` returned."""
        if not self.changed():
            return None
        return self.reload()

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)


class Service:
    """Everything the HTTP and gRPC transports share."""

    def __init__(
        self,
        holder: PolicyHolder,
        store: AsyncStore,
        *,
        stats: Stats | None = None,
        clock: Callable[[], float] | None = None,
        max_body: int = DEFAULT_MAX_BODY,
        store_name: str = "memory",
    ) -> None:
        self.holder = holder
        self.store = store
        self.stats: Stats = NullStats() if stats is None else stats
        self.engine = Engine(holder, store, clock=clock, stats=self.stats)
        self.max_body = max_body
        self.store_name = store_name
        self.stopping = False

    def __repr__(self) -> str:
        return f"Service({self.holder!r}, store={self.store_name}, stopping={self.stopping})"
