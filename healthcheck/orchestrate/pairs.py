"""Bandwidth tests between nodes, for a deep sweep: hc's torch sweep across pairs (or
groups) of nodes over SSH, planned and judged by `bandwidth.localize`, then the `pairs`
analyses (bw.pairs) name the culprit node or the slow link.

Every test runs hc's torch sweep on each member at once: by default on the node's
persistent worker (`hc bw serve`, pair_workers.py: started once per node for the whole
sweep, over SSH or by the fabric's launcher), else (`pairs.persistent_workers: false`)
`hc bw allreduce` started per test, over SSH with torchrun's variables (RANK,
WORLD_SIZE, MASTER_ADDR/PORT) or by mpirun or srun (pair_launch.py); the first member is
the rendezvous; all sides have timeouts, and a member that fails to start makes the
test ERROR (no result, no evidence against anyone). A test passes when it reaches the fabric's pair floor at
its largest judged size (the floor decides, however few the nodes), or, where the fabric
sets none, when it is within `bandwidth.peer_fraction` of its peers' reference
(`peers.peer_threshold`: the median of the tests with no suspected node, robust where
a slow node is in half the tests or more). A short test runs again, up to
`bandwidth.repeats`; once the rounds are done every peer-judged test is judged against the
sweep's final reference, runs again where it is short by it and has not used its repeats,
and takes the final status (`_settle`): two tests at one speed are judged alike. Whether
a node short with every partner is the culprit, or slower within the sweep's own noise, is
the analysis's to say (bw.pairs, `peers.PeerReference.noise_threshold`).

Only nodes that are reachable and passed their own node-local bandwidth tests take
part: a node slow on its own is judged on that alone, and must not implicate partners.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec

from healthcheck.bandwidth.judge import floors
from healthcheck.bandwidth.localize import Result, judge_by_peers
from healthcheck.bandwidth.peers import peer_threshold
from healthcheck.bandwidth.schedule import Test
from healthcheck.core.config import Config
from healthcheck.core.model import GroupResult, Metric, NodeResult
from healthcheck.core.status import Status
from healthcheck.core.units import format_size, parse_size
from healthcheck.parsers.bandwidth_common import BandwidthSample

if TYPE_CHECKING:
    from healthcheck.bandwidth.pairs_analysis import PairsInput
    from healthcheck.orchestrate.busy import JobWatch
    from healthcheck.orchestrate.pair_workers import WorkerPool

SCOPE = "pair"

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


class PairPlan:
    """The settings every test of the run shares, from the first node's fabric."""

    def __init__(self, config: Config, node: str) -> None:
        limits = config.for_node(node).limits
        bw = limits.bandwidth
        self.collective = bw.collectives[0]
        self.floors = floors(bw, self.collective, SCOPE)
        sizes = {parse_size(s) for s in bw.sizes} | {f.size_bytes for f in self.floors}
        self.sizes = sorted(sizes)
        self.judged = self.floors[-1].size_bytes if self.floors else self.sizes[-1]
        floor = next((f for f in self.floors if f.size_bytes == self.judged), None)
        self.floor = floor.gbytes_per_s if floor else None
        self.limit_key = floor.key if floor else ""
        self.peer_fraction = bw.peer_fraction
        self.repeats = bw.repeats
        self.torch = bw.torch
        self.pairs = bw.pairs
        # the torch sweep needs bandwidth.torch enabled; the first tool listed is the one the
        # pair matrix shows and localization compares with peers
        self.tools = [t for t in bw.pairs.tests if t != "torch" or bw.torch.enabled]
        self.gpus = limits.gpu.count or 0  # nccl-tests between nodes runs one rank per GPU the fabric names
        # the sweep's persistent torch workers (pair_workers), where run_pairs opened them
        self.workers: WorkerPool | None = None


