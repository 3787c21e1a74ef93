"""A worker process for the concurrency tests: N threads hammering one key.

    python -m tests.integration._hammer '{"url": ..., "prefix": ..., "limits": [...], ...}'

Every thread calls ``store.decide`` on the same checks as fast as it can from ``start``
(Unix time) for ``duration`` seconds, on the server's clock, and the process prints one JSON
list of ``[at, allowed]`` pairs: ``at`` is the server time the decision was made at.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

from ratekeeper import Limit
from ratekeeper.limiter import GLOBAL_KEY
from ratekeeper.stores.redis import RedisStore


def main(spec: dict[str, Any]) -> list[tuple[float, bool]]:
    store = RedisStore.from_url(spec["url"], prefix=spec["prefix"], timeout=5.0)
    limits = [Limit(**kw) for kw in spec["limits"]]
    checks = [(lim, spec["key"] if lim.scope == "key" else GLOBAL_KEY, 1.0) for lim in limits]
    out: list[list[tuple[float, bool]]] = [[] for _ in range(spec["threads"])]
    store.decide(checks, 0.0, consume=False)  # connect and load the script before the start

    def run(i: int) -> None:
        mine = out[i]
        end = spec["start"] + spec["duration"]
        while time.time() < spec["start"]:
            time.sleep(0.001)
        while time.time() < end:
            decisions, at = store.decide(checks, 0.0)
            mine.append((at, all(d.allowed for d in decisions)))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(spec["threads"])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    store.close()
    return [x for part in out for x in part]


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
