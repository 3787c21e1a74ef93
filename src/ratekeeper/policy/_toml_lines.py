"""Line numbers for the key paths of a TOML document (tomllib gives none).

`key_lines` maps every key path a TOML text defines to the 1-based line where it begins;
`line_of` looks up a `ConfigIssue` location in that map, falling back to the longest known
prefix (a missing key: the line of its table). Paths are written as the loader writes
locations (`_loader._key_path`): bare keys (``[A-Za-z0-9_-]+``) as is, any other key
double-quoted with ``\\`` and ``"`` escaped, array elements and array-of-tables elements as
``[i]`` from 0, e.g. ``domains.api.descriptors[1].limits[0].rate``.

What a path's line is:

- a key of a key/value pair (``rate = "10/s"``, or the last part of ``a.b = 1``): the line of
  the key; the tables a dotted key creates (``a`` of ``a.b = 1``) where they first appear;
- a table: its ``[header]`` line; a table only implied by a header (``a`` of ``[a.b]``) or by
  a dotted key: where it first appears, unless a header of its own comes later;
- an array of tables: the line of its first ``[[header]]``; each element: its own header.
  A header below ``[[a]]`` (``[a.b]``, ``[[a.b]]``) belongs to the last element of ``a``;
- an element of an inline array, or a key of an inline table: the line where it begins.

Theory of operation: one forward scan, no backtracking, no recursion (nested arrays and
inline tables are a stack of frames), so the time is linear in the text; paths deeper than
`_MAX_DEPTH` parts are scanned but not recorded, which bounds the size of the map to a
constant times the text. It is not a validator: on malformed TOML it records what it can
(possibly nothing) and never raises. Standard library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TypeAlias

__all__ = ["key_lines", "line_of", "outline"]

#: Key paths with more parts than this are not recorded (real files have a dozen at most).
_MAX_DEPTH = 100

#: A path as (text, number of parts); text None: too deep to record, its depth still
#: counted; the whole None: under a header that could not be read.
_Path: TypeAlias = "tuple[str | None, int] | None"
_ROOT: tuple[str, int] = ("", 0)

_BARE = re.compile(r"[A-Za-z0-9_-]+")
_WS = re.compile(r"[ \t\r]*")
# Whitespace, newlines and comments: what may separate the parts of an array.
_GAP = re.compile(r"(?:[ \t\r\n]+|#[^\n]*)*")
_TO_EOL = re.compile(r"[^\n]*")
# String bodies, written as unrolled loops so that the regex engine does not backtrack.
_BASIC = re.compile(r'[^"\\\n]*(?:\\.[^"\\\n]*)*')
_LITERAL = re.compile(r"[^'\n]*")
_ML_BASIC = re.compile(r'[^"\\]*(?:(?:\\.|"(?!""))[^"\\]*)*', re.DOTALL)
_ML_LITERAL = re.compile(r"[^']*(?:'(?!'')[^']*)*")
# A local date-time may have a space between date and time: one value, not two.
_DATETIME = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?"
                       r"(?:[Zz]|[+-]\d{2}:\d{2})?")
_SCALAR = re.compile(r"[A-Za-z0-9_+.:-]+")
_ESCAPE = re.compile(r"\\(u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8}|x[0-9A-Fa-f]{2}|.)", re.DOTALL)
_ESCAPES = {"b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r", "e": "\x1b",
            '"': '"', "\\": "\\"}


def key_lines(text: str) -> dict[str, int]:
    """Every key path defined in TOML `text` -> the 1-based line where it begins.

    Best effort on malformed text (never raises); see the module doc for what a path's
    line is."""
    return outline(text)[0]


def outline(text: str) -> tuple[dict[str, int], int]:
    """`key_lines` of `text`, and the parts of its deepest key path (tables, array
    elements and dotted-key parts alike): what a loader checks before it parses."""
    scanner = _Scanner(text)
    try:
        return scanner.run(), scanner.deepest
    except Exception:  # pragma: no cover - a bug here must not hide the config error
        return {}, scanner.deepest


def line_of(lines: dict[str, int], location: str) -> int | None:
    """The line of `location` (a loader key path) in `lines` (from `key_lines`), or of its
    longest prefix that has one (``a.b[1].c`` -> ``a.b[1]`` -> ``a.b`` -> ``a``); None if
    no prefix has a line (or `location` is empty: the file as a whole)."""
    for end in reversed(_part_ends(location)):
        line = lines.get(location[:end])
        if line is not None:
            return line
    return None


def _part_ends(location: str) -> list[int]:
    """The offsets in `location` where each part ends: ``a."b.c"[0]`` -> [1, 7, 10]."""
    ends: list[int] = []
    i, n = 0, len(location)
    while i < n:
        c = location[i]
        if c == ".":
            i += 1
            continue
        if c == '"':
            j = i + 1
            while j < n and location[j] != '"':
                j += 2 if location[j] == "\\" else 1
            i = min(j + 1, n)
        elif c == "[":
            j = location.find("]", i)
            i = n if j < 0 else j + 1
        else:
            j = i
            while j < n and location[j] not in '.["':
                j += 1
            i = j
        ends.append(i)
    return ends


def _key_path(key: str) -> str:
    """A key as it appears in a path (as `_loader._key_path`: quoted unless bare)."""
    if _BARE.fullmatch(key):
        return key
    return '"' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _child(parent: _Path, key: str) -> _Path:
    if parent is None:
        return None
    if parent[0] is None or parent[1] >= _MAX_DEPTH:
        return (None, parent[1] + 1)
    part = _key_path(key)
    return (f"{parent[0]}.{part}" if parent[0] else part, parent[1] + 1)


def _element(parent: _Path, index: int) -> _Path:
    if parent is None:
        return None
    if parent[0] is None or parent[1] >= _MAX_DEPTH:
        return (None, parent[1] + 1)
    return (f"{parent[0]}[{index}]", parent[1] + 1)


def _unescape(m: re.Match[str]) -> str:
    e = m.group(1)
    if e[0] in "uUx" and len(e) > 1:
        try:
            return chr(int(e[1:], 16))
        except (ValueError, OverflowError):  # above U+10FFFF: invalid TOML, keep the text
            return m.group(0)
    return _ESCAPES.get(e, m.group(0))


@dataclass(slots=True)
class _Frame:
    """An open inline array (``[``) or inline table (``{``) and the path of its value."""

    kind: str
    path: _Path
    count: int = 0  # elements so far (arrays)


class _Scanner:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 1 if text.startswith("\ufeff") else 0
        self.line = 1
        self.lines: dict[str, int] = {}
        self.explicit: set[str] = set()  # paths with a line of their own, not implied
        self.aot: dict[str, int] = {}  # array-of-tables path -> elements so far
        self.table: _Path = _ROOT
        self.deepest = 0  # parts of the deepest path seen, recorded or not

    # moving -------------------------------------------------------------------------

    def goto(self, end: int) -> None:
        # Every move goes through here, so the line is counted once per character.
        self.line += self.text.count("\n", self.pos, end)
        self.pos = end

    def skip(self, pattern: re.Pattern[str]) -> None:
        m = pattern.match(self.text, self.pos)
        if m:
            self.goto(m.end())

    def peek(self, k: int = 1) -> str:
        return self.text[self.pos:self.pos + k]

    def end_line(self) -> None:
        """Skip what is left of the line (a comment, or junk in malformed text)."""
        self.skip(_TO_EOL)
        if self.pos < len(self.text):
            self.goto(self.pos + 1)

    # recording ------------------------------------------------------------------------

    def record(self, path: _Path, line: int, *, explicit: bool) -> None:
        if path is None:
            return
        self.deepest = max(self.deepest, path[1])
        if path[0] is None:
            return
        if not explicit:
            self.lines.setdefault(path[0], line)
        elif path[0] not in self.explicit:  # a second definition is invalid: keep the first
            self.explicit.add(path[0])
            self.lines[path[0]] = line

    def record_keys(self, base: _Path, keys: list[str], line: int) -> _Path:
        """Record a dotted key under `base`; returns the path of its value."""
        path = base
        for i, k in enumerate(keys):
            path = _child(path, k)
            self.record(path, line, explicit=i == len(keys) - 1)
        return path

    # the document -----------------------------------------------------------------------

    def run(self) -> dict[str, int]:
        n = len(self.text)
        while True:
            self.skip(_GAP)
            if self.pos >= n:
                return self.lines
            if self.peek() == "[":
                self.header()
            else:
                self.key_value()
            self.end_line()

    def header(self) -> None:
        aot = self.peek(2) == "[["
        self.goto(self.pos + (2 if aot else 1))
        line = self.line
        keys = self.key()
        self.skip(_WS)
        close = "]]" if aot else "]"
        if keys is None or self.peek(len(close)) != close:
            self.table = None  # unreadable: record nothing until the next header
            return
        self.goto(self.pos + len(close))
        path: _Path = _ROOT
        for k in keys[:-1]:
            path = _child(path, k)
            self.record(path, line, explicit=False)
            if path is not None and path[0] is not None and path[0] in self.aot:
                path = _element(path, self.aot[path[0]] - 1)  # into its last element
        path = _child(path, keys[-1])
        if aot and path is not None and path[0] is not None:
            count = self.aot.get(path[0], 0)
            self.aot[path[0]] = count + 1
            self.record(path, line, explicit=False)
            path = _element(path, count)
        self.record(path, line, explicit=True)
        self.table = path

    def key_value(self) -> None:
        line = self.line
        keys = self.key()
        self.skip(_WS)
        if keys is None or self.peek() != "=":
            return  # not a key/value line: the caller skips it
        self.goto(self.pos + 1)
        self.skip(_WS)
        self.value(self.record_keys(self.table, keys, line))

    def key(self) -> list[str] | None:
        """A (dotted) key: its parts, unquoted; None if there is none here."""
        keys: list[str] = []
        text = self.text
        while True:
            self.skip(_WS)
            c = self.peek()
            if c == '"':
                m = _BASIC.match(text, self.pos + 1)
                assert m is not None  # `*` always matches
                keys.append(_ESCAPE.sub(_unescape, m.group()))
                self.goto(m.end() + (text.startswith('"', m.end())))
            elif c == "'":
                m = _LITERAL.match(text, self.pos + 1)
                assert m is not None
                keys.append(m.group())
                self.goto(m.end() + (text.startswith("'", m.end())))
            else:
                m = _BARE.match(text, self.pos)
                if m is None:
                    return None
                keys.append(m.group())
                self.goto(m.end())
            self.skip(_WS)
            if self.peek() != ".":
                return keys
            self.goto(self.pos + 1)

    # values -----------------------------------------------------------------------------

    def value(self, path: _Path) -> None:
        """Scan one value (any nesting of inline arrays and tables) starting here."""
        stack: list[_Frame] = []
        self.open_value(path, stack)
        n = len(self.text)
        while stack:
            frame = stack[-1]
            # TOML 1.0 keeps an inline table on one line; 1.1 allows newlines and comments.
            self.skip(_GAP)
            if self.pos >= n:
                return
            c = self.text[self.pos]
            if c == ("]" if frame.kind == "[" else "}"):
                self.goto(self.pos + 1)
                stack.pop()
            elif c == ",":
                self.goto(self.pos + 1)
            elif c in "]}":  # the other closer: malformed, let the outer frame have it
                stack.pop()
            elif frame.kind == "[":
                child, start = _element(frame.path, frame.count), self.pos
                frame.count += 1
                self.record(child, self.line, explicit=True)
                self.open_value(child, stack)
                if self.pos == start:
                    self.goto(start + 1)  # junk: always make progress
            else:
                line, start = self.line, self.pos
                keys = self.key()
                self.skip(_WS)
                if keys is None or self.peek() != "=":
                    if self.pos == start:
                        self.goto(self.pos + 1)  # junk: always make progress
                    continue
                self.goto(self.pos + 1)
                self.skip(_WS)
                self.open_value(self.record_keys(frame.path, keys, line), stack)

    def open_value(self, path: _Path, stack: list[_Frame]) -> None:
        """Scan a scalar value, or open an array / inline table on `stack`."""
        text, pos = self.text, self.pos
        c = text[pos:pos + 1]
        if c in ("[", "{"):
            stack.append(_Frame(c, path))
            self.goto(pos + 1)
        elif c in ('"', "'"):
            self.string(c)
        elif c == "" or c in "\n#,]}":
            pass  # no value (malformed): leave the closer or separator to the caller
        else:
            m = _DATETIME.match(text, pos) or _SCALAR.match(text, pos)
            self.goto(m.end() if m else pos + 1)

    def string(self, quote: str) -> None:
        text, pos = self.text, self.pos
        if text.startswith(quote * 3, pos):
            m = (_ML_BASIC if quote == '"' else _ML_LITERAL).match(text, pos + 3)
            assert m is not None
            end = m.end()
            # The closing delimiter may follow one or two quotes of the content.
            closing = text[end:end + 5]
            self.goto(end + len(closing) - len(closing.lstrip(quote)))
        else:
            m = (_BASIC if quote == '"' else _LITERAL).match(text, pos + 1)
            assert m is not None
            self.goto(m.end() + text.startswith(quote, m.end()))
