"""GPU checks: the GPUs are all there, their memory, clocks, PCIe and NVLink are healthy,
the kernel log holds no serious Xid, versions agree, and a job left nothing behind.

When NVML cannot start: on a fabric that expects GPUs, gpu.count FAILs (the driver or a
GPU is gone) and the other GPU checks SKIP pointing at it. On a fabric that says nothing
about GPUs, the PCI bus decides: NVIDIA display/3D controllers there with NVML down (or
listing none) FAIL gpu.count (gpu.E005: the node cannot run GPU jobs); with none there,
every GPU check SKIPs.

A value the facts do not have is never judged healthy where the fabric asks for it: a
configured figure (NVLink count, PCIe width/generation, temperature limit) that NVML
could not give for a GPU is an ERROR for that GPU, and gpu.xid ERRORs on a kernel log
that was not read.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import msgspec

from healthcheck.core import catalogue, xid_catalogue
from healthcheck.core.catalogue import finding
from healthcheck.core.config.schema import Fabric, GpuLimits
from healthcheck.core.model import Finding, Limit, Metric
from healthcheck.core.registry import CheckOutput, NotApplicable, check
from healthcheck.core.status import Status, against_limits
from healthcheck.core.tiers import ALL as ALL_TIERS_AND_EPILOGUE
from healthcheck.parsers.gpu_common import Gpu, GpuFacts, is_pci_only
from healthcheck.parsers.xid import CRASH_DUMP as DUMPED
from healthcheck.parsers.xid import INIT_FAILED, NONE_PROBED, PROBE, RESET_REQUIRED, UNJUDGED_FAULTS, summarize

NVML_UNAVAILABLE = finding(
    "gpu.E001", "NVML could not initialise on a node that should have GPUs",
    "The NVIDIA driver is not loaded or a GPU hung the driver: check `nvidia-smi` and dmesg for Xid 79/119; "
    "reboot the node, and RMA the GPU if it recurs.", action="reboot")
GPUS_NOT_DRIVEN = finding(
    "gpu.E005", "NVIDIA GPUs are on the PCI bus but NVML cannot start or lists none (the driver does not drive them)",
    "The node cannot run GPU jobs: check `lsmod | grep nvidia` and the NVRM lines in dmesg (a driver that does not "
    "match the kernel after an update, a DKMS build that failed, RmInitAdapter failures, a GPU that fell off the "
    "bus at probe time); reload the driver or reboot; RMA a GPU that keeps failing to initialise.",
    action="investigate")
GPU_COUNT = finding(
    "gpu.E002", "the number of GPUs (or the job's GPUs) differs from the fabric's",
    "A GPU that NVML does not list fell off the bus or did not train: check lspci and dmesg; reseat, then RMA.",
    action="rma")
GPU_MODEL = finding(
    "gpu.E003", "a GPU's model differs from the fabric's",
    "The node is mapped to the wrong fabric, or a board was swapped: fix the node's fabric in the config or the board.",
    action="fix-config")
GPU_LOST = finding(
    "gpu.E004", "a GPU is listed but does not answer (lost)",
    "The GPU stopped responding (fallen off the bus, GSP hang): reset it (nvidia-smi -r) if idle, else reboot; "
    "RMA if it recurs.", action="reset-gpu")
ECC_UNCORRECTED = finding(
    "gpu.E010", "a GPU has uncorrected (volatile) ECC errors",
    "Uncorrectable memory errors since the last reset: drain, reset the GPU (row remapping applies on reset); "
    "RMA if they recur.", action="reset-gpu")
ECC_CORRECTED = finding(
    "gpu.E011", "a GPU's corrected (volatile) ECC error count is above the fabric's limit",
    "Many corrected errors precede uncorrected ones: watch the trend, reset the GPU at the next drain.",
    action="reset-gpu")
RETIRED_PENDING = finding(
    "gpu.E012", "a GPU has retired pages pending",
    "Pages are retired on the next GPU reset or reboot: drain and reset the GPU.", action="reset-gpu")
REMAP_PENDING = finding(
    "gpu.E013", "a GPU has a row remapping pending",
    "The remap takes effect on the next GPU reset: drain and reset the GPU (nvidia-smi -r) or reboot.",
    action="reset-gpu")
REMAP_FAILED = finding(
    "gpu.E014", "a GPU's row remapping failed",
    "The GPU has run out of spare rows or remapping failed: it cannot be repaired in the field; RMA it.",
    action="rma")
RETIRED_MAX = finding(
    "gpu.E017", "a GPU has more retired pages than the fabric allows",
    "Pages retired for single- or double-bit ECC errors are spent for the board's life: past DCGM's limit "
    "(63, its field diag's) the board is due for replacement; run dcgmi diag -r 3 and RMA it.",
    action="rma")
REMAP_BANKS_LOW = finding(
    "gpu.E018", "more of a GPU's memory banks are low on or out of spare rows than the fabric allows",
    "A bank with no reserved row left cannot remap its next failing row (a remapping failure, gpu.E014): "
    "run dcgmi diag -r 3 and plan the GPU's replacement.",
    action="investigate")
XID = finding(
    "gpu.E020", "a GPU logged an Xid error the severity table marks as serious",
    "Look the Xid code up in NVIDIA's Xid catalogue: 48/63/64/94/95 memory (reset, RMA if recurring), "
    "74 NVLink (reseat/replace the baseboard link), 79 fallen off the bus (reboot, reseat, RMA), "
    "119/120 GSP (reset or reboot, update the driver).", action="investigate")
SXID = finding(
    "gpu.E021", "an NVSwitch logged an SXid error",
    "A fatal SXid takes the NVLink fabric down: restart nvidia-fabricmanager after a reboot; repeated "
    "link faults mean a bad baseboard or tray: RMA.", action="reboot")
GPU_INIT_FAILED = finding(
    "gpu.E022",
    "the kernel log shows a GPU the NVIDIA driver could not initialise (RmInitAdapter failed, or refused at probe)",
    "The driver could not bring the GPU up (GSP firmware, VBIOS, a GPU left in a bad state, the open kernel "
    "modules required and not used): read the NVRM lines around it; power-cycle the node; RMA if it recurs.",
    action="reboot")
CRASH_DUMP = finding(
    "gpu.E023", "the kernel log shows the NVIDIA driver created a GPU crash dump",
    "The driver met a fatal GPU error: run nvidia-bug-report.sh as root before the module is unloaded, read the "
    "NVRM lines before the dump, then reset the GPU or reboot; RMA if it recurs.", action="investigate")
GPU_RESET_REQUIRED = finding(
    "gpu.E024", "the kernel log shows the NVIDIA driver says a GPU needs a reset (NV_ERR_RESET_REQUIRED, GPU lost)",
    "The driver met a fatal GPU or GSP error and refuses work until the GPU is reset (CUDA then reports the "
    "device busy or unavailable): read the NVRM lines before it (a GSP timeout, an Xid), reset the GPU or "
    "reboot; RMA if it recurs.", action="reset-gpu")
XID_RECURRING = finding(
    "gpu.E025", "the same Xid recurred on the same GPU after the node was rebooted twice or more",
    "A fault that survives reboots is in the hardware: drain the node for hardware inspection (reseat or "
    "replace the GPU or baseboard); put the repair on record (hc node NODE --repaired TEXT) so counting "
    "starts again.", action="rma")
THROTTLED = finding(
    "gpu.E030", "a GPU's clocks are held down by a hardware or thermal reason",
    "HW slowdown/power brake: check power supplies and the BMC's event log; thermal: check fans, airflow, "
    "inlet temperature and the heat sink seating.", action="investigate")
TOO_HOT = finding(
    "gpu.E031", "a GPU is hotter than the fabric's limit",
    "Check fans, airflow and inlet temperature; an idle GPU this hot has a cooling fault.", action="investigate")
PCIE_WIDTH = finding(
    "gpu.E040", "a GPU's PCIe link trained narrower than its maximum",
    "A x16 link at x8 halves host bandwidth: reseat the GPU (or its riser/cable) and check the slot; "
    "RMA if it persists.",
    action="reseat-cable")
PCIE_GEN = finding(
    "gpu.E041", "a GPU's PCIe link runs at a lower generation than its maximum",
    "A link below its generation under load is a signal-integrity fault: reseat, check the riser and BIOS "
    "PCIe settings.", action="reseat-cable")
NVLINK_DOWN = finding(
    "gpu.E050", "a GPU has fewer active NVLinks than the fabric expects",
    "A down NVLink cuts collective bandwidth: check nvidia-smi nvlink -s and fabric manager; reset the GPUs, "
    "then reboot; RMA the baseboard if the link stays down.", action="reset-gpu")
NVLINK_ERRORS = finding(
    "gpu.E051", "an NVLink error counter is above the fabric's limit",
    "Rising CRC/replay/recovery errors on one link point at the baseboard or GPU: watch the trend; reset; RMA "
    "if recovery errors keep growing.", action="investigate")
VERSION_MISMATCH = finding(
    "gpu.E060", "a driver, CUDA or VBIOS version differs from the fabric's",
    "Reinstall the fabric's driver (or flash the VBIOS) on this node; a node that differs from its peers "
    "gives jobs different behaviour.", action="fix-config")
VERSION_INCONSISTENT = finding(
    "gpu.E061", "the GPUs of one node do not all have the same VBIOS",
    "Flash the same VBIOS on every GPU of the node.", action="fix-config")
LEFTOVER_PROCESS = finding(
    "gpu.E070", "a compute process is still on a GPU after the job",
    "The job left a process behind (stuck in the driver, or a daemon it started): kill it; if it is "
    "unkillable (state D), drain and reboot.", action="clean-up")
LEFTOVER_MEMORY = finding(
    "gpu.E071", "a GPU has memory in use with no process on it after the job",
    "Memory held with no owner is leaked in the driver: reset the GPU (nvidia-smi -r) or reboot.",
    action="reset-gpu")


def _label(g: Gpu) -> str:
    return f"GPU{g.index}"


def _pci_only(facts: GpuFacts) -> list[str]:
    """Bus ids of the NVIDIA GPUs only the PCI bus shows (NVML down or listing none)."""

    return [lost.pci_bus_id or "?" for lost in facts.lost if is_pci_only(lost)]


def _gpus(facts: GpuFacts, limits: Fabric) -> list[Gpu]:
    """The GPUs to judge; SKIP when no GPU answers NVML (gpu.count judges that).

    Never an empty list: a check that judged no GPU would PASS having checked nothing.
    """
    on_pci = _pci_only(facts)
    if facts.init_error:
        if limits.gpu.count or on_pci:
            raise NotApplicable(f"no GPU facts: {facts.init_error} (see gpu.count)")
        raise NotApplicable(f"no NVIDIA GPU here: {facts.init_error}")
    if not facts.gpus:
        if facts.scoped_to == []:
            raise NotApplicable("the job has no GPU")
        if limits.gpu.count or facts.lost:
            raise NotApplicable("no GPU answers NVML (see gpu.count)")
        raise NotApplicable("no NVIDIA GPU found and the fabric expects none")
    return facts.gpus


def _unknown(what: str, component: str, key: str) -> Finding:
    """ERROR: the fabric asks about `what` and the facts do not have it (never a PASS)."""
    return catalogue.TOOL_MISSING(
        Status.ERROR, f"{what}: no value could be read, so {key} cannot be judged", component=component)


def _severity(value: str) -> Status | None:
    return {"FAIL": Status.FAIL, "WARN": Status.WARN}.get(value)


@check("gpu.count", tier="quick", needs=("gpus",),
       findings=(NVML_UNAVAILABLE, GPUS_NOT_DRIVEN, GPU_COUNT, GPU_MODEL, GPU_LOST, catalogue.TOOL_MISSING),
       budget_s=5.0,
       evidence_metrics=("gpu_count", "model"))
def count(gpus: GpuFacts, limits: Fabric) -> CheckOutput:
    """The fabric's number of GPUs (or every GPU of the job, or every NVIDIA GPU on the PCI bus) is present,
    answering, and of the fabric's model."""
    expected = limits.gpu.count
    on_pci = _pci_only(gpus)
    if on_pci and expected != 0 and not gpus.gpus:
        yield from _undriven(gpus, on_pci, expected)
        return
    if gpus.init_error:
        if not expected:
            raise NotApplicable(f"no NVIDIA GPU here: {gpus.init_error}")
        yield NVML_UNAVAILABLE.fail(
            f"NVML could not initialise ({gpus.init_error}); expected {expected} GPUs",
            value=gpus.init_error, limit=Limit("==", expected, "gpu.count"))
        return
    if not gpus.gpus and not gpus.lost and expected is None:
        raise NotApplicable("no NVIDIA GPU found and the fabric expects none")
    for lost in gpus.lost:
        where = f"GPU{lost.index}" if lost.index is not None else (lost.pci_bus_id or "a GPU")
        yield GPU_LOST.fail(f"{where} does not answer ({lost.error})", component=where, value=lost.error)
    yield from _missing(gpus, expected)
    yield Metric("gpu_count", len(gpus.gpus))
    yield from _models(gpus, limits)


