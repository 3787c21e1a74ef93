"""Hostile logs (issue 28, item 11): a deeply nested or absurdly wide JSON line is one
malformed line, and blank lines cost no parse each.

The cost of blank lines is held by work done, not time: a format that counts its `parse`
calls reads a file of N empty lines without one call.
"""

from __future__ import annotations

import gzip
import io
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ratekeeper.replay import read_log
from ratekeeper.replay._events import LogEvent
from ratekeeper.replay._formats import MAX_JSON_DEPTH, JsonFormat, TraceFormat

GOOD = {"time": 1700000000, "remote_addr": "203.0.113.7", "path": "/a"}


def _line(extra: str) -> str:
    return json.dumps(GOOD)[:-1] + ', "x": ' + extra + "}"


#: Values nested too deep to read: past json's own recursion limit, and past MAX_JSON_DEPTH.
DEEP = {
    "list-5000": "[" * 5000 + "]" * 5000,
    "list-400": "[" * 400 + "]" * 400,
    "object-900": '{"a":' * 900 + "1" + "}" * 900,
    "object-in-a-list-900": "[" + '{"a":' * 900 + "1" + "}" * 900 + "]",
    "list-in-an-object-past-bound": '{"a":' * 20 + "[" * 20 + "]" * 20 + "}" * 20,
    "object-past-bound": '{"a":' * (MAX_JSON_DEPTH + 1) + "1" + "}" * (MAX_JSON_DEPTH + 1),
}


@pytest.mark.parametrize("name", sorted(DEEP))
def test_deeply_nested_json_line_is_one_malformed_line_and_replay_goes_on(name: str) -> None:
    good = json.dumps(GOOD)
    text = "\n".join([good, _line(DEEP[name]), good]) + "\n"
    with read_log(io.BytesIO(text.encode()), "jsonl", window=0) as events:
        got = list(events)
    assert [ev.line for ev in got] == [1, 3]
    assert events.stats.malformed == {"json": 1}
    (example,) = events.stats.examples
    assert example.line == 2
    assert "nested deeper than" in example.why


def test_json_line_nested_to_the_bound_is_read() -> None:
    depth = MAX_JSON_DEPTH - 1  # the top object is one level
    ev = JsonFormat().parse(_line('{"a":' * depth + "1" + "}" * depth), 1)
    assert isinstance(ev, LogEvent)
    assert ev.fields["x" + ".a" * depth] == "1"


def test_deeply_nested_trace_line_is_malformed_not_a_traceback() -> None:
    for value in ("[" * 5000 + "]" * 5000, "[" * 900 + "]" * 900):
        text = '{"t": 0, "key": "a"}\n{"t": 1, "key": ' + value + '}\n{"t": 2, "key": "b"}\n'
        with read_log(io.StringIO(text), "trace", window=0) as events:
            got = list(events)
        assert [ev.client for ev in got] == ["a", "b"]
        assert events.stats.malformed_total == 1
        assert len(events.stats.examples[0].why) < 300  # the value is not written out whole


def test_wide_json_under_a_long_name_is_malformed_in_bounded_memory() -> None:
    # 20,000 fields under one 100 KB name: flattened, 2 GB of names for a 290 KB line.
    wide = '{"' + "k" * 100_000 + '": {' + ",".join(f'"{i}":1' for i in range(20_000)) + "}}"
    text = json.dumps(GOOD) + "\n" + _line(wide) + "\n"
    with read_log(io.StringIO(text), "jsonl", window=0) as events:
        got = list(events)
    assert [ev.line for ev in got] == [1]
    assert events.stats.malformed == {"json": 1}
    assert "field names" in events.stats.examples[0].why


class CountingJson:
    """`JsonFormat`, counting its `parse` calls."""

    def __init__(self) -> None:
        self.name = "jsonl"
        self.calls = 0
        self._json = JsonFormat()

    def parse(self, line: str, lineno: int) -> LogEvent | None:
        self.calls += 1
        return self._json.parse(line, lineno)


