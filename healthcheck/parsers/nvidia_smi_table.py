"""`nvidia-smi` with no arguments (the default table) -> SmiTable.

Input: what operators paste into tickets, from drivers 384 to 610 (Linux and Windows):
the banner ("NVIDIA-SMI 550.90.07  Driver Version: ...  CUDA Version: 12.4", or 610's
"KMD Version"/"CUDA UMD Version"), the GPU table (two rows per GPU before driver 450,
three after: the third holds the MIG mode), the "MIG devices" table where MIG is on
and the "Processes" table (with GI/CI columns since 450). Every cell is read by its
position in its row, so column widths (which changed in 525 and again in 550) do not
matter; a table pasted with leading indentation reads the same.

nvidia-smi prints "ERR!" where it could not read a value (a fan that stopped
answering, a power sensor that failed). Such a cell is never a number here: the
value is None and the cell's name is listed in the row's `errors`, so a check can
tell "could not read" (ERR!) from "not applicable" (N/A, None with no error).

Instead of a table nvidia-smi may print one line: "No devices were found", a driver
that cannot be reached ("NVIDIA-SMI has failed because it couldn't communicate with
the NVIDIA driver"), or a GPU whose handle could not be had ("Unable to determine the
device handle for GPU..."): they are facts (no_devices, init_error, lost), not errors.
A banner with no GPU row after it (a paste cut at the column titles) gives the driver and
CUDA versions and `cut_before_gpus`: no GPU was read, which is not zero GPUs.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import msgspec

from healthcheck.core.errors import ParseError
from healthcheck.core.inputs import clip
from healthcheck.parsers.gpu_common import BUS_ID, DriverWarning, LostGpu, normalize_pci
from healthcheck.parsers.lines import (
    NOTHING_UNREAD,
    Unrecognized,
    UnrecognizedLines,
    pasted_lines,
)
from healthcheck.parsers.nvidia_smi import (
    dedupe_lost,
    driver_warning_from_line,
    failure_from_line,
    is_no_devices_line,
    lost_gpu_from_line,
)
from healthcheck.parsers.unread import note_unread

SOURCE = "nvidia-smi"
ERR = "ERR!"
NAME_MAX = 256  # a name longer than any GPU or process name nvidia-smi prints: hostile input

_PCI = re.compile(rf"^{BUS_ID}$")
_TOKEN = re.compile(r"\S+")
_NUMBER = re.compile(r"^(?P<num>[0-9]{1,15}(?:\.[0-9]{1,6})?)(?P<unit>[A-Za-z%]{0,3})$")
_TIMESTAMP = re.compile(r"^[A-Z][a-z]{2} [A-Z][a-z]{2} [ 0-9]\d \d\d:\d\d:\d\d \d{4}$")
_BORDER_CHARS = frozenset("+-=|")
# a processes table's row pasted without the table's title and column names above it:
# "0   N/A  N/A   11327   C   /root/tools/memhog   2566MiB" (GI and CI since 450),
# "0     44454      C   python     15631MiB" (before), "... C+G  C:\\...\\dwm.exe  N/A"
_PROCESS_ROW = re.compile(r"^\s*\d{1,3}\s+(?P<gi_ci>(?:N/A|\d{1,5})\s+(?:N/A|\d{1,5})\s+)?\d{1,10}\s+(?:C\+G|C|G)\s+"
                          r"\S[^|]{0,400}\s(?:\d{1,10}MiB|N/A)\s*$")


class TableGpu(msgspec.Struct, frozen=True, omit_defaults=True):
    """One GPU's rows of the table. None: N/A, or ERR! (then named in `errors`)."""

    index: int
    name: str | None = None  # as printed: long names are cut ("NVIDIA GeForce RTX 2080 ...")
    pci_bus_id: str | None = None  # normalised "0000:19:00.0"
    persistence_mode: bool | None = None
    driver_model: str | None = None  # Windows prints WDDM/TCC/MCDM where Linux has Persistence-M
    display_active: bool | None = None
    ecc_volatile_uncorrected: int | None = None
    ecc_enabled: bool | None = None  # the ECC cell says On/Off instead of a count (MIG mode)
    fan_pct: int | None = None
    temperature_c: int | None = None
    performance_state: str | None = None
    power_draw_w: float | None = None
    power_limit_w: float | None = None
    memory_used_mib: int | None = None
    memory_total_mib: int | None = None
    utilization_pct: int | None = None
    compute_mode: str | None = None  # "Default", "E. Process", "Prohibited"
    mig_mode: bool | None = None
    errors: list[str] = []  # the cells printed as ERR!: "fan", "power_draw", ...


