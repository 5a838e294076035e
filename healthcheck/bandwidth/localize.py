"""Who is slow: culprit nodes, slow links, a fabric-wide problem and peer outliers, from
the results of bandwidth tests between nodes. Pure: no I/O, no launching.

A test measures its member nodes together (a pair, or a group in one allreduce); its
`Result` says whether it reached its threshold. A failed test implicates every member,
so attribution comes from comparing each node's tests (collectives.md §0.8, §4):

- **culprit** (FAIL, drains): the node failed every test it was in, and at least
  `confirm_tests` of them had only known-good partners (nodes that passed another test
  clearly, or that the caller vouches for). Slow with every partner while the partners
  are fine elsewhere. A pass is clear when above its threshold by more than the spread of
  the passing figures (`_clear_passes`, from `outlier_min_peers` passing tests): a slow
  node whose figures straddle the floor passes now and then, and its pass must not make
  the healthy node it was paired with a culprit.
- **within the noise** (WARN, drains nothing): a node that would be a culprit by tests
  with no floor, but whose best test is not below the sweep's noise threshold
  (`peers.PeerReference.noise_threshold`): slower than its peers by `peer_fraction`,
  not by more than the sweep's own spread allows a healthy test. Said where its best is
  also below every test it is not in (the rig's node1: 0.59-0.64 vs 0.71-0.88); a node
  whose short tests overlap the others' is the noise itself, and not named.
- **suspect** (not FAIL): failed every test it was in, but never with known-good
  partners only (its partners were suspects too). `confirmation_tests` plans the
  re-test with a known-good partner that turns it into a culprit or clears it.
- **slow link** (WARN, drains nothing): a test that failed although every member
  reached the floor in another test: the path between them (switch port, cable,
  route), named with its HCAs. A failed group whose slow pair inside it was found is
  explained by that pair, a failure with a member that is a peer outlier by that
  member (a node just at the floor fails some tests and passes others), and a failure
  that a re-test of the same members did not reproduce is not reported.
- **fabric-wide** (WARN, names no node): most nodes never passed, or most failures are
  unexplained, or most screening tests failed and naming the nodes would exceed the
  blast-radius guard (`max_culprit_fraction` of the nodes, as the drain policy's
  `max_drain_fraction`). One finding; no culprit, link or outlier of that kind is named.
  A test with no floor short by `peer_fraction` but not below the noise threshold does
  not count as failed here: on a noisy fabric a third of healthy tests are that short.
- **peer outlier** (WARN): a node whose best result is below the median of its peers'
  best by more than `outlier_fraction`, or a single test below the median of its peers
  by more than `pair_outlier_fraction`, even where every threshold was met. A node's
  best leaves out tests with a culprit or suspect, and needs `outlier_min_tests` tests:
  a node slow by itself is slow in every test, its partners only in the one they shared
  (regrouping keeps earlier partners apart, so no one shares two tests with it).

A test with no floor (`Result.peers`) is judged against the other tests of its kind
(`judge_by_peers`, `peers.peer_reference`): short below `1 - peer_fraction` of the median
of the tests that involve no suspected node, a node being suspected whose best test is
that far below the median of every node's best. A node slow with every partner is in 2 of
3 tests at three nodes and in half of them at four, so the median of all tests would be
its own speed; the nodes' bests are not fooled until half the nodes are slow. Such a node
is the culprit only where its best is also below the noise threshold (peers.py: the
sweep's measured spread, or a quarter of the reference where too few tests measure it);
else it is within the noise. Every such test is judged against the same reference, each
time `localize` runs, so two tests at one speed are judged alike whatever order they ran
in. Where no reference exists (fewer than
three nodes), or a test fell short and no node passed any test to confirm a suspect
against, the verdict says the kind is `undecided` instead of passing or naming anyone.

Results are judged per `kind` (one kind: comparable values, e.g. "ib_write_bw mlx5_2" or
"all_reduce 1GiB"), so a node slow on one rail only is a culprit of that rail, and a
whole rail that is slow is a fabric-wide finding of that rail. Values are compared only
between tests with the same number of members.

`localize_adaptive` drives a whole localization round by round through a callback that
runs tests (the circle method for small n, group testing, random regrouping and
bisection down to known-good pairs for large n).
"""

from __future__ import annotations

import math
import random
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Literal

import msgspec

from healthcheck.bandwidth.peers import PeerReference, peer_reference
from healthcheck.bandwidth.schedule import (
    Purpose,
    Seed,
    Test,
    circle_rounds,
    groups,
    round_seed,
    split_tests,
    unique_nodes,
)


class LocalizeSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How failures are attributed; the defaults are what an operator would start with."""

    # failed tests with known-good partners only that make a never-passing node a culprit
    confirm_tests: int = 1
    # more than this fraction of the nodes never passing, of the failures unexplained, or
    # of the screening tests failing (with the guard exceeded): a fabric-wide problem
    fabric_fraction: float = 0.5
    fabric_min_nodes: int = 4  # fewer nodes than this: never fabric-wide (two nodes and one slow test)
    # the blast-radius guard (as slurm.drain.max_drain_fraction / guard_min_nodes)
    max_culprit_fraction: float = 0.1
    guard_min_nodes: int = 10
    outlier_fraction: float = 0.05  # a node's best this far below its peers' median best
    pair_outlier_fraction: float = 0.10  # one test this far below the median of its peers
    outlier_min_peers: int = 8  # fewer peers (nodes, or tests) than this: no outlier findings
    outlier_min_tests: int = 2  # a node judged on fewer tests of one size is not an outlier
    # a test with no floor (Result.peers) this far below its peers' reference is short (bandwidth.peer_fraction)
    peer_fraction: float = 0.1

    def __post_init__(self) -> None:
        for name in ("fabric_fraction", "max_culprit_fraction", "outlier_fraction", "pair_outlier_fraction",
                     "peer_fraction"):
            v = getattr(self, name)
            if not (0 < v < 1):
                raise ValueError(f"{name} must be between 0 and 1, not {v}")
        for name in ("confirm_tests", "fabric_min_nodes", "guard_min_nodes", "outlier_min_peers",
                     "outlier_min_tests"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, not {getattr(self, name)}")


DEFAULT_SETTINGS = LocalizeSettings()


class Result(msgspec.Struct, frozen=True, omit_defaults=True):
    """One test's measurement and its verdict against the test's threshold."""

    members: tuple[str, ...]
    value: float  # the measured bandwidth (busbw, or ib_write_bw's average)
    passed: bool  # reached its threshold
    threshold: float | None = None
    unit: str = "GB/s"
    kind: str = ""  # what makes results comparable and judged together (a rail, a collective and size)
    hcas: tuple[str, ...] = ()  # each member's HCA, in members' order, where the test names them
    link: str = ""  # a label for the path between the members (switch port, cable) where known
    purpose: Purpose = "screen"
    limit_key: str = ""  # the config key that set the threshold
    # no floor: `passed` and `threshold` are the peers' (judge_by_peers sets them from every test of its kind)
    peers: bool = False


class Culprit(msgspec.Struct, frozen=True):
    """A node slow with every partner, confirmed with known-good ones: FAIL."""

    node: str
    kind: str
    failed: int  # tests it was in (every one failed)
    confirmed_by: tuple[tuple[str, ...], ...]  # the partners of each failed test whose others were known good
    best: float  # its best value
    threshold: float | None
    unit: str
    hca: str = ""  # its HCA, where every failed test named the same one
    limit_key: str = ""
    peers: bool = False  # the threshold is its peers' (no floor), not a configured one


class WithinNoise(msgspec.Struct, frozen=True):
    """A node short with every partner against its peers (no floor), confirmed with known-good
    partners, whose best test is still not below the sweep's noise threshold
    (`PeerReference.noise_threshold`): slower than its peers, not beyond this sweep's spread."""

    node: str
    kind: str
    failed: int  # tests it was in (every one short)
    low: float  # its tests' lowest and highest figure
    high: float
    peers_low: float | None  # the figures of the tests with neither it nor a node that never passed
    peers_high: float | None
    noise_threshold: float  # what its best would have had to be below
    spread: float | None  # the sweep's measured spread (log standard deviation); None: too few tests
    unit: str


class Suspect(msgspec.Struct, frozen=True):
    """A node that failed every test it was in, none of them with known-good partners only."""

    node: str
    kind: str
    failed: int
    partners: tuple[str, ...]  # everyone it was measured with
    best: float
    threshold: float | None
    unit: str
    hca: str = ""


class SlowLink(msgspec.Struct, frozen=True):
    """A test that failed although every member reached the floor in another test."""

    members: tuple[str, ...]
    kind: str
    value: float
    threshold: float | None
    unit: str
    hcas: tuple[str, ...] = ()
    link: str = ""
    passes: tuple[int, ...] = ()  # each member's passed tests elsewhere, in members' order
    limit_key: str = ""
    peers: bool = False  # the threshold is its peers' (no floor), not a configured one


class FabricWide(msgspec.Struct, frozen=True):
    """Too much failed to blame nodes: one finding, no node named."""

    kind: str
    tests: int
    failed: int
    nodes: int
    implicated: int  # nodes that never passed
    reason: str


