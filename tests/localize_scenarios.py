"""Labelled scenarios for localizing slow nodes between few and many nodes, and a scorer:
the detector measured as the deep sweep runs it (orchestrate/pairsweep/sweep.run_pairs, its retries
and judging, then the bw.pairs analysis through judge_pairs), with the tests replaced by a
model of pair busbw. Used by tests/unit/bandwidth/test_localize_scenarios.py (the held-out set is
asserted) and bin/bench (the detector table, both sets).

A scenario is a cluster of n nodes: a test runs at its slowest member's speed, times any
slow link among its members, times a fabric-wide factor, times jitter (uniform +-jitter,
drawn afresh for each attempt), or at the figure a replay gives for that pair (every
attempt); a lost node answers its first `lost_after` tests and is unreachable after (its
tests ERROR). Its labels say what a correct verdict is, by docs/bandwidth.md's rule: a culprit
(bw.E101, FAIL, drained) is slow with every partner while its partners are fine elsewhere,
so two slow nodes of three are nobody's culprits; a slow link (bw.E102) is a pair slow
while both nodes are fine elsewhere; one pair can tell nothing about which node (bw.E106);
a fabric slow everywhere is visible only against a floor (bw.E103 from four nodes, bw.E106
below).

Without a floor, a slow node is a culprit the sweep must catch only where its tests can
show it beyond their own noise (`beyond_noise`): its fastest test a quarter of the slowest
healthy one or less, or, with six tests or more that involve no slow node to measure the
spread, 8 standard deviations of the healthy figures' logarithms below their median. A
slower node short of that is `maybe`: it may be named, or said (bw.E109 within the noise,
bw.E105), never passed silently, and a healthy node is never named or drained.

TUNING was used to choose the reference (`peers.peer_threshold`); HELD_OUT was written
before the code was run on it and never tuned on: other node counts, slowness, jitter,
floors and seeds. NOISE_TUNING and NOISE_HELD_OUT (issue 18, after B.3): noisy fleets at
the default peer_fraction 0.1, healthy or with a mildly to grossly slow node; the held-out
one written before the noise rule (`bandwidth/peers.py`) was run on it. RIG_REPLAYS are
the rig's sweeps, figure for figure.
"""

from __future__ import annotations

import math
import random
import tempfile
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BASE = 1.0  # GB/s, a healthy pair with no jitter


@dataclass(frozen=True)
class Scenario:
    name: str
    n: int
    slow: dict[int, float] = field(default_factory=dict)  # node index -> its speed, a fraction of BASE
    links: dict[tuple[int, int], float] = field(default_factory=dict)  # a pair's own factor
    fabric: float = 1.0  # every test's factor (a fabric-wide slowdown)
    lost: int | None = None  # a node that stops answering
    lost_after: int = 0  # ... after this many of its tests
    jitter: float = 0.03
    peer_fraction: float = 0.1
    floor: float | None = None  # the fabric's pair floor, a fraction of BASE; None: judged by peers
    repeats: int = 2
    seed: int = 0
    # labels: what a correct verdict names
    culprits: frozenset[int] = frozenset()  # bw.E101, FAIL
    # slow, not beyond what the tests can tell from noise: named or said (E101, E105, E109), never silent
    maybe: frozenset[int] = frozenset()
    figures: dict[tuple[int, int], float] = field(default_factory=dict)  # a replay: these pairs' figures
    slow_links: frozenset[tuple[int, int]] = frozenset()  # bw.E102
    fabric_wide: bool = False  # bw.E103
    undecided: bool = False  # bw.E106
    visible: bool = True  # False: nothing in the tests can show it (no floor and no faster peer)

    def node(self, i: int) -> str:
        return f"s{i + 1:02d}"

    @property
    def nodes(self) -> list[str]:
        return [self.node(i) for i in range(self.n)]

    @property
    def degraded(self) -> bool:
        return bool(self.slow or self.links or self.fabric < 1.0 or self.culprits or self.maybe)


