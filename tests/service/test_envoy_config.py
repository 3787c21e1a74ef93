"""envoyproxy/ratelimit's YAML configuration, read as it is: its own test files load and the
Engine gives its tests' answers for them.

``envoy_configs/upstream/`` holds copies of envoyproxy/ratelimit's ``test/config/*.yaml``
and ``envoy_configs/runtime/config/`` of its integration runtime directory
(``test/integration/runtime/current/ratelimit/config``); each says where it came from. The
Go test each case follows is cited beside it. ``envoy_configs/bad/`` holds our own file per
error kind, each stating what ``check-config`` must report::

    # expect: line <n>, <key path>: <a part of the message>
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ratekeeper.cli import main
from ratekeeper.policy._engine import CheckResult
from ratekeeper.policy._envoy_config import load_envoy_config, parse_envoy_config
from ratekeeper.policy._loader import parse_policies_text
from ratekeeper.policy._model import Policies, PolicyError
from ratekeeper.service import Engine, check_file, load_policies, make_descriptor
from ratekeeper.stores.memory import MemoryStore
from ratekeeper.testing import ManualClock

HERE = Path(__file__).parent / "envoy_configs"
UP = HERE / "upstream"
BAD = sorted((HERE / "bad").glob("*.yaml"))

MINUTE, HOUR, DAY = 60.0, 3600.0, 86400.0


def engine(p: Policies) -> Engine:
    return Engine(lambda: p, MemoryStore(), clock=ManualClock())


async def check(e: Engine, domain: str, *descriptors: list[tuple[str, str]],
                hits: float | None = None) -> CheckResult:
    return await e.check(domain, [make_descriptor(d, hits=hits) for d in descriptors])


async def admits_exactly(e: Engine, domain: str, entries: list[tuple[str, str]],
                         n: int) -> bool:
    """Whether a fresh counter admits `n` hits at once and then not one more."""
    first = await check(e, domain, entries, hits=n)
    then = await check(e, domain, entries)
    return first.allowed and not then.allowed


def limit_of(p: Policies, domain: str, entries: list[tuple[str, str]]) -> tuple[float, float]:
    rule = p.domains[domain].match(entries)
    assert rule is not None and len(rule.limits) == 1, rule
    rate = rule.limits[0].limit.rate
    return rate.amount, rate.period


# -- the upstream files that must be refused ----------------------------------------------

@pytest.mark.parametrize(("name", "want"), [
    # TestBadLimitUnit: "invalid rate limit unit 'foo'"
    ("bad_limit_unit", "line 8, descriptors[0].rate_limit.unit: invalid rate limit unit 'foo'"),
    # TestBadYaml: "error loading config file: yaml: line 2: found unexpected end of stream"
    ("bad_yaml", "line 4: not valid YAML: "),
    # TestDuplicateKey: "duplicate descriptor composite key 'test-domain.key1_value1'"
    ("duplicate_key", "line 8, descriptors[1]: duplicate descriptor key 'key1' value 'value1'"),
    # TestEmptyDomain: "config file cannot have empty domain"
    ("empty_domain", "domain: the file needs a non-empty `domain`"),
    # TestEmptyKey: "descriptor has empty key"
    ("empty_key", "line 5, descriptors[0]: a descriptor needs a non-empty `key`"),
    # TestMisspelledKey: "config error, unknown key 'ratelimit'" / 'requestsperunit'
    ("misspelled_key", "line 7, descriptors[0].ratelimit: unknown key 'ratelimit' "
                       "(did you mean 'rate_limit'?)"),
    ("misspelled_key2", "line 9, descriptors[0].rate_limit.requestsperunit: unknown key "
                        "'requestsperunit' (did you mean 'requests_per_unit'?)"),
    # TestNonMapList: "yaml file contains list of type other than map: a"
    ("non_map_list", "line 5, descriptors[0]: must be a mapping (`key: ...`), got a string 'a'"),
    # TestNonStringKey: "config error, key is not of type string: 0.25"
    ("non_string_key", "line 3: a key must be a string, got a number '0.25'"),
    # TestReplacesEmpty: "should not have an empty replaces entry"
    ("replaces_empty", "line 12, descriptors[0].descriptors[0].rate_limit.replaces[0].name: "
                       "a replaces entry needs the `name`"),
    # TestReplacesSelf: "replaces should not contain name of same descriptor"
    ("replaces_self", "line 12, descriptors[0].descriptors[0].rate_limit.replaces[0].name: "
                      "a limit cannot replace itself ('self'"),
    # TestUnlimitedWithRateLimitUnit: "should not specify rate limit unit when unlimited"
    ("unlimited_with_unit", "line 8, descriptors[0].rate_limit.unit: an unlimited rate_limit "
                            "takes no unit"),
])
def test_the_go_services_bad_files_are_refused_with_a_located_error(name: str,
                                                                    want: str) -> None:
    path = UP / f"{name}.yaml"
    policies, issues = check_file(path)
    assert policies is None
    assert any(str(i).startswith(want) or want in str(i) for i in issues), \
        [str(i) for i in issues]
    assert all(i.file == str(path) for i in issues)


def test_duplicate_domain_across_files_is_refused_unless_merged(tmp_path: Path) -> None:
    # config_test.go TestDuplicateDomain: "duplicate domain 'test-domain' in config file"
    files = [(str(UP / n), (UP / n).read_bytes())
             for n in ("basic_config.yaml", "duplicate_domain.yaml")]
    with pytest.raises(PolicyError) as info:
        parse_envoy_config(files)
    (issue,) = info.value.issues
    assert issue.file.endswith("duplicate_domain.yaml") and issue.location == "domain"
    assert "duplicate domain 'test-domain'" in issue.message
    assert "basic_config.yaml" in issue.message


async def test_merged_domains_join_their_descriptors() -> None:
    # config_test.go TestDomainMerge (MERGE_DOMAIN_CONFIG=true)
    files = [(str(UP / n), (UP / n).read_bytes())
             for n in ("merge_domain_key1.yaml", "merge_domain_key2.yaml")]
    p = parse_envoy_config(files, merge_domains=True)
    assert limit_of(p, "test-domain", [("key1", "value1")]) == (10, MINUTE)
    assert limit_of(p, "test-domain", [("key2", "value2")]) == (20, MINUTE)
    # TestDuplicateKeyDomainMerge: the same file twice repeats key1_value1.
    twice = [files[0], files[0]]
    with pytest.raises(PolicyError, match="duplicate descriptor key 'key1' value 'value1'"):
        parse_envoy_config(twice, merge_domains=True)


# -- basic_config.yaml: config_test.go TestBasicConfig ------------------------------------

@pytest.fixture(scope="module")
def basic() -> Policies:
    return load_policies(UP / "basic_config.yaml")


@pytest.mark.parametrize("entries", [
    [("key1", "something")],
    [("key1", "value1")],                              # a branch: no limit at this depth
    [("key2", "value2"), ("subkey", "subvalue")],      # deeper than the rules
    [("key5", "value5"), ("subkey5", "subvalue")],
    [("key2", "value3")],                              # whitelisted: matched, no rate_limit
])
async def test_basic_config_descriptors_without_a_limit_are_ok_and_uncounted(
        basic: Policies, entries: list[tuple[str, str]]) -> None:
    assert basic.domains["test-domain"].match(entries) is None
    r = await check(engine(basic), "test-domain", entries, hits=10**6)
    assert r.allowed and r.statuses[0].outcome == "unmatched"


@pytest.mark.parametrize(("entries", "rpu", "unit"), [
    ([("key1", "value1"), ("subkey1", "something")], 5, 1.0),
    ([("key1", "value1"), ("subkey1", "subvalue1")], 10, 1.0),
    ([("key2", "something")], 20, MINUTE),
    ([("key2", "value2")], 30, MINUTE),
    ([("key3", "foo")], 1, HOUR),
    ([("key4", "foo")], 1, DAY),
    ([("key7", "unspecified_value")], 70, MINUTE),
])
async def test_basic_config_limits_and_decisions(basic: Policies, entries: list[tuple[str, str]],
                                                 rpu: int, unit: float) -> None:
    assert limit_of(basic, "test-domain", entries) == (rpu, unit)
    assert await admits_exactly(engine(basic), "test-domain", entries, rpu)


async def test_basic_config_names_unlimited_and_detailed_metric(basic: Policies) -> None:
    d = basic.domains["test-domain"]
    key3, key4 = d.match([("key3", "foo")]), d.match([("key4", "foo")])
    assert key3 is not None and key3.label == "" and key3.limits[0].label == ""
    assert key4 is not None and key4.label == "key4_rate_limit"
    assert key4.limits[0].label == "key4_rate_limit"  # Envoy's current_limit.name
    assert key3.name == "key3"  # the rule is named as the Go service's stats key
    key6 = d.match([("key6", "foo")])
    assert key6 is not None and key6.unlimited
    r = await check(engine(basic), "test-domain", [("key6", "foo")], hits=10**6)
    assert r.allowed and r.statuses[0].outcome == "unlimited"
    key7 = d.match([("key7", "x")])
    assert key7 is not None and key7.detailed_metric


async def test_a_default_rule_counts_each_value_apart(basic: Policies) -> None:
    # The Go cache key holds every entry's value: key2=a and key2=b have a counter each.
    e = engine(basic)
    assert await admits_exactly(e, "test-domain", [("key2", "a")], 20)
    assert (await check(e, "test-domain", [("key2", "b")])).allowed


# -- shadowmode_config.yaml: config_test.go TestShadowModeConfig --------------------------

async def test_shadow_mode_rules_decide_but_answer_ok() -> None:
    p = load_policies(UP / "shadowmode_config.yaml")
    d = p.domains["test-domain"]
    for entries, shadow in (([("key1", "value1"), ("subkey1", "something")], False),
                            ([("key1", "value1"), ("subkey1", "subvalue1")], True),
                            ([("key2", "something")], True), ([("key2", "value2")], False)):
        rule = d.match(entries)
        assert rule is not None and rule.shadow_mode is shadow, entries
    e = engine(p)
    over = await check(e, "test-domain", [("key2", "something")], hits=21)
    assert over.allowed and over.statuses[0].outcome == "shadow_rejected"
    assert not (await check(e, "test-domain", [("key2", "value2")], hits=31)).allowed


# -- wildcard.yaml: config_test.go TestWildcardConfig -------------------------------------

@pytest.mark.parametrize(("entries", "pattern"), [
    ([("noVal", "foo1")], None),
    ([("wild", "foo1")], "foo*"),
    ([("wild", "foo2")], "foo*"),
    ([("nestedWild", "val1"), ("wild", "goo2")], "goo*"),
    ([("wild", "bar")], "-"),           # no match
    ([("noWild", "foo1")], "-"),        # a literal value does not match eagerly
    ([("midWild", "barab")], "bar*b"),
    ([("midWild", "bar123b")], "bar*b"),
    ([("midWild", "barb")], "bar*b"),   # * matches the empty string
    ([("midWild", "bara")], "-"),       # no suffix
    ([("midWild", "xbarb")], "-"),      # no prefix
    ([("multiWild", "foo123bar456baz")], "foo*bar*baz"),
    ([("multiWild", "foobarbaz")], "foo*bar*baz"),
    ([("multiWild", "foo123baz")], "-"),  # the middle part is missing
    ([("multiWild", "bar456baz")], "-"),
])
def test_wildcards_match_as_the_go_service(entries: list[tuple[str, str]],
                                           pattern: str | None) -> None:
    p = load_policies(UP / "wildcard.yaml")
    rule = p.domains["test-domain"].match(entries)
    if pattern == "-":
        assert rule is None
    else:
        assert rule is not None and rule.path[-1] == (entries[-1][0], pattern)


_COMPOSITE = """
domain: d
descriptors:
  - key: a
    value: "b*"
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: a_b
    value: c
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: x_y
    rate_limit: {unit: minute, requests_per_unit: 3}
