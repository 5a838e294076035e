"""`nvidia-smi --query-gpu=<fields> --format=csv` text -> GpuFacts.

Input: the CSV nvidia-smi prints, one row per GPU, with its header line
("index, pci.bus_id, memory.total [MiB], ..."): columns are found by name, so any
subset and order of fields parses. Headers and values may carry units
("memory.total [MiB]", "81559 MiB"; `nounits` drops them from values). Without a
header (`--format=csv,noheader`) the caller must say which fields were asked for:
`parse_nvidia_smi_query(text, fields=[...])`; a paste that holds the command line
(`` `nvidia-smi --query-gpu=name,pci.device_id --format=csv,noheader` ``, a prompt's
`$ nvidia-smi --query-gpu=...`) names them itself: its `--query-gpu=` list is the
columns where no header line is there (and no row of the table).

Every column is kept: the ones the checks read become typed Gpu fields, and all of
them (utilisation, clocks, power, encoder stats, whatever was asked for) are in
`Gpu.query_fields` by field name (lower-case, unit dropped), numbers as numbers.

The one-line messages nvidia-smi prints instead of rows (a lost GPU, "No devices
were found", driver/NVML failures) are read as in the -q parser. Cells like [N/A],
[Not Supported], [Unknown Error], ERR! and "[Requested functionality has been
deprecated]" are None, never 0.

QUERY_FIELDS is what hc itself asks for when it runs nvidia-smi remotely.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Sequence
from typing import Any, NamedTuple

import msgspec

from healthcheck.core.errors import FragmentError, ParseError
from healthcheck.core.gpu_vocabulary import THROTTLE_REASONS
from healthcheck.core.inputs import clip
from healthcheck.parsers.gpu_common import (
    BUS_ID,
    Gpu,
    GpuFacts,
    GpuReadings,
    LostGpu,
    normalize_pci,
    throttle_names,
)
from healthcheck.parsers.lines import UnrecognizedLines, read_lines
from healthcheck.parsers.nvidia_smi import (
    assign_indexes,
    clean_value,
    dedupe_lost,
    failure_from_line,
    is_no_devices_line,
    lost_gpu_from_line,
    parse_bool,
    parse_float,
    parse_int,
    parse_pstate,
    parse_version,
    throttle_list,
)
from healthcheck.parsers.unread import note_unread

SOURCE = "nvidia-smi --query-gpu"

# What hc asks for: `nvidia-smi --query-gpu=` + ",".join(QUERY_FIELDS) + ` --format=csv`.
# An unknown field name makes nvidia-smi fail the whole query ("Field ... is not a
# valid field to query"), so this list holds only names that drivers 470 to 610 all
# accept. Where a field was renamed, the old name is used; newer drivers keep it as
# an alias (and the parser reads both spellings of the header):
#   - clocks_throttle_reasons.active: renamed clocks_event_reasons.active in 535;
#   - pcie.link.gen.current: "deprecated, use pcie.link.gen.gpucurrent" since about
#     the 550s (gpucurrent/gpumax/hostmax do not exist on 470);
#   - driver_version: "deprecated; use kmd_version" in 610 (kmd_version is 610+).
# Left out on purpose (see NEWER_QUERY_FIELDS): remapped_rows.* (added to
# --query-gpu after 470; 470 has them only in --query-remapped-rows and -q),
# fabric.state (NVSwitch fabric, 5xx), clocks_event_reasons.* (535+).
QUERY_FIELDS: tuple[str, ...] = (
    "index",
    "pci.bus_id",
    "name",
    "uuid",
    "serial",
    "vbios_version",
    "driver_version",
    "persistence_mode",
    "mig.mode.current",  # 450+
    "pstate",
    "ecc.mode.current",
    "ecc.errors.corrected.volatile.total",
    "ecc.errors.uncorrected.volatile.total",
    "ecc.errors.corrected.aggregate.total",
    "ecc.errors.uncorrected.aggregate.total",
    "retired_pages.single_bit_ecc.count",
    "retired_pages.double_bit.count",
    "retired_pages.pending",
    "temperature.gpu",
    "clocks_throttle_reasons.active",
    "pcie.link.gen.current",
    "pcie.link.gen.max",
    "pcie.link.width.current",
    "pcie.link.width.max",
    "memory.total",
    "memory.used",
)

# Fields the parser maps that are not valid on every driver hc supports: a caller
# that knows the driver is new enough (535+) may append them to QUERY_FIELDS.
NEWER_QUERY_FIELDS: tuple[str, ...] = (
    "remapped_rows.correctable",
    "remapped_rows.uncorrectable",
    "remapped_rows.pending",
    "remapped_rows.failure",
    "fabric.state",
)

# Gpu attribute -> the header names that carry it, preferred first. nvidia-smi
# accepts aliases (gpu_name, retired_pages.sbe, ...) and prints the name it was asked
# for, so every spelling is listed.
_COLUMNS: dict[str, tuple[str, ...]] = {
    "index": ("index",),
    "pci_bus_id": ("pci.bus_id", "gpu_bus_id"),
    "name": ("name", "gpu_name"),
    "uuid": ("uuid", "gpu_uuid"),
    "serial": ("serial", "gpu_serial"),
    "vbios_version": ("vbios_version",),
    "persistence_mode": ("persistence_mode",),
    "mig_mode": ("mig.mode.current",),
    "performance_state": ("pstate",),
    "ecc_enabled": ("ecc.mode.current",),
    "ecc_volatile_corrected": ("ecc.errors.corrected.volatile.total",),
    "ecc_volatile_uncorrected": ("ecc.errors.uncorrected.volatile.total",),
    "ecc_aggregate_corrected": ("ecc.errors.corrected.aggregate.total",),
    "ecc_aggregate_uncorrected": ("ecc.errors.uncorrected.aggregate.total",),
    "retired_pages_sbe": ("retired_pages.single_bit_ecc.count", "retired_pages.sbe"),
    "retired_pages_dbe": ("retired_pages.double_bit.count", "retired_pages.dbe"),
    "retired_pages_pending": ("retired_pages.pending",),
    "remapped_rows_correctable": ("remapped_rows.correctable", "remapped_rows.sbe"),
    "remapped_rows_uncorrectable": ("remapped_rows.uncorrectable", "remapped_rows.dbe"),
    "remapped_rows_pending": ("remapped_rows.pending",),
    "remapped_rows_failure": ("remapped_rows.failure",),
    "temperature_c": ("temperature.gpu",),
    # gpucurrent is the non-deprecated name of the same NVML reading as current
    # (the link's current generation); prefer it where the driver has it.
    "pcie_gen_current": ("pcie.link.gen.gpucurrent", "pcie.link.gen.current"),
    # max is min(GPU max, host max), what the link can reach; gpumax is the GPU alone
    # and would make a Gen5 GPU in a Gen4 slot look degraded. Same choice as -q.
    "pcie_gen_max": ("pcie.link.gen.max",),
    "pcie_width_current": ("pcie.link.width.current",),
    "pcie_width_max": ("pcie.link.width.max",),
    "memory_total_mib": ("memory.total",),
    "memory_used_mib": ("memory.used",),
    "fabric_state": ("fabric.state",),
    "fan_speed_pct": ("fan.speed",),
    "utilization_gpu_pct": ("utilization.gpu",),
    "utilization_memory_pct": ("utilization.memory",),
    # power.draw is what every driver has; 535+ adds .average and .instant beside it
    "power_draw_w": ("power.draw", "power.draw.instant", "power.draw.average"),
    "power_limit_w": ("enforced.power.limit", "power.limit"),
    "clocks_graphics_mhz": ("clocks.current.graphics", "clocks.gr"),
    "clocks_sm_mhz": ("clocks.current.sm", "clocks.sm"),
    "clocks_memory_mhz": ("clocks.current.memory", "clocks.mem"),
    "compute_mode": ("compute_mode",),
}
_CONVERT = {
    "index": parse_int,
    "name": clean_value,
    "uuid": clean_value,
    "serial": clean_value,
    "vbios_version": clean_value,
    "persistence_mode": parse_bool,
    "mig_mode": parse_bool,
    "performance_state": parse_pstate,
    "ecc_enabled": parse_bool,
    "retired_pages_pending": parse_bool,
    "remapped_rows_pending": parse_bool,
    "remapped_rows_failure": parse_bool,
    "temperature_c": parse_float,
    "fabric_state": clean_value,
    "fan_speed_pct": parse_float,
    "utilization_gpu_pct": parse_float,
    "utilization_memory_pct": parse_float,
    "power_draw_w": parse_float,
    "power_limit_w": parse_float,
    "clocks_graphics_mhz": parse_float,
    "clocks_sm_mhz": parse_float,
    "clocks_memory_mhz": parse_float,
    "compute_mode": clean_value,
}
QUERY_VALUE_MAX = 256  # a cell longer than any nvidia-smi value: hostile input, cut
_DRIVER_COLUMNS = ("kmd_version", "driver_version")  # 610 deprecates driver_version
_REASON_PREFIXES = ("clocks_event_reasons.", "clocks_throttle_reasons.")  # 535 renamed them

_PCI = re.compile(rf"^{BUS_ID}$")
_FIELD_NAME = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_.]*)(?:\s*\[[^\]]*\])?$")
_KNOWN_NAMES = frozenset(n for names in _COLUMNS.values() for n in names) | set(_DRIVER_COLUMNS)


# the command line pasted with its output: `--query-gpu=name,pci.device_id` (nvidia-smi
# also takes `--query-gpu name,...`); the field names as _FIELD_NAME reads a header's
_COMMAND_FIELDS = re.compile(r"--query-gpu[= ]([A-Za-z_][\w.]{0,127}(?:,[A-Za-z_][\w.]{0,127}){0,511})")


def command_fields(line: str) -> list[str] | None:
    """The fields a `nvidia-smi --query-gpu=...` command line on `line` asks for, lower
    case; None where the line holds no such command."""
    if "--query-gpu" not in line:
        return None
    m = _COMMAND_FIELDS.search(line)
    return [name.lower() for name in m.group(1).split(",")] if m else None


def _field_name(cell: str) -> str | None:
    """ "memory.total [MiB]" -> "memory.total"; a cell that is no field name -> None."""
    m = _FIELD_NAME.match(cell.strip())
    return m.group("name").lower() if m else None


def _header(cells: list[str]) -> list[str] | None:
    """The field names if `cells` is a header line, else None.

    Every cell must look like a field name and at least one must be a known or dotted
    name: a data row ("0, NVIDIA H100 80GB HBM3, ...") never passes.
    """
    names = [_field_name(c) for c in cells]
    if not names or any(n is None for n in names):
        return None
    clean = [n for n in names if n is not None]
    if not any(n in _KNOWN_NAMES or "." in n for n in clean):
        return None
    return clean


def _reasons(row: dict[str, str]) -> list[str] | None:
    """Active clock event reasons: the .active bitmask when it is there (complete by
    construction), else the per-reason Active/Not Active columns."""
    for prefix in _REASON_PREFIXES:
        text = clean_value(row.get(prefix + "active"))
        if text is not None:
            try:
                return throttle_names(int(text, 16))
            except ValueError:
                pass
    states: dict[str, bool] = {}
    for name in THROTTLE_REASONS.values():
        for prefix in _REASON_PREFIXES:
            state = parse_bool(row.get(prefix + name))
            if state is not None:
                states[name] = state
                break
    return throttle_list(states)


def _pick(row: dict[str, str], names: tuple[str, ...]) -> str | None:
    """The first of `names` the row has a value for (a known one, not [N/A])."""
    present = [row[n] for n in names if n in row]
    return next((v for v in present if clean_value(v) is not None), present[0] if present else None)


_QUERY_NUMBER = re.compile(r"^(?P<num>-?[0-9]{1,30}(?:\.[0-9]{1,30})?)\s*(?:[A-Za-z%]{1,4})?$")


# Fields whose values are names, versions or ids even where they look like numbers
# ("serial" 0000000000000, "inforom.oem" 2.1, "pci.device_id"): kept as text.
_TEXT_FIELDS = ("version", "inforom", "vbios", "serial", "uuid", "name", "bus_id", "timestamp", "pci.", "_id")


def _query_value(name: str, raw: str) -> int | float | str | None:
    """One cell as given: "629.25 W" -> 629.25, "81559 MiB" -> 81559, "[N/A]" -> None,
    anything else ("0x0000", "Enabled", a date, a version) as text."""
    text = clean_value(raw)
    if text is None:
        return None
    m = _QUERY_NUMBER.match(text) if not any(part in name for part in _TEXT_FIELDS) else None
    if m:
        num = m.group("num")
        return float(num) if "." in num else int(num)
    return clip(text, QUERY_VALUE_MAX)


def _gpu_fields(row: dict[str, str]) -> dict[str, Any]:
    fields: dict[str, Any] = {"query_fields": {name: _query_value(name, value) for name, value in row.items()}}
    for attr, names in _COLUMNS.items():
        if attr in {"index", "pci_bus_id"}:
            continue
        raw = _pick(row, names)
        if raw is not None:
            fields[attr] = _CONVERT.get(attr, parse_int)(raw)
    fields["throttle_reasons"] = _reasons(row)
    return fields


class _CsvLine(NamedTuple):
    number: int  # 1-based, in the text
    text: str
    cells: list[str]


def _table(lines: list[tuple[int, str]]) -> list[_CsvLine]:
    """Each line's CSV cells (each line alone: a row never spans two), blank rows left out."""
    table = []
    for number, line in lines:
        try:
            cells = [c.strip() for c in next(csv.reader((line,), skipinitialspace=True), [])]
        except csv.Error as exc:  # e.g. a cell past csv's field size limit (128 KiB)
            raise ParseError(f"nvidia-smi --query-gpu: not CSV: {clip(str(exc))}") from None
        if any(cells):
            table.append(_CsvLine(number, line, cells))
    return table