N_BLANK = 300_000  # over four 64 KiB reads of newlines


def _gzip(data: bytes) -> io.BytesIO:
    return io.BytesIO(gzip.compress(data, compresslevel=1))


@pytest.mark.parametrize("source", ["gzip", "plain", "text"])
def test_blank_lines_are_counted_without_a_parse_each(source: str) -> None:
    good = json.dumps(GOOD)
    text = good + "\n" + "\n" * N_BLANK + "not json\n" + "\n" * N_BLANK + good + "\n"
    stream = {"gzip": lambda: _gzip(text.encode()), "plain": lambda: io.BytesIO(text.encode()),
              "text": lambda: io.StringIO(text)}[source]()
    fmt = CountingJson()
    with read_log(stream, fmt, window=0) as events:
        got = list(events)
    assert fmt.calls == 3  # the three lines that are not blank
    assert [ev.line for ev in got] == [1, 2 * N_BLANK + 3]
    assert events.stats.lines == 2 * N_BLANK + 3
    assert events.stats.skipped == {"blank": 2 * N_BLANK}
    assert [ex.line for ex in events.stats.examples] == [N_BLANK + 2]


def test_a_file_of_only_newlines_reads_with_no_parse_call() -> None:
    fmt = CountingJson()
    with read_log(_gzip(b"\n" * N_BLANK), fmt) as events:
        assert list(events) == []
    assert fmt.calls == 0
    assert events.stats.lines == N_BLANK
    assert events.stats.skipped == {"blank": N_BLANK}


def test_blank_lines_between_log_lines_keep_every_line_number() -> None:
    # Runs of every length from 0 to 5, for both formats' readers.
    lines, expect = [], []
    for run in range(6):
        lines.append(json.dumps({**GOOD, "time": 1700000000 + run}))
        expect.append(len(lines))
        lines.extend([""] * run)
    text = "\n".join(lines) + "\n"
    for stream in (io.BytesIO(text.encode()), io.StringIO(text)):
        with read_log(stream, "jsonl", window=0) as events:
            assert [ev.line for ev in events] == expect
        assert events.stats.lines == len(lines)
        assert events.stats.skipped == {"blank": sum(range(6))}


def test_trace_lines_after_a_run_of_blank_lines_keep_their_numbers() -> None:
    data = b'{"t": 0, "key": "a"}\n' + b"\n" * N_BLANK + b'{"t": 1, "key": "b"}\n'
    with read_log(_gzip(data), TraceFormat(), window=0) as events:
        assert [(ev.client, ev.line) for ev in events] == [("a", 1), ("b", N_BLANK + 2)]


@given(st.lists(st.sampled_from(["", "", "", "x", "\r"]), max_size=60),
       st.integers(min_value=1, max_value=70_000), st.booleans())
def test_runs_of_blank_lines_count_as_the_lines_they_are(lines: list[str], pad: int,
                                                         final_newline: bool) -> None:
    # "x" lines (malformed JSON) among empty ones, after `pad` newlines that put the chunk
    # edges anywhere: every line counted, every malformed one at its own number.
    body = ["", *[""] * pad, *lines]
    text = "\n".join(body) + ("\n" if final_newline else "")
    want_lines = len(body) if final_newline or body[-1] else len(body) - 1
    with read_log(io.BytesIO(text.encode()), "jsonl", max_examples=100) as events:
        assert list(events) == []
    assert events.stats.lines == want_lines
    bad = [i + 1 for i, v in enumerate(body) if v == "x"]
    assert [ex.line for ex in events.stats.examples] == bad
    ended = body if final_newline else body[:-1]  # a last line with no newline: the tail
    blank = sum(1 for v in ended if v in ("", "\r"))
    assert events.stats.skipped.get("blank", 0) == blank
