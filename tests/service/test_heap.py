"""`ratekeeper serve` freezes its start-up heap (`ServeOptions.freeze_heap`, set by the CLI):
each full collection of Python's cyclic GC then scans only what was made since, so the loop
pauses for less (measured in docs/service.md, Speed)."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path
from typing import Any

from ratekeeper.service._server import ServeOptions, serve

POLICIES = Path(__file__).parent / "policies" / "service.toml"


async def _frozen_when_ready(freeze: bool) -> int:
    stop = asyncio.Event()
    seen: dict[str, int] = {}

    def ready(listening: dict[str, Any]) -> None:
        seen["frozen"] = gc.get_freeze_count()
        stop.set()

    try:
        status = await serve(ServeOptions(config=POLICIES, http_port=0, grpc_port=None,
                                          grace=0.1, freeze_heap=freeze),
                             on_ready=ready, stop=stop)
    finally:
        gc.unfreeze()  # this test's process is pytest's: give its heap back to the GC
    assert status == 0
    return seen["frozen"]


async def test_serve_freezes_its_start_up_heap_when_asked() -> None:
    assert gc.get_freeze_count() == 0
    assert await _frozen_when_ready(True) > 10_000  # modules, starlette, the policies...
    assert await _frozen_when_ready(False) == 0