def _undriven(gpus: GpuFacts, on_pci: list[str], expected: int | None) -> CheckOutput:
    """NVIDIA GPUs on the PCI bus that NVML does not list."""
    why = gpus.init_error or "NVML lists no GPU"
    where = ", ".join(on_pci)
    if expected is None:
        # A GPU node whose driver is down cannot run a GPU job: that is evidence
        # against the node (FAIL), not a check that could not run (ERROR).
        yield GPUS_NOT_DRIVEN.fail(
            f"{len(on_pci)} NVIDIA GPU(s) on the PCI bus ({where}) but {why}: the node cannot run GPU jobs",
            value=on_pci, evidence="; ".join(lost.error for lost in gpus.lost))
    elif gpus.init_error:
        yield NVML_UNAVAILABLE.fail(
            f"NVML could not initialise ({gpus.init_error}); expected {expected} GPUs; on the PCI bus: {where}",
            value=gpus.init_error, limit=Limit("==", expected, "gpu.count"))
    else:
        yield GPU_COUNT.fail(f"NVML lists no GPU, expected {expected}; on the PCI bus: {where}",
                             value=0, limit=Limit("==", expected, "gpu.count"))


def _missing(gpus: GpuFacts, expected: int | None) -> CheckOutput:
    """The job's GPUs that are not present, or a count other than the fabric's."""
    present = {g.index for g in gpus.gpus}
    if gpus.scoped_to is not None:
        for index in gpus.scoped_to:
            if index not in present and not any(lost.index == index for lost in gpus.lost):
                # the job's environment asked for it, not the config: no Limit (its key
                # would name no config key, and the finding no source)
                yield GPU_COUNT.fail(f"the job's GPU{index} (SLURM_JOB_GPUS or CUDA_VISIBLE_DEVICES) is not "
                                     "present", component=f"GPU{index}")
    elif expected is not None and len(gpus.gpus) + len(gpus.lost) != expected:
        yield GPU_COUNT.fail(f"{len(gpus.gpus) + len(gpus.lost)} GPUs found, expected {expected}",
                             value=len(gpus.gpus) + len(gpus.lost), limit=Limit("==", expected, "gpu.count"))