class Undecided(msgspec.Struct, frozen=True):
    """Tests of one kind that cannot tell who is slow: nobody is named from them, and the run says so.

    why "no-peers": no floor, and fewer than three nodes in the tests, so nothing to judge
    them against (one pair: its figure is all there is); "no-partner": tests fell short and
    no node passed any test, so no known-good partner can confirm a suspect (two nodes, or
    every node of a few slow)."""

    kind: str
    why: Literal["no-peers", "no-partner"]
    nodes: tuple[str, ...]  # every node in the tests of this kind
    tests: int
    low: float  # the lowest and highest figure among them
    high: float
    threshold: float | None  # the floor the short tests missed ("no-partner"), where one was set
    unit: str
    limit_key: str = ""


class Outlier(msgspec.Struct, frozen=True):
    """A node (its best result) or one test below the median of its peers, threshold met or not."""

    members: tuple[str, ...]  # one node, or the members of the test
    kind: str
    value: float
    peer_median: float
    below: float  # fraction below the peers' median
    peers: int  # nodes (or tests) whose median it was compared with, itself included
    size: int  # members per test of the tests compared
    unit: str


class Verdict(msgspec.Struct, frozen=True):
    culprits: tuple[Culprit, ...] = ()
    suspects: tuple[Suspect, ...] = ()
    links: tuple[SlowLink, ...] = ()
    fabric: tuple[FabricWide, ...] = ()
    outliers: tuple[Outlier, ...] = ()
    undecided: tuple[Undecided, ...] = ()  # kinds whose tests cannot tell who is slow
    # slower than their peers with every partner, not beyond the sweep's spread: said, not drained
    within_noise: tuple[WithinNoise, ...] = ()
    good: tuple[str, ...] = ()  # passed a test of every kind they were in, and named by nothing
    vouching: tuple[str, ...] = ()  # good, and passed clearly above the threshold in every kind they were in
    untested: tuple[str, ...] = ()  # named in `nodes` but in no result
    tests: int = 0
    failed: int = 0

    @property
    def culprit_nodes(self) -> list[str]:
        return sorted({c.node for c in self.culprits})

    @property
    def suspect_nodes(self) -> list[str]:
        return sorted({s.node for s in self.suspects} - {c.node for c in self.culprits})

    @property
    def named_nodes(self) -> list[str]:
        """Every node a finding would name alone (culprits, suspects, node outliers)."""
        named = {c.node for c in self.culprits} | {s.node for s in self.suspects}
        named |= {o.members[0] for o in self.outliers if len(o.members) == 1}
        return sorted(named)


# ------------------------------------------------------------------------------ peers


def peer_references(results: Iterable[Result], fraction: float) -> dict[str, PeerReference | None]:
    """Per kind, what its peer-judged results (`Result.peers`) are judged against
    (`peers.peer_reference` over all of them); None where nothing to compare them with."""
    figures: dict[str, list[tuple[Sequence[str], float]]] = defaultdict(list)
    for r in results:
        if r.peers:
            figures[r.kind].append((r.members, r.value))
    return {kind: peer_reference(tests, fraction) for kind, tests in figures.items()}


def judge_by_peers(results: Iterable[Result], fraction: float,
                   references: Mapping[str, PeerReference | None] | None = None) -> tuple[list[Result], set[str]]:
    """The results with every peer-judged one judged against its kind's threshold
    (`peer_references`, computed here unless given), and the kinds that had no reference
    (their tests count as passed: nothing was found against them, and the verdict says they
    were not judged)."""
    rs = list(results)
    refs = references if references is not None else peer_references(rs, fraction)
    out = []
    for r in rs:
        if r.peers:
            ref = refs.get(r.kind)
            t = ref.threshold if ref is not None else None
            r = msgspec.structs.replace(r, passed=t is None or r.value >= t, threshold=t)
        out.append(r)
    return out, {kind for kind, ref in refs.items() if ref is None}


# ------------------------------------------------------------------------------ judge


class _Part(msgspec.Struct):
    culprits: list[Culprit]
    suspects: list[Suspect]
    links: list[SlowLink]
    fabric: FabricWide | None
    outliers: list[Outlier]
    nodes: set[str]
    good: set[str]
    undecided: Undecided | None = None
    within: list[WithinNoise] = msgspec.field(default_factory=list)
    vouching: set[str] = msgspec.field(default_factory=set)  # good, with a clear pass (_clear_passes)


def _hca_of(node: str, results: Iterable[Result]) -> str:
    labels = {r.hcas[r.members.index(node)] for r in results if len(r.hcas) == len(r.members)}
    return labels.pop() if len(labels) == 1 else ""


