"""Slurm's `sinfo` text -> SinfoReport.

Layouts read (Slurm 22.05's output captured in tests/fixtures/sinfo/):

- `sinfo -R` (REASON USER TIMESTAMP NODELIST), `sinfo -R -l` (adds STATE; USER as
  "root(0)"): the reason comes first and may hold spaces, so the columns after it are
  taken from the right; with no header (`-h`, a paste that cut it) by the same tail;
- a header whose words were typed (or run) onto the command line after `sinfo`
  (`sinfo -R REASON USER TIMESTAMP NODELIST`, also after a prompt): `command_header`;
- `sinfo -N -l` (a timestamp line, then NODELIST NODES PARTITION STATE CPUS S:C:T
  MEMORY TMP_DISK WEIGHT AVAIL_FE REASON), `sinfo`, `sinfo -N`: columns by their header;
- `-o`/`-O` with a header, whitespace- or "|"-separated (`-O Field:|` ends each cell
  with a "|");
- hc's own `sinfo -h -N -o '%N|%T|%H|%E'` (HC_FORMAT, no header), which the Slurm
  actions read through `parse_hc_sinfo`: the reason is the last field and keeps any
  "|" it holds; another headerless "|"-separated `-o` layout (gcm's `%N|%G|%b|%c|%C|%T|%P`,
  padded) by what its cells hold (`layout` "inferred"), refused where no column holds
  node states: a GRES or anything else is never read as the state.

At most one column can hold spaces (REASON, else COMMENT or EXTRA); the others never
do. Fixed-width columns cut their values (`sinfo -R` keeps 20 characters of a reason):
a reason that fills its column is flagged `reason_maybe_cut`. (A value that fills an
`-O Field:N` column touches the next one with no space between: use "|" suffixes or
-o for output that must be read back.) States are Slurm's
long names, lower-case, with the suffix characters read as flags ("down*": not
responding, "idle~": powered down); the compact names sinfo prints by default (`%t`:
"alloc", "mix", "drng") are read as the long ones (`%T`) they stand for, as printed in
`columns`. What sinfo prints when it cannot reach the
controller is a fact (`error`), not a parse error.
"""

from __future__ import annotations

import re

import msgspec