def worker_argv(remote_hc: str, plan: PairPlan, master: str) -> tuple[str, ...]:
    torch = plan.torch
    return (remote_hc, "bw", "allreduce", "--format", "json", "--collectives", plan.collective,
            "--sizes", ",".join(format_size(s) for s in plan.sizes), "--iters", str(torch.iters),
            "--warmup", str(torch.warmup), "--backend", torch.backend,
            "--timeout", str(max(5, int(plan.pairs.timeout_s) - 10)),
            "--master-addr", master, "--master-port", str(plan.pairs.port))


def node_address(config: Config, node: str) -> str:
    """How the other members reach `node`: the host name SSH would connect to."""
    from healthcheck.runners.ssh import resolve_target

    return resolve_target(node, config.main.ssh).hostname


def run_test(config: Config, plan: PairPlan, members: Sequence[str]) -> tuple[list[BandwidthSample] | None, str]:
    """One test: the worker on every member at once; rank 0's samples, or None and why.
    Started over SSH by hc itself, or by the fabric's launcher (mpirun, srun: pair_launch)."""
    from healthcheck.orchestrate.pair_launch import run_launched, samples_from_json
    from healthcheck.runners.ssh import SshConnection, SshError

    if plan.workers is not None:
        try:
            # a launcher names nodes its own way (srun: Slurm's names, mpirun: through Open
            # MPI's own ssh); hc's ssh config, which neither reads, must not decide where
            # ranks meet (nor refuse a ProxyCommand it cannot follow)
            master = members[0] if plan.pairs.launcher != "ssh" else node_address(config, members[0])
        except SshError as exc:
            return None, exc.message
        got = plan.workers.run_test(members, master)
        if got is not None:
            return got  # else a member's hc has no `bw serve`: this test starts hc bw allreduce per member
    if plan.pairs.launcher != "ssh":
        return run_launched(config, plan, members)
    settings = config.main.ssh
    try:
        master = node_address(config, members[0])
    except SshError as exc:
        return None, exc.message
    argv = worker_argv(settings.remote_hc, plan, master)
    outputs: dict[int, Any] = {}

    def member(rank: int, node: str) -> None:
        env = {"RANK": str(rank), "WORLD_SIZE": str(len(members)), "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
               "MASTER_ADDR": master, "MASTER_PORT": str(plan.pairs.port), **plan.torch.env}
        conn = SshConnection(node, settings)
        try:
            conn.connect()
            outputs[rank] = conn.run(argv, timeout_s=plan.pairs.timeout_s, env=env)
        except SshError as exc:
            outputs[rank] = exc.message
        except Exception as exc:  # one member's surprise is this test's ERROR, not the sweep's end
            outputs[rank] = f"{type(exc).__name__}: {exc}"
        finally:
            conn.close()

    threads = [threading.Thread(target=member, args=(i, n), daemon=True) for i, n in enumerate(members)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(plan.pairs.timeout_s + settings.connect_timeout_s + 10)
    first = outputs.get(0)
    if first is None or isinstance(first, str):
        return None, f"{members[0]}: {first or 'no result'}"
    problems = [f"{members[r]}: {o if isinstance(o, str) else (o.stderr or o.stdout).strip()[-300:]}"
                for r, o in sorted(outputs.items()) if isinstance(o, str) or not o.ok]
    samples = samples_from_json(first.stdout)
    if samples is None:
        return None, "; ".join(problems) or "the torch sweep printed no result"
    if problems and not samples:
        return None, "; ".join(problems)
    return samples, "; ".join(problems)


def run_pairs(config: Config, results: Sequence[NodeResult], *, exhaustive: bool = False,
              max_parallel: int | None = None, watch: JobWatch | None = None) -> PairRun:
    """Test the eligible nodes against each other until the culprit (or link) is named.

    With `watch` (busy.JobWatch, what a deep sweep's idle check gives), Slurm is asked
    again before each batch of tests and after a round's last whether a job took a member:
    a test with such a member is not run, or its result not used (the job may have run
    beside it), and is ERROR naming the job; that node is not tested again in the sweep,
    nor judged by the pairs analysis. Without one (a caller that checked otherwise, the
    tests), nothing is asked."""
    from healthcheck.bandwidth.localize import LocalizeSettings, localize_adaptive
    from healthcheck.orchestrate.pair_workers import WorkerPool

    run = PairRun(nodes=eligible(results))
    if len(run.nodes) < 2:
        run.notes.append("bandwidth between nodes: fewer than two eligible nodes, nothing to pair")
        return run
    plan = PairPlan(config, run.nodes[0])
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
    sweep = _Sweep(config, plan, run, max_parallel or max(1, config.main.ssh.max_parallel // 2), watch)
    if plan.pairs.persistent_workers and "torch" in plan.tools:
        plan.workers = WorkerPool(config, plan, len(run.nodes))
    try:
        adaptive = localize_adaptive(run.nodes, sweep.run_round, k=plan.pairs.group_size, exhaustive=exhaustive,
                                     circle_max=plan.pairs.circle_max, rails=rails or None,
                                     settings=LocalizeSettings(**run.settings))
        sweep.settle()
    finally:
        if plan.workers is not None:
            restarted = sorted(n for n, k in plan.workers.starts().items() if k > 1)
            plan.workers.close()
            run.notes += [f"bandwidth between nodes: {note}" for note in plan.workers.notes]
            if restarted:
                run.notes.append(f"bandwidth between nodes: torch workers started again after a failed test on "
                                 f"{', '.join(restarted[:20])}" + (" ..." if len(restarted) > 20 else ""))
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
    run: PairRun
    parallel: int
    watch: JobWatch | None  # asks Slurm whether a job took a member (None: nothing is asked)
    judging: _Judging = field(init=False)
    records: list[_Record] = field(default_factory=list)  # every test judged so far, in order
    not_applicable: set[str] = field(default_factory=set)
    released: set[str] = field(default_factory=set)  # taken nodes whose worker was ended

    def __post_init__(self) -> None:
        self.judging = _Judging(self.plan.peer_fraction)

    def measure(self, tests: dict[str, Test], held: dict[str, str], what: str = "not run"
                ) -> dict[str, list[Measured]]:
        """The tests whose members no job took (Slurm asked first); the others into held, with
        why (`what` they are: "not run", or for a repeat "not judged")."""
        from healthcheck.runners.fanout import fan_out

        held.update(_stopped(tests, self._stop(t.members for t in tests.values()), what))
        tests = {name: t for name, t in tests.items() if name not in held}
        if not tests:
            return {}
        return fan_out(list(tests), lambda name: measure_test(self.config, self.plan, tests[name].members),
                       max_parallel=self.parallel)

    def _stop(self, members: Iterable[Sequence[str]]) -> dict[str, str]:
        """node -> why it must not be tested now (a job took it), of these tests' members."""
        if self.watch is None:
            return {}
        return self.watch.check(n for names in members for n in names)

    def _release_taken(self) -> None:
        """A persistent worker on a node a job took ends now, not with the sweep: it shares the node."""
        if self.watch is None or self.plan.workers is None:
            return
        for node in sorted(set(self.watch.taken) - self.released):
            self.plan.workers.release(node)
            self.released.add(node)

    def run_round(self, tests: list[Test]) -> list[Result]:
        keyed = {"-".join(t.members): t for t in tests}
        held: dict[str, str] = {}  # test -> why it was not run, or its result not used
        mine = {name: _Record(keyed[name], got, 1) for name, got in self.measure(keyed, held).items()}
        for rec in mine.values():
            self.not_applicable.update(m.why for m in rec.got if m.not_applicable)
            self.judging.note(rec)
        # a test that fell short runs again, up to the fabric's repeats: it is short only if every attempt was
        for _ in range(self.plan.repeats - 1):
            if not _again([rec for rec in mine.values() if self.judging.short_test(rec.got)],
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
            group, result = _outcome(rec, self.judging, self.plan)
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
            if not _again(again, lambda tests: self.measure(tests, held, "not judged"), judging):
                break
            for rec in again:
                group, result = _outcome(rec, judging, plan)
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


def _value(samples: list[BandwidthSample] | None, plan: PairPlan) -> float | None:
    if not samples:
        return None
    got = [s.busbw_gbytes_per_s for s in samples if s.collective == plan.collective and s.size_bytes == plan.judged]
    return max(got) if got else None


@dataclass
class Measured:
    """What one tool of a test between nodes gave, as the sweep judges it."""

    tool: str  # torch | nccl_tests | ib_write_bw (bandwidth.pairs.tests)
    value: float | None  # the figure compared; None: this tool gave no verdict (why says why)
    floor: float | None = None  # the fabric's floor for value; None: judged against its peers
    against: bool = False  # the tool's own failure (hang, wrong data, NCCL/HCA error): short whatever value says
    why: str = ""
    kind: str = ""  # what value measures, e.g. "all_reduce 1G"
    limit_key: str = ""
    metrics: list[Metric] = field(default_factory=list)
    evidence: str = ""
    not_applicable: bool = False  # nothing to test (no GPU for nccl-tests, no HCA for ib_write_bw)


def measure_test(config: Config, plan: PairPlan, members: Sequence[str]) -> list[Measured]:
    """Every tool the fabric lists (bandwidth.pairs.tests), one after another, on these members."""
    from healthcheck.orchestrate import pair_tools
    from healthcheck.orchestrate.pair_launch import evidence_of

    out = []
    for tool in plan.tools:
        if tool == "torch":
            samples, why = run_test(config, plan, members)
            evidence = evidence_of(why)  # what the launcher printed, whole, where it carries it
            value = _value(samples, plan)
            # wrong data is evidence against the pair whatever its bandwidth, as nccl-tests' #wrong is
            wrong = sum(s.wrong or 0 for s in samples or [])
            if wrong:
                bad = sorted({format_size(s.size_bytes) for s in samples or [] if s.wrong})
                why = (f"{','.join(members)}: {wrong} wrong elements in the torch sweep's checked results "
                       f"({plan.collective} at {', '.join(bad)})")
            out.append(Measured("torch", value, plan.floor, against=bool(wrong),
                                why=why if wrong or value is None else "",
                                kind=f"{plan.collective} {format_size(plan.judged)}", limit_key=plan.limit_key,
                                metrics=_busbw_metrics(samples or [], plan, "torch"), evidence=evidence))
        elif tool == "nccl_tests":
            got = pair_tools.nccl_tests_pair(config, members, collective=plan.collective, sizes=plan.sizes,
                                             gpus=plan.gpus, timeout_s=plan.pairs.timeout_s)
            out.append(_from_tool(got, _busbw_metrics(list(got.samples), plan, "nccl_tests")))
        elif tool == "ib_write_bw":
            if len(members) != 2:  # HCA i <-> HCA i is a pair's test; groups are judged by the others
                out.append(Measured("ib_write_bw", None, not_applicable=True,
                                    why="ib_write_bw between nodes runs on pairs, not on groups"))
                continue
            got = pair_tools.ib_write_bw_pair(config, members, timeout_s=plan.pairs.timeout_s)
            out.append(_from_tool(got, [Metric("ib_write_bw_gbits", h.gbits, "Gb/s", component=h.hca)
                                        for h in got.hcas if h.gbits is not None]))
    return out


def _from_tool(got: Any, metrics: list[Metric]) -> Measured:
    """A pair_tools measurement as the sweep judges it."""
    common = dict(kind=f"{got.tool} {got.kind}".strip(), limit_key=got.limit_key, metrics=metrics,
                  evidence=got.evidence)
    if got.outcome == "not-applicable":
        return Measured(got.tool, None, why=got.why, not_applicable=True, **common)
    if got.passed is None:  # misconfigured, not run: no verdict
        return Measured(got.tool, None, why=got.why, **common)
    against = got.outcome in ("hung", "wrong", "failed")
    return Measured(got.tool, got.value if got.value is not None else 0.0, got.threshold, against=against,
                    why=got.why if against else "", **common)


def _better(old: Measured, new: Measured, short: Any) -> Measured:
    """Of two attempts of one tool, the one to keep: one with a figure over one without, a
    passing one over a short one, else the higher figure."""
    if new.value is None:
        return old
    if old.value is None:
        return new
    if short(old) != short(new):
        return new if short(old) else old
    return new if new.value > old.value else old


def _metric_name(plan: PairPlan, tool: str) -> str:
    # the first tool listed gives the pair matrix its figures ("busbw"); the others keep their own names
    return "busbw" if plan.tools and plan.tools[0] == tool else f"{tool}_busbw"


def _busbw_metrics(samples: list[BandwidthSample], plan: PairPlan, tool: str) -> list[Metric]:
    best: dict[int, float] = {}
    for s in samples:
        if s.collective == plan.collective:
            best[s.size_bytes] = max(best.get(s.size_bytes, 0.0), s.busbw_gbytes_per_s)
    name = _metric_name(plan, tool)
    return [Metric(name, v, "GB/s", component=format_size(size)) for size, v in sorted(best.items())]


def group_result(test: Test, status: Status, measured: list[Measured], reason: str, plan: PairPlan) -> GroupResult:
    """One test as the report shows it: its figures, bw.E107 (ERROR) where `reason` says a
    tool gave nothing, with what its launcher printed, and bw.E108 (WARN) for a tool's failure."""
    from healthcheck.bandwidth.pairs_analysis import TEST_FAILED, TEST_NOT_RUN
    from healthcheck.core.stamp import stamp

    members = list(test.members)
    metrics = [m for got in measured for m in got.metrics]
    findings = []
    if reason:
        # each tool that gave nothing: what its launcher printed, whole (Open MPI's banners), not one line
        said = "\n\n".join(f"[{m.tool}]\n{m.evidence}" for m in measured
                            if m.value is None and not m.not_applicable and m.evidence)
        findings.append(stamp(TEST_NOT_RUN(Status.ERROR, reason[:1000], component="pair", evidence=said or None),
                              check="bw.pairs", members=tuple(members)))
    for got in measured:
        if got.against:  # evidence against the pair; which node (or the link) is the analysis's to say
            findings.append(stamp(TEST_FAILED(Status.WARN, got.why[:1000], component=got.tool,
                                              evidence=got.evidence or None), check="bw.pairs",
                                  members=tuple(members)))
    name = "-".join(members) + ("" if test.purpose == "screen" else f" ({test.purpose})")
    return GroupResult(kind="pair" if len(members) == 2 else "group", name=name, members=members, status=status,
                       findings=findings, metrics=metrics)


def vouched_for(inputs: PairsInput, run: PairRun) -> list[str]:
    """The nodes the pairs analyses judged, in the order swept: what a drain policy may resume
    on (policy.analysed: judged, and nothing found, is a pass). Not a node whose every test
    gave no figure (ERROR: a worker that never started, a node lost, Slurm not answering),
    nor one of tests that cannot tell who is slow (bw.E106: one pair and no floor, or no
    partner known good), nor one a job took mid-sweep (not tested to the end)."""
    from healthcheck.bandwidth.pairs_analysis import settings_of

    undecided = {n for u in inputs.verdict(settings_of(run.settings or None)).undecided for n in u.nodes}
    measured = set(inputs.tested)
    return [n for n in run.nodes if n in measured and n not in undecided and n not in run.taken]


def judge_pairs(results: list[NodeResult], run: PairRun) -> tuple[list[NodeResult], list[GroupResult], list[Any],
                                                                    list[Any]]:
    """Run the `pairs` analyses over the tests: node findings onto the nodes (a culprit
    FAILs its node, which the policy drains), pair findings onto the pair's result, and a
    finding that names no node (fabric-wide) for the run. Returns nodes, groups, analysis
    runs and run findings."""
    from healthcheck.bandwidth.pairs_analysis import PairsInput
    from healthcheck.core.analysis import run_analyses
    from healthcheck.core.status import worst

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


# ---------------------------------------------------------------------------- judging


@dataclass(eq=False)  # compared and hashed by identity: two tests of the same members are two records
class _Record:
    """One test of the sweep: the best attempt of each tool so far, and where its results went."""

    test: Test
    got: list[Measured]
    attempts: int
    group: int = -1  # its GroupResult in run.groups
    result: int | None = None  # its Result in run.results (None: no tool gave a figure)


class _Judging:
    """Whether a tool's figure is short: against the fabric's pair floor where it sets one (the
    known-good figure: `hc baseline` learns it from earlier sweeps), which decides whatever the
    number of nodes; else against every test of the sweep so far (`peers.peer_threshold`:
    robust where the slow node is in half the tests or more, as with three or four nodes).
    A test's figure is its best attempt's, and changes when it is run again."""

    def __init__(self, fraction: float) -> None:
        self.fraction = fraction
        self._figures: dict[str, dict[_Record, tuple[tuple[str, ...], float]]] = {}  # tool -> test -> figure
        self._cached: dict[str, float | None] = {}

    def note(self, rec: _Record) -> None:
        """The test's figures (its best attempts) as peers of the others."""
        for m in rec.got:
            if m.value is not None and m.floor is None and not m.against and not m.not_applicable:
                self._figures.setdefault(m.tool, {})[rec] = (tuple(rec.test.members), m.value)
                self._cached.pop(m.tool, None)

    def forget(self, rec: _Record) -> None:
        """No longer a peer: its result is not used (a job took a member while it ran)."""
        for tool, figures in self._figures.items():
            if figures.pop(rec, None) is not None:
                self._cached.pop(tool, None)

    def reference(self, m: Measured) -> float | None:
        if m.floor is not None:
            return m.floor
        if m.tool not in self._cached:
            self._cached[m.tool] = peer_threshold(self._figures.get(m.tool, {}).values(), self.fraction)
        return self._cached[m.tool]

    def short(self, m: Measured) -> bool:
        ref = self.reference(m)
        return m.against or (m.value is not None and ref is not None and m.value < ref)

    def short_test(self, got: list[Measured]) -> bool:
        return any(self.short(m) for m in got)


def _again(recs: list[_Record], measure: Any, judging: _Judging) -> bool:
    """Run these tests once more, in rounds of tests with no node in common, keeping each
    tool's better attempt (a test `measure` held back, a job having taken a member, keeps
    what it had); False where there was nothing to run."""
    left = list(recs)
    while left:
        busy: set[str] = set()
        batch = []
        for rec in left:
            if not busy.intersection(rec.test.members):
                batch.append(rec)
                busy.update(rec.test.members)
        left = [rec for rec in left if rec not in batch]
        got = measure({"-".join(rec.test.members): rec.test for rec in batch})
        for rec in batch:
            new = got.get("-".join(rec.test.members))
            if new is None:
                continue
            rec.got = [_better(old, other, judging.short) for old, other in zip(rec.got, new, strict=True)]
            rec.attempts += 1
            judging.note(rec)
    return bool(recs)


def _outcome(rec: _Record, judging: _Judging, plan: PairPlan) -> tuple[GroupResult, Result | None]:
    """The test's GroupResult and, where a tool gave a figure, the Result localization judges."""
    test, got = rec.test, rec.got
    judged = [m for m in got if m.value is not None]
    unjudged = [m for m in got if m.value is None and not m.not_applicable]
    problems = "; ".join(f"{m.tool}: {m.why}" for m in unjudged)
    if not judged:
        return group_result(test, Status.ERROR, got, problems or "no test applies", plan), None
    short = [m for m in judged if judging.short(m)]
    # a test that fell short is WARN: the verdict (culprit node FAIL, slow link WARN) is the analysis's
    status = Status.ERROR if unjudged else Status.WARN if short else Status.PASS
    lead = judged[0]  # the first tool the fabric lists that gave a figure
    # with no floor the lead's figure is judged again against every test of the sweep
    # (localize.judge_by_peers), unless the tool failed itself or another tool made the test short
    peers = lead.floor is None and not lead.against and all(m is lead for m in short)
    result = Result(members=tuple(test.members), value=lead.value or 0.0, passed=not short,
                    threshold=judging.reference(lead), kind=lead.kind, purpose=test.purpose,
                    limit_key=lead.limit_key if lead.floor is not None else "", peers=peers)
    return group_result(test, status, got, problems, plan), result
