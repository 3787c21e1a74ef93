"""The policies file: one bad file per kind of error (as envoyproxy/ratelimit's config tests),
the bundled examples, and the matching rules.

Each file in ``configs/bad/`` states what ``check-config`` must report, one line per error::

    # expect: <location>: <the start of the message, or a part of it>
    # expect-count: <the number of errors, when knock-on errors must not appear>
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from ratekeeper._types import GLOBAL_KEY
from ratekeeper.cli import main
from ratekeeper.policy._keys import counter_key
from ratekeeper.policy._loader import parse_policies_text
from ratekeeper.service import Policies, PolicyError, check_file, load_policies, parse_policies

HERE = Path(__file__).parent
REPO = HERE.parent.parent
BAD = sorted((HERE / "configs" / "bad").glob("*.toml"))


def expectations(path: Path) -> list[str]:
    return [line.split("# expect:", 1)[1].strip()
            for line in path.read_text().splitlines() if line.startswith("# expect:")]


def test_there_is_a_file_per_error_kind() -> None:
    assert len(BAD) >= 40
    for path in BAD:
        assert expectations(path), f"{path.name} states no '# expect:' line"


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_bad_policies_report_every_error_with_its_location(path: Path) -> None:
    policies, issues = check_file(path, import_hooks=True)  # our files; hooks that fail too
    assert policies is None
    reported = [str(i) for i in issues]
    for want in expectations(path):
        location, _, message = want.partition(": ")
        assert any(
            (i.location == location or (location == "" and i.location == "")) and
            (message in i.message or message in str(i))
            for i in issues
        ), f"{path.name}: expected {want!r}; reported:\n" + "\n".join(reported)
    counts = [line.split(":", 1)[1] for line in path.read_text().splitlines()
              if line.startswith("# expect-count:")]
    if counts:  # no knock-on errors: exactly this many
        assert len(issues) == int(counts[0]), "\n".join(reported)
    with pytest.raises(PolicyError) as info:
        load_policies(path)
    assert info.value.issues == tuple(issues)
    assert str(path) in str(info.value)


def test_check_config_prints_every_error_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    path = HERE / "configs" / "bad" / "every_error_is_reported.toml"
    assert main(["check-config", str(path)]) == 1
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert len(lines) == len(expectations(path))
    for line, want in zip(lines, expectations(path), strict=True):
        # file:line: location: message (the line found in the text: tomllib gives none)
        assert re.match(rf"{re.escape(str(path))}:\d+: {re.escape(want)}", line), line
    assert err.strip() == f"{path}: {len(lines)} errors"


def test_check_config_on_good_files(capsys: pytest.CaptureFixture[str]) -> None:
    good = REPO / "examples" / "policies.toml"
    bad = BAD[0]
    assert main(["check-config", str(good)]) == 0
    assert capsys.readouterr().out == f"{good}: OK (4 domains, 15 rules, 13 limits)\n"
    assert main(["check-config", "-q", str(good), str(bad)]) == 1
    assert str(good) not in capsys.readouterr().out
    assert main(["check-config", "--json", str(good)]) == 0
    assert '"login.per-minute"' in capsys.readouterr().out


def test_unreadable_and_non_utf8_files(tmp_path: Path) -> None:
    _, issues = check_file(tmp_path / "missing.toml")
    assert [str(i) for i in issues] == ["cannot read the file: No such file or directory"]
    (tmp_path / "latin1.toml").write_bytes(b'[domains.caf\xe9]\n')
    _, issues = check_file(tmp_path / "latin1.toml")
    assert "not UTF-8" in str(issues[0])


def test_the_bundled_example_is_the_packaged_copy_and_valid() -> None:
    example = REPO / "examples" / "policies.toml"
    packaged = REPO / "src" / "ratekeeper" / "service" / "example_policies.toml"
    assert example.read_bytes() == packaged.read_bytes(), \
        "copy examples/policies.toml to src/ratekeeper/service/example_policies.toml"
    p = load_policies(example)
    assert set(p.domains) == {"api", "edge", "login", "web"}
    assert p.sha256 == hashlib.sha256(example.read_bytes()).hexdigest()
    load_policies(HERE / "policies" / "service.toml")


# -- matching ---------------------------------------------------------------------------------

MATCHING = """
[[domains.d.descriptors]]
key = "user"
limits = [{ rate = "1/s" }]

[[domains.d.descriptors]]
key = "user"
value = "alice"
limits = [{ rate = "2/s" }]

[[domains.d.descriptors]]
key = "user"
value = "adm*"
limits = [{ rate = "3/s" }]

[[domains.d.descriptors]]
key = "user"
value = "admin-*"
limits = [{ rate = "4/s" }]

[[domains.d.descriptors]]
key = "path"
value = "/x"

  [[domains.d.descriptors.descriptors]]
  key = "ip"
  limits = [{ rate = "5/s" }]

[[domains.d.descriptors]]
key = "path"
limits = [{ rate = "6/s" }]

  [[domains.d.descriptors.descriptors]]
  key = "method"
  value = "GET"
  unlimited = true