def _models(gpus: GpuFacts, limits: Fabric) -> CheckOutput:
    """Each GPU's model, and a FAIL where it is not the fabric's."""
    for g in gpus.gpus:
        if g.name:
            yield Metric("model", g.name, component=_label(g))
        if limits.gpu.model is not None and g.name is None:
            yield _unknown(f"{_label(g)}'s model", _label(g), "gpu.model")
        elif limits.gpu.model is not None and g.name != limits.gpu.model:
            yield GPU_MODEL.fail(f"{_label(g)} is a {g.name}, expected {limits.gpu.model}", component=_label(g),
                                 value=g.name, limit=Limit("==", limits.gpu.model, "gpu.model"))


@check("gpu.ecc", tier=ALL_TIERS_AND_EPILOGUE, needs=("gpus",),
       findings=(ECC_UNCORRECTED, ECC_CORRECTED, RETIRED_PENDING, REMAP_PENDING, REMAP_FAILED, RETIRED_MAX,
                 REMAP_BANKS_LOW, catalogue.TOOL_MISSING),
       budget_s=5.0,
       evidence_metrics=("ecc_volatile_uncorrected", "ecc_volatile_corrected"))
def ecc(gpus: GpuFacts, limits: Fabric) -> CheckOutput:
    """No GPU has uncorrected ECC errors, too many corrected ones, pending retirements or remaps, or a failed remap."""
    gl = limits.gpu
    for g in _gpus(gpus, limits):
        c = _label(g)
        for name in ("ecc_volatile_uncorrected", "ecc_volatile_corrected", "remapped_rows_correctable",
                     "remapped_rows_uncorrectable", "retired_pages_dbe"):
            value = getattr(g, name)
            if value is not None:
                yield Metric(name, value, component=c)
        if g.ecc_enabled and g.ecc_volatile_uncorrected is None:
            # ECC on, and NVML could not count its errors: not "no errors" (ECC off is
            # NVML's "not supported", which is not judged)
            yield _unknown(f"{c}'s uncorrected ECC count", c, "uncorrected ECC errors")
        if g.ecc_volatile_uncorrected:
            yield ECC_UNCORRECTED.fail(f"{c} has {g.ecc_volatile_uncorrected} uncorrected ECC errors since reset",
                                       component=c, value=g.ecc_volatile_uncorrected)
        corrected_max = gl.ecc_volatile_corrected_max
        if corrected_max is not None and (g.ecc_volatile_corrected or 0) > corrected_max:
            yield ECC_CORRECTED.warn(
                f"{c} has {g.ecc_volatile_corrected} corrected ECC errors since reset, above {corrected_max}",
                component=c, value=g.ecc_volatile_corrected,
                limit=Limit("<=", gl.ecc_volatile_corrected_max, "gpu.ecc_volatile_corrected_max"))
        status = _severity(gl.retired_pages_pending)
        if g.retired_pages_pending and status:
            yield RETIRED_PENDING(status, f"{c} has page retirements pending a reset", component=c, value=True,
                                  limit=Limit("==", False, "gpu.retired_pages_pending"))
        status = _severity(gl.remapped_rows_pending)
        if g.remapped_rows_pending and status:
            yield REMAP_PENDING(status, f"{c} has a row remapping pending a reset", component=c, value=True,
                                limit=Limit("==", False, "gpu.remapped_rows_pending"))
        if g.remapped_rows_failure:
            yield REMAP_FAILED.fail(f"{c} had a row remapping failure", component=c, value=True)
        yield from _spent_memory(g, c, gl)


