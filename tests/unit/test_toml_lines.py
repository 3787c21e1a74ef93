"""`policy._toml_lines`: the line of every key path of a TOML document.

Three kinds of check: the real policy files of the project (every path tomllib sees gets a
line, and each line shows its key or header); one case per construct the scanner must get
right; and hypothesis, on documents written by a tiny emitter of our own from random nested
values, that every path maps to the line where the emitter wrote it (and, on any text at
all, that the scanner never raises).
"""

from __future__ import annotations

import datetime as dt
import random
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ratekeeper.policy import check_file
from ratekeeper.policy._toml_lines import _MAX_DEPTH, _Scanner, key_lines, line_of

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

ROOT = Path(__file__).resolve().parents[2]
REAL_FILES = sorted({ROOT / "examples/policies.toml",
                     ROOT / "src/ratekeeper/service/example_policies.toml",
                     *(ROOT / "tests").rglob("*.toml")})
BAD_CONFIGS = sorted((ROOT / "tests/service/configs/bad").glob("*.toml"))


def _key_path(key: str) -> str:
    """A copy of `_loader._key_path`: the test must not trust the module it checks."""
    if key and re.fullmatch(r"[A-Za-z0-9_-]+", key):
        return key
    return '"' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _join(loc: str, key: str) -> str:
    return f"{loc}.{_key_path(key)}" if loc else _key_path(key)


def nodes(value: Any, path: str = "") -> Iterator[tuple[str, Any, str | int]]:
    """Every (path, value, last part) below `value`, a parsed TOML document."""
    if isinstance(value, dict):
        for k, v in value.items():
            p = _join(path, k)
            yield p, v, k
            yield from nodes(v, p)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            p = f"{path}[{i}]"
            yield p, v, i
            yield from nodes(v, p)


def _id(p: Path) -> str:
    return str(p.relative_to(ROOT))


# -- real files ---------------------------------------------------------------------------

def test_the_real_files_are_found() -> None:
    assert ROOT / "examples/policies.toml" in REAL_FILES
    assert len(REAL_FILES) > 20


@pytest.mark.parametrize("path", REAL_FILES, ids=_id)
def test_every_path_of_a_real_file_has_a_line_and_no_path_is_made_up(path: Path) -> None:
    text = path.read_text("utf-8")
    lines = key_lines(text)
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return  # a deliberately broken file: only that the scan did not raise
    paths = {p for p, _, _ in nodes(doc)}
    assert paths - lines.keys() == set(), "paths without a line"
    assert lines.keys() - paths == set(), "lines for paths that are not in the document"


@pytest.mark.parametrize("path", REAL_FILES, ids=_id)
def test_each_line_of_a_real_file_shows_its_key_or_its_header(path: Path) -> None:
    text = path.read_text("utf-8")
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return
    lines = key_lines(text)
    source = text.splitlines()
    for p, value, last in nodes(doc):
        n = lines[p]
        assert 1 <= n <= len(source), p
        shown = source[n - 1]
        if isinstance(last, str):
            assert last in shown or _key_path(last) in shown, (p, n, shown)
            continue
        parent = p[:p.rindex("[")]
        parent_line = source[lines[parent] - 1].strip()
        if parent_line.startswith("[["):  # an array of tables: each element its own header
            name = parent.rsplit(".", 1)[-1]
            assert shown.strip().startswith("[[") and name in shown, (p, n, shown)
            if last > 0:
                assert n > lines[f"{parent}[{last - 1}]"], p
        else:  # an inline array: the element is on (or after) the line of its key
            assert n >= lines[parent], p
            if last > 0:
                assert n >= lines[f"{parent}[{last - 1}]"], p
            if isinstance(value, str) and value.isprintable() and '"' not in value:
                assert value in shown, (p, n, shown)


@pytest.mark.parametrize("path", BAD_CONFIGS, ids=_id)
def test_every_location_the_loader_reports_in_a_bad_config_has_a_line(path: Path) -> None:
    text = path.read_text("utf-8")
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return
    _, issues = check_file(path, import_hooks=True)  # our own files: a hook error counts
    assert issues, "a bad config must fail"
    lines = key_lines(text)
    for issue in issues:
        if issue.location:  # "" is the file as a whole
            assert line_of(lines, issue.location) is not None, issue


