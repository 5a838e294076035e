"""GPU facts (NVML in-process, or a replayed recording) and the kernel log's Xid events.

Which GPUs: the job's, where the environment names them (SLURM_JOB_GPUS, else
CUDA_VISIBLE_DEVICES), so a prologue for a 2-GPU job looks at those 2; else all.

Evidence that could not be read is never "clean": a kernel log that every source
refused, or that printed nothing (a booted kernel always has lines since boot), is a
ProbeError naming each source tried and why; NVML that cannot start is not "no GPU
here" until the PCI bus has been looked at for NVIDIA display/3D controllers.
"""

from __future__ import annotations

import errno
import math
import os
import time
from collections.abc import Callable, Mapping

import msgspec

from healthcheck.core.errors import HcError
from healthcheck.core.facts import ProbeContext, ProbeError, provides, timeout_error
from healthcheck.core.inputs import TOOL_OUTPUT_MAX_BYTES, read_bounded
from healthcheck.parsers.gpu_common import PCI_ONLY, GpuFacts, LostGpu, normalize_pci
from healthcheck.parsers.kernlog import kernel_lines, kmsg_line, kmsg_lines
from healthcheck.parsers.xid import parse_kernel_log, since
from healthcheck.probes.nvml import NvmlProbe, ReplayNvml
from healthcheck.probes.sysinfo import boot_time

REPLAY_ENV = "HC_NVML_REPLAY"  # path of an NVML recording to replay instead of NVML


def job_gpu_indexes(env: Mapping[str, str]) -> list[int] | None:
    """The NVML indexes of the job's GPUs, or None when the environment names none.

    SLURM_JOB_GPUS holds the node's GPU indexes (gres.conf order, which is NVML/PCI
    order on a standard install). CUDA_VISIBLE_DEVICES is used only when it is a list
    of plain indexes; UUIDs and MIG names cannot be mapped without NVML, and an empty
    value means "no GPU for this job".
    """
    for var in ("SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES"):
        value = env.get(var)
        if value is None:
            continue
        value = value.strip()
        if value in ("", "NoDevFiles"):
            return []
        parts = [p.strip() for p in value.split(",") if p.strip()]
        if all(p.isdigit() for p in parts):
            return sorted({int(p) for p in parts})
    return None


@provides("gpus", "local")
def gpus_nvml(ctx: ProbeContext) -> GpuFacts:
    scope = job_gpu_indexes(ctx.env)
    replay = ctx.env.get(REPLAY_ENV)
    if replay:
        # a recording stands for a whole node, NVML and all: this machine's PCI bus is not
        # part of it, so it is not looked at
        try:
            nvml = ReplayNvml.from_file(replay)
        except (OSError, ValueError) as exc:
            raise ProbeError("unreadable", f"{REPLAY_ENV}={replay}: {exc}") from None
        return NvmlProbe(nvml, source=nvml.source).facts(scope)
    expects_gpus = ctx.limits is not None and ctx.limits.gpu.count is not None
    if not expects_gpus and not ctx.path("/proc/driver/nvidia").exists():
        # No NVIDIA driver on a node that expects no GPU: skip importing NVML at all (it
        # costs the prologue ~15 ms). Where GPUs are expected, NVML itself must say why.
        facts = GpuFacts(source="nvml", init_error="no NVIDIA driver loaded (/proc/driver/nvidia absent)")
        return with_pci_gpus(facts, local_pci_gpus(ctx))
    try:
        import pynvml
    except ImportError:
        facts = GpuFacts(source="nvml", init_error="pynvml (nvidia-ml-py) is not installed")
        return with_pci_gpus(facts, local_pci_gpus(ctx))
    facts = NvmlProbe(pynvml).facts(scope)
    return with_pci_gpus(facts, local_pci_gpus(ctx)) if nothing_answers(facts) else facts


# ------------------------------------------------------------ GPUs on the PCI bus