def retired_pages(g: Gpu) -> int | None:
    """A GPU's retired pages, single- and double-bit together (a lower bound where one is unknown)."""
    known = [v for v in (g.retired_pages_sbe, g.retired_pages_dbe) if v is not None]
    return sum(known) if known else None


def _spent_memory(g: Gpu, c: str, gl: GpuLimits) -> CheckOutput:
    """The spares a GPU's memory has used for good: retired pages, banks low on spare rows."""
    retired = retired_pages(g)
    if retired is not None:
        yield Metric("retired_pages", retired, component=c)
        if gl.retired_pages_max is not None and retired > gl.retired_pages_max:
            yield RETIRED_MAX.fail(f"{c} has {retired} retired pages, above {gl.retired_pages_max}", component=c,
                                   value=retired, limit=Limit("<=", gl.retired_pages_max, "gpu.retired_pages_max"))
    if g.remap_histogram is not None:
        low = g.remap_histogram.low_or_none
        yield Metric("remap_banks_low", low, component=c)
        if gl.remap_banks_low_max is not None and low > gl.remap_banks_low_max:
            h = g.remap_histogram
            yield REMAP_BANKS_LOW.warn(
                f"{c} has {low} memory banks low on or out of spare rows, above {gl.remap_banks_low_max}",
                component=c, value=low, limit=Limit("<=", gl.remap_banks_low_max, "gpu.remap_banks_low_max"),
                evidence=f"bank remap availability: max {h.max}, high {h.high}, partial {h.partial}, low {h.low}, "
                         f"none {h.none}")


