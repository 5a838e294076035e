"""Slurm's `sinfo` text -> SinfoReport.

Layouts read (Slurm 22.05's output captured in tests/fixtures/sinfo/):

- `sinfo -R` (REASON USER TIMESTAMP NODELIST), `sinfo -R -l` (adds STATE; USER as
  "root(0)"): the reason comes first and may hold spaces, so the columns after it are
  taken from the right;
- `sinfo -N -l` (a timestamp line, then NODELIST NODES PARTITION STATE CPUS S:C:T
  MEMORY TMP_DISK WEIGHT AVAIL_FE REASON), `sinfo`, `sinfo -N`: columns by their header;
- `-o`/`-O` with a header, whitespace- or "|"-separated (`-O Field:|` ends each cell
  with a "|");
- hc's own `sinfo -h -N -o '%N|%T|%H|%E'` (HC_FORMAT, no header), which the Slurm
  actions read through `parse_hc_sinfo`: the reason is the last field and keeps any
  "|" it holds.

At most one column can hold spaces (REASON, else COMMENT or EXTRA); the others never
do. Fixed-width columns cut their values (`sinfo -R` keeps 20 characters of a reason):
a reason that fills its column is flagged `reason_maybe_cut`. (A value that fills an
`-O Field:N` column touches the next one with no space between: use "|" suffixes or
-o for output that must be read back.) States keep Slurm's
words, lower-case, with the suffix characters read as flags ("down*": not
responding, "idle~": powered down). What sinfo prints when it cannot reach the
controller is a fact (`error`), not a parse error.
"""

from __future__ import annotations

import re

import msgspec

from healthcheck.core.errors import ParseError
from healthcheck.core.inputs import clip
from healthcheck.parsers.lines import read_lines

SOURCE = "sinfo"
HC_FORMAT = "%N|%T|%H|%E"  # what actions/slurm.py asks for (with -h -N)
HC_FIELDS = ("NODELIST", "STATE", "TIMESTAMP", "REASON")
VALUE_MAX = 1024  # a reason is at most a few hundred characters; beyond that it is hostile

# sinfo's state suffixes (man sinfo, NODE STATE CODES)
STATE_SUFFIXES = {
    "*": "not_responding",
    "~": "powered_down",
    "#": "powering_up",
    "!": "pending_power_down",
    "%": "powering_down",
    "$": "maintenance_reservation",
    "@": "pending_reboot",
    "^": "rebooting",
    "-": "planned",
}
# -o format letters hc uses, and their header names
FORMAT_FIELDS = {
    "N": "NODELIST", "n": "HOSTNAMES", "T": "STATE", "t": "STATE", "H": "TIMESTAMP", "E": "REASON",
    "P": "PARTITION", "a": "AVAIL", "l": "TIMELIMIT", "D": "NODES", "c": "CPUS", "z": "S:C:T",
    "m": "MEMORY", "d": "TMP_DISK", "w": "WEIGHT", "f": "AVAIL_FEATURES", "u": "USER", "U": "USER",
}
# Header names that say "this line is a header"; one of them must be there.
_CORE_HEADERS = frozenset({"NODELIST", "HOSTNAMES", "PARTITION", "STATE", "STATECOMPLETE", "REASON", "NODES"})
_HEADER_TOKEN = re.compile(r"^[A-Z][A-Z0-9_:/()]*$")
_SPACE_COLUMNS = ("REASON", "COMMENT", "EXTRA")  # the one column that may hold spaces
_TIMESTAMP_LINE = re.compile(r"^[A-Z][a-z]{2} [A-Z][a-z]{2} [ 0-9]\d \d\d:\d\d:\d\d \d{4}$")
_USER_UID = re.compile(r"^(?P<user>[^()\s]+)\((?P<uid>[0-9]{1,10})\)$")
_ERRORS = ("slurm_load_", "sinfo: error:", "sinfo: fatal:", "Unable to contact slurm controller")
_TOKEN = re.compile(r"\S+")