def _headed(
    table: list[_CsvLine], named: list[str] | None, unread: UnrecognizedLines, first: str
) -> tuple[list[str], list[_CsvLine]]:
    """(column names, the lines after them): the header line's names (a line before it
    counted in `unread`); without one, the fields the pasted command line `named`."""
    at = next((i for i, row in enumerate(table) if _header(row.cells) is not None), None)
    if at is None:
        if named:
            return named, table
        rows = any(len(row.cells) > 1 for row in table)
        raise (FragmentError if rows else ParseError)(  # CSV rows whose columns only the header names
            f"nvidia-smi --query-gpu: no CSV header line (output starts {clip(first.strip(), 60)!r});"
            " --format=csv,noheader needs the field list"
        )
    for row in table[:at]:
        note_unread(unread, row.number, row.text)
    return _header(table[at].cells) or [], table[at + 1:]


def _rows(
    lines: list[tuple[int, str]], fields: Sequence[str] | None, unread: UnrecognizedLines,
    named: list[str] | None = None,
) -> tuple[list[str], list[_CsvLine]]:
    """(column names, data rows) of the CSV lines; a line before the header, or one with no
    comma among rows of several columns, is no row of the table (counted in `unread`).
    `named`: the fields of a `--query-gpu=` command line pasted with the output."""
    table = _table(lines)
    if not table:
        return [], []
    if fields is None:
        columns, body = _headed(table, named, unread, lines[0][1])
    else:
        columns = [f.strip().lower() for f in fields]
        # the caller named the fields but the header is there too
        body = table[1:] if _header(table[0].cells) == columns else table
    rows = []
    for row in body:
        if len(row.cells) == 1 and len(columns) > 1:
            note_unread(unread, row.number, row.text)
        else:
            rows.append(row)
    return columns, rows


