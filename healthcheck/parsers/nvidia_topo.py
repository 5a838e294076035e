"""`nvidia-smi topo -m` (`topo --matrix`) text -> Topology.

Input: a header row of column names (devices GPU0.., NIC0.., then "CPU Affinity",
"NUMA Affinity" and, on newer drivers, "GPU NUMA ID"), one row per device, a "Legend:"
block and, when NICs are present, a "NIC Legend:" block mapping NIC0 -> mlx5_0:

            GPU0    GPU1    NIC0    CPU Affinity    NUMA Affinity   GPU NUMA ID
    GPU0     X      NV18    PIX     0-51            0               N/A
    NIC0    PIX     NODE     X
    NIC Legend:
      NIC0: mlx5_0

Columns are separated by tabs (what nvidia-smi writes) or runs of spaces (a terminal
copy). Newer drivers underline the header with ANSI escapes; those are removed first.
A row's values never hold spaces, so a row is split on whitespace and its values are
matched to the header's columns in order: this also reads tab output whose rows carry an
empty field (nvidia-smi pads "GPU NUMA ID" with a second tab), and rows shorter than the
header (NIC rows have no affinity columns; damaged copies lose their tails). The
price: a cell left empty in the middle of a space-aligned row would shift the ones after
it. A damaged copy's truncated values (CPU affinity "-31,64-95") are kept as printed.

A matrix pasted without its header row is read from its rows: each row's "X" stands in
its own device's column, so the diagonal names the columns; columns no row names (rows
cut from the paste) get nvidia-smi's order (GPU0.., then NIC0..) where the named ones
agree with it and the NIC Legend or a NIC row says where the NICs start, and stay unread
otherwise. The cells after the connection types are CPU Affinity, NUMA Affinity, GPU NUMA
ID, the order every driver prints them in. A column that holds NV# in a GPU's row is a
GPU's (NVLink joins GPUs, never a NIC), and so is every column before it: a fragment of
GPU1..GPU6's rows still names GPU7's column. A header whose whitespace a paste squeezed to
single spaces is split by those names.

A paste that ends mid-row (no line end after its last cell) may have cut that cell short
("NV1" of "NV18", "0-1" of "0-11"): it is not read, and `incomplete` says so
(`lines.without_cut_end`).

A header whose rows were cut (the paste ends after GPU3's row) still names every device
the node has: those with no row are listed in `devices` after the rows and again in
`devices_without_row`; no link is stored for them (their rows' values were not pasted).
A headerless paste's columns named only by nvidia-smi's order are not devices' evidence
and are not listed.

The diagonal "X" (a device and itself) is not stored in `links`: every value in it is a
real connection type (NV#, PIX, PXB, PHB, NODE, SYS, or what the driver printed).
"""

from __future__ import annotations

import re

import msgspec

from healthcheck.core.errors import ParseError
from healthcheck.core.inputs import clip
from healthcheck.parsers.lines import (
    NOTHING_UNREAD,
    Unrecognized,
    UnrecognizedLines,
    ends_mid_line,
    pasted_lines,
    without_cut_end,
)
from healthcheck.parsers.unread import note_unread

# Row and column labels: GPU0, NIC3; drivers before NIC numbering printed the HCA's own
# name (mlx5_0) in the matrix instead.
_DEVICE = re.compile(r"(?:GPU|NIC)\d{1,4}|mlx\d_\d{1,4}", re.ASCII)
_HEADER_SPLIT = re.compile(r"\t|\s{2,}")  # "CPU Affinity" holds one space; columns are split by more
_LEGEND_NIC = re.compile(r"\s*(?P<nic>NIC\d{1,4})\s*:\s*(?P<name>\S+)\s*$", re.ASCII)
_CPU_AFFINITY = "CPU Affinity"
_NUMA_AFFINITY = "NUMA Affinity"
_GPU_NUMA_ID = "GPU NUMA ID"
_AFFINITY_NAMES = (_CPU_AFFINITY.split(), _NUMA_AFFINITY.split(), _GPU_NUMA_ID.split())
# a matrix cell: X (itself), NV18, PIX, PXB, PHB, NODE, SYS, SOC (older drivers), what comes next
_LINK = re.compile(r"X|NV\d{1,4}|[A-Z][A-Z0-9]{1,4}", re.ASCII)
_NUMBERED = re.compile(r"(?P<kind>GPU|NIC)(?P<n>\d{1,4})", re.ASCII)