class MigDevice(msgspec.Struct, frozen=True, omit_defaults=True):
    """One row pair of the "MIG devices" table."""

    gpu: int
    gi: int | None = None
    ci: int | None = None
    mig_dev: int | None = None
    memory_used_mib: int | None = None
    memory_total_mib: int | None = None
    bar1_used_mib: int | None = None
    bar1_total_mib: int | None = None
    sm_count: int | None = None
    ecc_volatile_uncorrected: int | None = None
    ce: int | None = None
    enc: int | None = None
    dec: int | None = None
    ofa: int | None = None
    jpg: int | None = None
    errors: list[str] = []


class TableProcess(msgspec.Struct, frozen=True, omit_defaults=True):
    """One row of the "Processes" table."""

    gpu: int
    pid: int | None = None
    gi: int | None = None  # GPU instance (MIG); None: N/A or a driver without the column
    ci: int | None = None
    type: str | None = None  # C, G, C+G, M, M+C
    name: str | None = None  # as printed: long paths are cut ("...-token=3E0EB0...")
    used_memory_mib: int | None = None  # None: N/A (Windows WDDM) or no such column
    note: str | None = None  # a row with no process, e.g. "Not Supported" (old GeForce drivers)


class SmiTable(msgspec.Struct, frozen=True, omit_defaults=True):
    source: str = SOURCE
    timestamp: str | None = None  # the first line, as printed ("Mon Jan 20 10:18:26 2025")
    driver_version: str | None = None  # "KMD Version" from 610 on
    cuda_version: str | None = None  # "CUDA UMD Version" from 610 on
    gpus: list[TableGpu] = []
    mig_devices: list[MigDevice] = []
    processes: list[TableProcess] | None = None  # None: no Processes table; []: none running
    lost: list[LostGpu] = []
    init_error: str | None = None
    no_devices: bool = False
    warnings: list[DriverWarning] = []  # "WARNING: infoROM is corrupted at gpu ..." lines beside the table
    # a banner but no GPU row (the paste ends at the banner or the column titles, or left the
    # GPU rows out): no GPU was read, which is not "no GPU" (`gpus` empty says nothing then)
    cut_before_gpus: bool = False
    # lines outside the tables that say nothing hc reads (another command's output, prose):
    # counted, the first few kept as evidence; a prompt, a blank or `...` is none
    unrecognized: Unrecognized = NOTHING_UNREAD


# ---------------------------------------------------------------------------
# Cells
# ---------------------------------------------------------------------------