def test_the_mistakes_of_one_bad_config_are_on_their_lines() -> None:
    path = ROOT / "tests/service/configs/bad/every_error_is_reported.toml"
    text = path.read_text("utf-8")
    lines = key_lines(text)
    source = text.splitlines()
    got = {i.location: source[line_of(lines, i.location) - 1]  # type: ignore[operator]
           for i in check_file(path)[1]}
    assert got == {
        "service.failure": 'failure = "sometimes"',
        "domains.api.descriptors[0].limits[0].algorithm":
            'limits = [{ algorithm = "gcar", rate = "10/s" }]',
        "domains.api.descriptors[1].limits[0].rate": 'limits = [{ rate = "lots" }]',
        "domains.api.descriptors[2] (ip)": "[[domains.api.descriptors]]",  # the loader's note
        "domains.web.descriptors[0].descriptors[0].cost": "  cost = -2",
        "domains.web.descriptors[0].descriptors[0].limits[0]": '  limits = ["missing"]',
    }
    assert lines["domains.api.descriptors[2]"] == source.index('key = "ip"')  # its header


# -- one case per construct -----------------------------------------------------------------

def lines_of(text: str) -> dict[str, int]:
    """`key_lines`, checked to name exactly the paths tomllib finds in `text`."""
    text = text.lstrip("\n")
    got = key_lines(text)
    assert got.keys() == {p for p, _, _ in nodes(tomllib.loads(text))}
    return got


def test_table_headers_and_the_tables_they_imply() -> None:
    assert lines_of("""
[a.b]
x = 1
[a]
y = 2
[c]
""") == {"a": 3, "a.b": 1, "a.b.x": 2, "a.y": 4, "c": 5}


def test_arrays_of_tables_count_their_elements_per_path() -> None:
    assert lines_of("""
[[a]]
x = 1
[[b]]
[[a]]
x = 2
[[a]]
""") == {"a": 1, "a[0]": 1, "a[0].x": 2, "b": 3, "b[0]": 3, "a[1]": 4, "a[1].x": 5,
         "a[2]": 6}


def test_nested_arrays_of_tables_belong_to_the_last_element_of_their_parent() -> None:
    got = lines_of("""
[[d.api.descriptors]]
key = "user"
  [[d.api.descriptors.descriptors]]
  key = "op"
  [[d.api.descriptors.descriptors]]
  key = "op2"
[[d.api.descriptors]]
key = "ip"
  [[d.api.descriptors.descriptors]]
  key = "op3"
  [d.api.descriptors.settings]
  on = true
""")
    assert got["d.api.descriptors[0].descriptors[1].key"] == 6
    assert got["d.api.descriptors[1].descriptors[0]"] == 9
    assert got["d.api.descriptors[1].descriptors[0].key"] == 10
    assert "d.api.descriptors[1].descriptors[1]" not in got
    assert got["d.api.descriptors[1].descriptors"] == 9
    assert got["d.api.descriptors[1].settings.on"] == 12


def test_dotted_keys_create_their_tables_where_they_first_appear() -> None:
    assert lines_of("""
[t]
a.b = 1
a.c.d = 2
a . e = 3
""") == {"t": 1, "t.a": 2, "t.a.b": 2, "t.a.c": 3, "t.a.c.d": 3, "t.a.e": 4}


def test_quoted_keys_in_headers_and_pairs_are_written_as_the_loader_writes_them() -> None:
    got = lines_of(r"""
[domains."my domain".limits.per-user]
burst = 1
"a.b" = 2
'lit "x"' = 3
"esc\t\u00e9\"\\" = 4
"" = 5
"bare" = 6
[ 'x y' . z ]
w = 7
""")
    assert got['domains."my domain".limits.per-user.burst'] == 2
    assert got['domains."my domain".limits.per-user."a.b"'] == 3
    assert got['domains."my domain".limits.per-user."lit \\"x\\""'] == 4
    assert got['domains."my domain".limits.per-user."esc\té\\"\\\\"'] == 5
    assert got['domains."my domain".limits.per-user.""'] == 6
    assert got["domains.\"my domain\".limits.per-user.bare"] == 7
    assert got['"x y".z.w'] == 9


def test_indentation_whitespace_and_comments_do_not_move_a_key() -> None:
    assert lines_of("""
# [not] a = "header"
\t[ t ]   # [u] b = 1
  \t a   =   1   # = 2 [x]

   # b = 3
   c = "x # y = 4"   # comment
""") == {"t": 2, "t.a": 3, "t.c": 6}