@dataclass
class Outcome:
    scenario: Scenario
    culprits: set[str]  # bw.E101
    suspects: set[str]  # bw.E105
    within: set[str]  # bw.E109: slower with every partner, within the sweep's spread
    links: set[frozenset[str]]  # bw.E102
    fabric: bool  # bw.E103
    undecided: bool  # bw.E106
    failed: set[str]  # nodes whose status is FAIL: what --act drains
    status: str  # the run's status
    error: str = ""


# ------------------------------------------------------------------------------- sets


def _sets(ns: Iterable[int], seeds: Iterable[int], *, slow: float, slow_noisy: float, link: float,
          link_noisy: float, floor: float, floor_noisy: float, fabric: float, fabric_noisy: float,
          noisy: tuple[float, float], lose_after: int) -> Iterator[Scenario]:
    """Every kind of scenario for each n and seed, quiet (+-3 %, peer_fraction 0.1) and noisy
    (`noisy`: jitter and the peer_fraction an operator sets for it), with and without a floor."""
    for n in ns:
        for seed in seeds:
            for label, jitter, fraction, s_slow, s_link, s_floor, s_fabric in (
                    ("quiet", 0.03, 0.1, slow, link, floor, fabric),
                    ("noisy", noisy[0], noisy[1], slow_noisy, link_noisy, floor_noisy, fabric_noisy)):
                base = dict(n=n, jitter=jitter, peer_fraction=fraction, seed=seed)
                tag = f"n={n} {label} seed {seed}"
                for floored in (None, s_floor):
                    f = {} if floored is None else {"floor": floored}
                    ftag = tag + (" floor" if floored else "")
                    yield from _kinds(n, base | f, ftag, s_slow, s_link, s_fabric, floored, lose_after)


def beyond_noise(nodes: int, slow_nodes: int, slow: float, jitter: float, floor: float | None) -> bool:
    """Whether a sweep of `nodes` (circle: every pair) can show `slow_nodes` nodes at `slow` of
    a healthy node's speed slow beyond its own noise (+-jitter): a floor decides; else their
    fastest test is a quarter of the slowest healthy one or less, or, with six tests or more
    that no slow node is in, 8 standard deviations of the healthy figures' logarithms (a
    uniform +-jitter: about jitter / sqrt 3) below their median."""
    if floor is not None:
        return True
    fastest = slow * (1 + jitter)
    if fastest <= (1 - jitter) / 4:
        return True
    clean = (nodes - slow_nodes) * (nodes - slow_nodes - 1) // 2
    return clean >= 6 and -math.log(fastest) >= 8 * jitter / math.sqrt(3)


def _slow(nodes: int, slow_nodes: frozenset[int], speed: float, base: dict[str, Any]) -> dict[str, Any]:
    """The labels of these slow nodes: culprits where the sweep can show them, else maybe, and
    visible (never a silent PASS) only where their fastest test is below 1 - peer_fraction of
    the slowest healthy one (else the tests may not fall short at all)."""
    jitter = base["jitter"]
    if beyond_noise(nodes, len(slow_nodes), speed, jitter, base.get("floor")):
        return {"culprits": slow_nodes}
    fraction = base.get("peer_fraction", 0.1)
    return {"maybe": slow_nodes, "visible": speed * (1 + jitter) < (1 - fraction) * (1 - jitter)}