class _Cells:
    """Typed reads of cells, recording which ones said ERR!."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    def _text(self, value: str | None, name: str) -> str | None:
        if value is None:
            return None
        text = value.strip()
        if text == ERR:
            if name not in self.errors:
                self.errors.append(name)
            return None
        if not text or text.upper() in {"N/A", "[N/A]"}:
            return None
        return text

    def number(self, value: str | None, name: str, unit: str = "") -> float | None:
        text = self._text(value, name)
        m = _NUMBER.match(text) if text is not None else None
        if m is None or (unit and m.group("unit") not in (unit, "")):
            return None
        return float(m.group("num"))

    def integer(self, value: str | None, name: str, unit: str = "") -> int | None:
        number = self.number(value, name, unit)
        return int(number) if number is not None and number.is_integer() else None

    def boolean(self, value: str | None, name: str) -> bool | None:
        text = self._text(value, name)
        low = text.lower() if text else None
        if low in {"on", "enabled", "yes"}:
            return True
        if low in {"off", "disabled", "no"}:
            return False
        return None

    def text(self, value: str | None, name: str) -> str | None:
        text = self._text(value, name)
        return clip(text, NAME_MAX) if text is not None else None

    def pair(self, value: str | None, name: str, unit: str) -> tuple[int | None, int | None]:
        """ "1MiB /  81559MiB" -> (1, 81559)."""
        used, sep, total = (value or "").partition("/")
        if not sep:
            self._text(value, name + "_used")
            return None, None
        return self.integer(used, name + "_used", unit), self.integer(total, name + "_total", unit)


def _spans(text: str) -> list[re.Match[str]]:
    return list(_TOKEN.finditer(text))


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.isascii() and text.isdigit() and len(text) <= 15 else None


# ---------------------------------------------------------------------------
# Rows -> facts
# ---------------------------------------------------------------------------


def _gpu(rows: list[list[str]]) -> TableGpu | None:
    """A GPU's two or three rows (cells split on "|"); None when the first is no GPU row."""
    first = rows[0]
    ident = first[0].strip()
    tokens = ident.split()
    index = _int(tokens[0]) if tokens else None
    if index is None:
        return None
    cells = _Cells()
    rest = ident[len(tokens[0]):].strip()
    name_part, _, last = rest.rpartition(" ")
    persistence: bool | None = None
    model: str | None = None
    if last in {"On", "Off"}:
        persistence = last == "On"
    elif last in {"WDDM", "TCC", "MCDM"}:
        model = last
    elif last == ERR:
        cells.errors.append("persistence_mode")
    elif last != "N/A":
        name_part = rest  # no persistence column at all: the whole cell is the name
    fields: dict[str, object] = {
        "index": index,
        "name": cells.text(name_part, "name"),
        "persistence_mode": persistence,
        "driver_model": model,
    }
    if len(first) > 1:
        bus = first[1].split()
        if bus and _PCI.match(bus[0]):
            fields["pci_bus_id"] = normalize_pci(bus[0])
        elif bus and bus[0] == ERR:
            cells.errors.append("pci_bus_id")
        fields["display_active"] = cells.boolean(bus[1] if len(bus) > 1 else None, "display_active")
    if len(first) > 2:
        ecc = first[2].strip()
        if ecc in {"On", "Off"}:
            fields["ecc_enabled"] = ecc == "On"
        else:
            fields["ecc_volatile_uncorrected"] = cells.integer(ecc, "ecc")
    if len(rows) > 1:
        fields.update(_status_row(rows[1], cells))
    if len(rows) > 2 and len(rows[2]) > 2:
        fields["mig_mode"] = cells.boolean(rows[2][2], "mig_mode")
    return TableGpu(**fields, errors=cells.errors)  # type: ignore[arg-type]


def _status_row(row: list[str], cells: _Cells) -> dict[str, object]:
    """ "N/A   27C    P0   72W /  700W | 1MiB / 81559MiB | 0%   Default"."""
    out: dict[str, object] = {}
    tokens = row[0].split()
    if len(tokens) >= 3:
        out["fan_pct"] = cells.integer(tokens[0], "fan", "%")
        out["temperature_c"] = cells.integer(tokens[1], "temperature", "C")
        perf = cells.text(tokens[2], "performance_state")
        out["performance_state"] = perf if perf and re.fullmatch(r"P\d{1,2}", perf) else None
        usage, sep, cap = " ".join(tokens[3:]).partition(" / ")
        if sep:
            out["power_draw_w"] = cells.number(usage, "power_draw", "W")
            out["power_limit_w"] = cells.number(cap, "power_limit", "W")
    if len(row) > 1:
        out["memory_used_mib"], out["memory_total_mib"] = cells.pair(row[1], "memory", "MiB")
    if len(row) > 2:
        util, _, mode = row[2].strip().partition(" ")
        out["utilization_pct"] = cells.integer(util, "utilization", "%")
        out["compute_mode"] = cells.text(mode, "compute_mode")
    return out


def _mig(rows: list[list[str]]) -> MigDevice | None:
    """ "0  2  0  0 | 22MiB / 71424MiB | 16  0 | 3  0  3  0  3" and its BAR1 row."""
    first = rows[0]
    ids = first[0].split()
    gpu = _int(ids[0]) if ids else None
    if gpu is None or len(first) < 2:
        return None
    cells = _Cells()
    fields: dict[str, object] = {"gpu": gpu}
    for key, value in zip(("gi", "ci", "mig_dev"), ids[1:4], strict=False):
        fields[key] = cells.integer(value, key)
    fields["memory_used_mib"], fields["memory_total_mib"] = cells.pair(first[1], "memory", "MiB")
    if len(first) > 2:
        sm_ecc = first[2].split()
        fields["sm_count"] = cells.integer(sm_ecc[0] if sm_ecc else None, "sm_count")
        fields["ecc_volatile_uncorrected"] = cells.integer(sm_ecc[1] if len(sm_ecc) > 1 else None, "ecc")
    if len(first) > 3:
        for key, value in zip(("ce", "enc", "dec", "ofa", "jpg"), first[3].split(), strict=False):
            fields[key] = cells.integer(value, key)
    if len(rows) > 1 and len(rows[1]) > 1:
        fields["bar1_used_mib"], fields["bar1_total_mib"] = cells.pair(rows[1][1], "bar1", "MiB")
    return MigDevice(**fields, errors=cells.errors)  # type: ignore[arg-type]


