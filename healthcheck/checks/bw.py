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

import msgspec

from healthcheck.bandwidth.judge import describe, floors, judge
from healthcheck.core import catalogue
from healthcheck.core.catalogue import FindingSpec, finding
from healthcheck.core.config.schema import Fabric
from healthcheck.core.model import Finding, Limit, Metric
from healthcheck.core.registry import CheckOutput, NotApplicable, check
from healthcheck.core.status import Status
from healthcheck.core.units import format_size
from healthcheck.parsers.bandwidth_common import BandwidthAttempt, BandwidthRun, BandwidthRuns
from healthcheck.parsers.perftest import IbWriteBwAttempt, IbWriteBwHca, IbWriteBwLoopback, loopback_floor

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
    if fact.gpus == 1:
        # a one-rank collective copies at most one buffer on one GPU (nccl-tests' busbw is 0 by
        # definition): a PASS here would be a verdict on nothing; pair tests measure such nodes
        raise NotApplicable("one GPU: a collective within the node moves no data (pair tests in "
                            "`hc sweep --tier deep` measure it)")
    if not fact.runs:
        raise NotApplicable(f"{fact.tool} is disabled in the fabric (bandwidth)")
    for run in fact.runs:
        yield from _judge_run(run, limits, fact.tool)


_FINDINGS = (BELOW_FLOOR, WRONG_RESULTS, HUNG, TOOL_FAILED, MISCONFIGURED, NOT_MEASURED)


@check("bw.nccl", tier="deep", needs=("nccl_tests",), findings=_FINDINGS, budget_s=1800.0, hang_finding=HUNG,
       evidence_metrics=("busbw_gbytes_per_s",))
def nccl(nccl_tests: BandwidthRuns, limits: Fabric) -> CheckOutput:
    """nccl-tests on all the node's GPUs, and with NVLink/SHM off (IB loopback), reach the fabric's
    busbw floors with correct results."""
    yield from _runs(nccl_tests, limits)


@check("bw.torch", tier="deep", needs=("torch_sweep",), findings=_FINDINGS, budget_s=900.0, hang_finding=HUNG,
       evidence_metrics=("busbw_gbytes_per_s",))
def torch(torch_sweep: BandwidthRuns, limits: Fabric) -> CheckOutput:
    """hc's torch collective sweep on all the node's GPUs reaches the fabric's busbw floors with exact results."""
    yield from _runs(torch_sweep, limits)


# ----------------------------------------------------------- ib_write_bw loopback per HCA port

IB_BELOW_FLOOR = finding(
    "bw.E010",
    "an HCA port's ib_write_bw loopback stayed below its floor in every attempt",
    "The floor is bandwidth.ib_write_bw.per_hca_min_gbps, or rate_fraction x the port's rate (NVIDIA's 0.9 x "
    "rate rule). Look at the port: a PCIe link trained below x16 or Gen5 (lspci -vv, LnkSta), the HCA on the "
    "wrong NUMA node or unpinned (see the notes), error counters rising (perfquery), the GPU-direct path "
    "(nvidia-peermem) with use_cuda. Compare with the node's other ports and its peers (hc report).",
    action="investigate",
)
IB_TEST_FAILED = finding(
    "bw.E011",
    "ib_write_bw failed on an HCA port: QP to RTR, completion error, device open or memory registration",
    "'Failed to modify QP .. to RTR': no SM, a port not Active, a wrong GID index (-x, RoCE) or an MTU "
    "mismatch; a completion error (status/syndrome in the evidence): the link or, with use_cuda, the "
    "GPU-direct path (nvidia-peermem, ACS, BIOS); 'Couldn't get context': the driver (dmesg, ibv_devinfo). "
    "Fix, then re-run `hc node --local --tier deep --checks bw.ib_write_bw`.",
    action="investigate",
)
IB_NOT_RUN = finding(
    "bw.E012",
    "the ib_write_bw loopback could not run on an HCA port (perftest missing or unable to see the device, "
    "side channel refused, output hc cannot read)",
    "Not evidence against the node. Install perftest where the message says hc looked; 'Did not detect "
    "devices' means libibverbs sees no HCA (rdma-core provider library, /dev/infiniband in a container); "
    "'Couldn't listen to port' means a leftover perftest holds bandwidth.ib_write_bw.port_base + i; "
    "'Couldn't allocate MR' in host memory is the memlock limit (ulimit -l).",
    action="fix-config",
)
IB_COUNTERS_ROSE = finding(
    "bw.E013",
    "an HCA port error counter rose more than the fabric allows during a bandwidth test",
    "Errors that appear under load are a marginal cable, transceiver or port: reseat or replace the cable, "
    "check the switch side (ibdiagnet), clear the counters (perfquery -R) and re-run the test.",
    action="replace-cable",
)
IB_HUNG = finding(
    "bw.E014",
    "ib_write_bw loopback on an HCA port hung and was stopped at hc's timeout",
    "A loopback that connects and never finishes points at the HCA, its firmware or, with use_cuda, the "
    "GPU-direct path: check dmesg for mlx5 errors and the port's counters, then reset the HCA or reboot.",
    action="reboot",
)
_IB_FINDINGS = (IB_BELOW_FLOOR, IB_TEST_FAILED, IB_NOT_RUN, IB_COUNTERS_ROSE, IB_HUNG, catalogue.TOOL_MISSING)


