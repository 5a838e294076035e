"""Bandwidth tests between nodes, for a deep sweep: hc's torch sweep across pairs (or
groups) of nodes over SSH, planned and judged by `bandwidth.localize`, then the `pairs`
analyses (bw.pairs) name the culprit node or the slow link.

Every test runs the tools the fabric lists on its members (measure.py); the torch sweep
goes through the one transport the sweep chose (choose.py: persistent workers, or per
test over SSH or a launcher); a member that fails to start makes the test ERROR (no
result, no evidence against anyone). A test passes when it reaches the fabric's pair floor at
its largest judged size (the floor decides, however few the nodes), or, where the fabric
sets none, when it is within `bandwidth.peer_fraction` of its peers' reference
(`peers.peer_threshold`: the median of the tests with no suspected node, robust where
a slow node is in half the tests or more). A short test runs again, up to
`bandwidth.repeats`; once the rounds are done every peer-judged test is judged against the
sweep's final reference, runs again where it is short by it and has not used its repeats,
and takes the final status (`_Sweep.settle`): two tests at one speed are judged alike. Whether
a node short with every partner is the culprit, or slower within the sweep's own noise, is
the analysis's to say (bw.pairs, `peers.PeerReference.noise_threshold`).

Only nodes that are reachable and passed their own node-local bandwidth tests take
part: a node slow on its own is judged on that alone, and must not implicate partners.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec

from healthcheck.analyses.pairs import PairsInput, settings_of
from healthcheck.bandwidth.localize import LocalizeSettings, Result, judge_by_peers, localize_adaptive
from healthcheck.bandwidth.schedule import Test
from healthcheck.core.analysis import run_analyses
from healthcheck.core.config import Config
from healthcheck.core.model import GroupResult, NodeResult
from healthcheck.core.status import Status, worst
from healthcheck.orchestrate.pairsweep import choose
from healthcheck.orchestrate.pairsweep.judging import Judging, Record, group_result, judged_test, run_again
from healthcheck.orchestrate.pairsweep.measure import Measured, measure_test
from healthcheck.orchestrate.pairsweep.plan import PairPlan
from healthcheck.orchestrate.pairsweep.transport import PairTransport
from healthcheck.runners.fanout import fan_out

if TYPE_CHECKING:
    from healthcheck.orchestrate.busy import JobWatch


@dataclass
class PairRun:
    """What the tests between nodes gave: one GroupResult per test, the Results they judged."""

    groups: list[GroupResult] = field(default_factory=list)
    results: list[Result] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)  # the nodes that took part
    rounds: int = 0
    notes: list[str] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)  # localize's, from the fabric and the drain guard
    taken: dict[str, str] = field(default_factory=dict)  # node -> the job that took it mid-sweep (not judged)


def eligible(results: Sequence[NodeResult]) -> list[str]:
    """Reachable nodes whose own bandwidth tests did not fail (they are judged on those); a
    node whose checks all skipped (no GPU, no HCA) takes part: the pair tests need neither."""
    out = []
    for r in results:
        if r.error is not None:  # unreachable, or skipped before its checks (a job on it)
            continue
        if any(f.check.startswith("bw.") and f.status is Status.FAIL for f in r.findings):
            continue
        out.append(r.node)
    return out


def run_pairs(config: Config, results: Sequence[NodeResult], *, exhaustive: bool = False,
              max_parallel: int | None = None, watch: JobWatch | None = None) -> PairRun:
    """Test the eligible nodes against each other until the culprit (or link) is named.

    With `watch` (busy.JobWatch, what a deep sweep's idle check gives), Slurm is asked
    again before each batch of tests and after a round's last whether a job took a member:
    a test with such a member is not run, or its result not used (the job may have run
    beside it), and is ERROR naming the job; that node is not tested again in the sweep,
    nor judged by the pairs analysis. Without one (a caller that checked otherwise, the
    tests), nothing is asked."""

    run = PairRun(nodes=eligible(results))
    if len(run.nodes) < 2:
        run.notes.append("bandwidth between nodes: fewer than two eligible nodes, nothing to pair")
        return run
    plan = PairPlan.from_config(config, run.nodes[0])
    if not plan.pairs.enabled or not plan.tools:
        run.notes.append("bandwidth between nodes: disabled in the fabric (bandwidth.pairs, or bandwidth.torch "
                         "where pairs.tests names only torch)")
        run.nodes = []
        return run
    drain = config.main.slurm.drain
    localize = plan.pairs.localize
    run.settings = {"outlier_fraction": plan.peer_fraction, "pair_outlier_fraction": plan.peer_fraction,
                    "max_culprit_fraction": max(min(drain.max_drain_fraction, 0.99), 0.01),
                    "guard_min_nodes": max(drain.guard_min_nodes, 1),
                    "peer_fraction": plan.peer_fraction,
                    **{name: getattr(localize, name) for name in localize.__struct_fields__}}
    # groups span leaves where the config says which leaf a node hangs off (rails)
    rails = {n: rail for n in run.nodes if (rail := config.rail_of(n)) is not None}
    # the torch sweep's transport, chosen once for the whole sweep
    torch = choose.open_transport(config, plan, len(run.nodes)) if "torch" in plan.tools else None
    sweep = _Sweep(config, plan, torch, run, max_parallel or max(1, config.main.ssh.max_parallel // 2), watch)
    try:
        adaptive = localize_adaptive(run.nodes, sweep.run_round, k=plan.pairs.group_size, exhaustive=exhaustive,
                                     circle_max=plan.pairs.circle_max, rails=rails or None,
                                     settings=LocalizeSettings(**run.settings))
        sweep.settle()
    finally:
        if torch is not None:
            run.notes += torch.close()
    run.rounds = adaptive.rounds
    run.notes += sorted(sweep.not_applicable)
    run.taken = dict(watch.taken) if watch is not None else {}
    run.notes += [f"bandwidth between nodes: {why}" for _, why in sorted(run.taken.items())]
    return run


@dataclass
class _Sweep:
    """One sweep's rounds of tests between nodes: what localization's run_round calls."""

    config: Config
    plan: PairPlan
    torch: PairTransport | None  # the torch sweep's transport (None: torch is not among the tools)
    run: PairRun
    parallel: int
    watch: JobWatch | None  # asks Slurm whether a job took a member (None: nothing is asked)
    judging: Judging = field(init=False)
    records: list[Record] = field(default_factory=list)  # every test judged so far, in order
    not_applicable: set[str] = field(default_factory=set)
    released: set[str] = field(default_factory=set)  # taken nodes whose worker was ended

    def __post_init__(self) -> None:
        self.judging = Judging(self.plan.peer_fraction)

    def measure(self, tests: dict[str, Test], held: dict[str, str], what: str = "not run"
                ) -> dict[str, list[Measured]]:
        """The tests whose members no job took (Slurm asked first); the others into held, with
        why (`what` they are: "not run", or for a repeat "not judged")."""

        held.update(_stopped(tests, self._stop(t.members for t in tests.values()), what))
        tests = {name: t for name, t in tests.items() if name not in held}
        if not tests:
            return {}
        return fan_out(list(tests), lambda name: measure_test(self.config, self.plan, self.torch, tests[name].members),
                       max_parallel=self.parallel)

    def _stop(self, members: Iterable[Sequence[str]]) -> dict[str, str]:
        """node -> why it must not be tested now (a job took it), of these tests' members."""
        if self.watch is None:
            return {}
        return self.watch.check(n for names in members for n in names)

    def _release_taken(self) -> None:
        """A persistent worker on a node a job took ends now, not with the sweep: it shares the node."""
        if self.watch is None or self.torch is None:
            return
        for node in sorted(set(self.watch.taken) - self.released):
            self.torch.release(node)
            self.released.add(node)

    def run_round(self, tests: list[Test]) -> list[Result]:
        keyed = {"-".join(t.members): t for t in tests}
        held: dict[str, str] = {}  # test -> why it was not run, or its result not used
        mine = {name: Record(keyed[name], got, 1) for name, got in self.measure(keyed, held).items()}
        for rec in mine.values():
            self.not_applicable.update(m.why for m in rec.got if m.not_applicable)
            self.judging.note(rec)
        # a test that fell short runs again, up to the fabric's repeats: it is short only if every attempt was
        for _ in range(self.plan.repeats - 1):
            if not run_again([rec for rec in mine.values() if self.judging.short_test(rec.got)],
                             lambda again: self.measure(again, held, "not judged"), self.judging):
                break
        # a job that took a member while the round ran may have run beside its tests
        held.update(_stopped({n: keyed[n] for n in mine if n not in held},
                             self._stop(keyed[name].members for name in mine), "not judged"))
        for name, why in held.items():
            unused = mine.pop(name, None)
            if unused is not None:
                self.judging.forget(unused)
            self.run.groups.append(group_result(keyed[name], Status.ERROR, [], why, self.plan))
        self._release_taken()
        out = []
        for rec in mine.values():
            group, result = judged_test(rec, self.judging, self.plan)
            rec.group = len(self.run.groups)
            self.run.groups.append(group)
            if result is not None:
                rec.result = len(self.run.results)
                self.run.results.append(result)
                out.append(result)
            self.records.append(rec)
        return out

    def settle(self) -> None:
        """Judge every test against the sweep's final reference: one short by it that has not
        run `repeats` times runs again (the first tests had few peers or none when they ran),
        and each peer-judged test's status is the final judgment, so two tests at one speed
        are judged alike whatever order they ran in. A test whose member a job took since
        keeps the figure it had (measured while its nodes were idle)."""
        held: dict[str, str] = {}
        run, judging, plan = self.run, self.judging, self.plan
        while True:
            final = judge_by_peers(run.results, judging.fraction)[0]
            again = [rec for rec in self.records if rec.result is not None and rec.attempts < plan.repeats
                     and final[rec.result].peers and not final[rec.result].passed
                     and "-".join(rec.test.members) not in held]  # a held test is not run again
            if not run_again(again, lambda tests: self.measure(tests, held, "not judged"), judging):
                break
            for rec in again:
                group, result = judged_test(rec, judging, plan)
                if result is not None and rec.result is not None:
                    run.groups[rec.group], run.results[rec.result] = group, result
        for rec in self.records:
            if rec.result is None:
                continue
            r, g = final[rec.result], run.groups[rec.group]
            if r.peers and g.status in (Status.PASS, Status.WARN):
                run.groups[rec.group] = msgspec.structs.replace(g, status=Status.PASS if r.passed else Status.WARN)


def _stopped(tests: dict[str, Test], stop: dict[str, str], what: str) -> dict[str, str]:
    """test -> why, for the tests with a member that must not be tested (`stop`: node -> why)."""
    out = {}
    for name, test in tests.items():
        whys = list(dict.fromkeys(stop[n] for n in test.members if n in stop))
        if whys:
            out[name] = f"{what}: " + "; ".join(whys)
    return out


def vouched_for(inputs: PairsInput, run: PairRun) -> list[str]:
    """The nodes the pairs analyses judged, in the order swept: what a drain policy may resume
    on (policy.analysed: judged, and nothing found, is a pass). Not a node whose every test
    gave no figure (ERROR: a worker that never started, a node lost, Slurm not answering),
    nor one of tests that cannot tell who is slow (bw.E106: one pair and no floor, or no
    partner known good), nor one a job took mid-sweep (not tested to the end)."""

    undecided = {n for u in inputs.verdict(settings_of(run.settings or None)).undecided for n in u.nodes}
    measured = set(inputs.tested)
    return [n for n in run.nodes if n in measured and n not in undecided and n not in run.taken]


def judge_pairs(results: list[NodeResult], run: PairRun) -> tuple[list[NodeResult], list[GroupResult], list[Any],
                                                                    list[Any]]:
    """Run the `pairs` analyses over the tests: node findings onto the nodes (a culprit
    FAILs its node, which the policy drains), pair findings onto the pair's result, and a
    finding that names no node (fabric-wide) for the run. Returns nodes, groups, analysis
    runs and run findings."""

    if not run.results:
        return results, run.groups, [], []
    inputs = PairsInput(run.results, nodes=run.nodes)
    outcome = run_analyses("pairs", inputs, run.settings or None, judged=vouched_for(inputs, run), tier="deep")
    on_node: dict[str, list[Any]] = {}
    on_group: dict[frozenset[str], list[Any]] = {}
    for_run = []
    for who, f in outcome.findings:
        if isinstance(who, str) and who:
            on_node.setdefault(who, []).append(f)
        elif who:
            on_group.setdefault(frozenset(who), []).append(f)
        else:
            for_run.append(f)
    nodes = []
    for node in results:
        found = on_node.pop(node.node, None)
        if found:
            node = msgspec.structs.replace(node, findings=[*node.findings, *found],
                                           status=worst((node.status, *(f.status for f in found))))
        nodes.append(node)
    groups = []
    for g in run.groups:  # a pair's finding goes on its first screening result
        found = on_group.pop(frozenset(g.members), None)
        if found:
            g = msgspec.structs.replace(g, findings=[*g.findings, *found],
                                        status=worst((g.status, *(f.status for f in found))))
        groups.append(g)
    for members, found in on_group.items():  # members never tested together as one test
        names = sorted(members)
        groups.append(GroupResult(kind="pair" if len(names) == 2 else "group", name="-".join(names), members=names,
                                  status=worst(f.status for f in found), findings=found))
    return nodes, groups, outcome.runs, for_run