def parse_nvidia_smi_query_pasted(text: str) -> GpuFacts:
    """`hc parse nvidia-smi-query-gpu`: also a paste whose command line's fields name no bus id
    (`--query-gpu=name,pci.device_id`, no header): its rows are `unnamed` GPUs' readings,
    which GPU each is of not known.
    (The probe asks for pci.bus_id and reads only rows it names.)"""
    return parse_nvidia_smi_query(text, unnamed=True)


def parse_nvidia_smi_query(text: str, *, fields: Sequence[str] | None = None, unnamed: bool = False) -> GpuFacts:
    """`nvidia-smi --query-gpu=... --format=csv` -> GpuFacts (source "nvidia-smi --query-gpu").

    `fields`: the names passed to --query-gpu, for output without a header line (else
    a `--query-gpu=` command line in the text names them). `unnamed`: rows without a
    pci.bus_id column, their fields named by a pasted command line, are `unnamed` readings
    rather than refused.
    ParseError on empty output, garbage, or rows that cannot be matched to columns.
    """
    if not text or not text.strip():
        raise ParseError("nvidia-smi --query-gpu: empty output")
    lost: list[LostGpu] = []
    init_error: str | None = None
    no_devices = False
    csv_lines: list[tuple[int, str]] = []
    named: list[str] | None = None  # the fields of the command line pasted with the output
    # through the line layer: srun's `N: ` labels, colour codes, CRLF and a prompt line come
    # off; timestamps stay on, since `--query-gpu=timestamp,...` starts each row with one
    for read in read_lines(text.replace("\x00", ""), stamps=False):
        line = read.text
        asked = command_fields(line)
        if asked is not None:
            named = named or asked
            continue  # the command (after a prompt, in inline code): no row of the table
        if read.noise:
            continue  # a shell prompt or command echo before the output: the paste's, no GPU's
        gone = lost_gpu_from_line(line)
        failure = failure_from_line(line) if gone is None else None
        if gone is not None:
            lost.append(gone)
        elif failure is not None:
            init_error = init_error or failure
        elif is_no_devices_line(line):
            no_devices = True
        elif line.strip():
            csv_lines.append((read.number, line))
    lost = dedupe_lost(lost)
    if not csv_lines:
        if lost or no_devices:
            return GpuFacts(source=SOURCE, lost=assign_indexes([], lost)[1], init_error=init_error)
        if init_error is not None:
            return GpuFacts(source=SOURCE, init_error=init_error)
    unread = UnrecognizedLines()
    columns, rows = _rows(csv_lines, fields, unread, named)
    if unnamed:
        facts = _pasted_facts(columns, rows, lost, init_error, columns is named, unread)
    else:
        facts = _facts(columns, [row.cells for row in rows], lost, init_error)
    return msgspec.structs.replace(facts, unrecognized=unread.frozen_or_nothing()) if unread.count else facts