def is_idle(g: Gpu) -> bool:
    """Whether the GPU was idle when read: no compute process on it and 0% utilization, both known."""
    return g.processes == [] and g.utilization_gpu_pct == 0


def _when(t: float | None) -> str:
    return "boot" if t is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def log_window(log) -> str:
    """What the kernel log evidence covers: "since 2026-11-23T01:00:00Z in /dev/kmsg (3,214 lines read)"."""
    text = f"since {_when(log.since)} in {log.source} ({log.source_lines or 0:,} lines read)"
    return f"{text}; {log.window_note}" if log.window_note else text


@check("gpu.xid", tier=ALL_TIERS_AND_EPILOGUE, needs=("kernel_gpu_log",), optional=("gpus",),
       findings=(XID, SXID, GPU_INIT_FAILED, CRASH_DUMP, GPU_RESET_REQUIRED, XID_RECURRING, catalogue.TOOL_FAILED),
       budget_s=5.0,
       evidence_metrics=("xid_events", "kernel_log"))
def xid(kernel_gpu_log, gpus: GpuFacts | None, limits: Fabric) -> CheckOutput:
    """A kernel log that was read holds no Xid, SXid or number-less GPU failure (fallen off the bus, failed
    init, crash dump) the severity table marks WARN or FAIL, in the window read."""

    if kernel_gpu_log.source is None or not kernel_gpu_log.source_lines:
        # the providers never hand on an unread log; anything else is not evidence either
        yield catalogue.TOOL_FAILED(Status.ERROR, "gpu.xid has no kernel log that was read (source "
                                    f"{kernel_gpu_log.source or 'unknown'}, {kernel_gpu_log.source_lines or 0} "
                                    "lines): Xid events cannot be ruled out")
        return
    policy = limits.gpu.xid
    no_gpu = gpus is not None and gpus.init_error and not limits.gpu.count and not _pci_only(gpus)

    no_event = not kernel_gpu_log.xids and not kernel_gpu_log.sxids and not any(
        f.kind != NONE_PROBED for f in kernel_gpu_log.faults)  # no adapter probed: no GPU here says it too
    if gpus is not None and no_gpu and no_event:
        raise NotApplicable(f"no NVIDIA GPU here: {gpus.init_error}; no NVIDIA event {log_window(kernel_gpu_log)}")
    index_of = {g.pci_bus_id: g.index for g in (gpus.gpus if gpus is not None else [])}
    scope = set(gpus.scoped_to) if gpus is not None and gpus.scoped_to is not None else None

    def place(bus: str | None) -> tuple[str | None, str, str]:
        """(where, " (bus)" when where is an index, component prefix); where None: not this job's GPU."""
        index = index_of.get(bus) if bus else None
        if scope is not None and index is not None and index not in scope:
            return None, "", ""  # another job's GPU: not this prologue's business
        where = f"GPU{index}" if index is not None else (bus or "GPU?")
        return where, f" ({bus})" if index is not None and bus else "", where

    yield Metric("xid_events", len(kernel_gpu_log.xids))
    window = log_window(kernel_gpu_log)
    yield Metric("kernel_log_lines", kernel_gpu_log.source_lines)
    # what was read, for a PASS as much as a FAIL: a clean verdict names its evidence
    yield Metric("kernel_log", window)
    if kernel_gpu_log.boot_id:  # the history counts an Xid's recurrences across boots by it
        yield Metric("boot_id", kernel_gpu_log.boot_id)
    failed: set[str | None] = set()  # buses with a FAIL already: a crash dump adds nothing to them
    numberless = {e.pci_bus_id for e in kernel_gpu_log.xids if e.legacy}
    for s in summarize(kernel_gpu_log.xids):
        status = _severity(policy.severity.get(s.code, policy.unknown))
        where, pci, _ = place(s.pci_bus_id)
        if where is None or status is None:
            continue
        times = f"{s.count} times" if s.count > 1 else "once"
        key = f"gpu.xid.severity[{s.code}]" if s.code in policy.severity else "gpu.xid.unknown"
        if s.code == 79 and s.pci_bus_id in numberless:
            message = (f"{where}{pci} has fallen off the bus (the driver logged no Xid number: judged as Xid 79) "
                       f"{times}, {window}")
        else:
            message = f"{where}{pci} logged Xid {s.code} ({xid_catalogue.info(s.code).meaning}) {times}, {window}"
        message += f"; NVIDIA's action: {xid_catalogue.ACTION_TEXT[xid_catalogue.action_of(s.code, s.first_line)]}"
        message += _nvlink_registers(s.code, s.first_line)
        if status is Status.FAIL:
            failed.add(s.pci_bus_id)
        yield XID(status, message, component=f"{where}:xid{s.code}", value=s.count,
                  limit=Limit("==", policy.severity.get(s.code, policy.unknown), key), evidence=s.first_line)
        if s.last_time is not None:  # escalation tells an Xid logged again after a GPU reset by it
            yield Metric("xid_last_logged", round(s.last_time, 3), "s", component=f"{where}:xid{s.code}")
    seen: set[tuple[int, str | None, str]] = set()
    for e in kernel_gpu_log.sxids:
        if e.severity is None:
            continue  # continuation lines (Severity/Data) belong to the event above them
        status = _severity(policy.sxid_fatal if e.severity.lower() == "fatal" else policy.sxid_other)
        event = (e.code, e.pci_bus_id, e.severity)
        if status is None or event in seen:
            continue
        seen.add(event)
        where = e.switch or e.pci_bus_id or "nvswitch"
        todo = xid_catalogue.ACTION_TEXT[xid_catalogue.sxid_action(e.severity)]
        yield SXID(status, f"{where} logged SXid {e.code} ({e.severity}): {e.message}; action: {todo}",
                   component=f"{where}:sxid{e.code}", value=e.code, evidence=e.line)
    yield from _fault_findings(kernel_gpu_log.faults, place, failed, window)