class Topology(msgspec.Struct, frozen=True, omit_defaults=True):
    # every device the matrix names: row labels in printed order ("GPU0".."GPU7", "NIC0"..),
    # then the header's devices no row was pasted for (listed again in devices_without_row)
    devices: list[str]
    links: dict[str, dict[str, str]]  # links["GPU0"]["GPU1"] == "NV18"; no self ("X") entries; rows only
    cpu_affinity: dict[str, str] = {}  # "GPU0" -> "0-51" (as printed; "N/A" kept)
    numa_affinity: dict[str, str] = {}  # "GPU0" -> "0"
    nics: dict[str, str] = {}  # "NIC0" -> "mlx5_0", from the NIC Legend
    # header columns whose rows the paste cut: the node has them, their own links are unread
    devices_without_row: list[str] = []
    # why what was read is partial: a paste cut right after the header, the devices it names
    # known and none of their links; None when nothing was missing
    incomplete: str | None = None
    # lines that are neither the header, a device row nor the legends (omitted when none)
    unrecognized: Unrecognized = NOTHING_UNREAD


def parse_nvidia_topo(text: str) -> Topology:
    if not isinstance(text, str):
        raise ParseError(f"nvidia-smi topo: expected text, got {type(text).__name__}")
    lines = pasted_lines(text)  # colour codes (newer drivers underline the header), quotes, a grep's FILE:
    cut = ""
    if lines and ends_mid_line(text):  # a paste that ends mid-row: its last cell may be cut ("NV" of "NV18")
        lines[-1], cut = without_cut_end(lines[-1])  # the line as mended: a grep's `FILE:` is no cell
    header_at = _find_header(lines)
    if header_at is not None:
        columns = _header_columns(lines[header_at])
        rows = _matrix_rows(lines[header_at + 1:])
    else:
        rows = [r for r in _matrix_rows(lines) if len(r) > 1 and _LINK.fullmatch(r[1])]
        inferred = _headerless_columns(rows, _nic_legend(lines))
        if inferred is None:
            raise ParseError(
                f"nvidia-smi topo: no matrix header row (GPU0 ...) and no rows with their 'X' diagonal; "
                f"starts with {clip(text.strip(), 60)!r}"
            )
        columns = inferred
    devices: list[str] = []
    links: dict[str, dict[str, str]] = {}
    cpu: dict[str, str] = {}
    numa: dict[str, str] = {}
    for line in rows:
        label, values = line[0], line[1:]
        if label in links:
            continue  # a repeated row (pasted twice): the first one stands
        devices.append(label)
        links[label] = {}
        for column, value in zip(columns, values, strict=False):
            _store(label, column, value, links[label], cpu, numa)
    without_row = _header_only_devices(columns, links) if header_at is not None else []
    if not devices and not without_row:
        raise ParseError("nvidia-smi topo: a header row but no device rows under it")
    return Topology(
        devices=devices + without_row, links=links, cpu_affinity=cpu, numa_affinity=numa,
        nics=_nic_legend(lines), devices_without_row=without_row, unrecognized=_unread(lines, header_at),
        incomplete=HEADER_ONLY if not devices else CUT_END.format(clip(cut, 20)) if cut else None,
    )


HEADER_ONLY = "a header with no device row under it: the devices it names are known, none of their links"
CUT_END = "the paste ends mid-row: its last cell {!r} may be cut short, not read"