PCI_DEVICES = "/sys/bus/pci/devices"
NVIDIA_VENDOR = "0x10de"
# PCI class codes of a GPU: 0x0300xx VGA-compatible controller, 0x0302xx 3D controller
# (an SXM H100 is 0x030200). NVSwitches (0x0680xx), audio and USB functions are not GPUs.
_GPU_CLASSES = {"0x0300": "VGA controller", "0x0302": "3D controller"}
def nothing_answers(facts: GpuFacts) -> bool:
    # the case where "no NVIDIA GPU here" would be concluded; a job scoped to no GPU
    # (scoped_to == []) asks about none, so the bus is not looked at for it
    return bool(facts.init_error) or (not facts.gpus and not facts.lost and facts.scoped_to is None)


def with_pci_gpus(facts: GpuFacts, on_pci: list[tuple[str, str, str]]) -> GpuFacts:
    """The facts, with every NVIDIA GPU the PCI bus shows added as a LostGpu.

    on_pci: (bus id, class, driver) of each NVIDIA display/3D controller on the bus.
    """

    if not on_pci or not nothing_answers(facts):
        return facts
    why = facts.init_error or "NVML lists no GPU"
    lost = [
        LostGpu(pci_bus_id=bus,
                error=f"{PCI_ONLY} ({_GPU_CLASSES.get(cls[:6], cls)}, driver: {driver or 'none'}): {why}")
        for bus, cls, driver in on_pci
    ]
    return msgspec.structs.replace(facts, lost=lost)


def local_pci_gpus(ctx: ProbeContext) -> list[tuple[str, str, str]]:
    """NVIDIA display/3D controllers in /sys/bus/pci/devices (under ctx.root)."""

    base = ctx.path(PCI_DEVICES)
    try:
        names = sorted(os.listdir(base))
    except FileNotFoundError:
        return []  # no PCI bus at all (a virtio-mmio VM): no PCI GPU either
    except OSError as exc:
        raise ProbeError("unreadable", f"{PCI_DEVICES}: {exc.strerror or exc}: NVML cannot start and the PCI bus "
                                       "cannot be read, so whether this node has NVIDIA GPUs is unknown") from None
    found = []
    for name in names:
        device = base / name
        try:
            with open(device / "vendor") as f:
                if f.read(16).strip().lower() != NVIDIA_VENDOR:
                    continue
            with open(device / "class") as f:
                cls = f.read(16).strip().lower()
        except FileNotFoundError:
            continue  # the device went away while we looked
        except OSError as exc:
            raise ProbeError("unreadable", f"{PCI_DEVICES}/{name}: {exc.strerror or exc}: cannot tell whether it "
                                           "is an NVIDIA GPU") from None
        if cls[:6] not in _GPU_CLASSES:
            continue
        try:
            driver = os.path.basename(os.readlink(device / "driver"))
        except OSError:
            driver = ""  # no driver bound
        found.append((normalize_pci(name), cls, driver))
    return found


# One shell builtin loop (no process per device): "hc-pci: BUS CLASS DRIVER" per NVIDIA
# display/3D candidate, "hc-pci-error: BUS" where a device could not be read, and a
# last line that proves the loop ran to its end.
PCI_SCAN = ("/bin/sh", "-c", (
    f'[ -d {PCI_DEVICES} ] || {{ echo hc-pci-none; exit 0; }}; '
    f'cd {PCI_DEVICES} && [ -r . ] || {{ echo "hc-pci-error: the device list"; echo hc-pci-end; exit 0; }}; '
    'for d in *; do [ -e "$d/vendor" ] || continue; '
    'read v < "$d/vendor" || { echo "hc-pci-error: $d"; continue; }; '
    '[ "$v" = 0x10de ] || continue; '
    'read c < "$d/class" || { echo "hc-pci-error: $d"; continue; }; '
    'r=; [ -L "$d/driver" ] && r=$(readlink "$d/driver"); '
    'echo "hc-pci: $d $c ${r##*/}"; done; echo hc-pci-end'))