def _kinds(n: int, base: dict[str, Any], tag: str, slow: float, link: float, fabric: float,
           floor: float | None, lose_after: int) -> Iterator[Scenario]:
    one = n // 2  # the slow node: not the first (the circle's fixed node) nor the last
    two = (1, n - 1)
    pair_only = n == 2  # one test: nothing tells which node, or whether it is the link
    yield Scenario(f"{tag}: healthy", undecided=pair_only and floor is None, **base)
    if pair_only:
        yield Scenario(f"{tag}: one slow node", slow={one: slow}, undecided=True, **base)
        yield Scenario(f"{tag}: slow link", links={(0, 1): link}, undecided=True, **base)
        yield Scenario(f"{tag}: fabric-wide", fabric=fabric, undecided=True, visible=floor is not None, **base)
        return
    yield Scenario(f"{tag}: one slow node", slow={one: slow}, **_slow(n, frozenset({one}), slow, base), **base)
    # two slow nodes: culprits while fewer than half (each has partners fine elsewhere); two
    # of three are the majority: peers cannot see them, a floor sees all three short
    if n >= 4:
        yield Scenario(f"{tag}: two slow nodes", slow={two[0]: slow, two[1]: slow},
                       **_slow(n, frozenset(two), slow, base), **base)
    else:
        yield Scenario(f"{tag}: two slow nodes", slow={two[0]: slow, two[1]: slow}, visible=floor is not None,
                       undecided=floor is not None, **base)
    yield Scenario(f"{tag}: slow link", links={(0, n - 1): link}, slow_links=frozenset({(0, n - 1)}), **base)
    yield Scenario(f"{tag}: fabric-wide", fabric=fabric, visible=floor is not None,
                   fabric_wide=floor is not None and n >= 4, undecided=floor is not None and n < 4, **base)
    # a healthy node lost as the pair tests start (or after `lose_after` tests) beside a slow one
    lost = 0 if one != 0 else n - 1
    left = n - 1
    if left >= 3:
        yield Scenario(f"{tag}: one slow node, another lost after {lose_after} tests", slow={one: slow},
                       lost=lost, lost_after=lose_after, **_slow(left, frozenset({one}), slow, base), **base)
    elif lose_after == 0:  # three nodes, one lost at once: one test left, nothing to compare it with
        yield Scenario(f"{tag}: one slow node, another lost at once", slow={one: slow}, lost=lost,
                       undecided=True, **base)


TUNING: list[Scenario] = list(_sets(
    (2, 3, 4, 5, 8, 16), range(3), slow=0.025, slow_noisy=0.05, link=0.5, link_noisy=0.2, floor=0.8,
    floor_noisy=0.5, fabric=0.4, fabric_noisy=0.25, noisy=(0.30, 0.5), lose_after=0))
HELD_OUT: list[Scenario] = list(_sets(
    (2, 3, 4, 6, 7, 12), range(100, 104), slow=0.6, slow_noisy=0.1, link=0.6, link_noisy=0.25, floor=0.85,
    floor_noisy=0.45, fabric=0.5, fabric_noisy=0.2, noisy=(0.25, 0.45), lose_after=1))


def _noisy(ns: Iterable[int], seeds: Iterable[int], jitters: Iterable[float], slows: Iterable[float]
           ) -> Iterator[Scenario]:
    """Noisy fleets at the default peer_fraction 0.1 and no floor (what a site gets before it
    sets one): healthy, one node at each of `slows` of the healthy speed, and two from six
    nodes; the slow ones labelled culprits or maybe by `beyond_noise`."""
    for n in ns:
        for seed in seeds:
            for jitter in jitters:
                base: dict[str, Any] = dict(n=n, jitter=jitter, peer_fraction=0.1, seed=seed)
                tag = f"n={n} +-{jitter:.0%} p0.1 seed {seed}"
                yield Scenario(f"{tag}: healthy", **base)
                one, two = n // 2, frozenset((1, n - 1))
                for speed in slows:
                    yield Scenario(f"{tag}: one node at {speed:g}", slow={one: speed},
                                   **_slow(n, frozenset({one}), speed, base), **base)
                    if n >= 6:
                        yield Scenario(f"{tag}: two nodes at {speed:g}", slow=dict.fromkeys(two, speed),
                                       **_slow(n, two, speed, base), **base)


