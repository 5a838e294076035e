"""Hostlists: membership without expansion, a counted cap where names must be produced,
and a clean error (never an internal one) for whatever ClusterShell chokes on."""

from __future__ import annotations

import random
import re
import time
from pathlib import Path

import pytest
from ClusterShell.NodeSet import NodeSet
from support import assert_linear, run_hc, run_hc_inproc

from healthcheck.core.config.loader import Config
from healthcheck.core.errors import ConfigError, UsageError
from healthcheck.core.nodes import MAX_EXPAND, HostlistError, expand, overlapping, parse_hostlist

PATTERNS = [
    "gpu[1-10]", "gpu[001-128]", "gpu[01-16]-ib[0-7]", "n[0-9]", "n[00-09]", "rack[1-4]n[1-32]",
    "gpu[1-100/7]", "gpu[8-12,001-005,40]", "login1,login2", "gpu017", "a.b[1-3].c", "x[0]", "x[00]",
    "[1-5]node", "gpu[1-10],gpu[5-20]", "n1[0-9]", "n[1-3]0", "n[1-10]!n5", "n[1-20]&n[10-30]",
    "n[1-5]^n[3-8]", " gpu[1-3] , login ",
]
NAMES = [
    "gpu1", "gpu01", "gpu001", "gpu10", "gpu11", "gpu017", "gpu17", "gpu128", "gpu0128", "gpu129", "gpu15",
    "gpu01-ib0", "gpu1-ib0", "gpu16-ib7", "gpu16-ib07", "n0", "n00", "n9", "n09", "n10", "n5", "n15", "n30",
    "rack2n31", "rack02n31", "login1", "login", "a.b2.c", "x0", "x00", "3node", "gpu8", "gpu43", "gpu40",
    "gpu005", "gpu5", "gpu",
]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_membership_is_what_clustershell_says(pattern):
    expected = NodeSet(pattern)
    hostlist = parse_hostlist(pattern)
    for name in NAMES + list(expected):
        assert (name in hostlist) == (name in expected), (pattern, name)
    assert hostlist.size_bound >= len(expected)


def _random_pattern(rng: random.Random) -> str:
    def bound(n: int, width: int) -> str:
        return f"{n:0{width}d}" if width else str(n)

    terms = []
    for _ in range(rng.randint(1, 3)):
        text = ""
        for _ in range(rng.randint(1, 2)):
            text += rng.choice(["gpu", "n", "-ib", "x.", "a1b"])
            width = rng.choice([0, 0, 2, 3])
            a = rng.randint(0, 20)
            b = a + rng.randint(0, 12)
            step = f"/{rng.randint(2, 4)}" if rng.random() < 0.2 else ""
            text += f"[{bound(a, width)}-{bound(b, width)}{step},{bound(rng.randint(0, 30), width)}]"
        terms.append(text)
    return ",".join(terms)


def test_membership_and_overlap_agree_with_clustershell_on_random_patterns():
    rng = random.Random(20251122)
    names = [f"{p}{n}{s}" for p in ("gpu", "n", "x.", "a1b") for n in ("0", "1", "01", "001", "7", "07", "12", "30")
             for s in ("", "-ib0", "-ib07", "-ib12")]
    for _ in range(250):
        p1, p2 = _random_pattern(rng), _random_pattern(rng)
        ns1, ns2 = NodeSet(p1), NodeSet(p2)
        h1, h2 = parse_hostlist(p1), parse_hostlist(p2)
        for name in names + list(ns1)[:50]:
            assert (name in h1) == (name in ns1), (p1, name)
        common = ns1.intersection(ns2)
        assert h1.overlap(h2) == (str(common) if len(common) else None), (p1, p2)


def _best_of(fn, repeat: int = 7, number: int = 20) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.process_time()
        for _ in range(number):
            fn()
        best = min(best, time.process_time() - t)
    return best


def test_membership_in_a_huge_pattern_costs_what_a_small_one_does():
    small, huge = "gpu[1-10]", "gpu[1-1000000000]"
    assert "gpu999999999" in parse_hostlist(huge) and "gpu1000000001" not in parse_hostlist(huge)

    def check(pattern: str) -> None:
        assert "gpu7" in parse_hostlist(pattern)

    t_small, t_huge = _best_of(lambda: check(small)), _best_of(lambda: check(huge))
    assert t_huge < 20 * t_small, (t_small, t_huge)