def _nvlink_registers(code: int, line: str) -> str:
    """An Xid 74's NVLink register bits as NVIDIA's workflow reads them ('' for any other Xid, or none printed)."""
    bits = xid_catalogue.xid74_bits(line) if code == 74 else None
    if bits is None:
        return ""
    said = "; ".join(bits.meanings[:8]) + (f"; and {len(bits.meanings) - 8} more" if len(bits.meanings) > 8 else "")
    return f" (the first event's link {bits.link} error registers: {said or 'no bit set'})"


def _fault_findings(faults_logged: list, place: Callable[[str | None], tuple[str | None, str, str]],
                    failed: set[str | None], window: str) -> CheckOutput:
    """The GPU failures logged without an Xid number, one finding per (kind, GPU); a crash
    dump, or a failed probe, of a GPU that already FAILed is the same incident."""

    groups: dict[tuple[str, str | None], list] = {}
    for fault in faults_logged:
        if fault.kind in UNJUDGED_FAULTS:
            # facts (a link that did not train, no adapter probed, a client's other library version, a
            # bring-up step before the `RmInitAdapter failed!` judged): see xid.UNJUDGED_FAULTS
            continue
        groups.setdefault((fault.kind, fault.pci_bus_id), []).append(fault)
    for (kind, bus), faults in sorted(groups.items(), key=lambda kv: (kv[0][0] != INIT_FAILED, str(kv[0][1]))):
        where, pci, component = place(bus)
        if where is None:
            continue
        times = f"{len(faults)} times" if len(faults) > 1 else "once"
        if kind in (DUMPED, RESET_REQUIRED):
            if bus in failed or (bus is None and failed):
                continue  # the dump, or the reset asked for, of a failure already reported: one incident
            yield _aftermath(kind, f"{where}{pci}", times, window, component, faults)
            continue
        at_probe = all(f.stage == PROBE for f in faults)
        if at_probe and bus in failed:
            continue  # the driver refusing at probe a GPU it lost (fallen off the bus): one incident
        failed.add(bus)
        unbound = max((f.devices or 0 for f in faults), default=0)
        how = (f"its probe routine was not called for {unbound} device(s): another driver owns them" if unbound
               else faults[0].meaning or ("refused it at probe" if at_probe else "RmInitAdapter failed"))
        yield GPU_INIT_FAILED.fail(
            f"{where}{pci}: the NVIDIA driver could not initialise the GPU ({how}) {times}, {window}",
            component=f"{component}:init-failed", value=len(faults), evidence=faults[0].line)


def _aftermath(kind: str, where: str, times: str, window: str, component: str, faults: list) -> Finding:
    """A crash dump, or a GPU the driver says needs a reset: a FAIL of its own where no
    other failure of that GPU was reported."""

    if kind == DUMPED:
        return CRASH_DUMP.fail(f"{where}: the NVIDIA driver created a GPU crash dump {times}, {window}",
                               component=f"{component}:crash-dump", value=len(faults), evidence=faults[0].line)
    return GPU_RESET_REQUIRED.fail(
        f"{where}: the NVIDIA driver says the GPU needs a reset ({faults[0].error or faults[0].meaning}) {times}, "
        f"{window}",
        component=f"{component}:reset-required", value=len(faults), evidence=faults[0].line)


@check("gpu.clocks", tier="quick", needs=("gpus",), findings=(THROTTLED, TOO_HOT, catalogue.TOOL_MISSING),
       budget_s=5.0,
       evidence_metrics=("temperature_c",))
