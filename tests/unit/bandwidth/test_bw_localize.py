"""Who is slow: culprit nodes, slow links, fabric-wide problems and peer outliers, from
bandwidth tests between nodes, and the bw.pairs analysis that reports them."""

from __future__ import annotations

import math
import random

import msgspec
import pytest

from healthcheck.analyses.pairs import CHECK, PairsInput, findings
from healthcheck.bandwidth.localize import (
    LocalizeSettings,
    Result,
    Verdict,
    confirmation_tests,
    judge_by_peers,
    localize,
    localize_adaptive,
)
from healthcheck.bandwidth.peers import peer_threshold
from healthcheck.bandwidth.schedule import Test as Planned
from healthcheck.bandwidth.schedule import circle_rounds, groups
from healthcheck.core import registry
from healthcheck.core.analysis import run_analyses
from healthcheck.core.catalogue import CATALOGUE, EMITTERS
from healthcheck.core.model import Finding, GroupResult, Limit, Metric
from healthcheck.core.status import Status

BASE = 48.0  # busbw per NDR NIC, GB/s
FLOOR = 0.9  # NVIDIA's rule: 90 % of the expected rate


def names(n: int) -> list[str]:
    return [f"gpu{i:04d}" for i in range(n)]


class Fabric:
    """A model fabric: a test runs at its slowest member's speed, times any slow link
    among its members, times noise; it passes at FLOOR x BASE."""

    def __init__(self, slow: dict[str, float] | None = None, links: dict[tuple[str, str], float] | None = None,
                 noise: float = 0.03, seed: int = 0, hcas: bool = False, floor: float = FLOOR) -> None:
        self.slow = slow or {}
        self.links = {frozenset(k): v for k, v in (links or {}).items()}
        self.noise = noise
        self.rng = random.Random(seed)
        self.hcas = hcas
        self.floor = floor
        self.rounds: list[list[Planned]] = []

    def measure(self, members: tuple[str, ...]) -> Result:
        v = min(self.slow.get(m, 1.0) for m in members)
        for pair, factor in self.links.items():
            if pair <= set(members):
                v *= factor
        v *= 1 + self.rng.uniform(-self.noise, self.noise) if self.noise else 1
        value = round(BASE * v, 3)
        return Result(members, value, value >= self.floor * BASE, threshold=self.floor * BASE,
                      hcas=tuple("mlx5_0" for _ in members) if self.hcas else ())

    def __call__(self, tests: list[Planned]) -> list[Result]:
        members = [m for t in tests for m in t.members]
        assert len(members) == len(set(members)), "a round's tests must be disjoint"
        self.rounds.append(tests)
        return [self.measure(t.members) for t in tests]

    def circle(self, nodes: list[str]) -> list[Result]:
        return [self.measure(p) for rnd in circle_rounds(nodes) for p in rnd]


def only(v: Verdict, *, culprits=(), links=(), suspects=(), fabric=False, outliers=()) -> None:
    """The verdict names exactly these, and nothing else."""
    assert v.culprit_nodes == sorted(culprits)
    assert sorted(tuple(sorted(link.members)) for link in v.links) == sorted(tuple(sorted(p)) for p in links)
    assert v.suspect_nodes == sorted(suspects)
    assert bool(v.fabric) is fabric
    assert sorted(o.members for o in v.outliers) == sorted(outliers)


# ------------------------------------------------------------------------ culprits