"""


@pytest.mark.parametrize(("entries", "matched"), [
    ([("a", "bz")], ("a", "b*")),       # the ordinary reading
    ([("a_b", "c")], ("a_b", "c")),
    ([("a", "b_c")], ("a_b", "c")),     # "a_b_c": the Go service's exact name for a_b=c
    ([("a_b", "z")], ("a", "b*")),      # "a_b_z" starts with "a_b": the pattern a_b* matches
    ([("x", "y")], ("x_y", None)),      # "x_y", the name of the default rule of key x_y
    ([("x_y", "anything")], ("x_y", None)),
    ([("x", "z")], None),
])
def test_yaml_descriptors_match_on_key_value_as_the_go_service(
        entries: list[tuple[str, str]], matched: tuple[str, str | None] | None) -> None:
    # envoyproxy/ratelimit src/config/config_impl.go GetLimit: an entry is looked up as
    # key + "_" + value in the map of `key` / `key_value` names, then against the wildcard
    # patterns (`key_value` with a '*') in file order, then as `key`. A TOML file matches key
    # and value apart.
    rule = yaml_policies(_COMPOSITE).domains["d"].match(entries)
    assert (None if rule is None else rule.path[-1]) == matched
    toml = parse_policies_text(
        '[[domains.d.descriptors]]\nkey = "a"\nvalue = "b*"\nlimits = [{ rate = "1/minute" }]'
        '\n[[domains.d.descriptors]]\nkey = "x_y"\nlimits = [{ rate = "3/minute" }]')
    got = toml.domains["d"].match(entries)
    assert (None if got is None else got.path[-1]) == (
        ("a", "b*") if entries[0][0] == "a" and entries[0][1].startswith("b")
        else ("x_y", None) if entries[0][0] == "x_y" else None)


def test_two_yaml_descriptors_of_one_key_value_name_are_refused_as_the_go_service() -> None:
    # config_impl.go loadDescriptors: "duplicate descriptor composite key".
    with pytest.raises(PolicyError) as info:
        yaml_policies("domain: d\ndescriptors:\n  - key: a\n    value: b_c\n"
                      "  - key: a_b\n    value: c\n")
    assert "duplicate descriptor key 'a_b' value 'c': already defined at descriptors[0] " \
        "as key 'a' value 'b_c': both are 'a_b_c'" in str(info.value)


async def test_values_matched_by_a_plain_wildcard_keep_a_counter_each() -> None:
    # Without share_threshold the Go cache key holds the request's value (cache_key.go).
    e = engine(load_policies(UP / "wildcard.yaml"))
    assert await admits_exactly(e, "test-domain", [("wild", "foo1")], 20)
    assert (await check(e, "test-domain", [("wild", "foo2")])).allowed


# -- share_threshold.yaml: config_test.go TestShareThreshold ------------------------------

@pytest.fixture(scope="module")
def shared() -> Policies:
    return load_policies(UP / "share_threshold.yaml")


@pytest.mark.parametrize(("first", "second", "rpu"), [
    # Basic share_threshold: files/a.pdf, files/b.csv share 100/minute.
    ([("files", "files/a.pdf")], [("files", "files/b.csv")], 100),
    ([("nested", "parent"), ("files", "nested/a")], [("nested", "parent"), ("files", "nested/b")],
     200),
    # Nested wildcards with the same key at two levels, both shared.
    ([("files", "top/1"), ("files", "nested/1")], [("files", "top/2"), ("files", "nested/2")],
     300),
    # Both parent and child shared: one counter per action.
    ([("user", "user/alice"), ("resource", "res/file1"), ("action", "read")],
     [("user", "user/bob"), ("resource", "res/file2"), ("action", "read")], 150),
    ([("midpath", "/api/v1")], [("midpath", "/api-beta-v1")], 100),  # middle wildcard
    ([("multiroute", "svcAepBrpc")], [("multiroute", "svceprpc")], 50),  # multi-wildcard
    ([("tenant", "t1prod"), ("resource", "resAv2")],
     [("tenant", "t99prod"), ("resource", "resBBBv2")], 60),
    # Explicit value precedence: file=test2 and file=test123 share test*'s 100.
    ([("file", "test2")], [("file", "test123")], 100),
])
async def test_share_threshold_values_share_one_counter(
        shared: Policies, first: list[tuple[str, str]], second: list[tuple[str, str]],
        rpu: int) -> None:
    assert limit_of(shared, "test-domain", first)[0] == rpu
    e = engine(shared)
    assert (await check(e, "test-domain", first, hits=rpu)).allowed
    assert not (await check(e, "test-domain", second)).allowed


async def test_share_threshold_keeps_unshared_levels_apart(shared: Policies) -> None:
    e = engine(shared)
    # Explicit value precedence: file=test1 has its own 50, apart from test*.
    assert limit_of(shared, "test-domain", [("file", "test1")]) == (50, MINUTE)
    assert await admits_exactly(e, "test-domain", [("file", "test1")], 50)
    assert (await check(e, "test-domain", [("file", "test2")])).allowed
    # Parent shared, child (file=file/*) not: the child's value keys the counter.
    a = [("path", "path/foo"), ("file", "file/doc1"), ("type", "pdf")]
    b = [("path", "path/bar"), ("file", "file/doc1"), ("type", "pdf")]
    c = [("path", "path/foo"), ("file", "file/doc2"), ("type", "pdf")]
    assert (await check(e, "test-domain", a, hits=120)).allowed
    assert not (await check(e, "test-domain", b)).allowed
    assert (await check(e, "test-domain", c)).allowed


async def test_share_threshold_counters_are_keyed_as_the_go_services_cache_key() -> None:
    # envoyproxy/ratelimit src/limiter/cache_key.go GenerateCacheKey: every entry's own key
    # and value, in order, with a shared level's value replaced by its pattern. So an entry
    # matched (by its key_value name) under another key name keeps its counter apart, and
    # one key both shared and not, at two levels, is no conflict.
    p = yaml_policies("""