def _judge_kind(kind: str, rs: list[Result], known_good: frozenset[str], s: LocalizeSettings,
                fabric_check: bool = True, reference: PeerReference | None = None, unpeered: bool = False) -> _Part:
    """One kind's results judged; `reference`: what its peer-judged tests were judged against,
    `unpeered`: they had nothing to compare with."""
    passes: dict[str, int] = defaultdict(int)
    tests_of: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(rs):
        for m in dict.fromkeys(r.members):
            tests_of[m].append(i)
            if r.passed:
                passes[m] += 1
    nodes = set(tests_of)
    vouching = _clear_passes(rs, s) | (known_good & nodes)
    culprits, suspects, within = _attribute(kind, rs, tests_of, passes, known_good | vouching, s, reference)
    implicated = {c.node for c in culprits} | {x.node for x in suspects}
    # a node below its peers everywhere explains its own failures at the edge of the floor
    outliers = _outliers(kind, rs, implicated, s)
    slow_nodes = {o.members[0] for o in outliers if len(o.members) == 1} | {w.node for w in within}
    # said where it is below every test it is not in; else its short tests are the noise itself
    within = [w for w in within if w.peers_low is None or w.high < w.peers_low]
    links, unexplained = _links(kind, rs, passes, implicated | slow_nodes)

    noise = reference.noise_threshold if reference is not None else None
    reason = _fabric_reason(len(nodes), rs, implicated, unexplained, s, noise) if fabric_check else ""
    if reason:
        fabric = FabricWide(kind=kind, tests=len(rs), failed=sum(not r.passed for r in rs), nodes=len(nodes),
                            implicated=len(implicated), reason=reason)
        return _Part([], [], [], fabric, [], nodes, set())

    named = implicated | slow_nodes
    named |= {m for link in links for m in link.members}
    good = {m for m in nodes if passes[m] > 0} - named
    no_partner = bool(implicated) and not any(passes.values()) and not known_good
    undecided = _undecided(kind, rs, nodes, no_partner=no_partner, unpeered=unpeered)
    return _Part(culprits, suspects, links, None, outliers, nodes, good, undecided, within, vouching & good)


def _clear_passes(rs: list[Result], s: LocalizeSettings) -> set[str]:
    """The members of the tests that passed clearly: at or above their threshold times
    exp(the spread of the passing figures: 1.4826 x the MAD of their logarithms), where at
    least `outlier_min_peers` tests passed to measure it (fewer: any pass). A pass nearer the
    threshold than the sweep's own spread is what a slow node whose figures straddle it also
    gives now and then: it does not make the node a known-good partner that confirms another
    as the culprit. A floor `hc baseline` set (a few % under the healthy figures) leaves the
    healthy passes clear where the sweep is quiet; a noisy sweep widens the margin."""
    passed = [r for r in rs if r.passed]
    logs = [math.log(r.value) for r in passed if r.value > 0]
    margin = 1.0
    if len(logs) >= s.outlier_min_peers:
        mid = statistics.median(logs)
        margin = math.exp(1.4826 * statistics.median(abs(x - mid) for x in logs))
    return {m for r in passed if r.threshold is None or r.value >= r.threshold * margin for m in r.members}


def _attribute(kind: str, rs: list[Result], tests_of: Mapping[str, list[int]], passes: Mapping[str, int],
               known_good: frozenset[str], s: LocalizeSettings, reference: PeerReference | None = None
               ) -> tuple[list[Culprit], list[Suspect], list[WithinNoise]]:
    """The nodes that failed every test they were in: culprits where `confirm_tests` of those
    tests had only known-good partners (`known_good`: vouched for, or a clear pass here), else
    suspects; a culprit judged against its peers only (no floor) whose best is not below the
    sweep's noise threshold is within the noise instead (said, not drained)."""
    culprits: list[Culprit] = []
    suspects: list[Suspect] = []
    within: list[WithinNoise] = []
    for m in sorted(m for m in tests_of if passes.get(m, 0) == 0):  # in tests, and none passed
        mine = [rs[i] for i in tests_of[m]]
        confirming = [r for r in mine if all(o in known_good for o in r.members if o != m)]
        best = max(r.value for r in mine)
        thresholds = {r.threshold for r in mine if r.threshold is not None}
        threshold = max(thresholds) if thresholds else None
        unit = mine[0].unit
        if len(confirming) < s.confirm_tests:
            partners = tuple(sorted({o for r in mine for o in r.members if o != m}))
            suspects.append(Suspect(node=m, kind=kind, failed=len(mine), partners=partners, best=best,
                                    threshold=threshold, unit=unit, hca=_hca_of(m, mine)))
        elif reference is not None and all(r.peers for r in mine) and best >= reference.noise_threshold:
            within.append(_within_noise(m, kind, rs, mine, passes, reference))
        else:
            culprits.append(Culprit(
                node=m, kind=kind, failed=len(mine),
                confirmed_by=tuple(tuple(o for o in r.members if o != m) for r in confirming),
                best=best, threshold=threshold, unit=unit, hca=_hca_of(m, mine),
                limit_key=next((r.limit_key for r in mine if r.limit_key), ""), peers=any(r.peers for r in mine)))
    return culprits, suspects, within