def parse_pci_scan(text: str) -> list[tuple[str, str, str]]:
    """PCI_SCAN's output -> (bus id, class, driver) of each NVIDIA display/3D controller."""

    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if lines == ["hc-pci-none"]:
        return []
    if not lines or lines[-1] != "hc-pci-end":
        raise ProbeError("unparsable", "the PCI scan did not run to its end: cannot tell whether this node has "
                                       "NVIDIA GPUs", text[-2000:] or None)
    unread = [line.split(":", 1)[1].strip() for line in lines if line.startswith("hc-pci-error:")]
    if unread:
        raise ProbeError("unreadable", f"{PCI_DEVICES}: cannot read {', '.join(unread[:5])}: cannot tell whether "
                                       "this node has NVIDIA GPUs")
    found = []
    for line in lines:
        if line.startswith("hc-pci: "):
            parts = line[len("hc-pci: "):].split()
            if len(parts) >= 2 and parts[1].lower()[:6] in _GPU_CLASSES:
                found.append((normalize_pci(parts[0]), parts[1].lower(), parts[2] if len(parts) > 2 else ""))
    return found


# ------------------------------------------------------------------ kernel log


# The last instant an ISO 8601 date can name (9999-12-31T23:59:59Z). A later `since`, a
# negative one or one that is not a finite number cannot be a real window.
MAX_SINCE = 253402300799.0
KMSG = "/dev/kmsg"
# The words of the lines the Xid parser is given (gpu_events keeps only those): a /dev/kmsg
# record without one never becomes text.
NVIDIA_WORDS = ("NVRM", "nvswitch", "Xid")
NVIDIA_BYTES = tuple(word.encode() for word in NVIDIA_WORDS)
JOURNAL = ("journalctl", "-k", "-b", "-o", "short-iso", "--no-pager", "-q")


def read_kmsg_records(ctx: ProbeContext) -> list[bytes]:
    """Every /dev/kmsg record, as the device gives them: one a read, undecoded.

    The loop does nothing else per record (a GPU node's ring buffer holds 10^4-10^5 of them,
    read on every job start); `kmsg_lines` and `_read_kmsg` make text of what they need.
    """
    records: list[bytes] = []
    append, read = records.append, os.read
    fd = os.open(ctx.path(KMSG), os.O_RDONLY | os.O_NONBLOCK)
    try:
        while True:
            try:
                record = read(fd, 8192)
            except BlockingIOError:
                break  # EAGAIN: the buffer is drained
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # records were overwritten while we read; go on
                    continue
                raise
            if not record:
                break
            append(record)
    finally:
        os.close(fd)
    return records


def _read_kmsg(ctx: ProbeContext) -> str:
    """/dev/kmsg records as "[uptime] message" lines: all of them (hang diagnosis reads them all)."""
    lines = (kmsg_line(record.decode(errors="replace")) for record in read_kmsg_records(ctx))
    return "\n".join(line for line in lines if line is not None)


# A source: (name as reports say it, read() -> (text, note on why it may be empty) or (text,
# note, its kernel lines) where the source counted them: the lines of a text it narrowed).
Source = tuple[str, Callable[[], tuple[str, str] | tuple[str, str, int]]]


