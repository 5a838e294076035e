"""The bandwidth judgment as an analysis of scope "pairs": findings from tests between nodes.

`bw.pairs` runs `localize.localize` over a `PairsInput` (the results of tests that
measured nodes together) and turns its verdict into catalogued findings:

- bw.E101 culprit node, FAIL (drains): slow with every partner, confirmed with
  known-good partners;
- bw.E102 slow link, WARN, names the pair (or group) and its HCAs, drains nothing;
- bw.E103 fabric-wide, WARN, names no node: draining n nodes for a fabric problem is
  what the blast-radius guard exists to stop;
- bw.E104 peer outlier, WARN: a node or pair well below its peers, threshold met;
- bw.E105 suspect, WARN: failed every test it was in but never with known-good partners
  only; not confirmed, so not FAIL (`localize.confirmation_tests` plans the re-test);
- bw.E106 undecided, WARN, names no node: the tests cannot tell who is slow (one pair and
  no floor to judge it against; or tests fell short and no node passed one, so no partner
  is known good): said for the run instead of passing the tests or naming anyone;
- bw.E109 within the noise, WARN: no floor, a node short with every partner against its
  peers, confirmed, but its best test is not below the sweep's noise threshold (what its
  measured spread allows a healthy test): not evidence enough to drain, said instead.

Who a finding is about: a node's name (E101, E104 node, E105, E109), the member nodes (E102,
E104 pair), or `()` for E103 and E106 (no node named: its stamped `node` and `members` are
empty).

core/analysis.py has no input type for this scope yet, so `PairsInput` lives here,
shaped like its `FleetInput` (a dataclass with the scope's data and a memo).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from healthcheck.bandwidth.localize import (
    DEFAULT_SETTINGS,
    Culprit,
    FabricWide,
    LocalizeSettings,
    Outlier,
    Result,
    SlowLink,
    Suspect,
    Undecided,
    Verdict,
    WithinNoise,
    localize,
)
from healthcheck.core import typed
from healthcheck.core.catalogue import finding
from healthcheck.core.model import Finding, GroupResult, Limit
from healthcheck.core.registry import NotApplicable, analysis
from healthcheck.core.status import Status

CULPRIT = finding(
    "bw.E101",
    "a node is slow with every partner, and its partners are fine with others",
    "The node's own path is slow, not the fabric: a down-trained or erroring HCA port, a bad cable or "
    "transceiver, a PCIe link at reduced width or speed, a GPU and NIC on different NUMA nodes. The "
    "node-local loopback tests (ib_write_bw per HCA, single-node NCCL with P2P and SHM off) tell which "
    "HCA; check lspci -vv link status, reseat, then replace the cable.",
    action="investigate",
)
SLOW_LINK = finding(
    "bw.E102",
    "nodes are slow together although each of them is fine with other partners",
    "The path between them is slow, not either node: a switch port, an inter-switch cable or the route "
    "between the HCAs named (an errored or congested spine link, adaptive routing off). Check the ports "
    "on that route (ibdiagnet, UFM, perfquery); no node is drained for it.",
    action="investigate",
)
FABRIC_WIDE = finding(
    "bw.E103",
    "most bandwidth tests fell short: a fabric-wide problem, no node is named",
    "Too much is slow to blame nodes, and nothing is drained: look at the fabric (subnet manager, switch "
    "firmware, routing, congestion from other jobs) and at the test itself (NCCL/UCX settings, a "
    "threshold that does not fit this fabric, message size).",
    action="investigate",
)
PEER_OUTLIER = finding(
    "bw.E104",
    "a node or pair meets its threshold but is well below the median of its peers",
    "Not slow enough to fail, but unlike its peers (one NVLink lane or HCA down-trained, a link at a "
    "lower rate, a GPU throttling): re-run to rule out noise, then compare the node's ports, PCIe links "
    "and GPU clocks with a peer's.",
    action="investigate",
)
SUSPECT = finding(
    "bw.E105",
    "a node failed every bandwidth test it was in, never with known-good partners only",
    "Not confirmed, so not drained: its partners were slow too, so the tests cannot tell which node is "
    "at fault. Re-run it against a node that passed (the confirmation test); it is a culprit if that "
    "is slow too.",
    action="rerun",
)
UNDECIDED = finding(
    "bw.E106",
    "the bandwidth tests between nodes cannot tell who is slow: too few nodes, or no partner known good",
    "One pair with no floor has nothing to be judged against, and a pair (or a few nodes) that fell short "
    "with no node passing any test cannot say which node, or the link, is slow: nothing is drained. Set the "
    "pair floor (bandwidth.<collective>.pair.busbw_min_gbytes_per_s; hc baseline learns it from earlier "
    "sweeps), or sweep these nodes together with nodes known to be good.",
    action="fix-config",
)
WITHIN_NOISE = finding(
    "bw.E109",
    "a node is slower than its peers with every partner, but within the spread of this sweep's own tests",
    "No pair floor is set, so the node was judged against the other tests of the sweep: every one of its tests "
    "fell short of them by more than bandwidth.peer_fraction, but not by more than the sweep's own run-to-run "
    "spread allows a healthy test, so it is not drained. Re-run the sweep, and set the pair floor "
    "(bandwidth.<collective>.pair.busbw_min_gbytes_per_s; hc baseline learns it from earlier sweeps) so the "
    "node is judged against a known-good figure; a node slow for real is below it every time.",
    action="rerun",
)
# ERROR on a test's own result, never on a node: orchestrate/pairsweep/judging.py stamps it where a test gave nothing
TEST_NOT_RUN = finding(
    "bw.E107",
    "a bandwidth test between nodes could not run (a member unreachable, the worker missing or failing to start)",
    "The evidence names each member's error: hc (with torch) must be installed on the nodes as ssh.remote_hc, "
    "the tools the fabric's bandwidth.pairs.tests name (nccl-tests, perftest, mpirun) present, and the "
    "rendezvous port (bandwidth.pairs.port) reachable between them. No node is judged by this test.",
    action="fix-config",
)
# WARN on a test's own result: the tool failed between these nodes (evidence the analysis weighs)
TEST_FAILED = finding(
    "bw.E108",
    "a bandwidth test between nodes failed: it hung, returned wrong data, or nccl-tests/ib_write_bw reported "
    "an error",
    "Evidence against the pair, not yet against a node: bw.pairs names the node when it fails with every "
    "partner (bw.E101) or the link when only this pair does (bw.E102). The evidence holds the tool's last "
    "lines (NCCL WARN, completion status, the HCA port).",
    action="investigate",
)

CHECK = "bw.pairs"
FINDINGS = (CULPRIT, SLOW_LINK, FABRIC_WIDE, PEER_OUTLIER, SUSPECT, UNDECIDED, TEST_NOT_RUN, TEST_FAILED,
            WITHIN_NOISE)
_SHOWN = 6  # node names listed in a message; the rest are counted

Who = str | tuple[str, ...]


@dataclass
class PairsInput:
    """The input of scope "pairs": the results of tests that measured nodes together."""

    results: list[Result]
    nodes: list[str] | None = None  # every node meant to be tested (those in no result are untested)
    known_good: tuple[str, ...] = ()  # nodes vouched for from elsewhere (loopback tests, an earlier run)
    _memo: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def tested(self) -> list[str]:
        """The nodes some result names, in first-seen order (what the analysis judged)."""
        return list(dict.fromkeys(m for r in self.results for m in r.members))

    def shared(self, key: str, make: Callable[[], Any]) -> Any:
        """`make()` once per input, as `FleetInput.shared`."""
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]

    def verdict(self, settings: LocalizeSettings = DEFAULT_SETTINGS) -> Verdict:
        """`localize.localize` over these results, computed once per settings."""
        key = "bw.verdict/" + msgspec.json.encode(settings).decode()
        return self.shared(key, lambda: localize(self.results, nodes=self.nodes, known_good=self.known_good,
                                                 settings=settings))

    @classmethod
    def from_groups(cls, groups: Iterable[GroupResult], *, metric: str = "busbw", component: str | None = None,
                    nodes: Iterable[str] | None = None, known_good: Iterable[str] = ()) -> PairsInput:
        """From run-level results (report.build's `GroupResult`s): one `Result` per group.

        The value is the group's `metric` of `component` (a message size), or its last
        such metric; passed unless the group is FAIL; a group that is ERROR or SKIP, or
        has no such metric, gave no evidence and is left out. The threshold is the value
        of a finding's `>=` limit where one has it; the kind names metric and component.
        """
        results = []
        for g in groups:
            if g.status in (Status.ERROR, Status.SKIP):
                continue
            values = [m for m in g.metrics if m.name == metric and (component is None or m.component == component)]
            if not values or not isinstance(values[-1].value, (int, float)) or isinstance(values[-1].value, bool):
                continue
            m = values[-1]
            limits = [f.limit for f in g.findings if f.limit is not None and f.limit.op == ">="
                      and isinstance(f.limit.value, (int, float))]
            results.append(Result(
                members=tuple(g.members), value=float(m.value), passed=g.status is not Status.FAIL,
                threshold=float(limits[0].value) if limits else None, unit=m.unit or "GB/s",
                kind=f"{metric} {m.component}".strip(), limit_key=limits[0].key if limits else ""))
        return cls(results=results, nodes=list(nodes) if nodes is not None else None,
                   known_good=tuple(known_good))


def settings_of(limits: Any) -> LocalizeSettings:
    """The localization settings in `limits`: None (defaults), a LocalizeSettings, an
    object with a `localize` attribute holding one, or a mapping of its fields."""
    if limits is None:
        return DEFAULT_SETTINGS
    if isinstance(limits, LocalizeSettings):
        return limits
    nested = getattr(limits, "localize", None)
    if isinstance(nested, LocalizeSettings):
        return nested
    if isinstance(limits, Mapping):
        return typed.convert(dict(limits), LocalizeSettings)
    raise TypeError(f"{CHECK}: limits must be LocalizeSettings, not {type(limits).__name__}")


@analysis(CHECK, scope="pairs", tier="deep", findings=FINDINGS)
def pairs(inputs: PairsInput, limits: Any) -> Iterator[tuple[Who, Finding]]:
    """Nodes reach the bandwidth floor with every partner, and no path between them is slow."""
    if not inputs.results:
        raise NotApplicable("no bandwidth tests between nodes were run")
    settings = settings_of(limits)
    yield from findings(inputs.verdict(settings), settings)


def findings(verdict: Verdict, settings: LocalizeSettings = DEFAULT_SETTINGS) -> list[tuple[Who, Finding]]:
    """The verdict as (who, finding) pairs, unstamped (core/analysis.py stamps them)."""
    out: list[tuple[Who, Finding]] = []
    if verdict.fabric:
        out.append(((), _fabric(verdict.fabric, settings)))
    if verdict.undecided:
        out.append(((), _undecided(verdict.undecided)))
    out += [(c.node, _culprit(c)) for c in verdict.culprits]
    out += [(s.node, _suspect(s)) for s in verdict.suspects]
    out += [(w.node, _within_noise(w)) for w in verdict.within_noise]
    out += [(tuple(link.members), _link(link)) for link in verdict.links]
    for o in verdict.outliers:
        who: Who = o.members[0] if len(o.members) == 1 else tuple(o.members)
        out.append((who, _outlier(o, settings)))
    return out


# ---------------------------------------------------------------------------- messages


def _names(names: Iterable[str]) -> str:
    names = list(names)
    shown = ", ".join(names[:_SHOWN])
    return shown + (f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else "")


def _all(n: int) -> str:
    return "its only test" if n == 1 else f"all {n} tests it was in"


def _of(kind: str) -> str:
    return f" ({kind})" if kind else ""


def _v(x: float) -> str:
    return f"{x:.4g}"


def _floor(limit_key: str, threshold: float | None) -> Limit | None:
    """The threshold as a Limit, where the result names the config key that set it (a
    Limit's key must name one: it is how the finding finds its file:line)."""
    return None if threshold is None or not limit_key else Limit(">=", threshold, limit_key)


def _below(threshold: float | None, unit: str, peers: bool) -> str:
    if threshold is None:
        return ""
    return f" below {_v(threshold)} {unit}" + (" (its peers' figure less bandwidth.peer_fraction)" if peers else "")


def _culprit(c: Culprit) -> Finding:
    below = _below(c.threshold, c.unit, c.peers)
    partners = [p for ps in c.confirmed_by for p in ps] or ["none (a test of the node alone)"]
    message = (f"slow with every partner{_of(c.kind)}: {_all(c.failed)} fell short, best "
               f"{_v(c.best)} {c.unit}{below}; known-good partners it was slow with: {_names(partners)}")
    return CULPRIT.fail(message, component=c.hca or c.kind, value=c.best, unit=c.unit,
                        limit=_floor(c.limit_key, c.threshold))


def _suspect(s: Suspect) -> Finding:
    message = (f"failed {_all(s.failed)}{_of(s.kind)} (best {_v(s.best)} {s.unit}), never with known-good "
               f"partners only (partners: {_names(s.partners)}): not confirmed, not drained")
    return SUSPECT.warn(message, component=s.hca or s.kind, value=s.best, unit=s.unit)


def _within_noise(w: WithinNoise) -> Finding:
    figures = _v(w.low) if w.low == w.high else f"{_v(w.low)}-{_v(w.high)}"
    if w.peers_low is None or w.peers_high is None:
        peers = ""
    else:
        peers = f" vs {_v(w.peers_low)}" + ("" if w.peers_low == w.peers_high else f"-{_v(w.peers_high)}")
    spread = ("too few tests to measure the sweep's spread: only a quarter of the reference or less counts"
              if w.spread is None else f"the reference less what the sweep's spread, {w.spread:.2g} in log, "
              f"allows a healthy test")
    message = (f"slower than its peers with every partner{_of(w.kind)} ({figures}{peers} {w.unit}: {_all(w.failed)} "
               f"short by bandwidth.peer_fraction), but within this sweep's spread: to be named, its best "
               f"({_v(w.high)}) would have to be below {_v(w.noise_threshold)} {w.unit} ({spread}). Not drained; "
               f"set a pair floor (hc baseline) to judge it")
    return WITHIN_NOISE.warn(message, component=w.kind, value=w.high, unit=w.unit)


def _link(link: SlowLink) -> Finding:
    labels = [f"{m} ({h})" for m, h in zip(link.members, link.hcas, strict=True)] \
        if len(link.hcas) == len(link.members) else list(link.members)
    below = _below(link.threshold, link.unit, link.peers)
    elsewhere = ", ".join(f"{m} {p}" for m, p in zip(link.members, link.passes, strict=False))
    path = f" over {link.link}" if link.link else ""
    what = "pair" if len(link.members) == 2 else f"group of {len(link.members)}"
    message = (f"{' <-> '.join(labels)}{path}: {_v(link.value)} {link.unit}{below}{_of(link.kind)}, while every "
               f"node of the {what} passed with other partners (tests passed: {elsewhere}); no node is drained")
    component = "-".join(link.hcas) if link.hcas else (link.link or link.kind)
    return SLOW_LINK.warn(message, component=component, value=link.value, unit=link.unit,
                          limit=_floor(link.limit_key, link.threshold))


def _fabric(fabric: tuple[FabricWide, ...], settings: LocalizeSettings) -> Finding:
    parts = [f"{f.failed} of {f.tests} tests fell short{_of(f.kind)}: {f.reason}" for f in fabric]
    tests = sum(f.tests for f in fabric)
    failed = sum(f.failed for f in fabric)
    message = (f"{'; '.join(parts)} (fabric_fraction {settings.fabric_fraction:g}). A fabric-wide problem: no node "
               f"is named and nothing is drained")
    # no Limit: LocalizeSettings is not in the config schema yet, so no key to name
    return FABRIC_WIDE.warn(message, value=round(failed / tests, 4) if tests else None)


def _undecided(undecided: tuple[Undecided, ...]) -> Finding:
    parts = []
    for u in undecided:
        figures = _v(u.low) if u.low == u.high else f"{_v(u.low)}-{_v(u.high)}"
        tests = "1 test" if u.tests == 1 else f"{u.tests} tests"
        what = f"{tests}{_of(u.kind)} between {_names(u.nodes)} at {figures} {u.unit}"
        if u.why == "no-peers":
            parts.append(f"{what}: no pair floor is set, and too few nodes to judge the tests against each "
                         f"other (it takes 3): not judged")
        else:
            floor = f" short of the floor {_v(u.threshold)} {u.unit}" if u.threshold is not None else " short"
            parts.append(f"{what}, every one{floor}: no node passed a test, so no known-good partner can tell "
                         f"which node, or the link, is slow")
    message = "; ".join(parts) + ". No node is named and nothing is drained"
    first = undecided[0]
    limit = _floor(first.limit_key, first.threshold) if first.why == "no-partner" else None
    return UNDECIDED.warn(message, component=first.kind, value=first.low, unit=first.unit, limit=limit)


def _outlier(o: Outlier, settings: LocalizeSettings) -> Finding:
    if len(o.members) == 1:
        fraction = settings.outlier_fraction
        message = (f"best {_v(o.value)} {o.unit}{_of(o.kind)} is {o.below:.1%} below the median best "
                   f"{_v(o.peer_median)} {o.unit} of {o.peers} nodes in {o.size}-node tests")
    else:
        fraction = settings.pair_outlier_fraction
        message = (f"{' <-> '.join(o.members)} at {_v(o.value)} {o.unit}{_of(o.kind)} is {o.below:.1%} below "
                   f"the median {_v(o.peer_median)} {o.unit} of {o.peers} {o.size}-node tests")
    message += f" (outlier below {_v(o.peer_median * (1 - fraction))} {o.unit}, {fraction:.0%} under the median)"
    # no Limit: LocalizeSettings is not in the config schema yet, so no key to name
    return PEER_OUTLIER.warn(message, component=o.kind, value=o.value, unit=o.unit)