def test_a_config_with_a_huge_pattern_loads_and_resolves_fast(tmp_path):
    path = tmp_path / "hc.yaml"
    path.write_text("default_fabric: generic\nnodes:\n  'gpu[1-10000000]': h100-ndr400\n  'cpu[1-8]': generic\n")
    small = tmp_path / "small.yaml"
    small.write_text("default_fabric: generic\nnodes:\n  'gpu[1-10]': h100-ndr400\n  'cpu[1-8]': generic\n")

    def resolve(p) -> None:
        assert Config(p).fabric_of("gpu7") == "h100-ndr400"

    t_small, t_huge = _best_of(lambda: resolve(small), number=3), _best_of(lambda: resolve(path), number=3)
    assert t_huge < 5 * t_small, (t_small, t_huge)


def test_hc_config_validate_and_show_with_a_billion_node_pattern(tmp_path):
    path = tmp_path / "hc.yaml"
    path.write_text("default_fabric: generic\nnodes:\n  'gpu[1-1000000000]': h100-ndr400\n"
                    "  'cpu[1-1000000000]': generic\noverrides:\n  'gpu[500000000-1000000000]':\n    ib: {hca_count: 7}\n")
    r = run_hc_inproc("config", "validate", str(path))
    assert r.returncode == 0, r.stderr
    r = run_hc_inproc("config", "show", "gpu999999999", "--config", str(path), "--format", "json")
    assert r.returncode == 0, r.stderr
    assert b'"fabric":"h100-ndr400"' in r.stdout.replace(b" ", b"") and b'"value":7' in r.stdout.replace(b" ", b"")
    r = run_hc_inproc("config", "show", "gpu1000000001", "--config", str(path))
    assert r.returncode == 0 and b"fabric generic" in r.stdout, r.stderr


def test_huge_overlapping_patterns_are_found_without_expanding(tmp_path):
    path = tmp_path / "hc.yaml"
    path.write_text("nodes:\n  'gpu[1-1000000000]': generic\n  'gpu[999999990-2000000000/3]': h100-ndr400\n")
    with pytest.raises(ConfigError, match=r"hc.yaml:3: nodes: 'gpu\[999999990-2000000000/3\]' overlaps "
                                          r"'gpu\[1-1000000000\]' on gpu\[999999990,999999993,999999996,999999999\]"):
        Config(path).validate()


@pytest.mark.parametrize("pattern, error", [
    ("gpu[1-1000000000]!gpu5", r"hc.yaml:3: nodes: .* is not a valid hostlist: may expand to more than 100000"),
    ("gpu1[0-99999999]", r"hc.yaml:3: nodes: .* is not a valid hostlist: may expand to more than 100000"),
    ("gpu[1-", r"hc.yaml:3: nodes: 'gpu\[1-' is not a valid hostlist"),
    ("gpu[[1-2]]", r"hc.yaml:3: nodes: .* is not a valid hostlist: nested"),
    ("gpu[5-1]", r"hc.yaml:3: nodes: .* is not a valid hostlist: '5-1': invalid values in range"),
])
def test_hostile_config_patterns_are_config_errors(tmp_path, pattern, error):
    path = tmp_path / "hc.yaml"
    path.write_text(f"default_fabric: generic\nnodes:\n  '{pattern}': generic\n")
    with pytest.raises(ConfigError, match=error):
        Config(path)
    r = run_hc_inproc("config", "validate", str(path))
    assert r.returncode == 4 and b"internal error" not in r.stderr, r.stderr


def test_expand_counts_before_expanding():
    t_small = _best_of(lambda: expand(["node[1-100]"]), repeat=3, number=5)

    def huge() -> None:
        with pytest.raises(UsageError, match=f"hostlist expands to more than {MAX_EXPAND} nodes"):
            expand(["node[1-10000000]"])

    assert _best_of(huge, repeat=3, number=5) < 20 * t_small
    assert len(expand([f"n[1-{MAX_EXPAND}]"])) == MAX_EXPAND
    with pytest.raises(UsageError, match="more than"):
        expand([f"n[1-{MAX_EXPAND // 2}]", f"m[1-{MAX_EXPAND // 2 + 1}]"])
    assert expand(["gpu[1-3]", "gpu2,login1"]) == ["gpu1", "gpu2", "gpu3", "login1"]


@pytest.mark.parametrize("pattern", [
    "gpu[1-1000000000]", "gpu[1-1000000000]!gpu5", "a1[0-99999999999]", "x[", "x]", "x[[1]]", "[", ",", "x,,y",
    "gpu[1-0]", "gpu[" + "9" * 5000 + "]", "gpu" + "1" * 5000, "gpu[0-" + "9" * 200 + "]", "[1-9]" * 50,
    "gpu[1-5]" + "!gpu1" * 3000, "gpu[001-1000]", "n[-5--1]", "gpu[1-3/0]", "x" * 70000, "",
])
def test_hostile_hostlists_are_usage_errors_never_internal_ones(pattern):
    try:
        names = expand([pattern])
    except UsageError:
        return
    assert len(names) <= MAX_EXPAND


