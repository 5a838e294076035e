"""DCGM's diagnostic (`dcgmi diag`), judged per test and per GPU: gpu.dcgm in the standard
tier (gpu.dcgm.level_standard, -r 1 by default), gpu.dcgm_deep in the deep tier
(level_deep, -r 3), which runs only on a node with no job (a deep-only check: see
orchestrate/busy.py) and alone (an exclusive probe).

A result DCGM calls Fail is FAIL (gpu.E080 in the standard tier, gpu.E081 in the deep
one: a node that a level-3 failure drained is resumed only by a level-3 run that passes,
never by a level-1 run), Warn is WARN (gpu.E082), Skip and Not Run are not evidence: a
check whose every result skipped is SKIP. Two readings of DCGM's own classification:
dcgmi's JSON writes a warning as "Fail" (its table says "Warn" on the test's row), so a
Fail whose every error carries a severity DCGM says leaves the GPU usable (MONITOR: "can
perform workload, but needs to be monitored"; CONFIG: a setting such as persistence mode
or ECC) is WARN, gpu.E082 or gpu.E083, and drains nothing: persistence mode left off
would otherwise FAIL every node of a fleet. Errors without a severity (DCGM before 3.3,
the table) keep DCGM's Fail.

No diagnostic to judge (dcgmi missing, no nv-hostengine to reach, DCGM's own runtime
error, output hc cannot read) is ERROR naming what is missing, never FAIL; on a node with
no NVIDIA GPU (NVML says so) it is SKIP.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from healthcheck.core import catalogue
from healthcheck.core.catalogue import FindingSpec, finding
from healthcheck.core.config.schema import Fabric
from healthcheck.core.model import Finding, Metric
from healthcheck.core.registry import CheckOutput, NotApplicable, check
from healthcheck.core.status import Status
from healthcheck.parsers.gpu_common import GpuFacts

if TYPE_CHECKING:  # the parser is imported when a DCGM check runs, not when checks load (the prologue)
    from healthcheck.parsers.dcgmi_diag import DcgmMessage, DcgmResult, DcgmRun, DcgmTest

_FAIL_HINT = (
    "DCGM names the test, the GPU and its own error (DCGM_FR code and text in the evidence): memory, ECC and "
    "row-remap errors: drain and reset the GPU (nvidia-smi -r), RMA it if the test fails again; PCIe replays or "
    "bandwidth: reseat the GPU or its riser; thermal or power: check fans, airflow and power supplies. DCGM's own "
    "log is /var/log/nvidia-dcgm/nvvs.log (dcgmi diag --debugLogFile). Re-run `dcgmi diag -r 3` on the idle node "
    "before returning it to service.")
FAILED = finding(
    "gpu.E080", "a GPU (or the node) failed a test of the standard tier's DCGM diagnostic "
    "(dcgmi diag -r gpu.dcgm.level_standard)", _FAIL_HINT, action="investigate")
FAILED_DEEP = finding(
    "gpu.E081", "a GPU (or the node) failed a test of the deep tier's DCGM diagnostic "
    "(dcgmi diag -r gpu.dcgm.level_deep)", _FAIL_HINT, action="investigate")
WARNED = finding(
    "gpu.E082", "a DCGM diagnostic test warned on a GPU (DCGM's Warn, or a Fail whose errors DCGM rates "
    "MONITOR: the GPU can still run work)",
    "Not a reason to drain: watch it. Thermal violations and clock events point at cooling or power (fans, "
    "airflow, inlet temperature, PSUs); single-bit ECC at memory to watch (gpu.ecc). If the same warning comes "
    "back on the same GPU, run `dcgmi diag -r 3` on the idle node.", action="investigate")
CONFIG = finding(
    "gpu.E083", "DCGM failed a test for a setting it rates CONFIG (persistence mode, ECC disabled, a test it "
    "was told to skip), not for the hardware",
    "Fix the setting DCGM names: `nvidia-smi -pm 1` (or enable nvidia-persistenced) for persistence mode, "
    "`nvidia-smi -e 1` and a reset for ECC; then re-run the diagnostic.", action="fix-config")

_COULD_NOT_RUN = {"missing": catalogue.TOOL_MISSING, "hostengine": catalogue.TOOL_MISSING,
                  "unparsable": catalogue.UNPARSABLE}
_FINDINGS = (WARNED, CONFIG, catalogue.TOOL_MISSING, catalogue.TOOL_FAILED, catalogue.UNPARSABLE)
_JUDGED = ("Pass", "Fail", "Warn")
_NOT_EVIDENCE = ("Skip", "Not Run")


def _applies(limits: Fabric) -> str | None:
    if not limits.gpu.dcgm.enabled:
        return "DCGM diagnostics are off for this fabric (gpu.dcgm.enabled)"
    if limits.gpu.count == 0:
        return "the fabric has no GPU (gpu.count: 0)"
    return None


def _no_gpu(gpus: GpuFacts | None, limits: Fabric) -> str | None:
    """Why the node has no GPU for DCGM to test, or None (also when NVML could not say)."""
    if gpus is None:
        return None
    if gpus.scoped_to == []:
        return "the job has no GPU"
    if gpus.gpus or gpus.lost or limits.gpu.count:
        return None
    return f"no NVIDIA GPU here ({gpus.init_error})" if gpus.init_error else "no NVIDIA GPU found"


def _where(test: DcgmTest, result: DcgmResult) -> tuple[str, str]:
    """(component, words) of a result: `GPU3:memory` / "on GPU 3"."""
    if result.index is not None:
        entity = result.entity or "GPU"
        return f"{entity}{result.index}:{test.name}", f"on {entity} {result.index}"
    if result.every:
        return test.name, "on every GPU"
    return test.name, "for the node"


def _messages(test: DcgmTest, result: DcgmResult) -> tuple[DcgmMessage, ...]:
    """The result's own errors; in an old table (errors tied to the test), the test's
    errors that name this GPU or none."""
    if result.warnings:
        return result.warnings
    return tuple(m for m in test.warnings if m.gpu is None or result.gpu is None or m.gpu == result.gpu)


def _describe(m: DcgmMessage) -> str:
    code = [f"DCGM_FR error {m.error_id}" if m.error_id is not None else "",
            f"severity {m.severity_name}" if m.severity is not None else "",
            f"category {m.category}" if m.category is not None else ""]
    tag = ", ".join(c for c in code if c)
    return f"{m.text} ({tag})" if tag else m.text


def _evidence(run: DcgmRun, test: DcgmTest, result: DcgmResult, messages: tuple[DcgmMessage, ...]) -> str:
    lines = [f"$ {' '.join(run.argv)}  (exit {run.returncode})" if run.argv else f"dcgmi diag -r {run.level}"]
    diag = run.diag
    if diag is not None and (diag.dcgm_version or diag.driver_version):
        lines.append(f"DCGM {diag.dcgm_version or '?'}, driver {diag.driver_version or '?'}")
    gpu = next((g for g in diag.gpus if g.index == result.gpu), None) if diag is not None else None
    if gpu is not None and (gpu.serial or gpu.device_id):
        lines.append(f"GPU {gpu.index}: serial {gpu.serial or '?'}, device id {gpu.device_id or '?'}")
    lines.append(f"{test.category or 'DCGM'} / {test.name}: {result.status}"
                 + (f" (the test: {test.status})" if test.status and test.status != result.status else ""))
    lines += [f"  {_describe(m)}" for m in messages]
    lines += [f"  info: {i}" for i in (result.info or test.info)]
    return "\n".join(lines)


def _results(test: DcgmTest) -> list[DcgmResult]:
    """What to judge of a test: its results; the test's own status where it has none (a
    Deployment test of 2.x/3.x, run once for the node) or where it failed with no result
    to show for it (a 4.x error bound to no GPU)."""
    from healthcheck.parsers.dcgmi_diag import DcgmResult

    own = test.status
    if not test.results:
        return [DcgmResult(own, warnings=test.warnings, info=test.info)] if own else []
    out = list(test.results)
    if own in ("Fail", "Warn") and all(r.status not in ("Fail", "Warn") for r in out):
        out.append(DcgmResult(own, warnings=test.warnings, info=test.info))
    return out


def _judge(run: DcgmRun, gpus: GpuFacts | None, limits: Fabric, failed: FindingSpec) -> Iterator[Finding | Metric]:
    from healthcheck.parsers.dcgmi_diag import SEVERITY_CONFIG, SEVERITY_MONITOR

    usable_severities = {SEVERITY_MONITOR, SEVERITY_CONFIG}  # DCGM: the GPU can still run work
    if run.problem is not None or run.diag is None:
        if run.problem in ("no-gpu", "gpus-busy"):
            # not run, and rightly: no evidence either way (a busy GPU is not a broken one)
            raise NotApplicable(run.reason or "no GPU to test")
        no_gpu = _no_gpu(gpus, limits)
        if no_gpu:
            raise NotApplicable(f"{no_gpu}; dcgmi diag -r {run.level}: {run.reason}")
        spec = _COULD_NOT_RUN.get(run.problem or "", catalogue.TOOL_FAILED)
        yield spec(Status.ERROR, run.reason or f"dcgmi diag -r {run.level} gave nothing to judge",
                   component="dcgm", evidence=run.evidence)
        return
    skipped: list[str] = []
    judged = 0
    for test in run.diag.tests:
        for result in _results(test):
            status = result.status
            if status == "Fail" and test.status == "Warn":
                status = "Warn"  # the 4.x table: the test's row says Warn, each GPU's row Fail (dcgmi prints so)
            component, where = _where(test, result)
            if status in _NOT_EVIDENCE:
                # no evidence either way; kept in the report (a test DCGM skipped beside passes
                # would otherwise leave no trace)
                skipped.append(component)
                yield Metric("dcgm_result", status, component=component)
                continue
            judged += 1
            if status == "Pass":
                continue
            messages = _messages(test, result)
            said = f": {messages[0].text}" if messages else ""
            head = f"DCGM {test.category + ' ' if test.category else ''}test {test.name!r}"
            level = f"(dcgmi diag -r {run.level})"
            evidence = _evidence(run, test, result, messages)
            codes = [m.error_id for m in messages if m.error_id is not None]
            value = codes[0] if len(codes) == 1 else (codes or None)
            if status not in _JUDGED:
                yield catalogue.TOOL_FAILED(
                    Status.ERROR, f"{head} {where}: DCGM says {status!r}, a result hc does not know {level}",
                    component=component, evidence=evidence)
                continue
            severities = {m.severity for m in messages}
            usable = bool(messages) and None not in severities and severities <= usable_severities
            if status == "Fail" and not usable:
                yield failed.fail(f"{head} failed {where} {level}{said}", component=component, value=value,
                                  evidence=evidence)
            elif status == "Fail" and severities == {SEVERITY_CONFIG}:
                yield CONFIG.warn(f"{head} failed {where} for a setting DCGM rates CONFIG {level}{said}",
                                  component=component, value=value, evidence=evidence)
            else:
                rated = " (DCGM rates its errors MONITOR: the GPU can still run work)" if status == "Fail" else ""
                yield WARNED.warn(f"{head} warned {where} {level}{rated}{said}", component=component, value=value,
                                  evidence=evidence)
    if not judged:
        why = f"every DCGM test was skipped or not run ({', '.join(skipped[:8])})" if skipped else \
            "DCGM reported no test result"
        if not skipped:
            yield catalogue.TOOL_FAILED(Status.ERROR, f"dcgmi diag -r {run.level}: {why}", component="dcgm",
                                        evidence=run.evidence)
            return
        raise NotApplicable(why)


@check("gpu.dcgm", tier="standard", needs=("dcgm_diag",), optional=("gpus",), findings=(FAILED,) + _FINDINGS,
       budget_s=600.0, applies=_applies,
       evidence_metrics=("dcgm_result",))
def dcgm(dcgm_diag: DcgmRun, gpus: GpuFacts | None, limits: Fabric) -> CheckOutput:
    """Every test of DCGM's diagnostic at the standard tier's level (dcgmi diag -r gpu.dcgm.level_standard)
    passes on every GPU."""
    yield from _judge(dcgm_diag, gpus, limits, FAILED)


@check("gpu.dcgm_deep", tier="deep", needs=("dcgm_diag_deep",), optional=("gpus",),
       findings=(FAILED_DEEP,) + _FINDINGS, budget_s=14_400.0, applies=_applies,
       evidence_metrics=("dcgm_result",))
def dcgm_deep(dcgm_diag_deep: DcgmRun, gpus: GpuFacts | None, limits: Fabric) -> CheckOutput:
    """Every test of DCGM's diagnostic at the deep tier's level (dcgmi diag -r gpu.dcgm.level_deep, run alone on
    an idle node) passes on every GPU."""
    yield from _judge(dcgm_diag_deep, gpus, limits, FAILED_DEEP)