# seeds 200-203 were the first held-out set: its first run found two slow nodes among twelve
# called fabric-wide (noise-short healthy tests counted as failures), which was then fixed,
# so it is tuning now; the held-out set below was written after that fix and run once
NOISE_TUNING: list[Scenario] = [
    *_noisy((3, 4, 5, 8), range(3), (0.1, 0.2, 0.3), (0.5, 0.25)),
    *_noisy((3, 4, 5, 6, 7, 8, 12), range(200, 204), (0.12, 0.25, 0.3), (0.55, 0.4, 0.1))]
NOISE_HELD_OUT: list[Scenario] = list(_noisy((3, 4, 5, 6, 9, 11, 14), range(300, 304), (0.15, 0.22, 0.28),
                                             (0.6, 0.45, 0.3, 0.12)))


def _straddling(seeds: Iterable[int], n: int = 2048, count: int = 20) -> Iterator[Scenario]:
    """Group mode (n > circle_max): `count` nodes at 0.4 among n, floor 0.5, +-30 %: a slow
    node's figures straddle the floor, so now and then it passes a test. Its pass must not
    vouch for a healthy node it shared a failed group with (that node would be confirmed the
    culprit by a slow partner). The slow nodes are maybe: one that passed a test is not
    slow with every partner."""
    for seed in seeds:
        slow = random.Random(seed).sample(range(n), count)
        yield Scenario(f"n={n} +-30% floor 0.5: {count} nodes at 0.4, seed {seed}", n=n, slow=dict.fromkeys(slow, 0.4),
                       jitter=0.3, floor=0.5, seed=seed, maybe=frozenset(slow))


STRADDLING: list[Scenario] = list(_straddling(range(40)))


def _replay(name: str, figures: dict[tuple[int, int], float], **labels: Any) -> Scenario:
    n = 1 + max(max(pair) for pair in figures)
    return Scenario(name, n=n, figures=figures, jitter=0.0, **labels)


# the rig's sweeps (gloo over veth, four hosts on shared cores), at the default peer_fraction 0.1
RIG_REPLAYS: list[Scenario] = [
    # healthy: node1 (s01) descheduled, its three pairs the lowest (it was drained: issue 18 after B.3)
    _replay("rig: healthy, node1's pairs 0.59-0.64 vs 0.71-0.88",
            {(0, 1): 0.59, (0, 2): 0.61, (0, 3): 0.64, (1, 2): 0.71, (1, 3): 0.80, (2, 3): 0.88}),
    # node3 held to 100 Mbit/s by tc among node1, node3, node4 (issue 18 B.3)
    _replay("rig: three nodes, one at 100 Mbit/s", {(0, 2): 0.5, (0, 1): 0.012, (1, 2): 0.012},
            culprits=frozenset({1})),
    # node4 held to 200 Mbit/s, the healthy pairs 5x apart (issue 18 B.3)
    _replay("rig: four nodes, one at 200 Mbit/s",
            {(0, 1): 0.64, (0, 2): 0.13, (1, 2): 0.3, (0, 3): 0.025, (1, 3): 0.025, (2, 3): 0.025},
            culprits=frozenset({3})),
]


# ------------------------------------------------------------------------------ model