def _header_only_devices(columns: list[str], rows: dict[str, dict[str, str]]) -> list[str]:
    """The header's devices that have no row: a paste cut after a few rows still shows,
    in its header, every GPU and NIC the node has (GPU4-7, NIC0-NIC17); that is evidence
    of the node's devices, though not of their links."""
    return [c for c in dict.fromkeys(columns) if _DEVICE.fullmatch(c) and c not in rows]


def _find_header(lines: list[str]) -> int | None:
    """The first line that names device columns and is not a device row itself.

    A header's second cell is a device name or "CPU Affinity", a row's a connection type
    ("X", "NV18", "NODE"); indentation tells nothing (a paste may indent every line, and
    nvidia-smi indents the header only). A header has no "X" (the diagonal) in it.
    """
    for i, line in enumerate(lines):
        cells = line.split()
        if not cells or not _DEVICE.fullmatch(cells[0]) or "X" in cells:
            continue
        if len(cells) == 1 or _DEVICE.fullmatch(cells[1]) or "Affinity" in line:
            return i
    return None


def _header_columns(line: str) -> list[str]:
    """The header's column names: the device names, then "CPU Affinity", "NUMA Affinity",
    "GPU NUMA ID" (and what a newer driver adds), split by tabs or runs of spaces, or, where
    a paste squeezed those to one space, by the names nvidia-smi prints."""
    cells = line.split()
    devices = 0
    while devices < len(cells) and _DEVICE.fullmatch(cells[devices]):
        devices += 1
    tail = line.strip().split(None, devices)[devices] if len(cells) > devices else ""
    return cells[:devices] + [name for cell in _HEADER_SPLIT.split(tail) for name in _squeezed_names(cell.split())]


def _squeezed_names(words: list[str]) -> list[str]:
    """"CPU Affinity NUMA Affinity GPU NUMA ID" (one cell where a paste squeezed the
    whitespace) -> its three names; words between known names are one column."""
    names: list[str] = []
    unknown: list[str] = []
    i = 0
    while i < len(words):
        known = next((n for n in _AFFINITY_NAMES if words[i:i + len(n)] == n), None)
        if known is None:
            unknown.append(words[i])
            i += 1
            continue
        if unknown:
            names.append(" ".join(unknown))
            unknown = []
        names.append(" ".join(known))
        i += len(known)
    return names + ([" ".join(unknown)] if unknown else [])


def _headerless_columns(rows: list[list[str]], nics: dict[str, str]) -> list[str] | None:
    """A matrix pasted without its header row: its columns, from the rows themselves.

    Each row's "X" (a device and itself) stands in the column of that row's device, so the
    diagonal names the columns; columns no row names (rows cut from the paste) are named
    by nvidia-smi's order (GPU0.., then NIC0..) where the named ones agree with it. After
    the link cells come the affinity columns, in the order every driver prints them.
    None when no row has its "X".
    """
    width = max((_link_cells(r) for r in rows), default=0)
    names: list[str] = [""] * width
    for row in rows:
        cells = row[1:1 + _link_cells(row)]
        if "X" in cells and not names[cells.index("X")]:
            names[cells.index("X")] = row[0]
    if not any(names):
        return None
    return _fill_in_order(names, len(nics), _nvlinked(rows)) + [_CPU_AFFINITY, _NUMA_AFFINITY, _GPU_NUMA_ID]


_NVLINK = re.compile(r"NV\d{1,4}", re.ASCII)


def _nvlinked(rows: list[list[str]]) -> int:
    """How many columns, from the first, are GPUs by their cells alone: NV# joins two GPUs
    (never a NIC), so a column that holds one in a GPU's row is a GPU's, and so is every
    column before it (nvidia-smi lists the GPUs first)."""
    last = 0
    for row in rows:
        if row[0].startswith("GPU"):
            cells = row[1:1 + _link_cells(row)]
            last = max([last, *(p + 1 for p, cell in enumerate(cells) if _NVLINK.fullmatch(cell))])
    return last


def _link_cells(row: list[str]) -> int:
    """How many cells after the row's label are connection types (X, NV18, PIX, SYS, ...)."""
    n = 0
    while 1 + n < len(row) and _LINK.fullmatch(row[1 + n]):
        n += 1
    return n