def _ib_evidence(hca: IbWriteBwHca, attempt: IbWriteBwAttempt | None = None, lines: str = "") -> str:
    head = f"notes: {'; '.join(hca.notes)}\n" if hca.notes else ""
    if hca.counter_rises:
        head += "error counters that rose during the test: " + _rises(hca) + "\n"
    env = " ".join(f"{k}={v}" for k, v in sorted(attempt.env.items())) if attempt else ""
    head += f"env: {env}\n" if env else ""
    head += lines[:1500] + "\n" if lines else ""
    return head + (attempt.output_tail[-6000:] if attempt else "")


def _rises(hca: IbWriteBwHca) -> str:
    return ", ".join(f"{name} +{rise}" for name, rise in sorted(hca.counter_rises.items()))


def _rose(hca: IbWriteBwHca) -> str:
    """The counters that rose, for the message of a finding about the same port."""
    return f"; error counters rose during the test: {_rises(hca)}" if hca.counter_rises else ""


def _ib_counters(hca: IbWriteBwHca, limits: Fabric) -> CheckOutput:
    max_rise = msgspec.structs.asdict(limits.bandwidth.counters_max_rise)
    if hca.counters_unknown and any(v is not None for v in max_rise.values()):
        yield catalogue.TOOL_MISSING(Status.ERROR, f"{hca.name}: error counters could not be read around the "
                                     f"ib_write_bw test ({hca.counters_unknown}), so bandwidth.counters_max_rise "
                                     "cannot be judged", component=f"{hca.name}:counters")
    for counter, rise in sorted(hca.counter_rises.items()):
        # every rise is kept, judged or not: the counters' delta under load is what an operator trends
        yield Metric("counter_rise", rise, component=f"{hca.name}:{counter}")
        most = max_rise.get(counter)
        if most is not None and rise > most:
            yield IB_COUNTERS_ROSE.fail(
                f"{hca.name} {counter} rose by {rise} during the ib_write_bw loopback, more than {most}",
                component=f"{hca.name}:{counter}", value=rise,
                limit=Limit("<=", most, f"bandwidth.counters_max_rise.{counter}"), evidence=_ib_evidence(hca))