class SinfoRow(msgspec.Struct, frozen=True, omit_defaults=True):
    """One line of sinfo: a node (-N, hc's format) or a group of nodes (a hostlist)."""

    nodes: str  # "node3", or a hostlist expression "node[1-4]"
    node_count: int | None = None
    partition: str | None = None
    default_partition: bool | None = None  # sinfo marks the default partition with "*"
    avail: str | None = None
    timelimit: str | None = None
    state: str | None = None  # lower-case, suffix removed: "drained", "mix", "idle+drain"
    state_flags: list[str] = []  # the suffix, read: ["not_responding"]
    responding: bool = True
    cpus: int | None = None
    sockets_cores_threads: str | None = None  # "2:1:1"
    memory_mb: int | None = None
    tmp_disk_mb: int | None = None
    weight: int | None = None
    features: str | None = None
    reason: str | None = None  # None: sinfo printed "none"
    reason_maybe_cut: bool = False  # the reason fills its fixed-width column: it may be cut
    reason_user: str | None = None
    reason_uid: int | None = None
    reason_time: str | None = None  # as printed ("2026-11-23T13:28:24"); None: "Unknown"
    columns: dict[str, str] = {}  # every column as printed, by its header name


class SinfoReport(msgspec.Struct, frozen=True, omit_defaults=True):
    source: str = SOURCE
    layout: str = ""  # "reasons" (-R), "columns" (a header), "hc" (hc's -h -N -o format)
    timestamp: str | None = None  # -l's first line
    rows: list[SinfoRow] = []
    error: str | None = None  # sinfo's own failure ("Unable to contact slurm controller")


def split_state(raw: str) -> tuple[str, list[str], bool]:
    """ "down*" -> ("down", ["not_responding"], False); "down+not_responding" likewise."""
    text = raw.strip().lower()
    base = text.rstrip("".join(STATE_SUFFIXES))
    flags = [STATE_SUFFIXES[c] for c in text[len(base):] if c in STATE_SUFFIXES]
    responding = "not_responding" not in flags and "not_responding" not in base.split("+")
    return base, flags, responding


def _none(value: str | None, *empty: str) -> str | None:
    text = (value or "").strip()
    return None if not text or text in empty else clip(text, VALUE_MAX)


def slurm_int(value: str | None) -> int | None:
    """A count Slurm printed (ASCII digits: str.isdigit also takes '²', which int() refuses), else None."""
    text = (value or "").strip()
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 18 else None




def _row(cells: dict[str, str], width: int | None = None) -> SinfoRow | None:
    """Header name -> cell text, to a row; None without a node or partition name."""
    nodes = (cells.get("NODELIST") or cells.get("HOSTNAMES") or "").strip()
    partition = _none(cells.get("PARTITION"))
    if not nodes and partition is None:
        return None
    raw_state = cells.get("STATECOMPLETE") or cells.get("STATE")
    state, flags, responding = split_state(raw_state) if raw_state else (None, [], True)
    user = _none(cells.get("USER"), "Unknown")
    uid: int | None = None
    m = _USER_UID.match(user) if user else None
    if m:
        user, uid = m.group("user"), int(m.group("uid"))
    reason = _none(cells.get("REASON"), "none")
    return SinfoRow(
        nodes=clip(nodes, VALUE_MAX),
        node_count=slurm_int(cells.get("NODES")),
        partition=partition.rstrip("*") if partition else None,
        default_partition=partition.endswith("*") if partition else None,
        avail=_none(cells.get("AVAIL")),
        timelimit=_none(cells.get("TIMELIMIT")),
        state=state or None,
        state_flags=flags,
        responding=responding,
        cpus=slurm_int(cells.get("CPUS")),
        sockets_cores_threads=_none(cells.get("S:C:T")),
        memory_mb=slurm_int(cells.get("MEMORY")),
        tmp_disk_mb=slurm_int(cells.get("TMP_DISK")),
        weight=slurm_int(cells.get("WEIGHT")),
        features=_none(cells.get("AVAIL_FE") or cells.get("AVAIL_FEATURES") or cells.get("FEATURES"), "(null)"),
        reason=reason,
        reason_maybe_cut=bool(reason and width and len(reason) >= width),
        reason_user=user,
        reason_uid=uid,
        reason_time=_none(cells.get("TIMESTAMP"), "Unknown", "none"),
        columns={k: clip(v.strip(), VALUE_MAX) for k, v in cells.items()},
    )