# why a pasted reading is partial (GpuFacts.incomplete)
NO_BUS_ID_COLUMN = "no pci.bus_id column: which GPU each row is of is not known (`unnamed`, in the order printed)"


def _pasted_facts(
    columns: list[str], rows: list[_CsvLine], lost: list[LostGpu], init_error: str | None,
    from_command: bool, unread: UnrecognizedLines,
) -> GpuFacts:
    """`hc parse`'s reading: where the probe's strict one refuses a text that still holds GPUs'
    readings (no pci.bus_id column, a bus id that is no PCI address, a row with more values
    than the header has columns), what can be read is kept and `incomplete` says what was
    missing. A text with none of it is refused as the probe refuses it."""
    why: list[str] = []
    fitting = [row for row in rows if len(row.cells) <= len(columns)]
    if columns and fitting and len(fitting) < len(rows):
        for row in rows:
            if len(row.cells) > len(columns):
                note_unread(unread, row.number, row.text)  # which value is which column's is not known
        why.append(f"{len(rows) - len(fitting)} row(s) with more values than the {len(columns)} columns: not read")
    cells = [row.cells for row in (fitting or rows)]
    if not any(n in columns for n in _COLUMNS["pci_bus_id"]) and cells and (
            from_command or _names_gpu_fields(columns, cells)):
        # the columns a pasted command named, or a header of fields hc knows, no bus id among
        # them: these rows are GPUs'; a header-like line of another tool's text (`launch.`),
        # with no field hc knows, is still refused
        facts = _unnamed_facts(columns, cells, lost)
        why.insert(0, NO_BUS_ID_COLUMN)
    else:
        odd: list[dict[str, str]] = []
        facts = _facts(columns, cells, lost, init_error, odd)
        if odd:
            why.append(f"{len(odd)} row(s) whose pci.bus_id is no PCI address: their readings are `unnamed`")
    return msgspec.structs.replace(facts, incomplete="; ".join(why)) if why else facts