def _ib_judge(hca: IbWriteBwHca, fact: IbWriteBwLoopback, limits: Fabric) -> CheckOutput:
    name = hca.name
    if hca.not_run:
        yield _error(IB_NOT_RUN, f"{name}: ib_write_bw not run: {hca.not_run}", component=name,
                     evidence=_ib_evidence(hca))
        return
    if not hca.attempts:
        yield _error(IB_NOT_RUN, f"{name}: no ib_write_bw attempt finished within the run's time", component=name,
                     evidence=_ib_evidence(hca))
        return
    values = [a.avg_gbits for a in hca.attempts if a.avg_gbits is not None]
    if values:
        yield Metric("bw_gbps", max(values), "Gb/s", component=name)
    yield from _ib_counters(hca, limits)
    last = hca.attempts[-1]
    size = format_size(fact.size_bytes)
    if last.hung:
        yield IB_HUNG.fail(f"{name}: ib_write_bw loopback hung: stopped after {last.duration_s:g}s{_rose(hca)}",
                           component=name, evidence=_ib_evidence(hca, last))
        return
    broke = last.hca_failures(fact.use_cuda)
    if broke:
        yield IB_TEST_FAILED.fail(f"{name}: ib_write_bw failed: {broke[0].message} ({broke[0].kind}){_rose(hca)}",
                                  component=name, value=str(broke[0].kind),
                                  evidence=_ib_evidence(hca, last, "\n".join(f.message for f in last.failures)))
        return
    if last.cut_short:
        yield _error(IB_NOT_RUN, f"{name}: ib_write_bw stopped after {last.duration_s:g}s, when the run's deadline "
                     "came (no sign of a hang)", component=name, evidence=_ib_evidence(hca, last))
        return
    if last.failures or last.unreadable or last.avg_gbits is None:
        if last.failures:
            why = f"{last.failures[0].message} ({last.failures[0].kind})"
            if last.connect_tries > 1:
                why += f", after {last.connect_tries} client starts"
        else:
            why = last.unreadable or (f"no result row at {size} (client exit {last.client_returncode}, "
                                      f"server exit {last.server_returncode})")
        yield _error(IB_NOT_RUN, f"{name}: ib_write_bw could not run: {why}", component=name,
                     evidence=_ib_evidence(hca, last, "\n".join(f.message for f in last.failures)))
        return
    settings = limits.bandwidth.ib_write_bw
    floor, setting = loopback_floor(settings.per_hca_min_gbps, settings.rate_fraction, fact.bidirectional,
                                    hca.rate_gbps)
    key = ("bandwidth.ib_write_bw.per_hca_min_gbps" if setting == "per_hca_min_gbps"
           else "bandwidth.ib_write_bw.rate_fraction")
    if floor is None:
        yield catalogue.TOOL_MISSING(Status.ERROR, f"{name}: the port's rate is unknown, so its ib_write_bw floor "
                                     f"(rate_fraction x rate) cannot be set; set {key.rsplit('.', 1)[0]}"
                                     ".per_hca_min_gbps", component=name, value=max(values))
        return
    if all(v < floor for v in values):
        how = "per_hca_min_gbps" if setting == "per_hca_min_gbps" else (
            f"{settings.rate_fraction:g} x {hca.rate_gbps:g} Gb/s port rate" + (" x2 bidirectional"
                                                                               if fact.bidirectional else ""))
        got = ", ".join(f"{v:g}" for v in values)
        yield IB_BELOW_FLOOR.fail(
            f"{name}: ib_write_bw loopback at {size}: {max(values):g} Gb/s, floor {floor:g} ({how}); "
            f"attempts: {got}{_rose(hca)}",
            component=name, value=max(values), unit="Gb/s", limit=Limit(">=", floor, key),
            evidence=_ib_evidence(hca, last))


def _ib_write_bw_enabled(limits: Fabric) -> str | None:
    return None if limits.bandwidth.ib_write_bw.enabled else "ib_write_bw is disabled in the fabric " \
        "(bandwidth.ib_write_bw.enabled)"


@check("bw.ib_write_bw", tier="deep", needs=("ib_write_bw_loopback",), findings=_IB_FINDINGS, budget_s=600.0,
       applies=_ib_write_bw_enabled,
       evidence_metrics=("bw_gbps",))
def ib_write_bw(ib_write_bw_loopback: IbWriteBwLoopback, limits: Fabric) -> CheckOutput:
    """ib_write_bw loopback on every Active compute HCA port reaches its floor (per_hca_min_gbps, or
    rate_fraction x the port's rate), without failures, hangs or error counters rising."""
    fact = ib_write_bw_loopback
    if fact.missing:
        yield _error(IB_NOT_RUN, f"ib_write_bw could not run: {fact.missing}", component="ib_write_bw")
        return
    if not fact.hcas:
        if fact.skipped:
            raise NotApplicable("no Active compute HCA port to test (ib.port_state judges them: "
                                + "; ".join(fact.skipped[:8]) + ")")
        raise NotApplicable("no compute HCA on this node")
    for hca in fact.hcas:
        yield from _ib_judge(hca, fact, limits)