def test_multi_line_strings_are_values_not_keys() -> None:
    got = lines_of('''
a = """
b = 1
[fake]
c = "quoted \\""" still
"""
d = \'\'\'
e = 2 \\
it\'s \'\' x = 3
[[fake]]
\'\'\'
f = """x "" y""""
g = \'\'\'one\'\'\'\'\'
h = 1
''')
    assert got == {"a": 1, "d": 6, "f": 11, "g": 12, "h": 13}


def test_multi_line_arrays_record_each_element_where_it_begins() -> None:
    got = lines_of("""
a = [
  1,   # one ] [x] = 2
  "two ] ,",
  # a comment [b] = 3
  [3, 'x]'],
  1979-05-27 07:32:00, 2,
]
b = 5
""")
    assert got == {"a": 1, "a[0]": 2, "a[1]": 3, "a[2]": 5, "a[2][0]": 5, "a[2][1]": 5,
                   "a[3]": 6, "a[4]": 6, "b": 8}


def test_inline_tables_and_arrays_of_inline_tables() -> None:
    got = lines_of("""
x = { a = 1, b = { c = 2, "d e".f = [] }, g = {} }
[t]
limits = [
  { name = "one", rate = "1/s" },
  { rate = "2/s" }, { rate = "3/s", by = ["user"] }
]
""")
    assert got == {
        "x": 1, "x.a": 1, "x.b": 1, "x.b.c": 1, 'x.b."d e"': 1, 'x.b."d e".f': 1, "x.g": 1,
        "t": 2, "t.limits": 3, "t.limits[0]": 4, "t.limits[0].name": 4,
        "t.limits[0].rate": 4, "t.limits[1]": 5, "t.limits[1].rate": 5, "t.limits[2]": 5,
        "t.limits[2].rate": 5, "t.limits[2].by": 5, "t.limits[2].by[0]": 5,
    }


def test_crlf_line_ends_count_as_one_line() -> None:
    assert lines_of("[a]\r\nb = 1\r\n\r\nc = [\r\n 2\r\n]\r\n") == {
        "a": 1, "a.b": 2, "a.c": 4, "a.c[0]": 5}


# -- line_of ----------------------------------------------------------------------------------

LIMITS = """\
[domains.api]
description = "x"
[domains.api.limits.per-user]
rate = "10/s"
[[domains.api.descriptors]]
key = "user"
[[domains.api.descriptors]]
key = "token"
limits = [{ rate = "lots" }, { algorithm = "gcra",
  rate = "1/s" }]
[domains."my domain".limits."a.b[0]"]
burst = 1
"""


@pytest.mark.parametrize(("location", "line"), [
    ("domains.api.description", 2),                       # a key
    ("domains.api.limits.per-user", 3),                   # a table as a whole: its header
    ("domains.api.limits.per-user.burst", 3),             # a missing key: its table
    ("domains.api.descriptors[1]", 7),                    # an element: its own header
    ("domains.api.descriptors[1].value", 7),
    ("domains.api.descriptors[1].limits[0].rate", 9),     # inside an inline array
    ("domains.api.descriptors[1].limits[0].burst", 9),    # missing in an inline table
    ("domains.api.descriptors[1].limits[1].rate", 10),
    ("domains.api.descriptors[1].limits[1].by", 9),       # where the element begins
    ("domains.api.descriptors[5].key", 5),                # no such element: the array
    ('domains."my domain".limits."a.b[0]".burst', 12),    # quotes hide dots and brackets
    ('domains."my domain".limits."a.b[0]".rate', 11),
    ("domains.api.descriptors[1] (token=a.b[0])", 7),     # the loader's note on a rule
    ("domains.web", 1),                                   # unknown: the parent table
    ("http.routes[2].path", None),                        # nothing of it is in the file
    ("", None),                                           # the file as a whole
])
def test_line_of_falls_back_to_the_longest_known_prefix(location: str, line: int | None
                                                        ) -> None:
    assert line_of(key_lines(LIMITS), location) == line