def read_kernel_log(sources: list[Source]) -> tuple[str, str, int]:
    """(text, source, kernel lines) of the first source that gave kernel lines.

    A source that refused, failed, or printed no kernel line is noted and the next one
    tried; when none gave a line, ProbeError names each source and why. An empty kernel
    log is never read as a clean one: a booted kernel always has lines since boot.
    """
    tried: list[str] = []
    kinds: set[str] = set()
    for name, read in sources:
        try:
            text, note, *counted = read()
        except ProbeError as exc:
            tried.append(exc.message if exc.message.startswith(name) else f"{name}: {exc.message}")
            kinds.add(exc.kind)
            if exc.kind == "timeout":
                break  # the run's time is spent: the next source would be abandoned anyway
            continue
        count = counted[0] if counted else kernel_lines(text)
        if count:
            return text, name, count
        tried.append(f"{name}: printed no kernel log line" + (f" ({note})" if note else ""))
        kinds.add("unreadable")
    # one kind of failure keeps its name (a timeout stays hc.E002, a missing tool hc.E001)
    kind = kinds.pop() if len(kinds) == 1 else "unreadable"
    raise ProbeError(kind, "cannot read the kernel log, so Xid/SXid events cannot be ruled out: "
                     + "; ".join(tried), "\n".join(tried))


def kmsg_source(ctx: ProbeContext) -> Source:
    """/dev/kmsg, every line of it."""
    def read() -> tuple[str, str]:
        try:
            return _read_kmsg(ctx), ""
        except OSError as exc:
            raise ProbeError("unreadable", f"{KMSG}: {exc.strerror or exc}") from None
    return KMSG, read


def kmsg_gpu_source(ctx: ProbeContext) -> Source:
    """/dev/kmsg narrowed to the lines gpu_events keeps, with the count of all its lines."""
    def read() -> tuple[str, str, int]:
        try:
            records = read_kmsg_records(ctx)
        except OSError as exc:
            raise ProbeError("unreadable", f"{KMSG}: {exc.strerror or exc}") from None
        text, count = kmsg_lines(records, NVIDIA_BYTES)
        return text, "", count
    return KMSG, read


def command_source(ctx: ProbeContext, argv: tuple[str, ...]) -> Source:
    name = " ".join(argv)

    def read() -> tuple[str, str]:
        result = ctx.runner.run(argv, timeout_s=ctx.timeout_s)
        if result.not_found:
            raise ProbeError("missing", f"{name}: not found")
        if result.timed_out:
            raise timeout_error(result, name, ctx.timeout_s)  # keeps what it printed
        if result.error:
            raise ProbeError("failed", f"{name}: {result.error}")
        said = (result.stderr or "").strip().splitlines()
        if result.returncode != 0:
            said = said or result.stdout.strip().splitlines()
            raise ProbeError("failed", f"{name}: exited {result.returncode}" + (f": {said[-1][:200]}" if said else ""))
        return result.stdout, said[-1][:200] if said else ""
    return name, read


def _file_source(ctx: ProbeContext, file: str | None) -> Source:
    name = f"file {file}"

    def read() -> tuple[str, str]:
        if not file:
            raise ProbeError("missing", "gpu.xid.source is file but gpu.xid.file is not set")
        try:
            # bounded and regular files only: /dev/zero or a FIFO named here is an ERROR,
            # not a prologue that runs out of memory or hangs
            data = read_bounded(ctx.path(file), TOOL_OUTPUT_MAX_BYTES, what="gpu.xid.file")
        except HcError as exc:
            raise ProbeError("unreadable", str(exc)) from None
        return data.decode(errors="replace"), "empty: does it still hold this boot's log, or was it rotated?"
    return name, read


_LOCAL_ORDER = {"auto": ("kmsg", "dmesg", "journal"), "kmsg": ("kmsg",), "dmesg": ("dmesg",),
                "journal": ("journal",), "file": ("file",)}


@provides("kernel_gpu_log", "local")
def kernel_gpu_log(ctx: ProbeContext):
    """Xid/SXid events since `params["since"]` (epoch seconds; default: since boot)."""
    policy = ctx.limits.gpu.xid if ctx.limits is not None else None
    source = policy.source if policy is not None else "auto"
    makers = {
        "kmsg": lambda: kmsg_gpu_source(ctx),
        "dmesg": lambda: command_source(ctx, ("dmesg",)),
        "journal": lambda: command_source(ctx, JOURNAL),
        "file": lambda: _file_source(ctx, policy.file if policy is not None else None),
    }
    text, how, count = read_kernel_log([makers[name]() for name in _LOCAL_ORDER.get(source, _LOCAL_ORDER["auto"])])
    log = gpu_events(ctx, text, how, count, boot_time(str(ctx.root)))
    return msgspec.structs.replace(log, boot_id=_local_boot_id(ctx))