class Model:
    """Every torch test of one scenario's sweep (pair_fakes.torch_tests_by): deterministic
    whatever order the threads run in."""

    def __init__(self, sc: Scenario) -> None:
        self.sc = sc
        self.index = {sc.node(i): i for i in range(sc.n)}
        self.attempts: dict[tuple[str, ...], int] = {}
        self.seen: dict[str, int] = {}
        self.lock = threading.Lock()

    def __call__(self, cfg: Any, plan: Any, members: Any) -> tuple[list | None, str]:
        from healthcheck.parsers.bandwidth_common import BandwidthSample

        sc, key = self.sc, tuple(members)
        with self.lock:
            attempt = self.attempts[key] = self.attempts.get(key, 0) + 1
            for m in members:
                self.seen[m] = self.seen.get(m, 0) + 1
            lost = sc.lost is not None and sc.node(sc.lost) in members and self.seen[sc.node(sc.lost)] > sc.lost_after
        if lost:
            return None, f"{sc.node(sc.lost or 0)}: ssh: connect to host: No route to host"
        idx = [self.index[m] for m in members]
        replayed = sc.figures.get((min(idx), max(idx))) if len(idx) == 2 else None
        if replayed is not None:
            return [BandwidthSample(collective="all_reduce", size_bytes=1 << 20, busbw_gbytes_per_s=replayed,
                                    algbw_gbytes_per_s=replayed, time_us=1.0, ranks=2)], ""
        value = BASE * sc.fabric * min(sc.slow.get(i, 1.0) for i in idx)
        for (a, b), factor in sc.links.items():
            if a in idx and b in idx:
                value *= factor
        rng = random.Random(f"{sc.seed}/{sc.name}/{'-'.join(sorted(members))}/{attempt}")
        value *= 1 + rng.uniform(-sc.jitter, sc.jitter)
        return [BandwidthSample(collective="all_reduce", size_bytes=1 << 20, busbw_gbytes_per_s=value,
                                algbw_gbytes_per_s=value, time_us=1.0, ranks=len(members))], ""


# ---------------------------------------------------------------------------- detector