# -- never raises, bounded --------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "", "[", "[[", "[a", "[[a]", "a", "a =", "= 1", "a = [", "a = {", "a = {b", 'a = "',
    "a = '''", 'a = """\n', "a = [1, 2\n[t]\nb = 3", "a = {]}", "a = [}]", '"a', "a.=1",
    "[a.]\nb = 1", "\ufeffa = 1", "a = 1 2 3\nb = 2", "a = \\", "\x00", "[\u00e9]\n",
    'a = "\\u00"', 'k = { "a\\U0011FFFF" = 1 }', "x = [" * 5000, "x = {a = " * 5000,
    "[" * 5000 + "a", "a" + ".a" * 5000 + " = 1",
])
def test_malformed_text_never_raises(text: str) -> None:
    lines = _Scanner(text).run()  # not key_lines: its safety net would hide a bug
    assert all(1 <= n <= text.count("\n") + 1 for n in lines.values())


def test_paths_deeper_than_the_cap_are_not_recorded() -> None:
    lines = key_lines("a" + ".a" * 5000 + " = 1\nb = [" + "[" * 5000 + "]" * 5001 + "\nc = 2")
    assert len(lines) == 2 * _MAX_DEPTH + 1
    assert lines["c"] == 3


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from('[]{}"\'.=,#\n \\abc1-_\tu{}'), max_size=60))
def test_toml_like_noise_never_raises(text: str) -> None:
    _Scanner(text).run()


@settings(max_examples=100, deadline=None)
@given(st.text())
def test_any_text_never_raises(text: str) -> None:
    _Scanner(text).run()


@pytest.mark.parametrize("path", [ROOT / "examples/policies.toml"], ids=_id)
def test_every_prefix_of_a_real_file_scans_without_raising(path: Path) -> None:
    text = path.read_text("utf-8")
    for end in range(len(text) + 1):
        _Scanner(text[:end]).run()


# -- hypothesis: documents from a tiny emitter ------------------------------------------------

KEY_CHARS = "ab_-1 .\"'\\#=[]{}é\n"
STR_CHARS = "ab #=[]{},.'\"\\\n\té\x01"
BARE = re.compile(r"[A-Za-z0-9_-]+")

scalars = st.one_of(
    st.integers(-10**6, 10**6), st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(alphabet=STR_CHARS, max_size=8),
    st.dates(), st.datetimes(min_value=dt.datetime(1000, 1, 1)),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(alphabet=KEY_CHARS, max_size=3), inner, max_size=3),
    max_leaves=12)
documents = st.dictionaries(st.text(alphabet=KEY_CHARS, max_size=3), values, max_size=4)


def _is_aot(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(e, dict) for e in v)


def _escape(s: str, keep: str) -> str:
    out = []
    for c in s:
        if c in '"\\':
            out.append("\\" + c)
        elif c in keep:
            out.append(c)
        elif c == "\n":
            out.append("\\n")
        elif ord(c) < 0x20 or c == "\x7f":
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return "".join(out)


def _literal_ok(s: str) -> bool:
    return "'" not in s and not any((ord(c) < 0x20 and c != "\t") or c == "\x7f" for c in s)