domain: d
descriptors:
  - key: a
    value: "b*"
    descriptors:
      - key: user
        value: "*"
        share_threshold: true
        rate_limit: {unit: minute, requests_per_unit: 1}
  - key: k
    value: "x*"
    share_threshold: true
    descriptors:
      - key: k
        rate_limit: {unit: minute, requests_per_unit: 1}
""")
    e = engine(p)
    assert (await check(e, "d", [("a_bq", "z"), ("user", "u1")])).allowed
    assert not (await check(e, "d", [("a_bq", "z"), ("user", "u2")])).allowed  # shared
    assert (await check(e, "d", [("a_br", "z"), ("user", "u3")])).allowed  # a_br: its own
    assert (await check(e, "d", [("k", "x1"), ("k", "v1")])).allowed
    assert not (await check(e, "d", [("k", "x2"), ("k", "v1")])).allowed  # x* shared
    assert (await check(e, "d", [("k", "x1"), ("k", "v2")])).allowed  # the child is not


# -- the integration tests' runtime directory ---------------------------------------------

async def test_the_runtime_config_directory_loads_one_domain_per_file() -> None:
    p = load_policies(HERE / "runtime" / "config")
    assert set(p.domains) == {"basic", "another", "share-threshold-test"}
    assert limit_of(p, "basic", [("one_per_minute", "x")]) == (1, MINUTE)
    assert limit_of(p, "another", [("key4", "x")]) == (20, DAY)
    # integration_test.go testShareThreshold: files/a.pdf and files/b.csv share 10/hour;
    # each files_no_share value has its own 10 (remaining 9 after one).
    e = engine(p)
    dom = "share-threshold-test"
    for _ in range(10):
        await check(e, dom, [("files", "files/a.pdf")])
    over = await check(e, dom, [("files", "files/b.csv")])
    assert not over.allowed and over.statuses[0].outcome == "rejected"
    for i in range(10):
        r = await check(e, dom, [("files_no_share", f"files_no_share/{i}")])
        d = r.statuses[0].decision
        assert r.allowed and d is not None and d.remaining == 9


def test_a_directory_reads_yaml_files_under_it_and_skips_dot_files(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.yaml").write_text("domain: a\ndescriptors:\n  - key: k\n")
    (tmp_path / "sub" / "b.yml").write_text("domain: b\n")
    (tmp_path / ".c.yaml").write_text("domain: [broken\n")
    (tmp_path / "notes.txt").write_text("not a config\n")
    assert set(load_policies(tmp_path).domains) == {"a", "b"}
    (tmp_path / "empty").mkdir()
    with pytest.raises(PolicyError, match=r"no \.yaml or \.yml files"):
        load_policies(tmp_path / "empty")


# -- what the Go format says beyond the upstream files -------------------------------------

def yaml_policies(text: str) -> Policies:
    return parse_envoy_config([("inline.yaml", text)])


@pytest.mark.parametrize(("unit", "seconds"), [
    ("second", 1), ("MINUTE", 60), ("hour", 3600), ("day", 86400), ("week", 7 * 86400),
    ("month", 30 * 86400), ("year", 365 * 86400)])
def test_units_in_seconds_as_the_go_service(unit: str, seconds: int) -> None:
    p = yaml_policies(f"domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n"
                      f"      unit: {unit}\n      requests_per_unit: 7\n")
    assert limit_of(p, "d", [("k", "v")]) == (7, seconds)


async def test_requests_per_unit_zero_is_always_over_the_limit() -> None:
    p = yaml_policies("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n"
                      "      unit: second\n      requests_per_unit: 0\n")
    r = await check(engine(p), "d", [("k", "v")])
    assert not r.allowed and r.statuses[0].outcome == "rejected"


async def test_replaces_drops_the_named_limit_when_both_match() -> None:
    # envoyproxy/ratelimit src/service/ratelimit.go constructLimitsToCheck: a matched limit
    # named in another matched limit's `replaces` is not applied.
    p = yaml_policies("""
domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1, name: per-user}
  - key: vip
    rate_limit:
      unit: minute
      requests_per_unit: 5
      replaces: [{name: per-user}]
""")
    e = engine(p)
    for _ in range(5):
        r = await check(e, "d", [("user", "u")], [("vip", "yes")])
        assert r.allowed and r.statuses[0].outcome == "unmatched"
    assert not (await check(e, "d", [("user", "u")], [("vip", "yes")])).allowed
    # Alone, the user's limit applies and was never charged above.
    assert await admits_exactly(e, "d", [("user", "u")], 1)


async def test_algorithms_are_an_opt_in_under_rate_limit() -> None:
    p = yaml_policies("""
domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: token-bucket, burst: 3}
""")
    rule = p.domains["d"].match([("k", "v")])
    assert rule is not None
    lim = rule.limits[0].limit
    assert (lim.algorithm, lim.burst, lim.rate.per_second) == ("token-bucket", 3, 10)
    assert await admits_exactly(engine(p), "d", [("k", "v")], 3)


def test_scalar_values_are_read_as_written_and_empty_is_a_default() -> None:
    # yaml.v2 reads `value: 200` into the Go string field as "200".
    p = yaml_policies("domain: d\ndescriptors:\n  - key: status\n    value: 200\n"
                      "    rate_limit: {unit: second, requests_per_unit: 1}\n"
                      "  - key: any\n    value: ''\n"
                      "    rate_limit: {unit: second, requests_per_unit: 1}\n")
    assert p.domains["d"].match([("status", "200")]) is not None
    assert p.domains["d"].match([("any", "whatever")]) is not None


# -- our own file per error kind ----------------------------------------------------------

def expectations(path: Path) -> list[str]:
    return [line.split("# expect:", 1)[1].strip()
            for line in path.read_text().splitlines() if line.startswith("# expect:")]


def test_there_is_a_yaml_file_per_error_kind() -> None:
    assert len(BAD) >= 10
    for path in BAD:
        assert expectations(path), f"{path.name} states no '# expect:' line"


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_bad_yaml_reports_every_error_with_file_line_and_key_path(path: Path) -> None:
    policies, issues = check_file(path)
    assert policies is None
    reported = [str(i) for i in issues]
    for want in expectations(path):
        assert any(r.startswith(want) for r in reported), \
            f"{path.name}: expected {want!r}; reported:\n" + "\n".join(reported)
    assert len(reported) == len(expectations(path)), reported
    with pytest.raises(PolicyError):
        load_envoy_config(path)


def test_check_config_validates_yaml_files_and_directories(
        capsys: pytest.CaptureFixture[str]) -> None:
    bad = UP / "bad_limit_unit.yaml"
    assert main(["check-config", str(bad)]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"{bad}:8: descriptors[0].rate_limit.unit: invalid rate limit unit")
    runtime = HERE / "runtime" / "config"
    assert main(["check-config", str(runtime), str(UP / "wildcard.yaml")]) == 0
    assert capsys.readouterr().out == (f"{runtime}: OK (3 domains, 11 rules, 11 limits)\n"
                                       f"{UP / 'wildcard.yaml'}: OK (1 domain, 6 rules, "
                                       "6 limits)\n")


# -- serving an existing envoyproxy/ratelimit directory ------------------------------------

def test_serve_takes_an_existing_runtime_directory_and_reloads_it(tmp_path: Path) -> None:
    import shutil  # noqa: PLC0415
    import signal  # noqa: PLC0415

    import httpx  # noqa: PLC0415

    from tests.service._proc import ServiceProcess  # noqa: PLC0415

    config = tmp_path / "config"
    shutil.copytree(HERE / "runtime" / "config", config)

    def one_per_minute(svc: ServiceProcess, who: str) -> bool:
        r = httpx.post(f"{svc.http}/v1/check", timeout=10, json={
            "domain": "basic", "descriptors": [{"one_per_minute": who}]})
        assert r.status_code == 200, r.text
        out: bool = r.json()["allowed"]
        return out

    with ServiceProcess(config, tmp_path / "log") as svc:
        assert one_per_minute(svc, "a") and not one_per_minute(svc, "a")
        # A file edited in place and SIGHUP: the directory is read again.
        path = config / "basic.yaml"
        path.write_text(path.read_text().replace("requests_per_unit: 1\n",
                                                 "requests_per_unit: 3\n"))
        n = len(svc.records())
        svc.send(signal.SIGHUP)
        svc.wait_for(lambda r: r.get("event") == "reloaded", after=n)
        assert one_per_minute(svc, "a") and one_per_minute(svc, "a")
        assert not one_per_minute(svc, "a")