@pytest.mark.parametrize("n", [8, 64])
def test_one_bad_node_is_named_and_nothing_else(n):
    nodes = names(n)
    bad = nodes[n // 3]
    v = localize(Fabric({bad: 0.6}).circle(nodes), nodes=nodes)
    only(v, culprits=[bad])
    [c] = v.culprits
    assert c.failed == n - 1 and len(c.confirmed_by) == n - 1  # slow with every partner, each fine elsewhere
    assert set(v.good) == set(nodes) - {bad} and v.untested == ()
    # and driven round by round: the circle method for 8, group testing for 64
    fabric = Fabric({bad: 0.6})
    a = localize_adaptive(nodes, fabric)
    only(a.verdict, culprits=[bad])
    assert a.plan == ("circle" if n <= 16 else "groups") and a.complete
    assert a.rounds == (n - 1 if n <= 16 else 2) == len(fabric.rounds)


def test_a_single_culprit_among_2048_is_found_in_a_few_rounds():
    nodes = names(2048)
    target = 2 * math.log2(2048) + 3
    for bad in ("gpu0000", "gpu1337", "gpu2047"):
        a = localize_adaptive(nodes, Fabric({bad: 0.6}, seed=len(bad)))
        only(a.verdict, culprits=[bad])
        assert a.rounds <= target and a.complete
        # bisection when partners are scarce: still found, still nobody else named
        b = localize_adaptive(nodes, Fabric({bad: 0.6}), partners_per_round=2)
        only(b.verdict, culprits=[bad])
        assert b.rounds <= target and b.complete
        assert any(r.purpose == "split" for r in b.results)


def test_one_percent_bad_nodes_among_2048_are_all_named_and_no_healthy_one():
    nodes = names(2048)
    bad = random.Random(11).sample(nodes, 20)
    for kw in ({}, {"partners_per_round": 16}, {"k": 16}):
        a = localize_adaptive(nodes, Fabric({b: 0.6 for b in bad}, seed=3), **kw)
        only(a.verdict, culprits=bad)
        assert a.complete and a.rounds <= 2 * math.log2(2048) + 3
        assert set(a.verdict.named_nodes) == set(bad)


def test_a_suspect_not_confirmed_against_a_known_good_partner_is_not_fail():
    # two nodes, one slow test: either could be at fault, and the run says no test can tell
    v = localize([Result(("a", "b"), 20.0, False, threshold=40.0)])
    only(v, suspects=["a", "b"])
    out = findings(v)
    assert sorted((str(who), f.id) for who, f in out) == [("()", "bw.E106"), ("a", "bw.E105"), ("b", "bw.E105")]
    assert all(f.status is Status.WARN for _, f in out)
    # a group that fell short: every member is a suspect until re-tested with a known-good partner
    group = ("s1", "s2", "s3", "s4")
    results = [Result(group, 20.0, False), Result(("g1", "g2", "g3", "g4"), 46.0, True)]
    v = localize(results)
    only(v, suspects=list(group))
    tests = confirmation_tests(v, v.good, seed=1)
    assert sorted(t.members[0] for t in tests) == list(group) and all(t.purpose == "confirm" for t in tests)
    assert len({t.members[1] for t in tests}) == 4 and {t.members[1] for t in tests} <= {"g1", "g2", "g3", "g4"}
    partner = dict(t.members for t in tests)
    confirmed = results + [Result(t.members, 20.0 if t.members[0] == "s3" else 46.0, t.members[0] != "s3")
                           for t in tests]
    v = localize(confirmed)
    only(v, culprits=["s3"])
    # the re-test, and the group now that its other members passed elsewhere
    assert v.culprits[0].confirmed_by == (("s1", "s2", "s4"), (partner["s3"],))
    # a stricter policy wants three confirmations: two leave it a suspect
    only(localize(confirmed, settings=LocalizeSettings(confirm_tests=3)), suspects=["s3"])
    # a node vouched for from elsewhere (a loopback test) confirms like one that passed here
    only(localize([Result(("x", "ref"), 20.0, False)], known_good=["ref"]), culprits=["x"], suspects=["ref"])
    # no partner can be found: the adaptive driver stops, incomplete, naming no culprit
    a = localize_adaptive(["a", "b"], Fabric({"a": 0.5}))
    only(a.verdict, suspects=["a", "b"])
    assert not a.complete and a.rounds == 1


def test_a_pass_at_the_edge_of_the_floor_does_not_vouch_for_a_partner():
    """Group mode, floor 0.5, +-30 %: slow x (0.4) fails its screening group with healthy h;
    slow p's figures straddle the floor and its group passed at 0.507 (the healthy groups at
    0.74-1.27). h's confirmation test
    drew p as its known-good partner and measured p's speed, 0.439: h was the culprit,
    confirmed by a slow node, and drained. A pass that near the floor is what a straddling
    slow node gives now and then: it does not confirm anyone, so h stays a suspect (another
    confirmation follows, with a partner that passed clearly); x, short with a partner that
    passed clearly, is still named."""
    floor = 0.5
    g1 = ("x", "h", "a1", "a2", "a3", "a4", "a5", "a6")
    g2 = ("p", "b1", "b2", "b3", "b4", "b5", "b6", "b7")
    g3 = ("a1", "a2", "a3", "a4", "a5", "a6", "c1", "c2")
    g4 = ("y", "d1", "d2", "d3", "d4", "d5", "d6", "d7")
    # the rest of the fleet: healthy groups, +-30 % around 1.0
    rest = [Result(tuple(f"e{i}{j}" for j in range(8)), v, True, threshold=floor)
            for i, v in enumerate((0.74, 0.81, 0.88, 0.93, 1.07, 1.14, 1.2, 1.27))]
    results = [Result(g1, 0.394, False, threshold=floor), Result(g2, 0.507, True, threshold=floor),
               Result(g3, 1.02, True, threshold=floor), Result(g4, 0.98, True, threshold=floor), *rest,
               Result(("x", "y"), 0.46, False, threshold=floor, purpose="confirm"),
               Result(("h", "p"), 0.439, False, threshold=floor, purpose="confirm")]
    v = localize(results)
    assert (v.culprit_nodes, v.suspect_nodes) == (["x"], ["h"])  # (groups 10 % under the median are outliers)
    # the next confirmation partners are drawn from the nodes that passed clearly, never p
    assert "p" in v.good and "p" not in v.vouching and {"y", "a1", "c1", "e00"} <= set(v.vouching)
    # a quiet sweep (+-3 %) against a floor hc baseline set a few % below: healthy passes vouch
    quiet = [Result(tuple(f"q{i}{j}" for j in range(2)), 0.5 * 1.06 * (1 + (i % 5 - 2) / 100), True,
                    threshold=floor) for i in range(10)]
    v = localize([*quiet, Result(("s", "q00"), 0.3, False, threshold=floor, purpose="confirm")])
    only(v, culprits=["s"])


def test_a_large_noisy_sweep_without_a_floor_names_its_slow_nodes_and_not_the_noise():
    """512 nodes in groups, no floor, +-30 %, peer_fraction 0.1, five nodes at 0.2: a third of
    the healthy groups are short by the fraction. Those were counted as failures and the run
    was fabric-wide (nobody named); now the five are named and no healthy node is, and a
    node whose short tests overlap the others' is not said (bw.E109 is for one below them
    all: before that, 326 of 2048 were)."""
    nodes = names(512)
    rng = random.Random(0)
    slow = set(rng.sample(nodes, 5))

    def run_round(tests: list[Planned]) -> list[Result]:
        return [Result(t.members, (0.2 if slow & set(t.members) else 1.0) * (1 + rng.uniform(-0.3, 0.3)), True,
                       peers=True) for t in tests]

    a = localize_adaptive(nodes, run_round, seed=0)
    assert set(a.verdict.culprit_nodes) == slow and not a.verdict.fabric
    assert len(a.verdict.within_noise) <= 2  # (E104 peer outliers at this noise are another matter)


def test_confirmation_partners_are_distinct_new_and_free():
    tests = confirmation_tests(["s1", "s2"], ["g1", "g2", "g3"], busy=["g3"], tried=[("s1", "g1"), ("s2", "g1")])
    assert sorted(t.members for t in tests) == [("s1", "g2"), ("s2", "g1")] or \
        sorted(t.members for t in tests) == [("s1", "g1"), ("s2", "g2")]
    assert {t.members[1] for t in tests} == {"g1", "g2"}
    first = confirmation_tests(["s1"], ["g1", "g2"], tried=[("s1", "g1")])
    assert first == [Planned(("s1", "g2"), "confirm")]
    assert confirmation_tests(["s1", "s2", "s3"], ["g1"]) == [Planned(("s1", "g1"), "confirm")]
    assert confirmation_tests(["s1"], ["s1"]) == []  # never a suspect with itself


# ---------------------------------------------------------------------------- links


def test_one_bad_link_is_a_link_finding_and_names_no_node():
    nodes = names(8)
    link = ("gpu0002", "gpu0005")
    fabric = Fabric(links={link: 0.5}, hcas=True)
    v = localize(fabric.circle(nodes), nodes=nodes)
    only(v, links=[link])
    [slow] = v.links
    assert slow.hcas == ("mlx5_0", "mlx5_0") and slow.passes == (6, 6)
    [(who, f)] = findings(v)
    assert who == link and f.id == "bw.E102" and f.status is Status.WARN
    assert "gpu0002 (mlx5_0) <-> gpu0005 (mlx5_0)" in f.message and f.component == "mlx5_0-mlx5_0"
    # the adaptive driver on 8 nodes is exhaustive: it finds it too
    only(localize_adaptive(nodes, Fabric(links={link: 0.5})).verdict, links=[link])


def test_a_slow_link_inside_a_group_is_narrowed_down_to_its_pair():
    nodes = names(256)
    g = groups(nodes, 8, seed=0)[9]
    link = (g[2], g[5])
    a = localize_adaptive(nodes, Fabric(links={link: 0.5}))
    only(a.verdict, links=[link])  # the group's failure is explained by the pair inside it
    assert a.complete and a.rounds <= 2 + 7
    assert any(r.purpose == "narrow" for r in a.results)


def test_a_failure_a_retest_does_not_reproduce_is_not_a_link():
    results = [Result(("a", "b"), 20.0, False), Result(("a", "b"), 46.0, True),
               Result(("a", "c"), 46.0, True), Result(("b", "c"), 46.0, True)]
    only(localize(results))


def test_a_node_slow_on_one_rail_is_a_culprit_of_that_rail():
    nodes = names(6)
    results = []
    for rnd in circle_rounds(nodes):
        for a, b in rnd:
            for rail in range(2):
                slow = rail == 1 and "gpu0004" in (a, b)
                results.append(Result((a, b), 20.0 if slow else 46.0, not slow, kind=f"rail{rail}",
                                      hcas=(f"mlx5_{rail}", f"mlx5_{rail}")))
    v = localize(results, nodes=nodes)
    only(v, culprits=["gpu0004"])
    [c] = v.culprits
    assert (c.kind, c.hca) == ("rail1", "mlx5_1")
    [(who, f)] = findings(v)
    assert who == "gpu0004" and f.component == "mlx5_1" and f.status is Status.FAIL


# ----------------------------------------------------------------------- fabric-wide


def test_when_most_tests_are_slow_it_is_fabric_wide_and_no_node_is_named():
    nodes = names(64)
    everything = Fabric({n: 0.6 for n in nodes}).circle(nodes)
    v = localize(everything, nodes=nodes)
    only(v, fabric=True)
    assert v.good == () and "64 of 64 nodes" in v.fabric[0].reason
    [(who, f)] = findings(v)
    assert who == () and f.id == "bw.E103" and f.status is Status.WARN  # nothing to drain
    # most nodes slow
    only(localize(Fabric({n: 0.6 for n in nodes[:40]}).circle(nodes)), fabric=True)
    # failures everywhere, each node fine with some partners: a diffuse fabric problem, not 1,000 links
    rng = random.Random(4)
    diffuse = [Result(p, 20.0, False) if rng.random() < 0.6 else Result(p, 46.0, True)
               for rnd in circle_rounds(nodes) for p in rnd]
    v = localize(diffuse)
    only(v, fabric=True)
    assert "every member reached the floor" in v.fabric[0].reason
    # most screening tests fail and naming the nodes would pass the blast-radius guard
    guard = localize(Fabric({n: 0.6 for n in nodes[:24]}).circle(nodes))
    only(guard, fabric=True)
    assert "blast-radius" in guard.fabric[0].reason
    # the adaptive driver stops as soon as it is clear, and names no node either
    a = localize_adaptive(names(512), Fabric({n: 0.6 for n in names(512)}))
    only(a.verdict, fabric=True)
    assert a.rounds == 1


def test_a_few_bad_nodes_on_a_small_fabric_are_not_fabric_wide():
    nodes = names(4)  # one bad of four fails half the pairs: still one culprit
    only(localize(Fabric({"gpu0001": 0.5}).circle(nodes)), culprits=["gpu0001"])
    nodes = names(8)
    only(localize(Fabric({"gpu0001": 0.5, "gpu0006": 0.5}).circle(nodes)), culprits=["gpu0001", "gpu0006"])


# ----------------------------------------------------------- judged by peers (no floor)


def peer(members, value):
    """A test with no floor: short or not is for its peers to say."""
    return Result(tuple(members), value, True, peers=True)


@pytest.mark.parametrize("order", [0, 1, 2, 3, 4, 5])
def test_three_nodes_one_slow_with_both_partners_is_its_culprit_whatever_the_order(order):
    """Node3 in 2 of 3 tests: the median of the tests is its own speed; the nodes' bests are not."""
    import itertools

    tests = [peer(("n1", "n4"), 0.5), peer(("n1", "n3"), 0.012), peer(("n3", "n4"), 0.012)]
    rs = list(itertools.permutations(tests))[order]
    v = localize(rs)
    only(v, culprits=["n3"])
    [c] = v.culprits
    assert c.peers and c.threshold == pytest.approx(0.45) and sorted(c.confirmed_by) == [("n1",), ("n4",)]
    [(who, f)] = findings(v)
    assert (who, f.id, f.status) == ("n3", "bw.E101", Status.FAIL) and "its peers' figure" in f.message


def test_the_peer_reference_holds_while_fewer_than_half_the_nodes_are_slow():
    for n, slow in ((4, ["n2"]), (4, ["n1", "n3"]), (5, ["n1", "n4"]), (8, ["n0", "n5"])):
        nodes = [f"n{i}" for i in range(n)]
        rs = [peer(p, 0.02 if set(p) & set(slow) else 0.5) for rnd in circle_rounds(nodes) for p in rnd]
        only(localize(rs), culprits=slow)
    # two slow of three are the majority: the tests cannot show them, and no healthy node is named
    rs = [peer(p, 0.02 if set(p) & {"n1", "n2"} else 0.5) for p in (("n0", "n1"), ("n0", "n2"), ("n1", "n2"))]
    only(localize(rs))


def test_tests_at_one_speed_are_judged_alike_and_floors_are_never_judged_by_peers():
    rs = [peer(("a", "b"), 0.5), peer(("a", "d"), 0.012), peer(("c", "d"), 0.012), peer(("b", "c"), 0.5)]
    judged, unjudged = judge_by_peers(rs, 0.1)
    assert [r.passed for r in judged] == [True, False, False, True] and unjudged == set()
    assert len({r.threshold for r in judged}) == 1
    floor = [Result(("a", "b"), 0.5, True, threshold=0.4), Result(("c", "d"), 0.012, True, threshold=0.01),
             Result(("a", "c"), 0.5, True, threshold=0.4)]
    assert judge_by_peers(floor, 0.1) == (floor, set())


def test_one_pair_without_a_floor_is_undecided_not_passed():
    assert peer_threshold([(("a", "b"), 0.5)], 0.1) is None
    v = localize([peer(("a", "b"), 0.012)])
    only(v)
    [u] = v.undecided
    assert (u.why, u.nodes, u.tests, u.low) == ("no-peers", ("a", "b"), 1, 0.012)
    [(who, f)] = findings(v)
    assert (who, f.id, f.status) == ((), "bw.E106", Status.WARN) and "not judged" in f.message
    # short of a floor, with no node that passed anything: no partner can tell which
    v = localize([Result(("a", "b"), 0.012, False, threshold=0.4, limit_key="bandwidth.x")])
    [u] = v.undecided
    assert (u.why, u.threshold, u.limit_key) == ("no-partner", 0.4, "bandwidth.x")
    # nodes vouched for from elsewhere can: then a culprit, not undecided
    assert localize([Result(("a", "b"), 0.012, False, threshold=0.4)], known_good=["b"]).undecided == ()


def test_peer_fraction_is_a_fraction():
    with pytest.raises(ValueError, match="peer_fraction"):
        LocalizeSettings(peer_fraction=0.0)


# ------------------------------------------------------------------------- outliers


def test_a_peer_outlier_ten_percent_slower_than_63_identical_is_a_warning():
    nodes = names(64)
    odd = "gpu0042"
    fabric = Fabric({odd: 0.9}, noise=0.0)
    results = [msgspec.structs.replace(r, passed=True, threshold=0.8 * BASE) for r in fabric.circle(nodes)]
    v = localize(results, nodes=nodes)
    only(v, outliers=[(odd,)])  # every threshold met, still unlike its peers
    [o] = v.outliers
    assert o.below == pytest.approx(0.1) and o.peer_median == BASE and o.peers == 64
    [(who, f)] = findings(v)
    assert who == odd and f.id == "bw.E104" and f.status is Status.WARN
    assert "(outlier below 45.6 GB/s, 5% under the median)" in f.message
    # with measurement noise of +-3 %: the same, and no healthy node flagged
    noisy = [msgspec.structs.replace(r, passed=True) for r in Fabric({odd: 0.9}, seed=9).circle(nodes)]
    only(localize(noisy), outliers=[(odd,)])
    # in random groups of 8 (two regroupings, no two nodes together twice), too
    for seed in range(5):
        a = localize_adaptive(nodes, Fabric({odd: 0.9}, seed=seed, floor=0.8), seed=seed)
        only(a.verdict, outliers=[(odd,)])
        assert a.rounds == 2


def test_a_pair_well_below_its_peers_is_an_outlier_though_it_passed():
    nodes = names(16)
    results = [Result(p, 40.0 if set(p) == {"gpu0003", "gpu0009"} else 46.0, True)
               for rnd in circle_rounds(nodes) for p in rnd]
    v = localize(results)
    only(v, outliers=[("gpu0003", "gpu0009")])
    [(who, f)] = findings(v)
    assert who == ("gpu0003", "gpu0009") and f.id == "bw.E104"


# -------------------------------------------------------------------- the analysis


def test_bw_pairs_is_an_analysis_of_scope_pairs_with_catalogued_findings():
    spec = registry.DEFAULT.all_analyses()[CHECK]
    assert (spec.scope, spec.tiers) == ("pairs", frozenset({"deep"}))
    assert {f.id for f in spec.findings} == {"bw.E101", "bw.E102", "bw.E103", "bw.E104", "bw.E105", "bw.E106",
                                             "bw.E107", "bw.E108", "bw.E109"}
    assert all(CATALOGUE[f.id] is f and EMITTERS[f.id] == {CHECK} for f in spec.findings)
    assert CATALOGUE["bw.E101"].action == "investigate" and CATALOGUE["bw.E105"].action == "rerun"
    assert CATALOGUE["bw.E106"].action == "fix-config" and CATALOGUE["bw.E109"].action == "rerun"


def test_the_analysis_stamps_culprits_links_and_fabric_findings():
    nodes = names(8)
    key = "bandwidth.ib_write_bw.per_hca_min_gbps"  # the config key that set the threshold, where known
    results = [msgspec.structs.replace(r, limit_key=key)
               for r in Fabric({"gpu0001": 0.5}, links={("gpu0003", "gpu0006"): 0.5}).circle(nodes)]
    out = run_analyses("pairs", PairsInput(results, nodes=nodes), None, judged=nodes, tier="deep")
    got = {(who, f.id, f.status) for who, f in out.findings}
    assert got == {("gpu0001", "bw.E101", Status.FAIL), (("gpu0003", "gpu0006"), "bw.E102", Status.WARN)}
    culprit = next(f for _, f in out.findings if f.id == "bw.E101")
    assert (culprit.node, culprit.check, culprit.members, culprit.suggested_action) \
        == ("gpu0001", "bw.pairs", (), "investigate")
    assert culprit.limit == Limit(">=", FLOOR * BASE, key) and culprit.fingerprint
    link = next(f for _, f in out.findings if f.id == "bw.E102")
    assert (link.node, link.members, link.subject) == ("", ("gpu0003", "gpu0006"), "gpu0003-gpu0006")
    [run] = [r for r in out.runs if r.name == CHECK]
    assert (run.status, run.nodes) == (Status.FAIL, "gpu[0000-0007]")
    # fabric-wide: one finding about no node
    slow = Fabric({n: 0.5 for n in nodes}).circle(nodes)
    out = run_analyses("pairs", PairsInput(slow), None, judged=nodes, tier="deep")
    [(who, f)] = out.findings
    assert who == () and (f.id, f.status, f.node, f.members) == ("bw.E103", Status.WARN, "", ())
    # nothing measured: the analysis did not run
    out = run_analyses("pairs", PairsInput([]), None, judged=[], tier="deep")
    assert [(r.name, r.status) for r in out.runs] == [(CHECK, Status.SKIP)]


def test_settings_come_from_the_analysis_limits():
    results = [Result(("x", "ref"), 20.0, False)]
    out = run_analyses("pairs", PairsInput(results, known_good=("ref",)), {"confirm_tests": 2}, judged=["x"],
                       tier="deep")
    assert {f.id for _, f in out.findings} == {"bw.E105"}
    with pytest.raises(ValueError, match="fabric_fraction"):
        LocalizeSettings(fabric_fraction=1.5)


def test_pairs_input_from_group_results():
    def pair(a, b, busbw, status):
        limit = Limit(">=", 43.2, "bw.busbw_min")
        fs = [Finding(id="bw.E001", status=Status.FAIL, message="slow", value=busbw, limit=limit)] \
            if status is Status.FAIL else []
        return GroupResult(kind="pair", name=f"{a}-{b}", members=[a, b], status=status, findings=fs,
                           metrics=[Metric("busbw", 1.0, "GB/s", component="64KiB"),
                                    Metric("busbw", busbw, "GB/s", component="1GiB")])

    groups_ = [pair("a", "b", 20.0, Status.FAIL), pair("a", "c", 46.0, Status.PASS),
               pair("b", "c", 21.0, Status.FAIL), pair("c", "d", 0.0, Status.ERROR)]
    inputs = PairsInput.from_groups(groups_, nodes=["a", "b", "c", "d", "e"])
    assert [(r.members, r.value, r.passed, r.threshold, r.kind, r.limit_key) for r in inputs.results] == [
        (("a", "b"), 20.0, False, 43.2, "busbw 1GiB", "bw.busbw_min"),
        (("a", "c"), 46.0, True, None, "busbw 1GiB", ""),
        (("b", "c"), 21.0, False, 43.2, "busbw 1GiB", "bw.busbw_min")]
    v = inputs.verdict()
    only(v, culprits=["b"])
    assert v.untested == ("d", "e")
    assert inputs.verdict() is v  # computed once per settings