def _within_noise(m: str, kind: str, rs: list[Result], mine: list[Result], passes: Mapping[str, int],
                  reference: PeerReference) -> WithinNoise:
    others = [r.value for r in rs if m not in r.members and all(passes.get(o, 0) > 0 for o in r.members)]
    figures = [r.value for r in mine]
    return WithinNoise(node=m, kind=kind, failed=len(mine), low=min(figures), high=max(figures),
                       peers_low=min(others) if others else None, peers_high=max(others) if others else None,
                       noise_threshold=reference.noise_threshold, spread=reference.spread, unit=mine[0].unit)


def _links(kind: str, rs: list[Result], passes: Mapping[str, int], explained_by: set[str]
           ) -> tuple[list[SlowLink], list[Result]]:
    """Failures no never-passing (or slower-than-its-peers) member explains, and the slow
    links they name (a group's failure is explained by a slow pair found inside it)."""
    passed_sets = {frozenset(r.members) for r in rs if r.passed}
    unexplained = [r for r in rs if not r.passed and len(set(r.members)) >= 2
                   and not explained_by.intersection(r.members) and frozenset(r.members) not in passed_sets]
    slow_pairs = [frozenset(r.members) for r in unexplained if len(set(r.members)) == 2]
    links: list[SlowLink] = []
    seen: set[frozenset[str]] = set()
    for r in unexplained:
        key = frozenset(r.members)
        if key in seen or (len(key) > 2 and any(p <= key for p in slow_pairs)):
            continue
        seen.add(key)
        links.append(SlowLink(members=r.members, kind=kind, value=r.value, threshold=r.threshold, unit=r.unit,
                              hcas=r.hcas, link=r.link, passes=tuple(passes.get(m, 0) for m in r.members),
                              limit_key=r.limit_key, peers=r.peers))
    return links, unexplained


def _fabric_reason(n: int, rs: list[Result], implicated: set[str], unexplained: list[Result],
                   s: LocalizeSettings, noise_threshold: float | None = None) -> str:
    """Why too much is wrong to name nodes (a fabric-wide problem), or "". A test judged
    against its peers that is short by peer_fraction but not below the sweep's noise threshold
    is not counted: on a noisy fabric a third of healthy tests are that short, and two slow
    nodes among twelve would make most tests 'fail'."""
    if n < s.fabric_min_nodes:
        return ""

    def failed(r: Result) -> bool:
        return not r.passed and (not r.peers or noise_threshold is None or r.value < noise_threshold)

    unexplained = [r for r in unexplained if failed(r)]
    screen = [r for r in rs if r.purpose == "screen"] or rs
    screen_failed = sum(failed(r) for r in screen)
    if len(implicated) > s.fabric_fraction * n:
        return f"{len(implicated)} of {n} nodes failed every test they were in"
    if len(unexplained) > s.fabric_fraction * len(rs):
        return f"{len(unexplained)} of {len(rs)} tests failed although every member reached the floor in another test"
    if (screen_failed > s.fabric_fraction * len(screen) and n >= s.guard_min_nodes
            and len(implicated) > s.max_culprit_fraction * n):
        return (f"{screen_failed} of {len(screen)} tests failed, and the {len(implicated)} nodes they "
                f"implicate are more than the blast-radius guard ({s.max_culprit_fraction:g} of {n})")
    return ""


def _undecided(kind: str, rs: list[Result], nodes: set[str], *, no_partner: bool, unpeered: bool
               ) -> Undecided | None:
    """What these tests cannot tell: who is slow where tests fell short and no node passed one
    (no known-good partner), or anything at all where no floor and no peers judged them."""
    if not (no_partner or unpeered):
        return None
    short = [r for r in rs if not r.passed]
    thresholds = [r.threshold for r in short if r.threshold is not None and not r.peers]
    return Undecided(kind=kind, why="no-partner" if no_partner else "no-peers", nodes=tuple(sorted(nodes)),
                     tests=len(rs), low=min(r.value for r in rs), high=max(r.value for r in rs),
                     threshold=max(thresholds) if thresholds else None, unit=rs[0].unit,
                     limit_key=next((r.limit_key for r in short if r.limit_key), ""))


def _outliers(kind: str, rs: list[Result], implicated: set[str], s: LocalizeSettings) -> list[Outlier]:
    """Nodes whose best, and single tests, are far below the median of their peers (same size of test)."""
    by_size: dict[int, list[Result]] = defaultdict(list)
    for r in rs:
        by_size[len(set(r.members))].append(r)
    nodes_out = [o for size, group in sorted(by_size.items()) if size >= 2
                 for o in _slow_nodes(kind, size, group, implicated, s)]
    # one finding per node: the size of test with the most peers
    chosen: dict[str, Outlier] = {}
    for o in nodes_out:
        if o.members[0] not in chosen or o.peers > chosen[o.members[0]].peers:
            chosen[o.members[0]] = o
    # single tests, leaving out every test a slow node (of any size of test) explains
    bad = implicated | set(chosen)
    tests_out = [o for size, group in sorted(by_size.items()) if size >= 2
                 for o in _slow_tests(kind, size, [r for r in group if not bad.intersection(r.members)], s)]
    return [chosen[m] for m in sorted(chosen)] + tests_out