class Emitter:
    """Writes TOML from a value and records the line where it writes each path."""

    def __init__(self, rnd: random.Random) -> None:
        self.rnd = rnd
        self.parts: list[str] = []
        self.line = 1
        self.want: dict[str, int] = {}
        self.pending: list[str] = []  # tables left implicit: they take the next header

    def chance(self, p: float) -> bool:
        return self.rnd.random() < p

    def write(self, s: str) -> None:
        self.parts.append(s)
        self.line += s.count("\n")

    def text(self) -> str:
        return "".join(self.parts)

    def blank_or_comment(self) -> None:
        if self.chance(0.2):
            self.write(self.rnd.choice(["\n", "# x = [y] \"z'\n", "  #\n"]))

    def key(self, k: str) -> str:
        if BARE.fullmatch(k) and self.chance(0.8):
            return k
        if _literal_ok(k) and self.chance(0.4):
            return f"'{k}'"
        return '"' + _escape(k, "\t") + '"'

    def dotted(self, keys: list[str]) -> str:
        sep = self.rnd.choice([".", " . ", ". "])
        return sep.join(self.key(k) for k in keys)

    # tables --------------------------------------------------------------------------

    def table(self, path: str, hdr: list[str], d: dict[str, Any], *, header: bool) -> None:
        pairs, subs = [], []
        for k, v in d.items():
            if (isinstance(v, dict) and self.chance(0.5)) or (_is_aot(v) and self.chance(0.6)):
                subs.append((k, v))
            else:
                pairs.append((k, v))
        if header:
            if not pairs and subs and self.chance(0.5):
                self.pending.append(path)  # implied by its sub-tables' headers
            else:
                self.header(self.dotted(hdr), path)
        for k, v in pairs:
            self.blank_or_comment()
            self.pair(path, [k], v)
        for k, v in subs:
            p = _join(path, k)
            if isinstance(v, dict):
                self.table(p, [*hdr, k], v, header=True)
                continue
            for i, element in enumerate(v):
                self.header(self.dotted([*hdr, k]), f"{p}[{i}]", aot=True)
                self.want.setdefault(p, self.want[f"{p}[{i}]"])
                self.table(f"{p}[{i}]", [*hdr, k], element, header=False)

    def header(self, keys: str, path: str, *, aot: bool = False) -> None:
        self.blank_or_comment()
        self.write(self.rnd.choice(["", "  ", "\t"]))
        for p in self.pending:
            self.want[p] = self.line
        self.pending.clear()
        self.want[path] = self.line
        pad = self.rnd.choice(["", " "])
        self.write(("[[" if aot else "[") + pad + keys + pad + ("]]" if aot else "]"))
        self.end()

    def end(self) -> None:
        self.write(self.rnd.choice(["", "  # [c] d = 1 'e'", "\t"]) + "\n")

    # pairs and values -------------------------------------------------------------------

    def pair(self, path: str, keys: list[str], v: Any) -> None:
        """`keys = v`, or dotted `keys.k = ...` for each entry of a table `v`."""
        if isinstance(v, dict) and v and self.chance(0.4):
            for k, sub in v.items():
                self.pair(path, [*keys, k], sub)
            return
        self.write(self.rnd.choice(["", "  ", "\t "]))
        p = path
        for k in keys:
            p = _join(p, k)
            self.want.setdefault(p, self.line)
        self.write(self.dotted(keys) + self.rnd.choice([" = ", "=", "  =\t"]))
        self.value(p, v, oneline=False)
        self.end()

    def value(self, path: str, v: Any, *, oneline: bool) -> None:
        if isinstance(v, dict):
            self.write("{")
            for i, (k, sub) in enumerate(v.items()):
                self.write((", " if i else " ") + self.key(k) + " = ")
                self.want[_join(path, k)] = self.line
                self.value(_join(path, k), sub, oneline=True)
            self.write(" }" if v else "}")
        elif isinstance(v, list):
            multi = not oneline and v and self.chance(0.5)
            self.write("[")
            for i, e in enumerate(v):
                if i:
                    self.write(",")
                if multi:
                    self.write("\n")
                    if self.chance(0.3):
                        self.write("  # ] [x] = 'y\n")
                    self.write("  ")
                elif i:
                    self.write(" ")
                self.want[f"{path}[{i}]"] = self.line
                self.value(f"{path}[{i}]", e, oneline=oneline)
            if multi and self.chance(0.5):
                self.write(",")
            self.write("\n]" if multi else "]")
        else:
            self.write(self.scalar(v, oneline=oneline))

    def scalar(self, v: Any, *, oneline: bool) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, dt.datetime):
            return v.isoformat(sep=self.rnd.choice(" T"))
        if isinstance(v, dt.date):
            return v.isoformat()
        assert isinstance(v, str)
        choice = self.rnd.random()
        if not oneline and choice < 0.25:
            return '"""\n' + _escape(v, "\t\n").replace("\r", "\\r") + '"""'
        if (not oneline and choice < 0.5 and "'''" not in v
                and _literal_ok(v.replace("\n", "").replace("'", ""))):
            return "'''\n" + v + "'''"  # up to two quotes may end the content
        if choice < 0.7 and _literal_ok(v):
            return f"'{v}'"
        return '"' + _escape(v, "\t") + '"'


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents, st.randoms(use_true_random=False))
def test_every_path_of_an_emitted_document_is_on_the_line_it_was_written(
        doc: dict[str, Any], rnd: random.Random) -> None:
    e = Emitter(rnd)
    e.table("", [], doc, header=False)
    text = e.text()
    assert tomllib.loads(text) == doc, "the emitter wrote what it meant to"
    assert e.want.keys() == {p for p, _, _ in nodes(doc)}, "the emitter recorded every path"
    assert key_lines(text) == e.want, text
