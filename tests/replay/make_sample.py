"""Make the committed sample logs in tests/replay/data/ with a real nginx (Debian's package).

    apt-get install -y nginx        # /usr/sbin/nginx; its service need not run
    .venv/bin/python tests/replay/make_sample.py [--requests 300] [--out tests/replay/data]

Starts nginx in the foreground on 127.0.0.1 and [::1] on a free port, with a temporary prefix
and three access logs of the same requests (a custom ``log_format``, the predefined
``combined``, and JSON Lines with ``escape=json``), sends a bounded load (a fixed number of
requests, deterministic by seed: several methods, query strings, quotes, backslashes and UTF-8
in the user agent, X-Forwarded-For, absolute-form targets, a bad request line and a raw quote
in a path), stops nginx and copies the logs. Loopback only.
"""

from __future__ import annotations

import argparse
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: The custom format the sample is written with (also read by the tests).
REPLAY_FORMAT = ('$remote_addr - $remote_user [$time_local] "$request" $status '
                 '$body_bytes_sent "$http_referer" "$http_user_agent" '
                 '"$http_x_forwarded_for" $request_time $msec "$host"')
JSON_FORMAT = ('{"time":"$time_iso8601","msec":"$msec","remote_addr":"$remote_addr",'
               '"request":"$request","status":$status,"bytes":$body_bytes_sent,'
               '"http_user_agent":"$http_user_agent","http_x_forwarded_for":'
               '"$http_x_forwarded_for","host":"$host"}')

CONF = """\
worker_processes 1;
error_log {prefix}/error.log info;
pid {prefix}/nginx.pid;
events {{ worker_connections 64; }}
http {{
    client_body_temp_path {prefix}/tmp/body;
    proxy_temp_path {prefix}/tmp/proxy;
    fastcgi_temp_path {prefix}/tmp/fastcgi;
    uwsgi_temp_path {prefix}/tmp/uwsgi;
    scgi_temp_path {prefix}/tmp/scgi;
    log_format replay '{replay}';
    log_format jsonl escape=json '{jsonl}';
    access_log {prefix}/replay.log replay;
    access_log {prefix}/combined.log combined;
    access_log {prefix}/access.jsonl jsonl;
    server {{
        listen 127.0.0.1:{port};
        {listen6}
        server_name sample.test;
        location / {{ return 200 "ok\\n"; }}
        location /api/ {{ return 200 '{{"ok":true}}\\n'; }}
        location /missing {{ return 404; }}
        location /moved {{ return 301 /; }}
    }}
}}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def have_ipv6() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def send(family: int, host: str, port: int, raw: bytes) -> None:
    with socket.socket(family) as s:
        s.settimeout(5)
        s.connect((host, port))
        s.sendall(raw)
        while s.recv(65536):  # Connection: close: read to the end
            pass


def request(method: str, target: str, headers: dict[str, str]) -> bytes:
    lines = [f"{method} {target} HTTP/1.1", "Connection: close",
             *(f"{k}: {v}" for k, v in headers.items())]
    body = b"x=1" if method in ("POST", "PUT") else b""
    if body:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8") + body


AGENTS = ['Mozilla/5.0 (X11; Linux x86_64) Firefox/128.0', 'curl/7.88.1',
          'bot "quoted" \\backslash\\', 'caf\u00e9-client/1.0 (\u00fcml\u00e4ut)',
          'python-requests/2.31']
PATHS = ["/", "/index.html?page=2&sort=asc", "/api/users/42", "/api/search?q=a%22b",
         "/missing", "/moved", "/static/app.js"]
METHODS = ["GET"] * 6 + ["POST", "HEAD", "PUT", "DELETE", "OPTIONS"]


def load(port: int, n: int, ipv6: bool, seed: int) -> int:
    rng = random.Random(seed)
    sent = 0
    for i in range(n):
        six = ipv6 and i % 5 == 4
        family, host = (socket.AF_INET6, "::1") if six else (socket.AF_INET, "127.0.0.1")
        headers = {"Host": "sample.test" if i % 7 else "other.test",
                   "User-Agent": rng.choice(AGENTS)}
        if i % 3 == 0:
            headers["Referer"] = "http://sample.test/"
        if i % 4 == 0:
            headers["X-Forwarded-For"] = f"203.0.113.{rng.randint(1, 9)}, 10.0.0.{i % 3}"
        target = rng.choice(PATHS)
        if i % 50 == 10:
            target = "http://sample.test/absolute?form=1"
        send(family, host, port, request(rng.choice(METHODS), target, headers))
        sent += 1
        if i % 40 == 0:
            time.sleep(1.05)  # spread the load over several seconds of the log's clock
    # Oddities nginx logs as they come: a bad request line (400), a raw quote in a path.
    send(socket.AF_INET, "127.0.0.1", port, b"HELLO\r\n\r\n")
    send(socket.AF_INET, "127.0.0.1", port,
         request("GET", '/quote"in/path', {"Host": "sample.test", "User-Agent": "raw"}))
    return sent + 2


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "data")
    ap.add_argument("--nginx", default=shutil.which("nginx") or "/usr/sbin/nginx")
    args = ap.parse_args(argv)
    if not Path(args.nginx).exists():
        print("make_sample: nginx not found: apt-get install -y nginx", file=sys.stderr)
        return 2
    port, ipv6 = free_port(), have_ipv6()
    with tempfile.TemporaryDirectory(prefix="rk-nginx-") as prefix:
        (Path(prefix) / "tmp").mkdir()
        conf = Path(prefix) / "nginx.conf"
        conf.write_text(CONF.format(prefix=prefix, port=port, replay=REPLAY_FORMAT,
                                    jsonl=JSON_FORMAT,
                                    listen6=f"listen [::1]:{port};" if ipv6 else ""))
        proc = subprocess.Popen([args.nginx, "-p", prefix, "-c", str(conf),
                                 "-g", "daemon off; master_process on;"])
        try:
            deadline = time.monotonic() + 10
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        print((Path(prefix) / "error.log").read_text(), file=sys.stderr)
                        return 1
                    time.sleep(0.05)
            sent = load(port, args.requests, ipv6, args.seed)
        finally:
            proc.send_signal(signal.SIGQUIT)  # graceful: workers finish and flush the logs
            proc.wait(timeout=10)
        args.out.mkdir(parents=True, exist_ok=True)
        for name in ("replay.log", "combined.log", "access.jsonl"):
            shutil.copy(Path(prefix) / name, args.out / f"nginx-{name}")
    version = subprocess.run([args.nginx, "-v"], check=True, capture_output=True,
                             text=True).stderr.strip()
    print(f"make_sample: {sent} requests to {version} on port {port} (ipv6={ipv6}); "
          f"logs in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