def _process(text: str, gi_ci: bool) -> TableProcess | None:
    """ "0   N/A  N/A    11327   C   /root/tools/memhog   2566MiB" (GI/CI since 450)."""
    spans = _spans(text)
    gpu = _int(spans[0].group()) if spans else None
    if gpu is None:
        return None
    cells = _Cells()
    lead = 3 if gi_ci else 1  # tokens before the PID
    if len(spans) <= lead or _int(spans[lead].group()) is None:
        # no process in the row: "0    Not Supported"
        note = text[spans[1].start():].strip() if len(spans) > 1 else None
        return TableProcess(gpu=gpu, note=clip(note, NAME_MAX) if note else None)
    gi = cells.integer(spans[1].group(), "gi") if gi_ci else None
    ci = cells.integer(spans[2].group(), "ci") if gi_ci else None
    pid = _int(spans[lead].group())
    kind = spans[lead + 1].group() if len(spans) > lead + 1 else None
    rest = text[spans[lead + 2].start():].rstrip() if len(spans) > lead + 2 else ""
    name, _, memory = rest.rpartition(" ")
    if not (memory.endswith("MiB") or memory == "N/A"):
        name, memory = rest, ""  # a table without the memory column
    return TableProcess(
        gpu=gpu,
        pid=pid,
        gi=gi,
        ci=ci,
        type=kind,
        name=cells.text(name, "name"),
        used_memory_mib=cells.integer(memory, "used_memory", "MiB"),
    )


# ---------------------------------------------------------------------------
# The scan
# ---------------------------------------------------------------------------


def _cells_of(line: str) -> list[str]:
    """ "| a | b |" -> [" a ", " b "]."""
    inner = line[1:-1] if line.endswith("|") and len(line) > 1 else line[1:]
    return inner.split("|")


def _is_border(line: str) -> bool:
    return set(line) <= _BORDER_CHARS and ("-" in line or "=" in line)