from healthcheck.core.errors import FragmentError, ParseError
from healthcheck.core.inputs import clip
from healthcheck.core.nodes import HostlistError, parse_hostlist
from healthcheck.parsers.lines import (
    NOTHING_UNREAD,
    Line,
    Unrecognized,
    UnrecognizedLines,
    cut_end_note,
    ends_in_a_row,
    is_prompt,
    read_lines,
    rewrapped,
    without_cut_end,
    wrapped_word,
)

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
# sinfo's compact state names (`%t`, the default) -> the long ones (`%T`), lower-case: the pairs
# in Slurm 22.05's libslurmfull (node_state_string_compact / node_state_string). "drain" is
# DRAINED's alone; inside StateComplete's "idle+drain" it is the flag, left as printed
COMPACT_STATES = {
    "alloc": "allocated", "comp": "completing", "drain": "drained", "drng": "draining", "failg": "failing",
    "futr": "future", "mix": "mixed", "npc": "perfctrs", "plnd": "planned", "unk": "unknown",
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
    state: str | None = None  # long name, lower-case, suffix removed: "drained", "mixed", "idle+drain"
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
    gres: str | None = None  # -O Gres: "gpu:h100:8(S:0-1)"
    version: str | None = None  # -O Version: the node's slurmd version ("20.11.8")
    columns: dict[str, str] = {}  # every column as printed, by its header name (a repeated one: NAME#1)


class SinfoReport(msgspec.Struct, frozen=True, omit_defaults=True):
    source: str = SOURCE
    layout: str = ""  # "reasons" (-R), "columns" (a header), "hc" (hc's -h -N -o format)
    timestamp: str | None = None  # -l's first line
    rows: list[SinfoRow] = []
    error: str | None = None  # sinfo's own failure ("Unable to contact slurm controller")
    unrecognized: Unrecognized = NOTHING_UNREAD  # lines that fit no table: a banner, another command's output
    incomplete: str | None = None  # why what was read is partial: the row the text ends inside is not read


def split_state(raw: str) -> tuple[str, list[str], bool]:
    """ "down*" -> ("down", ["not_responding"], False); "down+not_responding" likewise;
    a compact name as its long one ("mix~" -> "mixed", ["powered_down"])."""
    text = raw.strip().lower()
    base = text.rstrip("".join(STATE_SUFFIXES))
    flags = [STATE_SUFFIXES[c] for c in text[len(base):] if c in STATE_SUFFIXES]
    responding = "not_responding" not in flags and "not_responding" not in base.split("+")
    return COMPACT_STATES.get(base, base), flags, responding


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
        gres=_none(cells.get("GRES"), "(null)"),
        version=_none(cells.get("VERSION"), "N/A"),
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


HEADER_NAMES_MAX = 64  # columns of one header: every -O field once, with room


def _header(line: str) -> tuple[list[str], bool] | None:
    """(column names, "|"-separated) if `line` is a sinfo header line."""
    piped = "|" in line
    text = line.strip()
    if piped and text.endswith("|"):
        text = text[:-1]  # -O Field:| ends every cell with the suffix
    names = [t.strip() for t in text.split("|")] if piped else text.split()
    if not names or len(names) > HEADER_NAMES_MAX or not all(_HEADER_TOKEN.match(t) for t in names):
        return None
    if not _CORE_HEADERS & set(names):
        return None
    return unique_names(names), piped


COMMAND_WORDS_MAX = 16  # words of a prompt and options before `sinfo`'s header words


def command_header(line: str) -> tuple[str, list[str]] | None:
    """A command line that ends in sinfo's header: the header words typed (or run) onto the
    command (`sinfo -R REASON USER TIMESTAMP NODELIST`, also after a prompt) -> (the header's
    text, its names). The header is the run of header words that ends the line, after the
    command's `sinfo` (its options' arguments are never all upper-case)."""
    words = line.split()
    head = words[:COMMAND_WORDS_MAX]
    at = next((i for i, w in enumerate(head) if w == "sinfo" or w.endswith("/sinfo")), None)
    if at is None or (at and not is_prompt(line.strip())):
        return None
    start = len(words)
    while start > at + 1 and _HEADER_TOKEN.match(words[start - 1]):
        start -= 1
    header = " ".join(words[start:])
    found = _header(header) if start < len(words) else None
    return (header, found[0]) if found else None


def unique_names(names: list[str]) -> list[str]:
    """A repeated header (`-O` StateCompact and StateLong both print STATE): each earlier
    one as NAME#1, NAME#2, so no column is lost; the typed fields read the last."""
    seen: dict[str, int] = {}
    out = []
    for i, name in enumerate(names):
        if name in names[i + 1:]:
            seen[name] = seen.get(name, 0) + 1
            out.append(f"{name}#{seen[name]}")
        else:
            out.append(name)
    return out


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
# Reading a paste: tables, and what is around them
# ---------------------------------------------------------------------------


class _Table:
    """One header's table while it is read: its columns, and the cells of its rows."""

    def __init__(self, line: Line, names: list[str], piped: bool) -> None:
        self.header = line.text
        self.names = names
        self.piped = piped
        self.width = None if piped else _reason_width(line.text, names)
        self.suffix = piped and line.text.strip().endswith("|")  # -O Field:| ends every cell with "|"
        self.rows: list[dict[str, str]] = []
        self.last_raw = 0  # the width of the row read last (0: the last line was no row)
        self.joined = 0  # wrapped tails joined to the last row (at most WRAP_MOST: linear time)
        self.per_line = False  # a header rendered one cell a line: so are its rows
        self.pending: list[str] = []  # a per-line row's cells read so far

    def joins(self, names: list[str], piped: bool) -> bool:
        """A one-name header line after this table's one-name header lines, before any row: a
        page that renders the table one cell a line (`REASON`, then `NODELIST`). It joins this
        table's header, and the rows are then read a cell a line, len(names) lines to a row."""
        if piped or self.piped or len(names) != 1 or self.rows or self.pending or not self.names:
            return False
        if len(self.names) >= HEADER_NAMES_MAX:  # as many as one header line may have: linear time
            return False
        if not self.per_line and len(self.names) != 1:
            return False
        self.names = unique_names([*self.names, *names])
        self.per_line, self.width = True, None
        return True

    def cell_line(self, text: str) -> None:
        """One cell of a per-line row; the row is complete at its header's count of cells."""
        self.pending.append(text.strip())
        if len(self.pending) == len(self.names):
            self.rows.append(dict(zip(self.names, self.pending, strict=True)))
            self.pending = []

    def cells(self, text: str) -> dict[str, str] | None:
        if not self.piped:
            return _split_spaces(text, self.names)
        cut = text.strip()
        if cut.endswith("|") and (self.suffix or cut.count("|") == len(self.names)):
            cut = cut[:-1]  # the suffix after the last cell (also on a row whose header lacks it)
        return _split_pipes(cut, self.names)

    def wrapped_tail(self, line: Line) -> bool:
        """`line` is the rest of the last row's host list, hard-wrapped onto a line of its own
        by the terminal (lines.wrapped_word: one word, after a row as wide as a terminal)."""
        if self.piped or not self.rows or self.joined >= WRAP_MOST or self.names[-1] not in _LIST_COLUMNS:
            return False
        if not wrapped_word(line, self.last_raw):
            return False
        self.rows[-1][self.names[-1]] += line.text.strip()
        self.joined += 1
        self.last_raw = rewrapped(line, self.last_raw)
        return True


WRAP_MOST = 16  # tails joined to one row: a host list is at most a few terminal lines
_LIST_COLUMNS = ("NODELIST", "HOSTNAMES")


class _Reading:
    """What parse_sinfo has read so far: tables, sinfo's own errors, the -l timestamp."""

    def __init__(self) -> None:
        self.tables: list[_Table] = []
        self.errors: list[str] = []
        self.timestamp: str | None = None
        self.loose: list[Line] = []  # lines before any header: headerless rows, or a preamble
        self.unrecognized = UnrecognizedLines()
        self.misfit: tuple[str, str] | None = None  # (header, line): the first line that fit no table
        self.incomplete: str | None = None  # the text ends inside a row, which is not read

    def read(self, line: Line) -> None:
        text = line.text.strip()
        table = self.tables[-1] if self.tables else None
        if not text:
            return
        if text.startswith(_ERRORS):
            self.errors.append(clip(text))
        elif (typed := command_header(text)) is not None:
            self.tables.append(_Table(msgspec.structs.replace(line, text=typed[0]), typed[1], False))
            self.tables[-1].width = None  # typed words, not sinfo's fixed-width columns
        elif line.noise:  # a prompt: what follows is another command's output until a header
            if table is not None and table.names:
                self.tables.append(_Table(line, [], False))  # closes the table: no row fits this one
        elif (header := _header(line.text)) is not None:
            if table is None or not table.joins(*header):
                self.tables.append(_Table(line, *header))
        elif (table is None or not table.names) and self.timestamp is None and _TIMESTAMP_LINE.match(text):
            self.timestamp = text  # -l's first line (also after a prompt closed a table)
        elif table is None:
            self.loose.append(line)
        else:
            self._row(table, line)

    def cut_row(self, line: Line) -> None:
        """The row the text ends inside, its cut cell taken off: its cells from the left, by the
        header's names, where no column among them may hold blanks (a reason's words would
        shift every cell after it); else not read."""
        table = self.tables[-1] if self.tables else None
        words = line.text.split()
        if table is not None and not words and table.rows and table.last_raw and table.names[-1] in _LIST_COLUMNS:
            table.rows[-1][table.names[-1]] = ""  # a word cut on a line of its own: the host list may go on there
            self.incomplete = f"the last row's {table.names[-1]} may go on in the cut word: not read"
            return
        wide = _wide_column(table.names) if table is not None else None
        if (table is None or table.piped or not words or len(words) >= len(table.names)
                or (wide is not None and wide < len(words))):
            self.unrecognized.note(line)
            self.incomplete = "the row it ends inside is not read"
            return
        table.rows.append(dict(zip(table.names, words, strict=False)))
        self.incomplete = f"the last row is read without its {', '.join(table.names[len(words):])}"

    def _row(self, table: _Table, line: Line) -> None:
        if table.per_line:
            table.cell_line(line.text)
            return
        cells = table.cells(line.text) if table.names else None
        if cells is not None:
            table.rows.append(cells)
            table.last_raw = len(line.raw.rstrip("\r"))
            table.joined = 0
        elif not table.wrapped_tail(line):
            self.unrecognized.note(line)
            if self.misfit is None and table.names:
                self.misfit = (table.header, line.text)
            table.last_raw = 0


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
    is read as `fmt` (default: hc's HC_FORMAT). ParseError when it is no sinfo output.

    A paste carries more than sinfo printed: a prompt and the command, a banner, another
    command's output before the table (read from its header on), several tables (each
    read by its own header; a prompt closes one). A line that fits no header is counted
    in `unrecognized`, unless it is the rest of a host list the terminal hard-wrapped."""
    if not text or not text.strip():
        raise ParseError("sinfo: empty output")
    reading = _Reading()
    text = text.replace("\x00", "")
    cut_at = text.count("\n") + 1 if ends_in_a_row(text) else 0
    text, cut = without_cut_end(text)
    for line in read_lines(text, stamps=False):
        if line.number == cut_at and (cut or line.text.strip()):  # the row the text ends inside (as mended:
            reading.cut_row(line)  # a quote's `> ` alone is none): its cut cell gone, read from the left
            continue
        reading.read(line)
    if cut_at:
        reading.incomplete = (f"{cut_end_note(cut)}: " if cut else "the text ends inside a row: ") + (
            reading.incomplete or "nothing after it read")
    if any(t.pending for t in reading.tables):  # a per-line row the text ends inside
        reading.incomplete = reading.incomplete or "the text ends inside a row rendered a cell a line: not read"
    errors = reading.errors
    tables = [t for t in reading.tables if t.names]
    if not tables:
        if reading.loose:
            summary = _headerless_summary(reading) if fmt is None else None
            return summary or _with_cut(_headerless_pasted(reading, fmt), reading)
        if errors:
            return SinfoReport(layout="error", error=errors[0], timestamp=reading.timestamp)
        raise ParseError("sinfo: no header and no rows")
    rows = [row for t in tables for cells in t.rows if (row := _row(cells, t.width)) is not None]
    if not rows and reading.misfit is not None:
        header, misfit = reading.misfit
        raise ParseError(f"sinfo: a row that does not fit the header {clip(header.strip(), 80)!r}: "
                         f"{clip(misfit.strip(), 80)!r}")
    for line in reading.loose:
        reading.unrecognized.note(line)  # what came before the first table: a banner, another command
    layout = "reasons" if tables[0].names[0] == "REASON" else "columns"
    return SinfoReport(layout=layout, timestamp=reading.timestamp, rows=rows, error=errors[0] if errors else None,
                       unrecognized=reading.unrecognized.freeze(), incomplete=reading.incomplete)


def _with_cut(report: SinfoReport, reading: _Reading) -> SinfoReport:
    """A headerless reading with the row the text ends inside counted unread, and said."""
    if not reading.incomplete:
        return report
    return msgspec.structs.replace(report, incomplete=reading.incomplete, unrecognized=reading.unrecognized.freeze())


def _piped(rows: list[Line], prose: list[Line]) -> bool:
    """Whether `rows` (the lines with a `|`) are a `|`-separated table with prose around it:
    most of the lines, two or more, all with as many `|` but a last one the paste cut."""
    widths = {line.text.count("|") for line in rows[:-1]}
    return len(rows) >= 2 and len(rows) > len(prose) and len(widths) == 1


def _cut_last(rows: list[Line]) -> bool:
    """The last of several headerless `|` rows has fewer fields than every other, which all
    have as many: a paste cut inside it."""
    if len(rows) < 2:
        return False
    width = rows[0].text.count("|")
    return all(line.text.count("|") == width for line in rows[:-1]) and rows[-1].text.count("|") < width


# `sinfo`'s default layout (`%#P %.5a %.10l %.6D %.6t %N`): PARTITION AVAIL TIMELIMIT NODES STATE NODELIST
SUMMARY_NAMES = ("PARTITION", "AVAIL", "TIMELIMIT", "NODES", "STATE", "NODELIST")
AVAILS = frozenset({"up", "down", "drain", "inact"})  # a partition's state (`%a`)
_TIMELIMIT = re.compile(r"^(?:infinite|UNLIMITED|n/a|N/A|(?:\d{1,5}-)?\d{1,5}(?::\d\d){0,2})$")


def _summary_row(line: str) -> SinfoRow | None:
    """A row of `sinfo`'s default layout by its shape alone: six words, the second a partition's
    state, the third a time limit, the fifth a node state, and the fourth the count of the
    node list's hosts (what tells NODES from another number an `-o` could put there)."""

    words = line.split()
    if len(words) != len(SUMMARY_NAMES) or words[1] not in AVAILS or not _TIMELIMIT.match(words[2]):
        return None
    count = slurm_int(words[3])
    if count is None or not is_node_state(words[4]):
        return None
    try:
        if parse_hostlist(words[5]).size_bound != count:
            return None
    except HostlistError:
        return None
    return _row(dict(zip(SUMMARY_NAMES, words, strict=True)))


def _headerless_summary(reading: _Reading) -> SinfoReport | None:
    """`sinfo`'s default table with its header cut (a fragment of its rows): the rows whose
    shape fixes every column (`_summary_row`), the other lines counted unread; None where
    no line is such a row."""
    rows: list[SinfoRow] = []
    unfit: list[Line] = []
    for line in reading.loose:
        row = _summary_row(line.text)
        if row is None:
            unfit.append(line)
        else:
            rows.append(row)
    if not rows:
        return None
    for line in unfit:
        reading.unrecognized.note(line)
    return SinfoReport(layout="columns", rows=rows, error=reading.errors[0] if reading.errors else None,
                       unrecognized=reading.unrecognized.freeze())


def _headerless_pasted(reading: _Reading, fmt: str | None) -> SinfoReport:
    """Headerless `|` rows with the writer's prose around them (a sentence before the paste,
    a question after it: lines with no `|` among rows that all have one): the rows read as
    `_headerless` reads them, the prose counted in `unrecognized`, never read as a row; a
    last row the paste cut (`_cut_last`) counted there too, the whole rows before it read."""
    rows = [line for line in reading.loose if "|" in line.text]
    prose = [line for line in reading.loose if "|" not in line.text]
    if not _piped(rows, prose):  # blank-aligned rows (`sinfo -R -h`), a `|` inside a reason: all rows
        rows, prose = list(reading.loose), []
    if _cut_last(rows):  # the paste ends inside its last row: the rows before it are whole
        prose.append(rows.pop())
    report = _headerless([line.text for line in rows], fmt, reading.errors)
    if not prose:
        return report
    for line in prose:
        reading.unrecognized.note(line)
    return msgspec.structs.replace(report, unrecognized=reading.unrecognized.freeze())


_WHEN = re.compile(r"^(?:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d|Unknown|none)$")
# Slurm's node state names (`man sinfo`, NODE STATE CODES: the long `%T` ones; the
# compact `%t` ones are COMPACT_STATES' and `pow_dn`, `pow_up`, `resv`; after a "+" in
# StateComplete, the flag words), lower-case, without suffix flags: what a STATE cell
# holds, and nothing else sinfo prints does (a GRES never)
NODE_STATES = frozenset({
    "allocated", "blocked", "completing", "down", "drained", "draining", "fail", "failing", "future", "idle",
    "inval", "maint", "mixed", "perfctrs", "planned", "power_down", "powered_down", "powering_down",
    "powering_up", "reboot_issued", "reboot_requested", "reserved", "unknown", "resv", "pow_dn", "pow_up",
    "drain", "cloud", "power", "not_responding", "dynamic_future", "dynamic_norm", "boot",
    *COMPACT_STATES,
})
INFERRED_COLUMNS_MAX = 64  # fields of a headerless line read by their cells (sinfo -o has fewer letters)
# a cell's kind in a headerless `-o` line by what it holds (the first cell is the node)
_CELL_KINDS = (
    ("TIMESTAMP", _WHEN),
    ("CPUS(A/I/O/T)", re.compile(r"^\d{1,9}/\d{1,9}/\d{1,9}/\d{1,9}$")),
    ("GRES", re.compile(r"^(?:\(null\)|[a-z][\w.\-]{0,63}:[^\s|]{0,512})$")),
)


def is_node_state(cell: str) -> bool:
    """`cell` is a node state as sinfo prints it ("drained$", "idle+drain", "mix~")."""
    base = split_state(cell)[0]
    return bool(base) and all(part in NODE_STATES for part in base.split("+"))


def _headerless(body: list[str], fmt: str | None, errors: list[str]) -> SinfoReport:
    """hc's format; without `fmt`, also '%N|%T|%E' (no timestamp), told apart by the
    third field, which in hc's format is always a timestamp or "Unknown"; another
    headerless `-o` layout by what its cells hold (`_inferred`): its second cell must be
    a node state for hc's, never a GRES or anything else read as one."""
    try:
        fields = fields_of_format(fmt) if fmt else HC_FIELDS
    except ValueError as exc:
        raise ParseError(f"sinfo: {exc}") from None
    if fmt is None and (reasons := _headerless_reasons(body)) is not None:
        return SinfoReport(layout="reasons", rows=reasons, error=errors[0] if errors else None)
    if fmt is None and not all(is_node_state((line.split("|", 2) + [""])[1]) for line in body):
        return _inferred(body, errors)
    if fmt is None and not all(_WHEN.match((line.split("|", 3) + ["", "", ""])[2].strip()) for line in body):
        fields = ("NODELIST", "STATE", "REASON")
    if not all(line.count("|") >= len(fields) - 1 for line in body):
        raise ParseError(f"sinfo: no header line and not hc's '{fmt or HC_FORMAT}' format "
                         f"(starts {clip(body[0].strip(), 60)!r})")
    rows = parse_hc_sinfo("\n".join(body), fields)
    if not rows:
        raise ParseError("sinfo: no node in the output")
    return SinfoReport(layout="hc", rows=rows, error=errors[0] if errors else None)


_ISO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d$")
REASONS_NAMES = ("REASON", "USER", "TIMESTAMP", "NODELIST")  # `sinfo -R`
REASONS_LONG_NAMES = ("REASON", "USER", "TIMESTAMP", "STATE", "NODELIST")  # `sinfo -R -l`


def _headerless_reasons(body: list[str]) -> list[SinfoRow] | None:
    """`sinfo -R` rows with no header (`-h`, or the header cut from the paste): every line
    ends in a user, a timestamp (`-l`: then a node state) and a node list, after a reason
    that may hold spaces (and a "|"); at least one timestamp is a real one (not `Unknown`).
    None where any line is not such a row."""
    rows = []
    for line in body:
        words = line.split()
        long = len(words) >= 5 and is_node_state(words[-2]) and _WHEN.match(words[-3]) is not None
        names = REASONS_LONG_NAMES if long else REASONS_NAMES
        if len(words) < len(names) or not _WHEN.match(words[len(words) - len(names) + 2]):
            return None
        if any("|" in w for w in words[len(words) - len(names) + 1:]):
            return None  # a "|"-separated layout; only the reason may hold one
        cells = _split_spaces(line, list(names))
        row = _row(cells) if cells else None
        if row is None:
            return None
        rows.append(row)
    return rows if any(r.reason_time and _ISO_TIME.match(r.reason_time) for r in rows) else None


def _inferred(body: list[str], errors: list[str]) -> SinfoReport:
    """A headerless '|'-separated `sinfo -N -h -o` of another layout (`%N|%G|%b|%c|%C|%T|%P`,
    padded), or a blank-separated one whose second word is the state (`_spaced_cells`):
    columns named by what every line's cell holds; the node is the first, the
    state the one column of node states. ParseError where no column is one (nothing
    else is ever read as the state)."""
    width = body[0].count("|") + 1
    if 2 <= width <= INFERRED_COLUMNS_MAX and all(line.count("|") + 1 == width for line in body):
        cells = [[cell.strip() for cell in line.split("|")] for line in body]
    elif (spaced := _spaced_cells(body)) is not None:
        cells, width = spaced, len(spaced[0])
    else:  # rows of a '|' table (every line two or more '|') whose header alone would name its columns
        raise (FragmentError if all(line.count("|") >= 2 for line in body) else ParseError)(
            f"sinfo: no header line, and its '|' fields differ from line to line or are too many "
            f"(starts {clip(body[0].strip(), 60)!r})")
    names = [_column_kind([row[i] for row in cells]) for i in range(width)]
    names[0] = "NODELIST"
    gres = [i for i, name in enumerate(names) if name == "GRES"]
    for i in gres[1:2]:
        names[i] = "GRES_USED"  # `%G` then `%b` (gcm's layout): what is configured, then what is used
    if "STATE" not in names[1:]:  # a table's rows, but which column is which only a header would say
        raise FragmentError(f"sinfo: no header line and no column of node states "
                            f"(starts {clip(body[0].strip(), 60)!r})")
    names = unique_names(names)
    rows = [row for line in cells if (row := _row(dict(zip(names, line, strict=True)))) is not None]
    if not rows:
        raise ParseError("sinfo: no node in the output")
    return SinfoReport(layout="inferred", rows=rows, error=errors[0] if errors else None)


_NODE_NAME = re.compile(r"^[A-Za-z0-9][\w.\-\[\],]{0,255}$")


def _spaced_cells(body: list[str]) -> list[list[str]] | None:
    """A headerless blank-separated `sinfo -N -h -o "%N %T ..."` / `-O NodeList,StateComplete,...`
    (a '|' in a reason does not make it '|'-separated): every line a node name, then its state,
    then the rest of the line as one cell (a reason has blanks in it; which column it is, is
    not known). None where any line is not such a row, or one line names a node without a
    number."""
    cells = []
    for line in body:
        words = line.split(None, 2)
        if len(words) < 2 or not _NODE_NAME.match(words[0]) or not is_node_state(words[1]):
            return None
        cells.append([words[0], words[1], words[2].strip() if len(words) > 2 else ""])
    if len(cells) < 2 and not any(c.isdigit() for c in cells[0][0]):
        return None  # one line `system down`: prose as likely as a node; a node's name has a number
    return cells if any(row[2] for row in cells) else [row[:2] for row in cells]


def _column_kind(values: list[str]) -> str:
    """A headerless column's name by its cells: STATE, TIMESTAMP, CPUS(A/I/O/T), GRES, else
    a name that says only that it is unknown."""
    if all(is_node_state(v) for v in values):
        return "STATE"
    for name, shape in _CELL_KINDS:
        if all(shape.match(v) for v in values):
            return name
    return "COLUMN"
