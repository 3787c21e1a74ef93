"""Read access logs as a stream of `LogEvent` in time order, in constant memory.

    with read_log("access.log.gz", "combined") as events:
        for ev in events:
            ...
        print(events.stats.summary())

The pieces, each usable alone (the line formats and `reorder` do no I/O):

- a *source*: a path (``str``/``os.PathLike``; gzip'd or not, told by its first bytes, not
  its name), ``"-"`` for standard input, or an open stream, binary (gzip'd or not) or text.
  Bytes are read in 64 KiB chunks and decoded as UTF-8, undecodable bytes becoming U+FFFD;
- a *format* (`_formats`): ``"combined"``, ``"common"``, ``"jsonl"``, ``"trace"``, any string
  with a ``$`` (an nginx ``log_format``), or a `LogFormat`/`JsonFormat`/`TraceFormat`;
- `reorder` (`_order`): events back in time order within `window` seconds.

Nothing is fatal about a line: a malformed line (no match, a bad time, a truncated last line,
a line over 1 MiB, JSON nested deeper than `MAX_JSON_DEPTH`, a gzip stream that ends early)
is counted in `ReadStats` with a few examples, and reading goes on (a broken gzip stream ends
the input there). Blank lines are counted as ``skipped["blank"]``, a run of them at once.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import sys
import zlib
from collections.abc import Iterator
from types import TracebackType
from typing import IO, Union

from .._errors import ConfigError
from . import _hot
from ._events import LogEvent, ReadStats
from ._formats import (
    COMBINED,
    COMMON,
    BadLine,
    JsonFormat,
    LineFormat,
    LogFormat,
    TraceFormat,
    apache_format,
)
from ._hot import parser_of
from ._order import check_order_options, reorder

__all__ = ["FORMATS", "LogReader", "Source", "detect_format", "measure_disorder", "open_format",
           "read_log"]

Source = Union[str, "os.PathLike[str]", IO[bytes], IO[str]]
#: The format names `read_log` takes (besides an nginx ``log_format`` string).
FORMATS = ("combined", "common", "jsonl", "trace")

_CHUNK = 1 << 16
#: A "line" longer than this is not a log line (a binary file, a missing newline): it is
#: counted as malformed and skipped up to the next newline, so memory stays bounded.
MAX_LINE = 1 << 20
_GZIP_MAGIC = b"\x1f\x8b"
#: Stands for a line over MAX_LINE in the line stream (no format matches it).
TOO_LONG = "\x00<a line over MAX_LINE bytes>"
_TOO_LONG_WHY = f"longer than {MAX_LINE} bytes: not a log line (skipped to its newline)"
#: Stands for a run of empty lines in the line stream, `_Lines.blanks` of them: counted at
#: once, without a parse each (a file of newlines reads at the speed of its decompression).
BLANKS = "\x00<a run of empty lines>"
_BLANK_RUN = re.compile("\n\n+")


def open_format(fmt: str | LineFormat, *, extra_variables: tuple[str, ...] = ()) -> LineFormat:
    """A format name (`FORMATS`), an nginx ``log_format`` string, or a format object -> a
    format object. An unknown name raises `ConfigError` listing the choices."""
    if not isinstance(fmt, str):
        return fmt
    if "$" in fmt:
        return LogFormat(fmt, extra_variables=extra_variables)
    if "%" in fmt:
        return apache_format(fmt)
    if fmt == "combined":
        return COMBINED
    if fmt == "common":
        return COMMON
    if fmt in ("jsonl", "json"):
        return JsonFormat()
    if fmt == "trace":
        return TraceFormat()  # stateful (previous t): a new one per read
    raise ConfigError(f"unknown log format {fmt!r}: use one of {', '.join(FORMATS)}, or an "
                      "nginx log_format string such as '$remote_addr [$time_local] "
                      "\"$request\" $status'")


class _Lines:
    """The complete lines of a source, then `tail` (text after the last newline) and `error`
    (why the input ended early, if it did)."""

    def __init__(self, source: Source) -> None:
        self.tail = ""
        self.error: tuple[str, str] | None = None
        self.blanks = 0  # how many empty lines the last BLANKS stands for
        self._close: IO[bytes] | IO[str] | None = None
        self._binary: IO[bytes] | None = None
        self._text: IO[str] | None = None
        if isinstance(source, (str, os.PathLike)):
            if source == "-":
                stdin = sys.stdin
                buf = getattr(stdin, "buffer", None)
                if buf is not None:
                    self._binary = self._ungzip(buf)
                else:
                    self._text = stdin
            else:
                f = open(source, "rb")  # noqa: SIM115 (closed by close())
                self._close = f
                self._binary = self._ungzip(f)
        elif isinstance(source, io.TextIOBase):
            self._text = source
        else:
            self._binary = self._ungzip(source)  # type: ignore[arg-type]

    def _ungzip(self, f: IO[bytes]) -> IO[bytes]:
        peek = getattr(f, "peek", None)
        if peek is None:
            buffered = io.BufferedReader(f)  # type: ignore[type-var]
            f, peek = buffered, buffered.peek
        head = peek(2)[:2]
        if head == _GZIP_MAGIC:
            return gzip.GzipFile(fileobj=f, mode="rb")  # type: ignore[return-value]
        return f

    def close(self) -> None:
        if self._binary is not None and isinstance(self._binary, gzip.GzipFile):
            self._binary.close()  # does not close the file under it
        if self._close is not None:
            self._close.close()

    def __iter__(self) -> Iterator[str]:
        if self._text is not None:
            return self._iter_text(self._text)
        assert self._binary is not None
        return self._iter_binary(self._binary)

    def _iter_binary(self, f: IO[bytes]) -> Iterator[str]:
        tail = b""  # the start of a line whose newline is in a later chunk
        skipping = False  # inside a line over MAX_LINE, up to its newline
        # read1: one read of the stream under it, so what a truncated gzip stream did hold
        # comes out before its EOFError (read() would drop the chunk it was filling).
        read = getattr(f, "read1", f.read)
        while True:
            try:
                chunk = read(_CHUNK)
            except EOFError:
                self.error = ("truncated", "the gzip stream ends early (truncated file)")
                break
            except (OSError, zlib.error) as e:
                self.error = ("gzip", f"cannot read on: {e}")
                break
            if not chunk:
                break
            cut = chunk.rfind(b"\n")
            if cut < 0:
                if not skipping:
                    tail += chunk
                    if len(tail) > MAX_LINE:
                        yield TOO_LONG
                        tail, skipping = b"", True
                continue
            start = 0
            if skipping or (tail and len(tail) + chunk.find(b"\n") > MAX_LINE):
                if not skipping:
                    yield TOO_LONG
                start, tail, skipping = chunk.find(b"\n") + 1, b"", False
            if start <= cut:
                body = tail + chunk[start:cut] if tail else chunk[start:cut]
                text = body.decode("utf-8", "replace")
                if "\n\n" in text:
                    yield from self._runs(text)
                else:
                    yield from text.split("\n")
            tail = chunk[cut + 1:]
        if tail and not skipping:
            self.tail = tail.decode("utf-8", "replace")

    def _runs(self, text: str) -> Iterator[str]:
        """The lines of `text` (joined by newlines), each run of empty lines as one
        `BLANKS` (an empty first or last line joins the run next to it)."""
        start, end = 0, len(text)
        for m in _BLANK_RUN.finditer(text):
            at, to = m.span()
            blanks = to - at - 1
            if at:
                yield from text[start:at].split("\n")  # up to the run's first newline
            else:
                blanks += 1  # the text starts with an empty line
            if to == end:
                blanks += 1  # ... or ends with one
            self.blanks = blanks
            yield BLANKS
            start = to
        if start < end:
            yield from text[start:].split("\n")

    def _iter_text(self, f: IO[str]) -> Iterator[str]:
        blanks = 0
        try:
            for raw in f:
                if raw == "\n":
                    blanks += 1
                    continue
                if blanks:
                    self.blanks, blanks = blanks, 0
                    yield BLANKS
                if raw[-1:] == "\n":
                    yield raw[:-1]
                else:
                    self.tail = raw
        except UnicodeDecodeError as e:
            self.error = ("decode", f"the text stream cannot be decoded on: {e.reason}")
        if blanks:
            self.blanks = blanks
            yield BLANKS


class LogReader:
    """An iterable of `LogEvent`, in time order, from one source; `stats` tallies the read.

    Iterate it once. Use it as a context manager (or call `close`) to close a file it opened;
    a stream it was given is left open. Options as `read_log`.
    """

    def __init__(self, source: Source, format: str | LineFormat = "combined", *,
                 window: float = 2.0, late: str = "clamp", max_examples: int = 5,
                 max_pending: int = 1_000_000, extra_variables: tuple[str, ...] = (),
                 grow_window: bool = False) -> None:
        self.format = open_format(format, extra_variables=extra_variables)
        check_order_options(window, late, max_pending)
        self.stats = ReadStats(max_examples=max_examples)
        self.window, self.late, self.max_pending = window, late, max_pending
        self.grow_window = grow_window
        self._lines = _Lines(source)
        self._started = False

    def __repr__(self) -> str:
        return (f"<LogReader format={self.format.name} window={self.window} "
                f"{self.stats.lines} lines>")

    def __iter__(self) -> Iterator[LogEvent]:
        hot = _hot.COMPILED
        if hot is not None and not self.grow_window:  # the same steps, compiled
            return hot.reorder(  # type: ignore[no-any-return]
                self.in_line_order(), self.stats, self.window, self.late == "drop",
                self.max_pending)
        return reorder(self.in_line_order(), self.stats, window=self.window, late=self.late,
                       max_pending=self.max_pending, grow=self.grow_window)

    def in_line_order(self) -> Iterator[LogEvent]:
        """The events as the lines give them, not put in time order (`measure_disorder`'s
        pass). Iterate a reader once, either way."""
        if self._started:
            raise RuntimeError("a LogReader is read once; open another for a second pass")
        self._started = True
        hot = _hot.COMPILED
        if hot is not None:
            return hot.parsed(  # type: ignore[no-any-return]
                self._lines, parser_of(self.format), self.stats, TOO_LONG, _TOO_LONG_WHY,
                BLANKS)
        return self._parsed()

    def _parsed(self) -> Iterator[LogEvent]:
        stats, lines, parse = self.stats, self._lines, self.format.parse
        n = 0
        try:
            for line in lines:
                if line is BLANKS:
                    n += lines.blanks
                    stats.lines = n
                    stats.skip("blank", lines.blanks)
                    continue
                n += 1
                stats.lines = n
                try:
                    ev = parse(line, n)
                except BadLine as b:
                    if line is TOO_LONG:
                        stats.bad(n, "too-long", _TOO_LONG_WHY, "")
                    elif b.skip:
                        stats.skip(b.reason)
                    else:
                        stats.bad(n, b.reason, b.why, line)
                    continue
                if ev is None:
                    stats.skip("blank")
                    continue
                yield ev
            if lines.tail:
                n += 1
                stats.lines = n
                try:
                    ev = parse(lines.tail, n)
                except BadLine as b:
                    stats.bad(n, "truncated", f"the last line has no newline and {b.why}",
                              lines.tail)
                    ev = None
                if ev is not None:
                    yield ev
            if lines.error is not None:
                stats.bad(n + 1, *lines.error, "")
        finally:
            stats.lines = n

    def close(self) -> None:
        self._lines.close()

    def __enter__(self) -> LogReader:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def measure_disorder(source: str | os.PathLike[str], format: str | LineFormat = "combined", *,
                     extra_variables: tuple[str, ...] = ()) -> float:
    """How far out of time order the lines of the file `source` are: the most seconds a
    line is older than the newest line before it (0.0 for a sorted log). A first pass over
    the file, in constant memory; `read_log` with this as `window` then puts every line in
    its true place (as long as one window's lines fit in `max_pending`)."""
    newest = most = 0.0
    first = True
    with LogReader(source, format, extra_variables=extra_variables) as reader:
        for ev in reader.in_line_order():
            t = ev.t
            if first:
                newest, first = t, False
            elif t > newest:
                newest = t
            elif newest - t > most:
                most = newest - t
    return most


#: How many of a log's first lines `detect_format` tries each format on.
DETECT_LINES = 200


def detect_format(sample: str) -> str:
    """The format (``"combined"``, ``"common"`` or ``"jsonl"``) that reads the most of the
    first `DETECT_LINES` non-blank lines of `sample`; ``"combined"`` when none reads any
    (the replay then says that no line could be read, in that format)."""
    lines = [ln for ln in sample.split("\n")[:-1] if ln.strip()][:DETECT_LINES]
    if not lines and sample.strip():
        lines = [sample]  # one line, no newline yet
    best, best_n = "combined", 0
    for name in ("combined", "common", "jsonl"):
        fmt = open_format(name)
        n = 0
        for i, line in enumerate(lines, 1):
            try:
                fmt.parse(line, i)
            except BadLine:
                continue
            n += 1
        if n > best_n:
            best, best_n = name, n
    return best


def sample_of(source: str | os.PathLike[str], size: int = _CHUNK) -> str:
    """The text of the first `size` bytes of the file `source` (gunzipped if it is)."""
    with open(source, "rb") as f:
        head = f.read(2)
        f.seek(0)
        if head == _GZIP_MAGIC:
            with gzip.GzipFile(fileobj=f, mode="rb") as g:
                try:
                    data = g.read(size)
                except (EOFError, OSError, zlib.error):
                    data = b""
        else:
            data = f.read(size)
    return data.decode("utf-8", "replace")


def read_log(source: Source, format: str | LineFormat = "combined", *, window: float = 2.0,
             late: str = "clamp", max_examples: int = 5, max_pending: int = 1_000_000,
             extra_variables: tuple[str, ...] = (), grow_window: bool = False) -> LogReader:
    """Read `source` (a path, a gzip'd path, ``"-"`` for stdin, or a binary or text stream)
    in `format` (``"combined"``, ``"common"``, ``"jsonl"``, ``"trace"``, an nginx
    ``log_format`` string, or a format object) -> a `LogReader` of events in time order.

    `window`: seconds a line may be older than the newest line before it and still be put
    in order (nginx logs at request end; 0 turns reordering off). `late`: what to do with a
    line older than that, ``"clamp"`` (to the last time handed out; the default) or
    ``"drop"``. `max_examples`: malformed lines kept as examples in `ReadStats.examples`.
    `extra_variables`: variables of your nginx configuration (map, set) a ``log_format`` may
    use. `grow_window`: for a stream, which cannot be read twice to measure its disorder,
    the window grows to the most a line so far was out of order (`reorder`'s ``grow``; at
    most `max_pending` lines held, however far it grows). Bad options raise `ConfigError`
    here; bad lines never raise.
    """
    return LogReader(source, format, window=window, late=late, max_examples=max_examples,
                     max_pending=max_pending, extra_variables=extra_variables,
                     grow_window=grow_window)
