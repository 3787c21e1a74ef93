"""The live policies: `PolicyHolder` (reload = swap a snapshot) and `Watcher` (polls a file).

`PolicyHolder` owns the policies file. `reload()` parses it into a new immutable snapshot and,
only if the whole file is valid, swaps it in with one attribute assignment; a bad file is
logged (every error, with its location) and the old snapshot stays. Decisions read the
snapshot once, so a decision never sees half of one policy set and half of another. `poll()`
reloads when the file's modification time, size or inode changed; the service's SIGHUP and
the middleware's ``reload()`` call `reload()`. `Watcher` polls every so many seconds of an
injected clock (`tick()` polls when one is due, so tests step a `ManualClock` instead of
sleeping); the service runs it as a task, the middleware ticks it on requests (no thread).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import time
from collections.abc import Callable
from pathlib import Path

from ._loader import load_policies
from ._model import Policies, PolicyError
from ._stats import NullStats, Stats

__all__ = ["PolicyHolder", "Watcher"]

log = logging.getLogger("ratekeeper.policy")


class PolicyHolder:
    """The live `Policies`, loaded from `path`; call it to get the current snapshot.

    The first load raises `PolicyError` (a service must not start without valid policies);
    later loads (`reload`, `poll`) report problems and keep the old snapshot. `clock` (wall
    seconds) stamps each snapshot's ``loaded_at``.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        stats: Stats | None = None,
        loader: Callable[[Path], Policies] = load_policies,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = Path(path)
        self.stats: Stats = NullStats() if stats is None else stats
        self._loader = loader
        self.clock = clock
        self._signature = self._stat()
        self.current: Policies = dataclasses.replace(loader(self.path), generation=1,
                                                     loaded_at=clock())
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
        except Exception as e:  # a loader bug or a file no check foresaw: still a failed
            # reload (kept, counted, shown), never an exception in a request or a signal
            self._signature = signature  # logged once per change of the file, not per poll
            self.last_error = f"{self.path}: the policies could not be loaded: " \
                              f"{type(e).__name__}: {e}"
            self.stats.reload(False, old.generation)
            log.error("policies NOT reloaded: %s; generation %d stays live", self.last_error,
                      old.generation, exc_info=True,
                      extra={"event": "reload_failed", "path": str(self.path),
                             "errors": [self.last_error], "generation": old.generation})
            return False
        self._signature = signature
        self.last_error = None
        if new.sha256 and new.sha256 == old.sha256:
            log.info("policies unchanged (generation %d)", old.generation,
                     extra={"event": "reload_unchanged", "generation": old.generation})
            return True
        gen = old.generation + 1
        self.current = dataclasses.replace(new, generation=gen, loaded_at=self.clock())
        self.stats.reload(True, gen)
        log.info("policies reloaded: generation %d, %s", gen, new.summary(),
                 extra={"event": "reloaded", "generation": gen, "sha256": new.sha256,
                        "path": str(self.path)})
        return True

    def changed(self) -> bool:
        """Whether the file (or a file of the config directory) changed since the last load
        attempt: its mtime, size or inode, or a file added or removed."""
        return self._stat() != self._signature

    def poll(self) -> bool | None:
        """Reload if the file changed: None if unchanged, else what `reload` returned."""
        if not self.changed():
            return None
        return self.reload()

    def _stat(self) -> tuple[tuple[str, int, int, int], ...] | None:
        """What a change is judged by: mtime, size and inode of the file, or of every file
        under a config directory (an edit in place leaves the directory's own mtime alone)."""
        try:
            paths = [self.path] if not self.path.is_dir() else [self.path, *sorted(
                p for p in self.path.rglob("*") if p.is_file())]
            sts = [(str(p), p.stat()) for p in paths]
        except OSError:
            return None
        return tuple((name, st.st_mtime_ns, st.st_size, st.st_ino) for name, st in sts)


class Watcher:
    """``--watch``: `holder.poll()` once every `every` seconds of `clock`.

    `tick()` polls if a period has passed since the last poll (the next one is due `every`
    seconds after it, so a clock that jumps gives one poll, not a burst) and says whether it
    did; `run(stop)` is the service's loop around it. Each poll is a debug ``watch_poll``
    record; `polls` counts them.
    """

    def __init__(self, holder: PolicyHolder, every: float, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if isinstance(every, bool) or not isinstance(every, (int, float)) \
                or not (0 < every < math.inf):
            raise ValueError(f"a watch period must be a number of seconds above 0, "
                             f"got {every!r}")
        self.holder = holder
        self.every = float(every)
        self.clock = clock
        self.polls = 0
        self._next = clock() + self.every

    def __repr__(self) -> str:
        return f"Watcher({str(self.holder.path)!r}, every={self.every:g}s, polls={self.polls})"

    def due_in(self) -> float:
        """Seconds until the next poll is due (0: now)."""
        return max(0.0, self._next - self.clock())

    def tick(self) -> bool:
        """Poll the file if a poll is due; True if it polled."""
        now = self.clock()
        if now < self._next:
            return False
        self._next = now + self.every
        self.polls += 1
        result = self.holder.poll()
        # Each poll at debug level: what the tests (and a curious operator) can count.
        log.debug("polled %s: %s", self.holder.path,
                  "unchanged" if result is None else "changed",
                  extra={"event": "watch_poll", "changed": result is not None})
        return True

    async def run(self, stop: asyncio.Event) -> None:
        """Tick whenever a poll is due, until `stop` is set."""
        while not stop.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), self.due_in())
            if stop.is_set():
                return
            try:
                self.tick()
            except Exception:  # never let the watcher die
                log.exception("watching the policies file failed",
                              extra={"event": "watch_error"})