class _Scan:
    def __init__(self) -> None:
        self.timestamp: str | None = None
        self.driver: str | None = None
        self.cuda: str | None = None
        self.gpus: list[TableGpu] = []
        self.migs: list[MigDevice] = []
        self.processes: list[TableProcess] | None = None
        self.lost: list[LostGpu] = []
        self.init_error: str | None = None
        self.no_devices = False
        self.warnings: list[DriverWarning] = []
        # the table being read
        self.kind: str | None = None  # "gpus", "mig", "processes" once its header is known
        self.in_rows = False
        self.gi_ci = False
        self.group: list[list[str]] = []
        self.unrecognized = UnrecognizedLines()
        self.number = 0  # the line being read

    def flush(self) -> None:
        """The GPU or MIG device whose rows were collected is complete."""
        if self.group and self.kind in {"gpus", "mig"}:
            make: Callable[[list[list[str]]], TableGpu | MigDevice | None] = _gpu if self.kind == "gpus" else _mig
            item = make(self.group)
            if isinstance(item, TableGpu):
                self.gpus.append(item)
            elif isinstance(item, MigDevice):
                self.migs.append(item)
        self.group = []

    def end_table(self) -> None:
        self.flush()
        self.kind, self.in_rows, self.gi_ci = None, False, False

    def header(self, text: str) -> None:
        """A line above a table's "|====|" rule: the banner or the column names."""
        tokens = text.replace("|", " ").split()
        if "NVIDIA-SMI" in tokens:
            for i, token in enumerate(tokens[1:], start=1):
                if token != "Version:" or i + 1 >= len(tokens):
                    continue
                value = clip(tokens[i + 1], 40)
                if tokens[i - 1] in {"Driver", "KMD"}:
                    self.driver = value
                elif tokens[i - 1] in {"CUDA", "UMD"}:
                    self.cuda = value
        elif "Processes:" in tokens:
            self.kind = "processes"
        elif tokens[:2] == ["MIG", "devices:"]:
            self.kind = "mig"
        elif "Bus-Id" in tokens or "Persistence-M" in tokens:
            self.kind = "gpus"
        elif {"GPU", "PID", "Type"} <= set(tokens):
            self.kind = "processes"  # the column names, a paste cut after the "Processes:" title
        if self.kind == "processes" and "GI" in tokens and "CI" in tokens:
            self.gi_ci = True

    def row(self, line: str) -> None:
        cells = _cells_of(line)
        if self.kind == "processes":
            text = cells[0].strip()
            if self.processes is None:
                self.processes = []
            if text and text.lower() != "no running processes found":
                proc = _process(text, self.gi_ci)
                if proc is not None:
                    self.processes.append(proc)
            return
        if "Processes:" in line or "MIG devices:" in line:
            # a new table right after this one, with no blank line between
            self.end_table()
            self.header(line)
            return
        if not self.group and not cells[0].strip() and not any(c.strip() for c in cells):
            return
        self.group.append(cells)

    def line(self, raw: str) -> None:
        line = raw.replace("\x00", "").strip()
        if not line:
            self.end_table()
            return
        if line[0] not in "|+":
            self._message(line)
            return
        if _is_border(line):
            if "=" in line:
                self.in_rows = self.kind is not None
            elif self.in_rows and self.kind in {"gpus", "mig"}:
                self.flush()
            elif self.in_rows:
                self.end_table()
            return
        if self.in_rows:
            self.row(line)
            return
        cells = _cells_of(line)
        if self.kind is None and len(cells) == 3 and any(_PCI.match(t) for t in cells[1].split()[:1]):
            # a pasted fragment: GPU rows with no banner or header above them
            self.kind, self.in_rows = "gpus", True
            self.row(line)
            return
        if self.kind is None and len(cells) == 1 and (m := _PROCESS_ROW.match(cells[0])):
            # a pasted fragment: process rows with no title or column names above them
            self.kind, self.in_rows, self.gi_ci = "processes", True, m.group("gi_ci") is not None
            self.row(line)
            return
        self.header(line)

    def _message(self, line: str) -> None:
        """A line outside any table: the timestamp, or a one-line failure."""
        self.end_table()
        lost = lost_gpu_from_line(line)
        if lost is not None:
            self.lost.append(lost)
            return
        failure = failure_from_line(line)
        if failure is not None:
            self.init_error = self.init_error or failure
        elif is_no_devices_line(line):
            self.no_devices = True
        elif (warning := driver_warning_from_line(line)) is not None:
            self.warnings.append(warning)
        elif self.timestamp is None and _TIMESTAMP.match(line):
            self.timestamp = line
        else:  # a prompt, or the command echoed before the table, is no line of the tool's
            note_unread(self.unrecognized, self.number, line)


def parse_nvidia_smi_table(text: str) -> SmiTable:
    """`nvidia-smi` (the default table) -> SmiTable. ParseError when it is no such output."""
    if not text or not text.strip():
        raise ParseError("nvidia-smi: empty output")
    scan = _Scan()
    for number, line in enumerate(pasted_lines(text), 1):
        scan.number = number
        scan.line(line)
    scan.end_table()
    lost = dedupe_lost(scan.lost)
    found = scan.gpus or scan.migs or scan.processes is not None or scan.driver is not None
    if not found and not (lost or scan.no_devices or scan.init_error):
        raise ParseError(f"nvidia-smi: not the default nvidia-smi table (starts {clip(text.strip(), 60)!r})")
    # the banner's versions are facts of their own; a table without its GPU rows was cut (a
    # driver with no GPU prints "No devices were found" instead of a table)
    cut = scan.driver is not None and not scan.gpus and not scan.no_devices and scan.init_error is None
    return SmiTable(
        timestamp=scan.timestamp,
        driver_version=scan.driver,
        cuda_version=scan.cuda,
        gpus=scan.gpus,
        mig_devices=scan.migs,
        processes=scan.processes,
        lost=lost,
        init_error=scan.init_error if not scan.gpus else None,
        no_devices=scan.no_devices and not scan.gpus,
        warnings=scan.warnings,
        cut_before_gpus=cut,
        unrecognized=scan.unrecognized.frozen_or_nothing(),
    )
