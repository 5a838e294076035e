"""`nvidia-smi -q` text (all GPUs, or one with -i) -> GpuFacts; also `-q -x`'s XML, read as
the -q text of the same tree (parsers/nvidia_smi_xml.py), so its facts have the same keys.

Input: what `nvidia-smi -q` prints on stdout, optionally with stderr mixed in, from
drivers 470 to 610. The report is an indented tree ("GPU 00000000:19:00.0", then
"    Product Name : ...", sections like "    ECC Errors" with deeper lines), so the
parser builds that tree per GPU block and reads values by their path. Reading by
path, not by a flat "last key wins" scan, is what keeps the MIG Device subsections
("Shared FB Memory Usage", their own "ECC Errors") from overwriting the parent GPU's
values, and "Clocks Event Reasons Counters" from being read as reasons.

Besides the report, nvidia-smi prints one-line failures instead of (or next to) it:
"Unable to determine the device handle for GPU...: Unknown Error" (a GPU that fell
off the bus: a LostGpu), "No devices were found" (zero GPUs), and driver/NVML start
failures (GpuFacts.init_error). The helpers for those lines, and the value helpers,
are shared with the --query-gpu parser (nvidia_smi_query.py).

A value nvidia-smi could not give (N/A, [Not Supported], ERR!, Unknown Error,
"Requested functionality has been deprecated") is None, never 0.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import msgspec

from healthcheck.core.errors import ParseError
from healthcheck.core.gpu_vocabulary import THROTTLE_REASONS
from healthcheck.core.inputs import clip
from healthcheck.parsers.gpu_common import (
    BUS_ID,
    DriverWarning,
    Gpu,
    GpuFacts,
    GpuProcess,
    GpuReadings,
    LostGpu,
    RemapHistogram,
    normalize_pci,
)
from healthcheck.parsers.lines import UnrecognizedLines, pasted_lines
from healthcheck.parsers.nvidia_smi_tree import adopted, flattened, renested
from healthcheck.parsers.nvidia_smi_xml import xml_as_q_text, xml_start
from healthcheck.parsers.unread import note_unread

SOURCE = "nvidia-smi -q"

# ---------------------------------------------------------------------------
# Values shared by both nvidia-smi parsers
# ---------------------------------------------------------------------------

# What nvidia-smi prints where it has no value; -q prints them bare, --query-gpu
# in brackets ("[N/A]"). Compared lower-case, without the brackets.
_UNKNOWN = {
    "n/a",
    "not supported",
    "unknown error",
    "err!",
    "requested functionality has been deprecated",
    "insufficient permissions",
    "gpu is lost",
    "not available",
    "not found",
    "unknown",
}
_TRUE = {"enabled", "yes", "active", "true", "on"}
_FALSE = {"disabled", "no", "not active", "false", "off"}
# Digit runs are bounded: int() refuses more than 4,300 digits, and a hostile value of a
# million digits must read as "not a number" (None), not crash the parser.
_NUMBER = re.compile(r"^(?P<num>-?[0-9]{1,30}(?:\.[0-9]{1,30})?)\s*(?P<unit>[A-Za-z%]*)$")
_WIDTH = re.compile(r"^(?P<num>[0-9]{1,9})\s*[xX]$")  # PCIe link width "16x"
_VERSION = re.compile(r"^\d+(?:\.\d+)*")


def clean_value(value: str | None) -> str | None:
    """The value as text, or None where nvidia-smi says it has none."""
    if value is None:
        return None
    text = value.strip()
    # Strip brackets only around a marker: a process may be named "[kworker]".
    marker = text[1:-1].strip() if text.startswith("[") and text.endswith("]") else text
    if not text or not marker or marker.lower() in _UNKNOWN:
        return None
    return text


def parse_int(value: str | None) -> int | None:
    """ "81559 MiB" / "0" / "16x" -> int; a unit is allowed, anything else is None."""
    text = clean_value(value)
    if text is None:
        return None
    m = _WIDTH.match(text)
    if m:
        return int(m.group("num"))
    m = _NUMBER.match(text)
    if not m or "." in m.group("num"):
        return None
    return int(m.group("num"))


def parse_float(value: str | None) -> float | None:
    """ "59 C" / "69.85 W" / "41" -> float."""
    text = clean_value(value)
    m = _NUMBER.match(text) if text is not None else None
    return float(m.group("num")) if m else None


def parse_bool(value: str | None) -> bool | None:
    """Enabled/Disabled, Yes/No, Active/Not Active -> bool; anything else None."""
    text = clean_value(value)
    if text is None:
        return None
    low = " ".join(text.lower().split())
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    return None


def parse_version(value: str | None) -> str | None:
    """ "590.48.01" -> itself; "610.43.02 [Deprecated; ...]" -> "610.43.02"; "Not Found" -> None."""
    text = clean_value(value)
    m = _VERSION.match(text) if text is not None else None
    return m.group(0) if m else None


def parse_pstate(value: str | None) -> str | None:
    text = clean_value(value)
    return text.upper() if text and re.fullmatch(r"[Pp]\d{1,2}", text) else None


# ---------------------------------------------------------------------------
# One-line messages nvidia-smi prints instead of (or next to) its report
# ---------------------------------------------------------------------------

# Linux's nvidia-smi says "determine", Windows' nvidia-smi.exe "detect" (field/issues-14's
# `Unable to detect the device handle for GPU0000:B1:00.0: Unknown Error`): one message.
_LOST = re.compile(r"Unable to (?:determine|detect) the device handle for GPU\s*(?P<rest>.*)$", re.IGNORECASE)
_PCI_ID = BUS_ID
# "GPU0000:3B:00.0: Unknown Error" (535 and older) or "GPU1: 0000:34:00.0: Unknown Error"
# (newer drivers name the index too). The index needs ": " after it, so the domain
# "0000:" of the older form is never taken for an index.
_PCI_FULL = re.compile(r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]")  # a whole bus id, domain too
_LOST_PCI = re.compile(rf"^(?:(?P<idx>[0-9]{{1,9}}):\s+)?(?P<pci>{_PCI_ID})\s*:\s*(?P<err>.*)$")
# "GPU 0: Unknown Error" / "GPU1: Unknown Error": index only.
_LOST_IDX = re.compile(r"^(?P<idx>[0-9]{1,9})\s*:\s*(?P<err>.*)$")

# Whole-command failures: (marker in the line, init_error to report).
_FAILURES = (
    (
        "couldn't communicate with the nvidia driver",
        "nvidia-smi: couldn't communicate with the NVIDIA driver",
    ),
    ("couldn't find libnvidia-ml.so", "nvidia-smi: couldn't find libnvidia-ml.so"),
)
_NVML_INIT = re.compile(r"^Failed to initialize NVML:\s*(?P<why>.*)$", re.IGNORECASE)
_NO_DEVICES = re.compile(r"^No devices were found\s*$", re.IGNORECASE)


def lost_gpu_from_line(line: str) -> LostGpu | None:
    """An "Unable to determine (or detect) the device handle for GPU..." line -> LostGpu, else None."""
    m = _LOST.search(line.strip())
    if not m:
        return None
    rest = m.group("rest").strip()
    mp = _LOST_PCI.match(rest)
    if mp:
        idx = mp.group("idx")
        return LostGpu(
            pci_bus_id=normalize_pci(mp.group("pci")),
            index=int(idx) if idx is not None else None,
            error=mp.group("err").strip(),
        )
    mi = _LOST_IDX.match(rest)
    if mi:
        return LostGpu(pci_bus_id=None, index=int(mi.group("idx")), error=mi.group("err").strip())
    return LostGpu(pci_bus_id=None, error=rest)


# "WARNING: infoROM is corrupted at gpu 0008:00:00.0" (nvidia-smi, after its table or -q)
_WARNING = re.compile(r"WARNING:[ \t]{0,8}(?P<message>\S.{0,500})", re.IGNORECASE)
_WARNING_GPU = re.compile(rf"\bat (?:gpu|GPU) (?P<pci>{_PCI_ID})\b")


def driver_warning_from_line(line: str) -> DriverWarning | None:
    """A `WARNING: ...` line -> DriverWarning, else None."""
    m = _WARNING.match(line.strip())
    if m is None:
        return None
    message = m.group("message").strip()
    gpu = _WARNING_GPU.search(message)
    return DriverWarning(message=message, pci_bus_id=normalize_pci(gpu.group("pci")) if gpu else None)


def failure_from_line(line: str) -> str | None:
    """A line saying nvidia-smi could not start at all -> the init_error, else None."""
    text = line.strip()
    low = text.lower()
    for marker, error in _FAILURES:
        if marker in low:
            return error
    m = _NVML_INIT.match(text)
    if m:
        # "Driver/library version mismatch", "Unknown Error" (often a container
        # without the device nodes): the reason is the useful part.
        return f"nvidia-smi: Failed to initialize NVML: {m.group('why').strip()}"
    return None


def is_no_devices_line(line: str) -> bool:
    return bool(_NO_DEVICES.match(line.strip()))


def assign_indexes(pci_ids: list[str], lost: list[LostGpu]) -> tuple[list[int], list[LostGpu]]:
    """NVML indexes for the healthy GPUs (in output order) and the lost ones.

    nvidia-smi lists GPUs in NVML index order, which is PCI bus order; a lost GPU
    has no block but still holds its index, so the blocks after it are shifted.
    Where every lost GPU names its bus id, the index is the rank in the bus-ordered
    union; otherwise the indexes the lost lines name are skipped.
    """
    if not lost:
        return list(range(len(pci_ids))), []
    if all(g.pci_bus_id for g in lost):
        order = sorted(set(pci_ids) | {g.pci_bus_id for g in lost if g.pci_bus_id})
        rank = {pci: i for i, pci in enumerate(order)}
        lost = [
            g if g.index is not None else msgspec.structs.replace(g, index=rank[g.pci_bus_id or ""])
            for g in lost
        ]
        return [rank[p] for p in pci_ids], lost
    taken = {g.index for g in lost if g.index is not None}
    indexes: list[int] = []
    i = 0
    for _ in pci_ids:
        while i in taken:
            i += 1
        indexes.append(i)
        i += 1
    return indexes, lost


def dedupe_lost(lost: list[LostGpu]) -> list[LostGpu]:
    """The same handle error can come on stdout and stderr: keep one of each."""
    seen: set[tuple[Any, ...]] = set()
    out: list[LostGpu] = []
    for g in lost:
        key = (g.pci_bus_id, g.index, g.error)
        if key not in seen:
            seen.add(key)
            out.append(g)
    return out


# ---------------------------------------------------------------------------
# The -q report as a tree
# ---------------------------------------------------------------------------

_GPU_HEADER = re.compile(rf"^GPU\s+(?P<pci>{_PCI_ID})\s*$")
# The key is everything before the first colon, stripped in code: a lazy key followed
# by `\s*` made a line with a long run of spaces and no colon quadratic.
_KEY_VALUE = re.compile(r"^(?P<key>[^:]*+):\s?(?P<value>.*)$")
_BANNER = re.compile(r"={2,80}\s{0,4}NVSMI LOG\s{0,4}={2,80}")  # `==============NVSMI LOG==============`
# -q's sections at the left margin, outside the GPU blocks (driver 580's `vGPU Driver Capability`)
_TOP_SECTIONS = frozenset({"vgpu driver capability"})
_NOT_A_NAME = re.compile(r"[^a-z0-9]+")
FRAGMENT_MAX = 1000  # grep'd lines of -q kept: a grep of every GPU's is a few dozen


class _Node:
    """One line of the report: its key, its value (None for a section header), its sub-lines."""

    __slots__ = ("children", "key", "value")

    def __init__(self, key: str, value: str | None) -> None:
        self.key = key
        self.value = value
        self.children: list[_Node] = []


def _norm(key: str) -> str:
    # "Ecc Mode" (525 and older) and "ECC Mode" are the same section.
    return " ".join(key.lower().split())


def _child(node: _Node | None, *path: str) -> _Node | None:
    """The first node along `path` (keys compared case-insensitively), or None."""
    for key in path:
        if node is None:
            return None
        want = _norm(key)
        node = next((c for c in node.children if _norm(c.key) == want), None)
    return node


def _value(node: _Node | None, *path: str) -> str | None:
    found = _child(node, *path)
    return found.value if found is not None else None


def _first_value(node: _Node | None, *keys: str) -> str | None:
    """The value of the first of `keys` that `node` has (one key, renamed over time)."""
    return next((v for v in (_value(node, k) for k in keys) if v is not None), None)


def _walk(node: _Node) -> Iterator[_Node]:
    """Every node under `node`, in output order (no recursion: garbage can nest deep)."""
    stack = list(reversed(node.children))
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(current.children))


def _build_tree(lines: list[str]) -> _Node:
    """Indented "Key : value" lines -> a tree; deeper indentation is a sub-line."""
    root = _Node("", None)
    stack: list[tuple[int, _Node]] = [(-1, root)]
    for raw in lines:
        line = raw.expandtabs(8).rstrip()
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        m = _KEY_VALUE.match(line.strip())
        node = _Node(m.group("key").rstrip(), m.group("value")) if m else _Node(line.strip(), None)
        while stack[-1][0] >= indent:
            stack.pop()
        stack[-1][1].children.append(node)
        stack.append((indent, node))
    return root


class _Scan:
    """The output split into top-level values, GPU blocks and one-line messages."""

    def __init__(self) -> None:
        self.top: dict[str, str] = {}
        self.blocks: list[tuple[str, list[str]]] = []  # (bus id from the "GPU ..." line, lines)
        self.lost: list[LostGpu] = []
        self.init_error: str | None = None
        self.no_devices = False
        self.warnings: list[DriverWarning] = []
        self.loose: list[str] = []  # indented lines outside any GPU block (`nvidia-smi -q | grep GSP`)
        self.loose_first: int | None = None  # how many of them came before the first GPU block
        self.unread = UnrecognizedLines()  # lines at the left margin that are none of -q's


def _message(scan: _Scan, line: str) -> bool:
    """A one-line message of nvidia-smi's (a lost GPU, a failure, no devices, a driver
    warning), read into `scan`; False for any other line."""
    lost = lost_gpu_from_line(line)
    if lost is not None:
        scan.lost.append(lost)
        return True
    failure = failure_from_line(line)
    if failure is not None:
        scan.init_error = scan.init_error or failure
        return True
    if is_no_devices_line(line):
        scan.no_devices = True
        return True
    warning = driver_warning_from_line(line) if line[:1] in "Ww" else None
    if warning is not None:
        scan.warnings.append(warning)
        return True
    return False


def _scan(text: str) -> _Scan:
    scan = _Scan()
    block: list[str] | None = None
    lines = pasted_lines(text.replace("\x00", ""))
    if flattened(lines):  # a paste that lost -q's indentation: nested again by the tree's own keys
        lines = renested(lines)
    for number, line in enumerate(lines, 1):
        if _message(scan, line):
            continue
        m = _GPU_HEADER.match(line.strip()) if not line[:1].isspace() else None
        if m:
            block = []
            scan.blocks.append((m.group("pci"), block))
            scan.loose_first = len(scan.loose) if scan.loose_first is None else scan.loose_first
            continue
        if line.strip() and not line[:1].isspace() and not (block is None and _is_section(line)):
            kv = _KEY_VALUE.match(line.strip())
            if kv or _norm(line) in _TOP_SECTIONS:  # a top-level line ("Driver Version : ...") ends any GPU block
                block = None
            if kv:
                scan.top.setdefault(_norm(kv.group("key")), kv.group("value"))  # _norm strips the key
            elif _norm(line) not in _TOP_SECTIONS and not _BANNER.fullmatch(line.strip()):
                note_unread(scan.unread, number, line)  # no line of -q's: it ends no GPU block
            continue
        if block is not None:
            block.append(line)
        elif line.strip() and len(scan.loose) < FRAGMENT_MAX:
            scan.loose.append(line)
    return scan


def _is_section(line: str) -> bool:
    """A GPU block's section line at the left margin (`Remapped Rows`, `Performance State :
    P8`): outside any GPU block, a paste's sections whose common indent was taken off."""
    kv = _KEY_VALUE.match(line.strip())
    return _norm(kv.group("key") if kv else line) in _SECTIONS


# ---------------------------------------------------------------------------
# One GPU block -> Gpu fields
# ---------------------------------------------------------------------------


def _identity(root: _Node) -> dict[str, Any]:
    return {
        "name": clean_value(_value(root, "Product Name")),
        "uuid": clean_value(_value(root, "GPU UUID")),
        "serial": clean_value(_value(root, "Serial Number")),
        "vbios_version": clean_value(_value(root, "VBIOS Version")),
        "persistence_mode": parse_bool(_value(root, "Persistence Mode")),
        # MIG Mode/Current: Enabled/Disabled; N/A on GPUs without MIG -> None.
        "mig_mode": parse_bool(_value(root, "MIG Mode", "Current")),
        "performance_state": parse_pstate(_value(root, "Performance State")),
        "temperature_c": parse_float(_value(root, "Temperature", "GPU Current Temp")),
        "utilization_gpu_pct": parse_float(_value(root, "Utilization", "Gpu")),
        "memory_total_mib": parse_int(_value(root, "FB Memory Usage", "Total")),
        "memory_used_mib": parse_int(_value(root, "FB Memory Usage", "Used")),
        "fabric_state": clean_value(_value(root, "Fabric", "State")),
        "virtualization_mode": clean_value(_value(root, "GPU Virtualization Mode", "Virtualization Mode")),
    }


def _sum_known(values: list[int | None]) -> int | None:
    """The sum of the counters that could be read; None when none could.

    A partial sum is a lower bound, which is what a "> 0 uncorrectable" check needs;
    None keeps "unknown" from reading as 0.
    """
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _bit_group_total(group: _Node) -> int | None:
    """Older layout ("Single Bit"/"Double Bit" with per-unit lines): its Total line,
    else the sum of the per-unit lines."""
    total = parse_int(_value(group, "Total"))
    if total is not None:
        return total
    return _sum_known([parse_int(c.value) for c in group.children if _norm(c.key) != "total"])


def _ecc_counts(timescale: _Node | None) -> tuple[int | None, int | None]:
    """(corrected, uncorrected) of an "ECC Errors/Volatile" or ".../Aggregate" section.

    Newer drivers list SRAM/DRAM lines ("SRAM Correctable", "SRAM Uncorrectable Parity",
    "SRAM Uncorrectable SEC-DED", "DRAM Uncorrectable", ...): the totals are the sums,
    as --query-gpu's ecc.errors.*.total are. Volta-era layouts group by "Single Bit"
    (corrected) and "Double Bit" (uncorrected), each with a Total.
    """
    if timescale is None:
        return None, None
    corrected: list[int | None] = []
    uncorrected: list[int | None] = []
    for c in timescale.children:
        key = _norm(c.key)
        if c.children:
            if key == "single bit":
                corrected.append(_bit_group_total(c))
            elif key == "double bit":
                uncorrected.append(_bit_group_total(c))
            continue
        if "threshold" in key:  # "SRAM Threshold Exceeded: No" is a flag, not a count
            continue
        if "uncorrectable" in key:
            uncorrected.append(parse_int(c.value))
        elif "correctable" in key:
            corrected.append(parse_int(c.value))
    return _sum_known(corrected), _sum_known(uncorrected)


def _memory_errors(root: _Node) -> dict[str, Any]:
    ecc = _child(root, "ECC Errors")
    vol_c, vol_u = _ecc_counts(_child(ecc, "Volatile"))
    agg_c, agg_u = _ecc_counts(_child(ecc, "Aggregate"))
    retired = _child(root, "Retired Pages")
    # The pending flag was renamed over the years; same meaning.
    pending = _first_value(retired, "Pending Page Blacklist", "Pending Page Retirement", "Pending")
    remap = _child(root, "Remapped Rows")  # "Remapped Rows : N/A" (MIG, pre-Ampere): no sub-lines
    return {
        "ecc_enabled": parse_bool(_value(root, "ECC Mode", "Current")),
        "ecc_volatile_corrected": vol_c,
        "ecc_volatile_uncorrected": vol_u,
        "ecc_aggregate_corrected": agg_c,
        "ecc_aggregate_uncorrected": agg_u,
        "retired_pages_sbe": parse_int(_value(retired, "Single Bit ECC")),
        "retired_pages_dbe": parse_int(_value(retired, "Double Bit ECC")),
        "retired_pages_pending": parse_bool(pending),
        "remapped_rows_correctable": parse_int(_value(remap, "Correctable Error")),
        "remapped_rows_uncorrectable": parse_int(_value(remap, "Uncorrectable Error")),
        "remapped_rows_pending": parse_bool(_value(remap, "Pending")),
        "remapped_rows_failure": parse_bool(_value(remap, "Remapping Failure Occurred")),
        "remap_histogram": _remap_histogram(_child(remap, "Bank Remap Availability Histogram")),
    }


def _banks(value: str | None) -> int | None:
    """ "2560 bank(s)" -> 2560."""
    text = clean_value(value)
    if text is not None and text.endswith("bank(s)"):
        text = text[: -len("bank(s)")]
    return parse_int(text)


def _remap_histogram(section: _Node | None) -> RemapHistogram | None:
    """The "Bank Remap Availability Histogram" (Max, High, Partial, Low, None banks); None
    unless every level was read: a level left out is unknown, not 0 banks."""
    if section is None:
        return None
    levels = {level: _banks(_value(section, level)) for level in ("Max", "High", "Partial", "Low", "None")}
    if any(v is None for v in levels.values()):
        return None
    return RemapHistogram(**{k.lower(): v for k, v in levels.items() if v is not None})


# -q line names -> canonical reason names (gpu_common.THROTTLE_REASONS).
_REASON_LINES = {
    "idle": "gpu_idle",
    "gpu idle": "gpu_idle",
    "applications clocks setting": "applications_clocks_setting",
    "application clocks setting": "applications_clocks_setting",
    "sw power cap": "sw_power_cap",
    "hw slowdown": "hw_slowdown",
    "hw thermal slowdown": "hw_thermal_slowdown",
    "hw power brake slowdown": "hw_power_brake_slowdown",
    "sync boost": "sync_boost",
    "sw thermal slowdown": "sw_thermal_slowdown",
    "display clock setting": "display_clock_setting",
    "display clocks setting": "display_clock_setting",
}
# Every reason nvidia-smi has listed since well before driver 470. "Display Clock
# Setting" is left out because --query-gpu has no column for it: both parsers then
# apply the same rule.
REQUIRED_REASONS = frozenset(THROTTLE_REASONS.values()) - {"display_clock_setting"}


def throttle_list(states: dict[str, bool]) -> list[str] | None:
    """Active reasons in bit order, or None unless every required reason was read.

    The list means "these are active, the others are not": a reason that could not
    be read (truncated output, N/A, a garbled line) would otherwise read as "not
    active", so an incomplete set is unknown (None).
    """
    if not REQUIRED_REASONS <= states.keys():
        return None
    return [name for name in THROTTLE_REASONS.values() if states.get(name)]


def _throttle(root: _Node) -> list[str] | None:
    # Driver 535 renamed "Clocks Throttle Reasons" to "Clocks Event Reasons".
    section = _child(root, "Clocks Event Reasons") or _child(root, "Clocks Throttle Reasons")
    if section is None:
        return None
    states: dict[str, bool] = {}
    # HW Thermal/Power Brake Slowdown are nested under HW Slowdown: walk the subtree.
    for node in _walk(section):
        name = _REASON_LINES.get(_norm(node.key))
        if name is None:
            continue
        state = parse_bool(node.value)
        if state is None:
            return None
        states[name] = state
    return throttle_list(states)


def _pcie(root: _Node) -> dict[str, Any]:
    """PCIe link generation and width.

    "Max" is the most the *link* can do, min(device max, host max) (the same number as
    NVML's nvmlDeviceGetMaxPcieLinkGeneration and --query-gpu's pcie.link.gen.max);
    "Device Max" is the GPU alone. A check comparing current with max should use the
    link's max: a Gen5 GPU in a Gen4 slot is a platform fact, not a degraded link.
    "Current" is the link's current state (newer drivers repeat it as "Device Current");
    it drops at idle to save power.
    """
    pci = _child(root, "PCI")
    gen = _child(pci, "GPU Link Info", "PCIe Generation")
    width = _child(pci, "GPU Link Info", "Link Width")
    current = parse_int(_value(gen, "Current"))
    if current is None:
        current = parse_int(_value(gen, "Device Current"))
    return {
        "pcie_gen_current": current,
        "pcie_gen_max": parse_int(_value(gen, "Max")),
        "pcie_width_current": parse_int(_value(width, "Current")),
        "pcie_width_max": parse_int(_value(width, "Max")),
        "pcie_replays": parse_int(_value(pci, "Replays Since Reset")),
    }


def _process(pid_node: _Node, fields: dict[str, str | None]) -> GpuProcess | None:
    pid = parse_int(pid_node.value)
    if pid is None:
        return None
    return GpuProcess(
        pid=pid,
        name=clean_value(fields.get("name")),
        used_memory_mib=parse_int(fields.get("used gpu memory")),
        type=clean_value(fields.get("type")),
    )


def _processes(root: _Node) -> list[GpuProcess] | None:
    """The Processes section: "Processes : None" -> []; absent or unreadable -> None.

    Each "Process ID" line carries Type/Name/Used GPU Memory as sub-lines; older
    drivers printed them as siblings after it, which is read the same way.
    """
    section = _child(root, "Processes")
    if section is None:
        return None
    if not section.children:
        text = (section.value or "").strip().lower()
        return [] if text in {"none", "no running processes found"} else None
    procs: list[GpuProcess] = []
    pid_node: _Node | None = None
    fields: dict[str, str | None] = {}

    def flush() -> None:
        if pid_node is not None:
            proc = _process(pid_node, fields)
            if proc is not None:
                procs.append(proc)

    for c in section.children:
        key = _norm(c.key)
        if key == "process id":
            flush()
            pid_node, fields = c, {_norm(s.key): s.value for s in c.children}
        elif pid_node is not None and key in {"type", "name", "used gpu memory"}:
            fields[key] = c.value
    flush()
    return procs


def _readings(root: _Node) -> dict[str, Any]:
    """What a GPU block's sections say, by GpuReadings' field names."""
    return {**_identity(root), **_memory_errors(root), "throttle_reasons": _throttle(root), **_pcie(root),
            "processes": _processes(root)}


def _gpu(header_pci: str, root: _Node, index: int) -> Gpu:
    # The bus id comes from the block's "GPU 00000000:19:00.0" line, which is always
    # whole once lines follow it; the PCI/Bus Id line repeats it but may be the line
    # a truncated capture cut in half.
    return Gpu(index=index, pci_bus_id=normalize_pci(header_pci), **_readings(root))


def _gpu_groups(lines: list[str]) -> list[_Node]:
    """Sections of -q pasted without their "GPU 00000000:19:00.0" line -> one tree per GPU:
    the sections of one GPU come once each, so a section named again starts the next GPU's
    (a `grep -A4 "Remapped Rows"` of every GPU). A fragment that starts inside a section gets
    that section's line back where its first lines name it (`nvidia_smi_tree.adopted`)."""
    groups: list[_Node] = []
    names: set[str] = set()
    for node in _build_tree(adopted(lines)).children:  # the section a fragment starts inside, put back
        name = _norm(node.key)
        if not groups or name in names:
            groups.append(_Node("", None))
            names = set()
        groups[-1].children.append(node)
        names.add(name)
    return groups


def _headless_blocks(lines: list[str]) -> list[tuple[str, _Node]]:
    """A fragment that starts inside a GPU's block, its `GPU 00000000:01:00.0` line cut off
    (field/issues-15: from `Board Part Number` on; or from inside its PCI section), whose PCI
    section names the GPU (`Bus Id : 00000000:01:00.0`) -> (that bus id, the GPU's tree): a
    GPU block like any other, the bus id its own PCI section's. A group whose Bus Id line is
    missing or cut is not one."""
    out = []
    for root in _gpu_groups(lines):
        # the PCI section's, or the section's own lines where the paste starts inside it
        bus_id = (_value(root, "PCI", "Bus Id") or _value(root, "Bus Id") or "").strip()
        if _PCI_FULL.fullmatch(bus_id):
            out.append((bus_id, root))
    return out


def _unnamed_gpus(lines: list[str]) -> list[GpuReadings]:
    """Sections of -q pasted without their "GPU 00000000:19:00.0" line (field/issues-5: only
    `    Remapped Rows` and its counters, indented as in the report) -> each GPU's readings
    (`_gpu_groups`). A group with no section hc knows (`_SECTIONS`), or whose sections give
    no reading (`GSP Firmware Version` grep'd), is no GPU."""
    out: list[GpuReadings] = []
    for root in _gpu_groups(lines):
        if not any(_norm(section.key) in _SECTIONS for section in root.children):
            continue
        readings = {key: value for key, value in _readings(root).items() if value is not None}
        if readings:
            out.append(GpuReadings(**readings))
    return out


# The sections of a GPU block (drivers 470-610), by the name `_norm` gives them: what a
# `nvidia-smi -q -d SECTION[,SECTION]` block may start with.
_SECTIONS = frozenset(_norm(k) for k in (
    "Performance State", "Clocks Event Reasons", "Clocks Throttle Reasons", "Clocks Event Reasons Counters",
    "FB Memory Usage", "BAR1 Memory Usage", "Conf Compute Protected Memory Usage", "ECC Mode", "ECC Errors",
    "Retired Pages", "Remapped Rows", "Temperature", "Utilization", "Power Readings", "GPU Power Readings",
    "Module Power Readings", "GPU Memory Power Readings", "Power Smoothing", "Workload Power Profiles",
    "Clocks", "Applications Clocks", "Default Applications Clocks", "Deferred Clocks", "Max Clocks",
    "Max Customer Boost Clocks", "Clock Policy", "Compute Mode", "Processes", "Accounting Mode",
    "Accounting Mode Buffer Size", "Encoder Stats", "FBC Stats", "Voltage", "GPU Reset Status",
    "GSP Firmware Version", "Fan Speed", "PCI", "Fabric", "MIG Mode", "GPU Virtualization Mode",
))


def _complete_enough(root: _Node) -> bool:
    """Whether a block tells something about its GPU: refused is a block cut before its
    first line was whole (nothing under the "GPU 00000000:42:00.0" line, or a piece of
    one line), since that line may be the name, cut ("NVIDIA H1").

    A line is whole once another follows it, so a block of two lines or more is a GPU, kept
    with the facts it has: a whole report's, one cut before its PCI section, or a
    `-q -d SECTION,...` fragment's, which never prints the Product Name. A one-line block
    is one when its line is a section hc knows ("Performance State : P8"). The bus id comes
    from the block's "GPU ..." line, which is whole once a line follows it.
    """
    lines = 0
    for _ in _walk(root):
        lines += 1
        if lines > 1:
            return True
    return lines == 1 and _norm(root.children[0].key) in _SECTIONS


# ---------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------


def _top_version(top: dict[str, str], *keys: str) -> str | None:
    # 610 keeps "Driver Version"/"CUDA Version" with a deprecation note and adds
    # "KMD Version"/"CUDA UMD Version": the first key given wins.
    for key in keys:
        version = parse_version(top.get(key))
        if version is not None:
            return version
    return None


def parse_nvidia_smi_q_pasted(text: str) -> GpuFacts:
    """`hc parse nvidia-smi-q`: also a fragment of -q, lines grep'd out of it with no GPU
    block (`nvidia-smi -q | grep GSP`), read into `fragment`; which GPU each line is of
    is not known, so no Gpu is made of it: whole sections pasted so (`Remapped Rows` and
    its lines) are `unnamed` GPUs' readings; a report cut after its header gives its versions
    and `cut_before_gpus`. (The probe reads whole reports only.)"""
    return parse_nvidia_smi_q(text, fragments=True)


def _fragment(lines: list[str]) -> dict[str, list[str]]:
    """`    GSP Firmware Version   : N/A` -> {"gsp_firmware_version": ["N/A"]}: each key as a
    name, its values in the order printed (one a GPU, when grep kept every GPU's)."""
    out: dict[str, list[str]] = {}
    for line in lines:
        kv = _KEY_VALUE.match(line.strip())
        if kv is None or not kv.group("value").strip():
            continue
        name = _NOT_A_NAME.sub("_", kv.group("key").strip().lower()).strip("_")[:64]
        if name:
            out.setdefault(name, []).append(clip(kv.group("value").strip(), 200))
    return out


def _without_gpu_lines(scan: _Scan) -> GpuFacts | None:
    """Lines of -q with no GPU block: each key's values (`fragment`) and, where they are
    whole sections, the unnamed GPUs they are of (`unnamed`); a report cut after its header
    (the driver version, no GPU line) is `cut_before_gpus`. None when they are none of these."""
    fragment = _fragment(scan.loose)
    unnamed = _unnamed_gpus(scan.loose)
    driver = _top_version(scan.top, "kmd version", "driver version")
    cut = not fragment and not unnamed and driver is not None
    if not fragment and not unnamed and not cut:
        return None
    return GpuFacts(source=SOURCE, fragment=fragment, unnamed=unnamed, warnings=scan.warnings, driver_version=driver,
                    cuda_version=_top_version(scan.top, "cuda umd version", "cuda version"), cut_before_gpus=cut)


def parse_nvidia_smi_q(text: str, *, fragments: bool = False) -> GpuFacts:
    """`nvidia-smi -q` output -> GpuFacts (source "nvidia-smi -q"). ParseError on garbage,
    and (unless `fragments`) on lines of -q without a GPU block."""
    if not text or not text.strip():
        raise ParseError("nvidia-smi -q: empty output")
    if xml_start(text) >= 0:  # `nvidia-smi -q -x`: the same tree as XML, read as its -q text
        text = xml_as_q_text(text)
    scan = _scan(text)
    lost = dedupe_lost(scan.lost)
    trees = [(pci, _build_tree(lines)) for pci, lines in scan.blocks]
    if fragments:  # a paste that starts inside a GPU's block: that GPU first, where it names its bus id
        trees = _headless_blocks(scan.loose[:scan.loose_first]) + trees
    blocks = [(pci, root) for pci, root in trees if _complete_enough(root)]
    if scan.blocks and not blocks:
        raise ParseError("nvidia-smi -q: output cut off before the first GPU's name and bus id")
    if not blocks and not lost and not scan.no_devices:
        if scan.init_error is not None:
            return GpuFacts(source=SOURCE, init_error=scan.init_error, unrecognized=scan.unread.frozen_or_nothing())
        pasted = _without_gpu_lines(scan) if fragments else None
        if pasted is not None:
            return msgspec.structs.replace(pasted, unrecognized=scan.unread.frozen_or_nothing())
        raise ParseError(f"nvidia-smi -q: no 'GPU xxxx:xx:xx.x' block (output starts {clip(text.strip(), 60)!r})")
    pci_ids = [normalize_pci(pci) for pci, _ in blocks]
    indexes, lost = assign_indexes(pci_ids, lost)
    gpus = [_gpu(pci, root, index) for (pci, root), index in zip(blocks, indexes, strict=True)]
    return GpuFacts(
        source=SOURCE,
        gpus=gpus,
        lost=lost,
        driver_version=_top_version(scan.top, "kmd version", "driver version"),
        cuda_version=_top_version(scan.top, "cuda umd version", "cuda version"),
        init_error=scan.init_error if not gpus else None,
        warnings=scan.warnings,
        unrecognized=scan.unread.frozen_or_nothing(),
    )