def _fill_in_order(names: list[str], nic_count: int, nvlinked: int = 0) -> list[str]:
    """Name the columns no row named, where every named one sits where nvidia-smi's order
    (GPU0..GPUn-1, then NIC0..) puts it; otherwise leave them unnamed (""). `nvlinked`: the
    columns known to be GPUs by their NV# cells (`_nvlinked`)."""
    gpus, nics_known = _gpu_columns(names, nic_count, nvlinked)
    if gpus is None:
        return names
    expected = [f"GPU{p}" if p < gpus else f"NIC{p - gpus}" if nics_known else "" for p in range(len(names))]
    if any(name and name != want for name, want in zip(names, expected, strict=True)):
        return names
    return [name or want for name, want in zip(names, expected, strict=True)]


def _gpu_columns(names: list[str], nic_count: int, nvlinked: int = 0) -> tuple[int | None, bool]:
    """How many of the columns are GPUs, and whether the rest are known to be NICs: where
    a named NIC column says, or the NIC Legend's count. Without either, the columns up to
    the last named GPU or the last with an NV# cell (`nvlinked`) are GPUs and the rest
    unknown (GPU rows or NIC rows cut: NIC0 or an older driver's mlx5_0, not known)."""
    for p, name in enumerate(names):
        m = _NUMBERED.fullmatch(name)
        if m and m.group("kind") == "NIC":
            return p - int(m.group("n")), True
    if nic_count and len(names) >= nic_count:
        return len(names) - nic_count, True
    gpu_at = [p + 1 for p, name in enumerate(names) if _NUMBERED.fullmatch(name)]
    return (max(gpu_at[-1], nvlinked) if gpu_at else None), False


def _matrix_rows(lines: list[str]) -> list[list[str]]:
    """Device rows up to the legend: lines whose first cell is a device name."""
    rows = []
    for line in lines:
        if line.strip().startswith(("Legend", "NIC Legend")):
            break
        cells = line.split()
        if cells and _DEVICE.fullmatch(cells[0]):
            rows.append(cells)
    return rows


def _store(
    label: str, column: str, value: str, row: dict[str, str], cpu: dict[str, str], numa: dict[str, str]
) -> None:
    if column == _CPU_AFFINITY:
        cpu[label] = value
    elif column == _NUMA_AFFINITY:
        numa[label] = value
    elif _DEVICE.fullmatch(column) and column != label:
        row[column] = value
    # other columns ("GPU NUMA ID", ones a future driver adds) are not part of Topology


def _unread(lines: list[str], header_at: int | None) -> Unrecognized:
    """The lines that are none of topo's: not the header, a device row (under the header,
    or with its connection types where there is none) or a line of the legends."""
    unread = UnrecognizedLines()
    legend = False
    for i, line in enumerate(lines):
        cells = line.split()
        if not cells or i == header_at:
            continue
        if line.strip().startswith(("Legend", "NIC Legend")):
            legend = True
        elif legend:
            if "=" not in cells[1:2] and not _LEGEND_NIC.match(line):  # `  NV#  = ...`, `  NIC0: mlx5_0`
                note_unread(unread, i + 1, line)
        elif not _is_row(cells, i, header_at):
            note_unread(unread, i + 1, line)
    return unread.frozen_or_nothing()


def _is_row(cells: list[str], i: int, header_at: int | None) -> bool:
    """Line `i` is a device row: under the header, or (none) with its connection type."""
    if not _DEVICE.fullmatch(cells[0]):
        return False
    if header_at is None:
        return len(cells) > 1 and _LINK.fullmatch(cells[1]) is not None
    return i > header_at


def _nic_legend(lines: list[str]) -> dict[str, str]:
    nics: dict[str, str] = {}
    in_legend = False
    for line in lines:
        if line.strip().startswith("NIC Legend"):
            in_legend = True
            continue
        m = _LEGEND_NIC.match(line) if in_legend else None
        if m:
            nics[m.group("nic")] = m.group("name")
    return nics