def _slow_nodes(kind: str, size: int, group: list[Result], implicated: set[str], s: LocalizeSettings
                ) -> list[Outlier]:
    """Nodes whose best test of this size is far below the median of their peers' best."""
    best: dict[str, float] = {}
    count: dict[str, int] = defaultdict(int)
    for r in group:
        if implicated.intersection(r.members):
            continue  # a culprit or suspect explains the test; it says nothing about the others
        for m in set(r.members):
            count[m] += 1
            best[m] = max(best.get(m, -math.inf), r.value)
    scored = {m: v for m, v in best.items() if count[m] >= s.outlier_min_tests}
    if len(scored) < s.outlier_min_peers:
        return []
    med = statistics.median(scored.values())
    if med <= 0:
        return []
    return [Outlier(members=(m,), kind=kind, value=v, peer_median=med, below=1 - v / med, peers=len(scored),
                    size=size, unit=group[0].unit)
            for m, v in sorted(scored.items()) if v < med * (1 - s.outlier_fraction)]


def _slow_tests(kind: str, size: int, clean: list[Result], s: LocalizeSettings) -> list[Outlier]:
    """Passing tests far below the median of the tests no slow node explains."""
    if len(clean) < s.outlier_min_peers:
        return []
    med = statistics.median(r.value for r in clean)
    if med <= 0:
        return []
    return [Outlier(members=r.members, kind=kind, value=r.value, peer_median=med, below=1 - r.value / med,
                    peers=len(clean), size=size, unit=r.unit)
            for r in clean if r.passed and r.value < med * (1 - s.pair_outlier_fraction)]


def localize(results: Iterable[Result], *, nodes: Iterable[str] | None = None, known_good: Iterable[str] = (),
             settings: LocalizeSettings | None = None, fabric_check: bool = True) -> Verdict:
    """Judge the results: culprits, suspects, slow links, fabric-wide problems and peer outliers.

    nodes: every node meant to be tested (those in no result are `untested`);
    known_good: nodes vouched for from elsewhere (a node-local loopback test, an earlier
    run), which count as known-good partners even without a pass here;
    fabric_check=False: attribute nodes and links even where the verdict would be
    fabric-wide (what the adaptive driver plans its next tests from).
    """
    s = settings or DEFAULT_SETTINGS
    results = list(results)
    references = peer_references(results, s.peer_fraction)
    rs, unpeered = judge_by_peers(results, s.peer_fraction, references)
    vouched = frozenset(known_good)
    by_kind: dict[str, list[Result]] = defaultdict(list)
    for r in rs:
        by_kind[r.kind].append(r)
    parts = [_judge_kind(kind, by_kind[kind], vouched, s, fabric_check, reference=references.get(kind),
                         unpeered=kind in unpeered)
             for kind in sorted(by_kind)]
    tested: set[str] = set().union(*(p.nodes for p in parts)) if parts else set()
    not_good = set().union(*(p.nodes - p.good for p in parts)) if parts else set()
    unclear = set().union(*(p.nodes - p.vouching for p in parts)) if parts else set()
    wanted = unique_nodes(nodes) if nodes is not None else []
    return Verdict(
        culprits=tuple(c for p in parts for c in p.culprits),
        suspects=tuple(x for p in parts for x in p.suspects),
        links=tuple(x for p in parts for x in p.links),
        fabric=tuple(p.fabric for p in parts if p.fabric is not None),
        outliers=tuple(x for p in parts for x in p.outliers),
        undecided=tuple(p.undecided for p in parts if p.undecided is not None),
        within_noise=tuple(w for p in parts for w in p.within),
        good=tuple(sorted(tested - not_good)),
        vouching=tuple(sorted(tested - not_good - unclear)),
        untested=tuple(n for n in wanted if n not in tested),
        tests=len(rs),
        failed=sum(not r.passed for r in rs),
    )


# ----------------------------------------------------------------------- confirmation