# ---------------------------------------------------------------------------
# Splitting a line into its columns
# ---------------------------------------------------------------------------


def _wide_column(names: list[str]) -> int | None:
    """The index of the column that may hold the separator (spaces or "|")."""
    for wide in _SPACE_COLUMNS:
        if wide in names:
            return names.index(wide)
    return None


def _split_pipes(line: str, names: list[str]) -> dict[str, str] | None:
    """ "a|b|reason | with pipes|d" by the header: the wide column keeps its pipes."""
    n = len(names)
    wide = _wide_column(names)
    if wide is None:
        parts = line.split("|")
        return dict(zip(names, parts, strict=True)) if len(parts) == n else None
    left = line.split("|", wide)
    if len(left) <= wide:
        return None
    rest = left.pop()  # the wide column and everything after it
    right = rest.rsplit("|", n - 1 - wide) if n - 1 - wide else [rest]
    if len(right) != n - wide:
        return None
    return dict(zip(names, left + right, strict=True))


def _split_spaces(line: str, names: list[str]) -> dict[str, str] | None:
    """Whitespace-separated columns by the header; the wide column takes what is left."""
    spans = list(_TOKEN.finditer(line))
    n = len(names)
    wide = _wide_column(names)
    if wide is None:
        return dict(zip(names, (s.group() for s in spans), strict=True)) if len(spans) == n else None
    after = n - 1 - wide
    if len(spans) < n - 1:
        return None
    if len(spans) == n - 1:  # the wide column printed nothing
        values = [s.group() for s in spans]
        return dict(zip(names, values[:wide] + [""] + values[wide:], strict=True))
    left = [s.group() for s in spans[:wide]]
    right = [s.group() for s in spans[len(spans) - after:]] if after else []
    end = spans[len(spans) - after].start() if after else len(line)
    middle = line[spans[wide].start():end].strip()
    return dict(zip(names, [*left, middle, *right], strict=True))


def _header(line: str) -> tuple[list[str], bool] | None:
    """(column names, "|"-separated) if `line` is a sinfo header line."""
    piped = "|" in line
    text = line.strip()
    if piped and text.endswith("|"):
        text = text[:-1]  # -O Field:| ends every cell with the suffix
    names = [t.strip() for t in text.split("|")] if piped else text.split()
    if not names or len(names) > 64 or not all(_HEADER_TOKEN.match(t) for t in names):
        return None
    if not _CORE_HEADERS & set(names):
        return None
    return names, piped


def _reason_width(header_line: str, names: list[str]) -> int | None:
    """The fixed width of the REASON column, from where the header's words sit."""
    if "REASON" not in names:
        return None
    spans = list(_TOKEN.finditer(header_line))
    i = names.index("REASON")
    if i + 1 < len(spans):
        width = spans[i + 1].start() - spans[i].start() - 1
    else:
        width = len(header_line.rstrip("\n")) - spans[i].start()
    return width if width > len("REASON") else None


# ---------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------


def parse_hc_sinfo(text: str, fields: tuple[str, ...] = HC_FIELDS) -> list[SinfoRow]:
    """hc's `sinfo -h -N -o '%N|%T|%H|%E'` -> rows, one per line; lines it cannot read
    (too few fields, no node name) are skipped, never an error: the drain policy reads
    what Slurm said about the nodes it could."""
    rows = []
    for line in text.splitlines():
        cells = _split_pipes(line, list(fields))
        if cells is None or not cells.get(fields[0], "").strip():
            continue
        row = _row(cells)
        if row is not None:
            rows.append(row)
    return rows