def clocks(gpus: GpuFacts, limits: Fabric) -> CheckOutput:
    """No GPU's clocks are held down by a hardware or thermal reason, and none is hotter than the fabric's limit."""
    gl = limits.gpu
    for g in _gpus(gpus, limits):
        c = _label(g)
        if g.temperature_c is not None:
            yield Metric("temperature_c", g.temperature_c, "C", component=c)
            if is_idle(g):  # the reading trends are taken of (trend.counters): load does not move it
                yield Metric("temperature_idle_c", g.temperature_c, "C", component=c)
        elif gl.temp_max_c is not None:
            yield _unknown(f"{c}'s temperature", c, "gpu.temp_max_c")
        if g.throttle_reasons is None and (gl.throttle_fail or gl.throttle_warn):
            yield _unknown(f"{c}'s clock event (throttle) reasons", c, "gpu.throttle_fail")
        for reason in g.throttle_reasons or []:
            if reason in gl.throttle_fail:
                yield THROTTLED.fail(f"{c} clocks are held down: {reason}", component=f"{c}:{reason}", value=reason,
                                     limit=Limit("in", gl.throttle_fail, "gpu.throttle_fail"))
            elif reason in gl.throttle_warn:
                yield THROTTLED.warn(f"{c} clocks are held down: {reason}", component=f"{c}:{reason}", value=reason,
                                     limit=Limit("in", gl.throttle_warn, "gpu.throttle_warn"))
        if gl.temp_max_c is not None and g.temperature_c is not None and g.temperature_c > gl.temp_max_c:
            yield TOO_HOT.fail(f"{c} is at {g.temperature_c:g} C, above {gl.temp_max_c:g}", component=c,
                               value=g.temperature_c, unit="C", limit=Limit("<=", gl.temp_max_c, "gpu.temp_max_c"))


@check("gpu.pcie", tier="quick", needs=("gpus",), findings=(PCIE_WIDTH, PCIE_GEN, catalogue.TOOL_MISSING),
       budget_s=5.0,
       evidence_metrics=("pcie_gen", "pcie_width"))
def pcie(gpus: GpuFacts, limits: Fabric) -> CheckOutput:
    """Every GPU's PCIe link runs at its full width and generation (or the fabric's, where set)."""
    gl = limits.gpu
    judged = _gpus(gpus, limits)
    if not gl.pcie_width and not gl.pcie_gen and all(
            g.pcie_width_current is None and g.pcie_gen_current is None for g in judged):
        raise NotApplicable("NVML gives no PCIe link state for any GPU and the fabric sets no figure")
    for g in judged:
        c = _label(g)
        if gl.pcie_width and g.pcie_width_current is None:
            yield _unknown(f"{c}'s PCIe link width", c, "gpu.pcie_width")
        if gl.pcie_gen and g.pcie_gen_current is None:
            yield _unknown(f"{c}'s PCIe link generation", c, "gpu.pcie_gen")
        if g.pcie_width_current is not None:
            yield Metric("pcie_width", g.pcie_width_current, component=c)
            yield Metric("pcie_gen", g.pcie_gen_current, component=c)
        want_w, key_w = (gl.pcie_width, "gpu.pcie_width") if gl.pcie_width else (g.pcie_width_max, None)
        if want_w is not None and g.pcie_width_current is not None and g.pcie_width_current < want_w:
            yield PCIE_WIDTH.fail(f"{c} PCIe link is x{g.pcie_width_current}, expected x{want_w}", component=c,
                                  value=g.pcie_width_current, limit=Limit(">=", want_w, key_w) if key_w else None)
        want_g, key_g = (gl.pcie_gen, "gpu.pcie_gen") if gl.pcie_gen else (g.pcie_gen_max, None)
        # An idle GPU may drop its link to a lower generation to save power and come
        # back up under load: only the width is judged while the idle reason is active.
        idle = "gpu_idle" in (g.throttle_reasons or [])
        if want_g is not None and g.pcie_gen_current is not None and g.pcie_gen_current < want_g and not idle:
            yield PCIE_GEN.fail(f"{c} PCIe link is Gen{g.pcie_gen_current}, expected Gen{want_g}", component=c,
                                value=g.pcie_gen_current, limit=Limit(">=", want_g, key_g) if key_g else None)


@check("gpu.nvlink", tier="standard", needs=("gpus",), findings=(NVLINK_DOWN, NVLINK_ERRORS, catalogue.TOOL_MISSING),
       budget_s=8.0,
       evidence_metrics=("nvlink_active",))
def nvlink(gpus: GpuFacts, limits: Fabric) -> CheckOutput:
    """Every GPU has the fabric's number of active NVLinks, with error counters under the fabric's limits."""
    gl = limits.gpu
    judged = _gpus(gpus, limits)
    if gl.nvlink_count is None and not any(g.nvlinks for g in judged):
        raise NotApplicable("no NVLink here and the fabric expects none")
    warn_at = msgspec.structs.asdict(gl.nvlink_errors_warn)
    fail_at = msgspec.structs.asdict(gl.nvlink_errors_fail)
    for g in judged:
        c = _label(g)
        if g.nvlinks is None:
            if gl.nvlink_count is not None:
                # the fabric says this GPU has NVLinks; NVML could not list them (MIG mode?)
                yield _unknown(f"{c}'s NVLink state", c, "gpu.nvlink_count")
            continue  # unknown and not asked about: nothing to judge
        active = [link for link in g.nvlinks if link.active]
        yield Metric("nvlink_active", len(active), component=c)
        if gl.nvlink_count is not None and len(active) < gl.nvlink_count:
            down = [str(link.link) for link in g.nvlinks if not link.active]
            yield NVLINK_DOWN.fail(
                f"{c} has {len(active)} active NVLinks, expected {gl.nvlink_count}"
                + (f" (down: {', '.join(down)})" if down else ""),
                component=c, value=len(active), limit=Limit(">=", gl.nvlink_count, "gpu.nvlink_count"))
        for link in active:
            for name in warn_at:
                value = getattr(link, name)
                crossed = against_limits(value, fail_at[name], warn_at[name]) if value is not None else None
                if crossed is not None:
                    status, at, which = crossed
                    yield NVLINK_ERRORS(status, f"{c} link {link.link} {name} is {value}, above {at}",
                                        component=f"{c}:link{link.link}:{name}", value=value,
                                        limit=Limit("<=", at, f"gpu.nvlink_errors_{which}.{name}"))