def confirmation_tests(suspects: Verdict | Iterable[str], known_good: Iterable[str], *,
                       busy: Iterable[str] = (), tried: Iterable[Iterable[str]] = (), seed: Seed = 0
                       ) -> list[Test]:
    """The re-tests that confirm or clear suspects: each with its own known-good partner.

    Partners are drawn from `known_good` (minus `busy` nodes and the suspects
    themselves) in a seeded random order, each used once, preferring one the suspect
    was never measured with (`tried`: member lists of earlier tests). Suspects beyond
    the partners available get no test this time.
    """
    if isinstance(suspects, Verdict):
        names = suspects.suspect_nodes
    else:
        names = list(dict.fromkeys(suspects))
    exclude = set(busy) | set(names)
    pool = [g for g in dict.fromkeys(sorted(set(known_good))) if g not in exclude]
    random.Random(f"hc.confirm/{seed}").shuffle(pool)
    pairs = {frozenset(t) for t in tried}
    tests: list[Test] = []
    for s in names:
        if not pool:
            break
        pick = next((j for j, g in enumerate(pool) if frozenset((s, g)) not in pairs), 0)
        tests.append(Test((s, pool.pop(pick)), "confirm"))
    return tests


# ---------------------------------------------------------------------------- adaptive


class Adaptive(msgspec.Struct, frozen=True):
    """What `localize_adaptive` found, and what it cost."""

    verdict: Verdict
    rounds: int
    tests: int
    plan: str  # "circle" or "groups"
    complete: bool  # False: stopped (max_rounds, no partner left) with suspects or a group to narrow
    results: tuple[Result, ...] = ()


RunRound = Callable[[list[Test]], list[Result]]


def _blocks(results: Sequence[Result], suspects: list[str]) -> list[list[str]]:
    """Suspects grouped by the latest failed test they share (what bisection splits next)."""
    left = dict.fromkeys(suspects)
    blocks: list[list[str]] = []
    for r in reversed(results):
        if r.passed:
            continue
        block = [m for m in dict.fromkeys(r.members) if m in left]
        for m in block:
            del left[m]
        if block:
            blocks.append(block)
    blocks.extend([m] for m in left)
    return blocks


def _tag(got: Iterable[Result], tests: list[Test]) -> list[Result]:
    """Results with the purpose of the test they measured (run_round need not copy it)."""
    purpose = {frozenset(t.members): t.purpose for t in tests}
    out = []
    for r in got:
        p = purpose.get(frozenset(r.members), "screen")
        out.append(msgspec.structs.replace(r, purpose=p) if r.purpose == "screen" and p != "screen" else r)
    return out


def localize_adaptive(
    nodes: Sequence[str],
    run_round: RunRound,
    *,
    k: int = 8,
    seed: Seed = 0,
    rails: Mapping[str, str] | None = None,
    exhaustive: bool = False,
    circle_max: int = 16,
    screen_rounds: int = 2,
    partners_per_round: int | None = None,
    pad: bool = False,
    max_rounds: int | None = None,
    known_good: Iterable[str] = (),
    settings: LocalizeSettings | None = None,
) -> Adaptive:
    """Localize slow nodes and links among `nodes`, round by round, through `run_round`.

    `run_round(tests)` runs disjoint tests at the same time and returns their results
    (a test that could not run may return none: its members stay unjudged).

    - n <= circle_max, or exhaustive=True: every pair once (`circle_rounds`, n-1 rounds,
      n for odd n), then confirmation rounds for any suspect left.
    - otherwise: round 1 puts every node in a group of about k (`groups`); each later
      round plans, in this order: a known-good partner for every suspect
      (`confirmation_tests`) when there are enough partners (at most
      `partners_per_round` lent per round), else the bisection of each failed group's
      suspects (`split_tests`, with `pad`); pairs inside a group that failed while each
      member passed elsewhere (a circle round over its members, to find the slow link);
      and, for the first `screen_rounds` rounds, a random regrouping of every node not
      otherwise busy and not implicated (a second partner set for everyone).

    Stops when nothing is left to test, when every kind is fabric-wide, or after
    `max_rounds` (default: the screening rounds + 2*ceil(log2 n) + 3, plus k - 1 in group
    mode for narrowing a slow link). `known_good`: nodes vouched for from elsewhere,
    lent as partners too (they may lie outside `nodes`).
    """
    names = unique_nodes(nodes)
    n = len(names)
    s = settings or DEFAULT_SETTINGS
    vouched = list(dict.fromkeys(known_good))
    plan = "circle" if exhaustive or n <= circle_max else "groups"
    if n < 2:
        return Adaptive(verdict=localize([], nodes=names, settings=s), rounds=0, tests=0, plan=plan,
                        complete=n == 0)
    circle = circle_rounds(names) if plan == "circle" else []
    screens = len(circle) if plan == "circle" else max(1, screen_rounds)
    if max_rounds is None:
        max_rounds = screens + 2 * math.ceil(math.log2(n)) + 3 + (k - 1 if plan == "groups" else 0)
    results: list[Result] = []
    tests_run = 0
    rounds = 0
    pending = True
    planning = Verdict()
    while rounds < max_rounds:
        if results:
            # stop once every kind is fabric-wide, but never on a partial circle: after one
            # round of pairs, two bad nodes of six implicate four
            if plan == "groups" or rounds >= len(circle):
                real = localize(results, nodes=names, known_good=vouched, settings=s)
                if {r.kind for r in results} <= {f.kind for f in real.fabric}:
                    pending = False
                    break
            planning = localize(results, nodes=names, known_good=vouched, settings=s, fabric_check=False)
        # bisection follows the failed tests as judged now (a peer-judged test by every test so far)
        judged = judge_by_peers(results, s.peer_fraction)[0]
        tests, pending = _plan(rounds, plan, names, circle, judged, planning, vouched, k=k, seed=seed,
                               rails=rails, screens=screens, partners_per_round=partners_per_round, pad=pad)
        if not tests:
            break
        rounds += 1
        tests_run += len(tests)
        results.extend(_tag(run_round(tests), tests))
    verdict = localize(results, nodes=names, known_good=vouched, settings=s)
    if rounds >= max_rounds and not verdict.fabric:
        planning = localize(results, nodes=names, known_good=vouched, settings=s, fabric_check=False)
        judged = judge_by_peers(results, s.peer_fraction)[0]
        pending = bool(_plan(rounds, plan, names, circle, judged, planning, vouched, k=k, seed=seed, rails=rails,
                             screens=screens, partners_per_round=partners_per_round, pad=pad)[0])
    return Adaptive(verdict=verdict, rounds=rounds, tests=tests_run, plan=plan, complete=not pending,
                    results=tuple(results))