def _names_gpu_fields(columns: list[str], rows: list[list[str]]) -> bool:
    """A header that names a field hc reads, over at least one row with a value for every column."""
    return any(n in _KNOWN_NAMES for n in columns) and any(len(cells) == len(columns) for cells in rows)


def _unnamed_facts(columns: list[str], rows: list[list[str]], lost: list[LostGpu]) -> GpuFacts:
    """Rows of fields that name no bus id: each GPU's readings, in the order printed
    (`GpuFacts.unnamed`); which GPU each is of is not known, so none is in `gpus`."""
    readings = []
    for cells in rows:
        if len(cells) > len(columns):
            raise ParseError(f"nvidia-smi --query-gpu: a row has {len(cells)} values for {len(columns)} columns")
        readings.append(GpuReadings(**_gpu_fields(dict(zip(columns, cells, strict=False)))))
    first = dict(zip(columns, rows[0], strict=False))
    return GpuFacts(source=SOURCE, unnamed=readings, lost=assign_indexes([], lost)[1],
                    driver_version=parse_version(_pick(first, _DRIVER_COLUMNS)))


def _facts(
    columns: list[str], rows: list[list[str]], lost: list[LostGpu], init_error: str | None,
    odd: list[dict[str, str]] | None = None,
) -> GpuFacts:
    """The rows' GPUs by bus id. `odd`: where given (`hc parse`), a row whose bus id is no PCI
    address goes there (its readings become `unnamed`) instead of refusing the text."""
    if not columns:
        raise ParseError("nvidia-smi --query-gpu: no CSV in the output")
    if not rows:
        raise ParseError("nvidia-smi --query-gpu: a header but no GPU rows (cut off?)")
    if not any(n in columns for n in _COLUMNS["pci_bus_id"]):
        raise ParseError("nvidia-smi --query-gpu: no pci.bus_id column to name the GPUs by")
    found: list[tuple[int | None, str, dict[str, Any]]] = []
    for cells in rows:
        if len(cells) > len(columns):
            raise ParseError(
                f"nvidia-smi --query-gpu: a row has {len(cells)} values for {len(columns)} columns"
            )
        # A shorter row (output cut off) keeps the columns it has; the rest stay None.
        row = dict(zip(columns, cells, strict=False))
        index = parse_int(row.get("index"))
        raw_bus_id = _pick(row, _COLUMNS["pci_bus_id"])
        if raw_bus_id is None:
            continue  # cut off before the bus id: nothing identifies this GPU
        bus_id = clean_value(raw_bus_id)
        if bus_id is not None and not _PCI.match(bus_id):
            if odd is None:
                raise ParseError(f"nvidia-smi --query-gpu: {clip(bus_id, 40)!r} is not a PCI bus id")
            odd.append(row)
            continue
        if bus_id is None:
            # nvidia-smi could not read the GPU's bus id: report it, do not drop it.
            error = "no PCI bus id in the --query-gpu row"
            lost.append(LostGpu(pci_bus_id=None, index=index, error=error))
            continue
        found.append((index, normalize_pci(bus_id), row))
    if not found and not lost and not odd:
        raise ParseError("nvidia-smi --query-gpu: no GPU rows")
    # Without an index column, rows come in NVML index order, as -q blocks do.
    fallback, lost = assign_indexes([pci for _, pci, _ in found], lost)
    gpus = [
        Gpu(index=index if index is not None else fallback[i], pci_bus_id=pci, **_gpu_fields(row))
        for i, (index, pci, row) in enumerate(found)
    ]
    first = found[0][2] if found else (odd[0] if odd else {})
    return GpuFacts(
        source=SOURCE,
        gpus=gpus,
        unnamed=[GpuReadings(**_gpu_fields(row)) for row in odd or ()],
        lost=lost,
        driver_version=parse_version(_pick(first, _DRIVER_COLUMNS)),
        init_error=init_error if not gpus else None,
    )