@check("gpu.versions", tier="standard", needs=("gpus",), optional=("shared_libs",),
       findings=(VERSION_MISMATCH, VERSION_INCONSISTENT, catalogue.TOOL_MISSING), budget_s=5.0,
       evidence_metrics=("driver_version", "cuda_version", "nccl_version"))
def versions(gpus: GpuFacts, shared_libs, limits: Fabric) -> CheckOutput:
    """Driver, CUDA, VBIOS and NCCL versions equal the fabric's where set, and the node's GPUs agree on their VBIOS."""
    gl = limits.gpu
    judged = _gpus(gpus, limits)
    nccl_lib = shared_libs.version_of("libnccl.so") if shared_libs is not None else None
    nccl = nccl_lib.version if nccl_lib is not None else None
    if gpus.driver_version:
        yield Metric("driver_version", gpus.driver_version)
    if gpus.cuda_version:
        yield Metric("cuda_version", gpus.cuda_version)
    if nccl:
        yield Metric("nccl_version", nccl)
    for label, have, want, key in (("driver", gpus.driver_version, gl.driver_version, "gpu.driver_version"),
                                   ("CUDA", gpus.cuda_version, gl.cuda_version, "gpu.cuda_version"),
                                   ("NCCL", nccl, gl.nccl_version, "gpu.nccl_version")):
        if want is not None and have is None:
            unread = label == "NCCL" and shared_libs is None
            why = "the shared-library list could not be read" if unread else "unknown"
            yield catalogue.TOOL_MISSING(Status.ERROR, f"{label} version is {why}, so {key} cannot be judged",
                                         component=label.lower())
        elif want is not None and have != want:
            yield VERSION_MISMATCH.fail(f"{label} version is {have}, expected {want}", component=label.lower(),
                                        value=have, limit=Limit("==", want, key))
    vbios = {g.vbios_version for g in judged if g.vbios_version}
    for g in judged:
        if g.vbios_version:
            yield Metric("vbios_version", g.vbios_version, component=_label(g))
        if gl.vbios_version is not None and g.vbios_version is None:
            yield _unknown(f"{_label(g)}'s VBIOS version", _label(g), "gpu.vbios_version")
        elif gl.vbios_version is not None and g.vbios_version != gl.vbios_version:
            yield VERSION_MISMATCH.fail(f"{_label(g)} VBIOS is {g.vbios_version}, expected {gl.vbios_version}",
                                        component=_label(g), value=g.vbios_version,
                                        limit=Limit("==", gl.vbios_version, "gpu.vbios_version"))
    if len(vbios) > 1:
        yield VERSION_INCONSISTENT.warn(f"the node's GPUs have {len(vbios)} VBIOS versions: {', '.join(sorted(vbios))}",
                                        component="vbios", value=sorted(vbios))


# the epilogue, and the deep tier, which runs only on a node no job uses (orchestrate/busy.py):
# there a process is as much left behind as after a job, and it would make DCGM's deep
# level SKIP (probes/dcgm.py) without saying so as a finding
@check("gpu.processes", tier=("epilogue", "deep"), needs=("gpus",),
       findings=(LEFTOVER_PROCESS, LEFTOVER_MEMORY, catalogue.TOOL_MISSING), budget_s=5.0)
def processes(gpus: GpuFacts, limits: Fabric) -> CheckOutput:
    """After a job, and on a node no job uses, no compute process is left on its GPUs and no GPU
    holds memory without a process."""
    for g in _gpus(gpus, limits):
        c = _label(g)
        if g.processes is None:
            # what a job left behind is this check's whole question: not knowing is not "nothing"
            yield _unknown(f"{c}'s compute processes", c, "leftover processes")
            continue
        if g.processes:
            desc = ", ".join(f"{p.pid} ({p.name or '?'})" for p in g.processes)
            yield LEFTOVER_PROCESS.fail(f"{c} still runs {len(g.processes)} compute process(es): {desc}", component=c,
                                        value=[p.pid for p in g.processes])
        elif g.memory_used_mib is not None and g.memory_used_mib > limits.gpu.leftover_memory_max_mib:
            yield LEFTOVER_MEMORY.fail(
                f"{c} has {g.memory_used_mib} MiB in use with no process, above {limits.gpu.leftover_memory_max_mib}",
                component=c, value=g.memory_used_mib, unit="MiB",
                limit=Limit("<=", limits.gpu.leftover_memory_max_mib, "gpu.leftover_memory_max_mib"))