BOOT_ID = "/proc/sys/kernel/random/boot_id"
_BOOT_ID_CHARS = frozenset("0123456789abcdef-")


def boot_id_of(text: str) -> str | None:
    """The kernel's boot id (a UUID) from what BOOT_ID held; None for anything else."""
    word = text.strip().lower()[:64]
    return word if 32 <= len(word) <= 36 and set(word) <= _BOOT_ID_CHARS else None


def _local_boot_id(ctx: ProbeContext) -> str | None:
    """This boot's id, or None where it cannot be read (escalation then counts no boot for this run)."""
    try:
        return boot_id_of(read_bounded(ctx.path(BOOT_ID), 128, what="boot_id").decode(errors="replace"))
    except HcError:
        return None


def window(raw: object, now: float | None = None) -> tuple[float | None, str | None]:
    """A run's `since` -> (epoch seconds or None for "since boot", a note when it is odd).

    Whatever sets it (the command line, a hook's cursor file, a remote caller), a
    `since` that is not a real time (NaN, inf, negative, past year 9999, not a number)
    would hide every event: it is read as "since boot" instead, and the note says so. A
    window in the future is kept, as asked, and noted.
    """
    if raw is None:
        return None, None
    try:
        t = math.nan if isinstance(raw, bool) else float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        t = math.nan
    if not math.isfinite(t) or not 0.0 <= t <= MAX_SINCE:
        return None, f"since={str(raw)[:40]!r} is not a usable time: read since boot"
    now = time.time() if now is None else now
    if t > now:
        return t, "the window starts in the future: no line can be in it yet"
    return t, None


def gpu_events(ctx: ProbeContext, text: str, how: str, count: int, boot: float | None = None):
    """The NVIDIA driver's events in a kernel log, within the run's window (`since`)."""

    # Only the NVIDIA driver's lines matter; a busy ring buffer holds ~100k others.
    # (each with its line end: a text that ends mid-line may end inside its last word, which is not read)
    # (NVIDIA_WORDS, spelt out: a generator per line costs 3x on a 100k-line dmesg)
    text = "".join(line + "\n" for line in text.splitlines() if "NVRM" in line or "nvswitch" in line or "Xid" in line)
    log = ctx.parse(lambda t: parse_kernel_log(t, boot_time=boot), text, how) if text else parse_kernel_log("")
    start, note = window(ctx.params.get("since"))
    if start is not None:
        log = since(log, start)
    return msgspec.structs.replace(log, source=how, source_lines=count, since=start, window_note=note)


# ---------------------------------------------------------------- agentless (ssh)

NVIDIA_SMI_Q = ("nvidia-smi", "-q")
KERNEL_LOG_COMMANDS = (("dmesg", "--time-format", "iso"), ("dmesg",), JOURNAL)


@provides("kernel_gpu_log", "ssh", prefetch=lambda ctx: [KERNEL_LOG_COMMANDS[0], ("cat", BOOT_ID)])
def kernel_gpu_log_ssh(ctx: ProbeContext):
    """The same events from dmesg (ISO times, then raw) or the journal, run over SSH."""
    text, how, count = read_kernel_log([command_source(ctx, argv) for argv in KERNEL_LOG_COMMANDS])
    log = gpu_events(ctx, text, how, count)
    result = ctx.runner.run(("cat", BOOT_ID), timeout_s=ctx.timeout_s)
    ok = result.returncode == 0 and not (result.not_found or result.timed_out or result.error)
    return msgspec.structs.replace(log, boot_id=boot_id_of(result.stdout or "") if ok else None)