class Detector:
    """The deep sweep's localization over modelled tests: configs written once per fabric setting."""

    def __init__(self, root: Path | None = None) -> None:
        self._tmp = None if root is not None else tempfile.TemporaryDirectory(prefix="hc-localize-")
        self.root = root or Path(self._tmp.name)  # type: ignore[union-attr]
        self._configs: dict[tuple, Any] = {}

    def close(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()

    def config(self, sc: Scenario) -> Any:
        from healthcheck.core.config.loader import load_config

        key = (sc.repeats, sc.peer_fraction, sc.floor)
        if key not in self._configs:
            d = self.root / f"c{len(self._configs)}"
            (d / "fabrics").mkdir(parents=True)
            floor = f"  all_reduce: {{pair: {{busbw_min_gbytes_per_s: {{1M: {sc.floor}}}}}}}\n" if sc.floor else ""
            (d / "fabrics" / "f.yaml").write_text(
                f"extends: generic\nbandwidth:\n  sizes: [1M]\n  repeats: {sc.repeats}\n"
                f"  peer_fraction: {sc.peer_fraction}\n{floor}  pairs: {{circle_max: 16}}\n")
            (d / "hc.yaml").write_text(f"fabric_dirs: [{d / 'fabrics'}]\nnodes: {{'s[01-99],s[100-4096]': f}}\n"
                                       "history: {path: null}\n")
            self._configs[key] = load_config(d / "hc.yaml")
        return self._configs[key]

    def run(self, sc: Scenario) -> Outcome:
        from pair_fakes import torch_tests_by

        from healthcheck.core.model import CheckResult, NodeResult
        from healthcheck.core.status import Status, worst
        from healthcheck.orchestrate.pairsweep import choose, sweep

        nodes = [NodeResult(node=m, fabric="f", status=Status.PASS, mode="agent",
                            checks=[CheckResult("bw.torch", Status.PASS, 0.0)]) for m in sc.nodes]
        saved = choose.open_transport
        choose.open_transport = torch_tests_by(Model(sc))
        try:
            run = sweep.run_pairs(self.config(sc), nodes)
        finally:
            choose.open_transport = saved
        judged, groups, _runs, for_run = sweep.judge_pairs(nodes, run)
        ids = {(n.node, f.id) for n in judged for f in n.findings}
        return Outcome(
            scenario=sc,
            culprits={n for n, i in ids if i == "bw.E101"},
            suspects={n for n, i in ids if i == "bw.E105"},
            within={n for n, i in ids if i == "bw.E109"},
            links={frozenset(f.members) for g in groups for f in g.findings if f.id == "bw.E102"},
            fabric=any(f.id == "bw.E103" for f in for_run),
            undecided=any(f.id == "bw.E106" for f in for_run),
            failed={n.node for n in judged if n.status is Status.FAIL},
            status=worst([*(n.status for n in judged), *(g.status for g in groups),
                          *(f.status for f in for_run)]).value)


@dataclass
class Score:
    """The detector over a set of scenarios."""

    scenarios: int = 0
    culprits: int = 0  # labelled
    caught: int = 0
    missed: list[str] = field(default_factory=list)
    false_culprits: list[str] = field(default_factory=list)  # healthy nodes named bw.E101
    false_drains: list[str] = field(default_factory=list)  # healthy nodes FAIL (drained by --act)
    maybe: int = 0  # slow nodes labelled maybe (not beyond what the sweep can tell from noise)
    maybe_named: int = 0  # ... named bw.E101 (allowed)
    maybe_said: int = 0  # ... said instead (bw.E109 within the noise, bw.E105 suspect)
    links: int = 0
    links_found: int = 0
    said: int = 0  # run findings (bw.E103, bw.E106) labelled and given
    to_say: int = 0
    unsaid: list[str] = field(default_factory=list)
    silent: list[str] = field(default_factory=list)  # something visible was slow and the run PASSed
    healthy: int = 0  # scenarios with nothing slow
    noise_warns: int = 0  # ... whose run was not PASS (a WARN from noise: bw.E109, bw.E102)

    def add(self, o: Outcome) -> None:
        sc = o.scenario
        self.scenarios += 1
        want = {sc.node(i) for i in sc.culprits}
        maybe = {sc.node(i) for i in sc.maybe}
        self.culprits += len(want)
        self.caught += len(want & o.culprits)
        self.missed += [f"{sc.name}: {m}" for m in sorted(want - o.culprits)]
        self.false_culprits += [f"{sc.name}: {m}" for m in sorted(o.culprits - want - maybe)]
        self.false_drains += [f"{sc.name}: {m}" for m in sorted(o.failed - want - maybe)]
        self.maybe += len(maybe)
        self.maybe_named += len(maybe & o.culprits)
        self.maybe_said += len(maybe & (o.within | o.suspects) - o.culprits)
        links = {frozenset((sc.node(a), sc.node(b))) for a, b in sc.slow_links}
        self.links += len(links)
        self.links_found += len(links & o.links)
        for flag, got, what in ((sc.fabric_wide, o.fabric, "bw.E103"), (sc.undecided, o.undecided, "bw.E106")):
            if flag:
                self.to_say += 1
                self.said += got
                if not got:
                    self.unsaid.append(f"{sc.name}: no {what}")
        if sc.degraded and sc.visible and o.status == "PASS":
            self.silent.append(sc.name)
        if not sc.degraded and not sc.undecided:
            self.healthy += 1
            self.noise_warns += o.status != "PASS"

    @property
    def clean(self) -> bool:
        """No healthy node named or drained, every culprit caught, every run finding given, nothing silent."""
        return not (self.missed or self.false_culprits or self.false_drains or self.unsaid or self.silent)

    def row(self) -> str:
        maybe = (f"; slow, not clearly (maybe) {self.maybe}: named {self.maybe_named}, said {self.maybe_said}"
                 if self.maybe else "")
        return (f"culprits caught {self.caught}/{self.culprits}, missed {len(self.missed)}, false culprits "
                f"{len(self.false_culprits)}, false drains {len(self.false_drains)}{maybe}; links found "
                f"{self.links_found}/{self.links}; run findings {self.said}/{self.to_say}; silent PASS "
                f"{len(self.silent)}; healthy runs not PASS {self.noise_warns}/{self.healthy}")


def score(scenarios: Iterable[Scenario], detector: Detector | None = None) -> Score:
    own = detector is None
    detector = detector or Detector()
    out = Score()
    try:
        for sc in scenarios:
            out.add(detector.run(sc))
    finally:
        if own:
            detector.close()
    return out
