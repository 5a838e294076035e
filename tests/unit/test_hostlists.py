"""Hostlists: membership without expansion, a counted cap where names must be produced,
and a clean error (never an internal one) for whatever ClusterShell chokes on."""

from __future__ import annotations

import random
import time

import pytest
from ClusterShell.NodeSet import NodeSet
from support import run_hc

from healthcheck.core.config.loader import Config
from healthcheck.core.errors import ConfigError, UsageError
from healthcheck.core.nodes import MAX_EXPAND, HostlistError, expand, parse_hostlist

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
        t = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, time.perf_counter() - t)
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
    r = run_hc("config", "validate", str(path))
    assert r.returncode == 0, r.stderr
    r = run_hc("config", "show", "gpu999999999", "--config", str(path), "--format", "json")
    assert r.returncode == 0, r.stderr
    assert b'"fabric":"h100-ndr400"' in r.stdout.replace(b" ", b"") and b'"value":7' in r.stdout.replace(b" ", b"")
    r = run_hc("config", "show", "gpu1000000001", "--config", str(path))
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
    r = run_hc("config", "validate", str(path))
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
