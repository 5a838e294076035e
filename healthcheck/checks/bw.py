"""Bandwidth checks on one node (deep tier): nccl-tests and hc's torch sweep, judged per
collective, scope and message size against the fabric's floors.

A size FAILs only when every attempt fell short there (the probe re-runs a test while it
falls short, up to `bandwidth.repeats`); wrong results, a hang and the tool's own
failure lines are evidence against the node; a run that says nothing about the node
(lone ranks, a refused launcher, output hc cannot read) is ERROR and never drains.
Every measured size is kept as a metric (`busbw_gbytes_per_s`, component
`collective/scope/size`), the same names from both tools, for outliers and reports.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from healthcheck.bandwidth.judge import describe, floors, judge
from healthcheck.core.catalogue import FindingSpec, finding
from healthcheck.core.config.schema import Fabric
from healthcheck.core.model import Finding, Limit, Metric
from healthcheck.core.registry import CheckOutput, NotApplicable, check
from healthcheck.core.status import Status
from healthcheck.core.units import format_size
from healthcheck.parsers.bandwidth_common import BandwidthAttempt, BandwidthRun, BandwidthRuns

BELOW_FLOOR = finding(
    "bw.E001",
    "a collective's bus bandwidth stayed below the fabric's floor at a judged size in every attempt",
    "Compare with the node's peers (hc report), then look for the cause on this node: NVLink links down or "
    "degraded (nvidia-smi nvlink -s), GPU clocks held down, a PCIe link trained below its width, an HCA at "
    "half rate (ibstat). Re-run `hc node --local --tier deep` after fixing.",
    action="investigate",
)
WRONG_RESULTS = finding(
    "bw.E002",
    "a collective returned wrong data (#wrong or out-of-bounds values above 0)",
    "Silent data corruption on a GPU, NVLink or HCA path: take the node out, run DCGM diagnostics "
    "(dcgmi diag -r 3) and check Xid and ECC history; replace what they name.",
    action="rma",
)
HUNG = finding(
    "bw.E003",
    "a collective on this node hung and was stopped at hc's timeout",
    "A single-node collective that never finishes points at a GPU, NVLink/NVSwitch (fabric manager) or "
    "HCA fault: check nvidia-smi, the Xid log and nv-fabricmanager, then reset the GPUs or reboot.",
    action="reboot",
)
TOOL_FAILED = finding(
    "bw.E004",
    "the bandwidth test failed with an NCCL, CUDA or test error on this node",
    "The failure line names the file and error: 'system not yet initialized' is the fabric manager, "
    "'unhandled system error' or 'remote process exited' a network or driver fault. Fix, then re-run.",
    action="investigate",
)
MISCONFIGURED = finding(
    "bw.E005",
    "the bandwidth test ran in a way that says nothing about the node "
    "(lone ranks, refused launcher, unreadable output)",
    "Rebuild nccl-tests with MPI=1 if it runs under mpirun, give mpirun enough slots, or check the command "
    "and output in the evidence; this is not evidence against the node.",
    action="fix-config",
)
NOT_MEASURED = finding(
    "bw.E006",
    "a size the fabric sets a floor for was never measured",
    "The floor's size lies outside what the test ran (bandwidth.sizes) or the run stopped early: align the "
    "fabric's sizes and floors, then re-run.",
    action="fix-config",
)


def _error(spec: FindingSpec, message: str, **kw: Any) -> Finding:
    """The finding as ERROR: the run could not judge the node."""
    return spec(Status.ERROR, message, **kw)


def _where(run: BandwidthRun) -> str:
    return f"{run.collective}/{run.scope}"


def _evidence(attempt: BandwidthAttempt) -> str:
    env = " ".join(f"{k}={v}" for k, v in sorted(attempt.env.items()))
    head = f"$ {env + ' ' if env else ''}{' '.join(attempt.argv)}  (exit {attempt.returncode})\n"
    return head + attempt.output_tail[-3000:]


def _judge_run(run: BandwidthRun, limits: Fabric, tool: str) -> Iterator[Finding | Metric]:
    if not run.attempts:
        yield _error(MISCONFIGURED, f"{tool} {_where(run)}: no attempt ran (the run's time was spent)",
                     component=_where(run))
        return
    last = run.attempts[-1]
    best: dict[int, float] = {}  # every measured size is a metric: the best of its placements and attempts
    for attempt in run.attempts:
        for s in attempt.samples:
            if s.collective == run.collective:
                best[s.size_bytes] = max(best.get(s.size_bytes, 0.0), s.busbw_gbytes_per_s)
    for size, value in sorted(best.items()):
        yield Metric("busbw_gbytes_per_s", value, "GB/s", component=f"{_where(run)}/{format_size(size)}")
    if last.hung:
        reached = format_size(last.last_size_bytes) if last.last_size_bytes else "no size"
        yield HUNG.fail(f"{tool} {_where(run)} hung: stopped after {last.duration_s:g}s, last size reached: {reached}",
                        component=_where(run), value=last.last_size_bytes, unit="bytes", evidence=_evidence(last))
        return
    if last.failures:
        yield TOOL_FAILED.fail(f"{tool} {_where(run)} failed: {last.failures[0]}", component=_where(run),
                               evidence=_evidence(last))
        return
    if last.misconfigured:
        yield _error(MISCONFIGURED, f"{tool} {_where(run)}: {last.misconfigured}", component=_where(run),
                     evidence=_evidence(last))
        return
    bad = max((a.wrong or 0) for a in run.attempts) + max((a.out_of_bounds or 0) for a in run.attempts)
    if bad:
        yield WRONG_RESULTS.fail(f"{tool} {_where(run)}: {bad} wrong or out-of-bounds values", component=_where(run),
                                 value=bad, evidence=_evidence(last))
    if last.returncode not in (0, None) and not last.samples:
        yield _error(MISCONFIGURED, f"{tool} {_where(run)} exited {last.returncode} with no result",
                     component=_where(run), evidence=_evidence(last))
        return
    for verdict in judge([a.samples for a in run.attempts], run.collective, run.scope,
                         floors(limits.bandwidth, run.collective, run.scope)):
        floor = verdict.floor
        component = f"{_where(run)}/{format_size(floor.size_bytes)}"
        limit = Limit(">=", floor.gbytes_per_s, floor.key)
        if not verdict.measured:
            yield _error(NOT_MEASURED, f"{tool} {_where(run)} never measured {describe(floor)}",
                         component=component, limit=limit)
        elif not verdict.passed:
            got = ", ".join("-" if a is None else f"{a:g}" for a in verdict.attempts)
            yield BELOW_FLOOR.fail(
                f"{tool} {_where(run)} at {describe(floor)}: busbw {verdict.best:g} GB/s, floor "
                f"{floor.gbytes_per_s:g} (attempts: {got})",
                component=component, value=verdict.best, unit="GB/s", limit=limit)


def _runs(fact: BandwidthRuns, limits: Fabric) -> CheckOutput:
    if fact.gpus == 0:
        raise NotApplicable("no GPU on this node")
    if not fact.runs:
        raise NotApplicable(f"{fact.tool} is disabled in the fabric (bandwidth)")
    for run in fact.runs:
        yield from _judge_run(run, limits, fact.tool)


_FINDINGS = (BELOW_FLOOR, WRONG_RESULTS, HUNG, TOOL_FAILED, MISCONFIGURED, NOT_MEASURED)


@check("bw.nccl", tier="deep", needs=("nccl_tests",), findings=_FINDINGS, budget_s=1800.0, hang_finding=HUNG)
def nccl(nccl_tests: BandwidthRuns, limits: Fabric) -> CheckOutput:
    """nccl-tests on all the node's GPUs, and with NVLink/SHM off (IB loopback), reach the fabric's
    busbw floors with correct results."""
    yield from _runs(nccl_tests, limits)


@check("bw.torch", tier="deep", needs=("torch_sweep",), findings=_FINDINGS, budget_s=900.0, hang_finding=HUNG)
def torch(torch_sweep: BandwidthRuns, limits: Fabric) -> CheckOutput:
    """hc's torch collective sweep on all the node's GPUs reaches the fabric's busbw floors with exact results."""
    yield from _runs(torch_sweep, limits)