def fields_of_format(fmt: str) -> tuple[str, ...]:
    """ "%N|%T|%H|%E" -> ("NODELIST", "STATE", "TIMESTAMP", "REASON"); field widths
    ("%.20E") are allowed; ValueError for a letter hc does not map."""
    names = []
    for part in fmt.split("|"):
        m = re.fullmatch(r"%\.?[0-9]{0,4}(?P<letter>[A-Za-z])", part.strip())
        if m is None or m.group("letter") not in FORMAT_FIELDS:
            raise ValueError(f"unsupported sinfo format field {part!r}")
        names.append(FORMAT_FIELDS[m.group("letter")])
    return tuple(names)


def parse_sinfo(text: str, *, fmt: str | None = None) -> SinfoReport:
    """sinfo output (any layout above) -> SinfoReport. Headerless "|"-separated output
    is read as `fmt` (default: hc's HC_FORMAT). ParseError when it is no sinfo output."""
    if not text or not text.strip():
        raise ParseError("sinfo: empty output")
    # through the line layer: a paste's prompt line, CRLF, colours, a quoted reply or shell
    # string mended; no stamp or srun label is taken (sinfo's first column may be either)
    lines = [line.text.replace("\x00", "") for line in read_lines(text, stamps=False, srun=False) if not line.noise]
    errors = [clip(line.strip()) for line in lines if line.strip().startswith(_ERRORS)]
    body = [line for line in lines if line.strip() and not line.strip().startswith(_ERRORS)]
    timestamp = None
    if body and _TIMESTAMP_LINE.match(body[0].strip()):
        timestamp = body.pop(0).strip()
    if not body:
        if errors:
            return SinfoReport(layout="error", error=errors[0], timestamp=timestamp)
        raise ParseError("sinfo: no header and no rows")
    header = _header(body[0])
    if header is None:
        return _headerless(body, fmt, errors)
    names, piped = header
    width = None if piped else _reason_width(body[0], names)
    suffix = piped and body[0].strip().endswith("|")  # -O Field:| ends every cell with "|"
    rows = []
    for line in body[1:]:
        if piped:
            cut = line.strip()
            cells = _split_pipes(cut[:-1] if suffix and cut.endswith("|") else cut, names)
        else:
            cells = _split_spaces(line, names)
        if cells is None:
            raise ParseError(f"sinfo: a row that does not fit the header {clip(body[0].strip(), 80)!r}: "
                             f"{clip(line.strip(), 80)!r}")
        row = _row(cells, width)
        if row is not None:
            rows.append(row)
    layout = "reasons" if names[0] == "REASON" else "columns"
    return SinfoReport(layout=layout, timestamp=timestamp, rows=rows, error=errors[0] if errors else None)


_WHEN = re.compile(r"^(?:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d|Unknown|none)$")


def _headerless(body: list[str], fmt: str | None, errors: list[str]) -> SinfoReport:
    """hc's format; without `fmt`, also '%N|%T|%E' (no timestamp), told apart by the
    third field, which in hc's format is always a timestamp or "Unknown"."""
    try:
        fields = fields_of_format(fmt) if fmt else HC_FIELDS
    except ValueError as exc:
        raise ParseError(f"sinfo: {exc}") from None
    if fmt is None and not all(_WHEN.match((line.split("|", 3) + ["", "", ""])[2].strip()) for line in body):
        fields = ("NODELIST", "STATE", "REASON")
    if not all(line.count("|") >= len(fields) - 1 for line in body):
        raise ParseError(f"sinfo: no header line and not hc's '{fmt or HC_FORMAT}' format "
                         f"(starts {clip(body[0].strip(), 60)!r})")
    rows = parse_hc_sinfo("\n".join(body), fields)
    if not rows:
        raise ParseError("sinfo: no node in the output")
    return SinfoReport(layout="hc", rows=rows, error=errors[0] if errors else None)