"""


@pytest.fixture(scope="module")
def matching() -> Policies:
    return parse_policies_text(MATCHING)


@pytest.mark.parametrize(("entries", "rule"), [
    ([("user", "bob")], "user"),                          # default: any value
    ([("user", "alice")], "user=alice"),                  # exact before default
    ([("user", "admiral")], "user=adm*"),                 # wildcard before default
    ([("user", "admin-1")], "user=admin-*"),              # the longest prefix wins
    ([("user", "alice"), ("op", "x")], None),             # deeper than the rules: no match
    ([("path", "/x")], None),                             # a branch without limits
    ([("path", "/x"), ("ip", "1.2.3.4")], "path=/x.ip"),  # nested default
    ([("path", "/y")], "path"),
    ([("path", "/y"), ("method", "GET")], "path.method=GET"),
    # No backtracking (envoyproxy/ratelimit): path=/x is taken, and it has no method rule.
    ([("path", "/x"), ("method", "GET")], None),
    ([("nothing", "x")], None),
])
def test_matching_order(matching: Policies, entries: list[tuple[str, str]],
                        rule: str | None) -> None:
    found = matching.domains["d"].match(entries)
    assert (found.name if found is not None else None) == rule


def test_rules_and_limits_are_named_for_their_path(matching: Policies) -> None:
    d = matching.domains["d"]
    assert [r.name for r in d.rules] == [
        "user", "user=alice", "user=adm*", "user=admin-*", "path=/x.ip", "path",
        "path.method=GET"]
    assert [p.limit.name for p in d.rules[0].limits] == ["d.user"]
    assert d.rules[-1].unlimited and d.rules[-1].limits == ()


def test_multi_limit_rules_name_each_limit() -> None:
    p = parse_policies({"domains": {"d": {"descriptors": [{"key": "k", "limits": [
        {"algorithm": "gcra", "rate": "10 per second"},
        {"rate": "100/minute"},
        {"name": "own", "rate": "1/day"},
    ]}]}}})
    assert [x.limit.name for x in p.domains["d"].rules[0].limits] == [
        "d.k#gcra-10/s", "d.k#fixed-window-100/m", "d.own"]


def test_counter_keys_are_one_to_one_and_printable() -> None:
    tricky = [
        [("a", "x,b=y")], [("a", "x"), ("b", "y")], [("a", "x%2Cb%3Dy")],
        [("a", "{tag}")], [("a", "sp ace")], [("a", "é")], [("a=x", "")],
    ]
    keys = [counter_key(e, None) for e in tricky]
    assert len(set(keys)) == len(keys)
    for k in keys:
        assert k.isprintable() and k.isascii() and not set(k) & set("{} ")
    assert counter_key([("user", "u"), ("op", "x")], ("user",)) == "user=u"
    assert counter_key([("user", "u")], ()) == GLOBAL_KEY  # the library's, for inspect
    long = counter_key([("k", "v" * 500)], None)
    assert long.startswith("#") and len(long) == 65


def test_describe_round_trips_the_tree(matching: Policies) -> None:
    doc = matching.describe()
    d = doc["domains"]["d"]["descriptors"]
    assert [n.get("value") for n in d] == [None, "alice", "adm*", "admin-*", "/x", None]
    assert d[4] == {"key": "path", "value": "/x", "descriptors": [
        {"key": "ip", "rule": "path=/x.ip", "limits": [{
            "name": "d.path=/x.ip", "algorithm": "fixed-window", "rate": "5/s",
            "per_second": 5, "quota": 5, "window_seconds": 1,
            "counter": "per descriptor"}]}]}
    assert d[5]["descriptors"][0] == {"key": "method", "value": "GET",
                                      "rule": "path.method=GET", "unlimited": True}


def test_a_broken_named_limit_is_reported_once_not_again_where_rules_list_it() -> None:
    text = """
[domains.api.limits.per-user]
algorithm = "gcar"
rate = "1/s"

[domains.api.limits.per-ip]
rate = "lots"

[[domains.api.descriptors]]
key = "user"
limits = ["per-user", "per-ip"]

[[domains.api.descriptors]]
key = "ip"
limits = ["per-user", { rate = "5/s" }, "per-typo"]
"""
    with pytest.raises(PolicyError) as info:
        parse_policies_text(text)
    assert [i.location for i in info.value.issues] == [
        "domains.api.limits.per-user.algorithm",
        "domains.api.limits.per-ip.rate",
        "domains.api.descriptors[1].limits[2]",  # a name never defined: still an error
    ]
    typo = info.value.issues[-1].message
    assert "no limit named 'per-typo'" in typo and "per-user" in typo


# -- wildcards ---------------------------------------------------------------------------------

WILDCARDS = """
[[domains.d.descriptors]]
key = "path"
value = "/api*v1"
limits = [{ rate = "1/s" }]

[[domains.d.descriptors]]
key = "path"
value = "foo*bar*baz"
limits = [{ rate = "2/s" }]

[[domains.d.descriptors]]
key = "path"
value = "/api*"
limits = [{ rate = "3/s" }]
"""


@pytest.mark.parametrize(("value", "rule"), [
    # As envoyproxy/ratelimit's config_test.go TestWildcardConfig (midWild, multiWild): each
    # * matches any run of characters, the empty one included.
    ("/api/users/v1", "path=/api*v1"),
    ("/apiv1", "path=/api*v1"),
    ("/api/v2", "path=/api*"),            # the most literal characters first, then /api*
    ("foo1bar2baz", "path=foo*bar*baz"),
    ("foobarbaz", "path=foo*bar*baz"),
    ("foo1baz", None),                    # a middle part missing
    ("xfoobarbaz", None),
    ("foo*bar*baz", "path=foo*bar*baz"),  # the pattern itself is a value it matches
])
def test_toml_wildcards_match_anywhere_in_the_value(value: str, rule: str | None) -> None:
    found = parse_policies_text(WILDCARDS).domains["d"].match([("path", value)])
    assert (found.name if found is not None else None) == rule


def test_a_wildcard_key_is_refused_with_its_location() -> None:
    with pytest.raises(PolicyError) as info:
        parse_policies_text('[[domains.d.descriptors]]\nkey = "user*"\n'
                            'limits = [{ rate = "1/s" }]\n')
    (issue,) = info.value.issues
    assert issue.location == "domains.d.descriptors[0].key"
    assert "only a value can be a wildcard pattern" in issue.message
