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

The diagonal "X" (a device and itself) is not stored in `links`: every value in it is a
real connection type (NV#, PIX, PXB, PHB, NODE, SYS, or what the driver printed).
"""

from __future__ import annotations

import re

import msgspec

from healthcheck.core.errors import ParseError
from healthcheck.core.inputs import clip

_ANSI = re.compile(r"\x1b\[[0-9;?]{0,32}[A-Za-z]")
# Row and column labels: GPU0, NIC3; drivers before NIC numbering printed the HCA's own
# name (mlx5_0) in the matrix instead.
_DEVICE = re.compile(r"(?:GPU|NIC)\d{1,4}|mlx\d_\d{1,4}", re.ASCII)
_HEADER_SPLIT = re.compile(r"\t|\s{2,}")  # "CPU Affinity" holds one space; columns are split by more
_LEGEND_NIC = re.compile(r"\s*(?P<nic>NIC\d{1,4})\s*:\s*(?P<name>\S+)\s*$", re.ASCII)
_CPU_AFFINITY = "CPU Affinity"
_NUMA_AFFINITY = "NUMA Affinity"


class Topology(msgspec.Struct, frozen=True, omit_defaults=True):
    devices: list[str]  # row labels in printed order: "GPU0".."GPU7", "NIC0"..
    links: dict[str, dict[str, str]]  # links["GPU0"]["GPU1"] == "NV18"; no self ("X") entries
    cpu_affinity: dict[str, str] = {}  # "GPU0" -> "0-51" (as printed; "N/A" kept)
    numa_affinity: dict[str, str] = {}  # "GPU0" -> "0"
    nics: dict[str, str] = {}  # "NIC0" -> "mlx5_0", from the NIC Legend


def parse_nvidia_topo(text: str) -> Topology:
    if not isinstance(text, str):
        raise ParseError(f"nvidia-smi topo: expected text, got {type(text).__name__}")
    lines = [_ANSI.sub("", line) for line in text.splitlines()]
    header_at = _find_header(lines)
    if header_at is None:
        raise ParseError(
            f"nvidia-smi topo: no matrix header row (GPU0 ...) found; starts with {clip(text.strip(), 60)!r}"
        )
    columns = _header_columns(lines[header_at])
    devices: list[str] = []
    links: dict[str, dict[str, str]] = {}
    cpu: dict[str, str] = {}
    numa: dict[str, str] = {}
    for line in _matrix_rows(lines[header_at + 1:]):
        label, values = line[0], line[1:]
        if label in links:
            continue  # a repeated row (pasted twice): the first one stands
        devices.append(label)
        links[label] = {}
        for column, value in zip(columns, values, strict=False):
            _store(label, column, value, links[label], cpu, numa)
    if not devices:
        raise ParseError("nvidia-smi topo: a header row but no device rows under it")
    return Topology(
        devices=devices, links=links, cpu_affinity=cpu, numa_affinity=numa, nics=_nic_legend(lines)
    )


def _find_header(lines: list[str]) -> int | None:
    """The first line that names device columns and is not a device row itself.

    The header starts with blank space before "GPU0"; a copy that lost the indentation
    is still told from a row by its second cell, which is a device name, not "X"/"NV18".
    """
    for i, line in enumerate(lines):
        cells = line.split()
        if not cells or not _DEVICE.fullmatch(cells[0]):
            continue
        if line[:1].isspace() or (len(cells) > 1 and _DEVICE.fullmatch(cells[1])) or "Affinity" in line:
            return i
    return None


def _header_columns(line: str) -> list[str]:
    return [cell.strip() for cell in _HEADER_SPLIT.split(line.strip()) if cell.strip()]


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