def _confirm_or_split(suspects: list[str], lend: list[str], results: list[Result], tried: list[tuple[str, ...]],
                      busy: set[str], *, seed: str, pad: bool) -> list[Test]:
    """A known-good partner for every suspect where there are enough, else the bisection of each
    failed test's suspects; the nodes they take are added to `busy`."""
    tests: list[Test] = []
    if len(suspects) <= len(lend):
        tests += confirmation_tests(suspects, lend, tried=tried, seed=seed)
    else:
        for block in _blocks(results, suspects):
            planned = split_tests(block, [g for g in lend if g not in busy], pad=pad)
            for t in planned:
                busy.update(t.members)
            tests += planned
    for t in tests:
        busy.update(t.members)
    return tests


def _narrow(links: Iterable[SlowLink], tried: list[tuple[str, ...]], tests: list[Test], busy: set[str]
            ) -> tuple[list[Test], bool]:
    """A group that failed while each member passed elsewhere: the next round of pairs inside it
    not tested yet (on nodes not busy), and whether any such pair is left."""
    tested_pairs = {frozenset(m) for m in tried}
    narrowing = False
    for link in links:
        members = sorted(set(link.members))
        if len(members) <= 2:
            continue
        for rnd in circle_rounds(members):
            todo = [p for p in rnd if frozenset(p) not in tested_pairs]
            if not todo:
                continue
            narrowing = True
            for p in todo:
                if not busy.intersection(p):
                    tests.append(Test(p, "narrow"))
                    busy.update(p)
            break
    return tests, narrowing


def _plan(r: int, plan: str, names: list[str], circle: list[list[tuple[str, str]]], results: list[Result],
          verdict: Verdict, vouched: list[str], *, k: int, seed: Seed, rails: Mapping[str, str] | None,
          screens: int, partners_per_round: int | None, pad: bool) -> tuple[list[Test], bool]:
    """Round r's tests (0-based), and whether anything is still left to resolve."""
    if plan == "circle" and r < len(circle):
        return [Test(p, "screen") for p in circle[r]], True
    if plan == "groups" and r == 0:
        return [Test(tuple(g), "screen") for g in groups(names, k, seed, rails)], True

    tests: list[Test] = []
    busy: set[str] = set()
    implicated = {c.node for c in verdict.culprits} | {x.node for x in verdict.suspects}
    suspects = verdict.suspect_nodes
    # partners that passed clearly (a pass at the threshold's edge confirms nobody), else any good one
    pool = [g for g in dict.fromkeys([*(verdict.vouching or verdict.good), *vouched]) if g not in implicated]
    random.Random(f"hc.partners/{seed}/{r}").shuffle(pool)
    budget = len(pool) if partners_per_round is None else min(len(pool), partners_per_round)
    tried = [res.members for res in results if len(set(res.members)) == 2]
    unresolved = bool(suspects)

    if suspects and budget:
        tests += _confirm_or_split(suspects, pool[:budget], results, tried, busy, seed=f"{seed}/{r}", pad=pad)
    tests, narrowing = _narrow(verdict.links, tried, tests, busy)

    if plan == "groups" and r < screens:
        free = [m for m in names if m not in busy and m not in implicated]
        if len(free) >= 2:
            earlier = [res.members for res in results]
            tests += [Test(tuple(g), "screen") for g in groups(free, k, round_seed(seed, r), rails, avoid=earlier)]
    return tests, unresolved or narrowing