def test_hostile_hostlists_parse_to_a_hostlist_error_only():
    for pattern in ["gpu[1-1000000000]!gpu5", "x[", "x[[1]]", "gpu[" + "9" * 5000 + "]", "n[-5--1]&x", "@"]:
        try:
            parse_hostlist(pattern)
        except HostlistError:
            pass


def test_hc_sweep_refuses_a_huge_nodes_list_quickly(tmp_path):
    r = run_hc("sweep", "--nodes", "node[1-10000000]", timeout=60)
    assert r.returncode == 4 and f"more than {MAX_EXPAND} nodes".encode() in r.stderr, r.stderr
    r = run_hc("node", "node[1-1000000000]", timeout=60)
    assert r.returncode == 4 and b"internal error" not in r.stderr, r.stderr


# ----------------------------------------------- many patterns at once (issue 18, D.17)


def _random_term(rng: random.Random) -> str:
    if rng.random() < 0.1:  # a form outside the plain one: listed through ClusterShell
        return rng.choice(["n[1-10]!n5", "gpu[1-5]^gpu[3-8]", "x.[0-9]&x.[5-20]"])
    return _random_pattern(rng)


def test_overlapping_finds_every_pair_that_shares_a_name_and_only_those():
    """The sweep against every pair compared the slow way, on random plain and operator
    patterns with padding, steps, two indexes and names without digits, in random groups."""
    rng = random.Random(20261122)
    for _ in range(60):
        texts = [_random_term(rng) for _ in range(rng.randint(2, 14))] + rng.sample(["login", "x.", "gpu"], 1)
        hostlists = [parse_hostlist(t) for t in texts]
        groups = [rng.choice("ab") for _ in texts]
        expected = {(i, j) for i in range(len(texts)) for j in range(i + 1, len(texts))
                    if groups[i] != groups[j] and hostlists[i].overlap(hostlists[j]) is not None}
        found = list(overlapping(hostlists, groups, lambda a, b: a != b))
        assert len(found) == len(set(found)) and set(found) == expected, texts


def _many_patterns(tmp_path, n: int) -> Path:
    """A config as a big site writes one: a pattern per rack of 8 and a few single nodes,
    three fabrics taking turns, and overrides over some racks."""
    fabrics = ("h100-ndr400", "a100-hdr200", "generic")
    lines = ["default_fabric: generic", "nodes:"]
    for i in range(n):
        pattern = f"gpu[{i * 8:06d}-{i * 8 + 7:06d}]" if i % 10 else f"login{i}"
        lines.append(f"  '{pattern}': {fabrics[i % 3]}")
    lines += ["overrides:", f"  'gpu[000000-{min(n, 50) * 8:06d}]': {{ib: {{hca_count: 4}}}}",
              "  'login0,gpu[000100-000200]': {gpu: {count: 4}}"]
    path = tmp_path / f"hc-{n}.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_validating_twenty_thousand_node_patterns_costs_ten_times_two_thousand(tmp_path):
    small, large = _many_patterns(tmp_path, 2_000), _many_patterns(tmp_path, 20_000)
    assert Config(large).validate() == []
    assert_linear(lambda path: Config(path).validate(), small, large, what="hc config validate")


@pytest.mark.parametrize("section", ["nodes", "overrides", "rails"])
@pytest.mark.parametrize("pattern, named", [
    ("gpu\\u202e[01-10]", "U+202E RIGHT-TO-LEFT OVERRIDE"),
    ("gpu[1-4]\\u2066x", "U+2066 LEFT-TO-RIGHT ISOLATE"),
    ("gp\\u00fc[1-3]", "U+00FC LATIN SMALL LETTER U WITH DIAERESIS"),
    ("gpu\\u200b1", "U+200B ZERO WIDTH SPACE"),
    ("\\u0433pu[1-2]", "U+0433 CYRILLIC SMALL LETTER GHE"),  # looks like a g
    ("n\\x01[1-2]", "U+0001"),
    ("n\\t1", "U+0009"),
])
def test_patterns_no_node_name_can_match_are_refused_at_file_line(tmp_path, section, pattern, named):
    value = {"nodes": "generic", "overrides": "{ib: {hca_count: 4}}", "rails": "leaf1"}[section]
    path = tmp_path / "hc.yaml"
    path.write_text(f'default_fabric: generic\n{section}:\n  "gpu[1-2]": {value}\n  "{pattern}": {value}\n')
    with pytest.raises(ConfigError, match=rf"hc.yaml:4: {section}: .* is not a valid hostlist: it holds {re.escape(named)}"):
        Config(path)
    r = run_hc_inproc("config", "validate", str(path))
    err = r.stderr.decode()
    assert r.returncode == 4 and err.count("\n") == 1 and "internal error" not in err, err
    assert err.isascii() and named in err  # the pattern escaped: a bidi override cannot reorder the line
