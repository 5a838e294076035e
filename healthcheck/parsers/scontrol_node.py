"""`scontrol show node [NODES]` (and `scontrol -o show node`) -> ScontrolNodes.

Input: one record per node, each starting "NodeName=", as "Key=Value" words on
indented lines (or all on one line with -o). Values hold no spaces except OS, Reason,
Comment and Extra, which Slurm prints on lines of their own (so they run to the end
of the line); with -o they run on until the next "Key=" word (Reason: to its
"[user@time]" suffix). Every Key=Value is kept in `fields`; the ones a health check
needs are typed: the state split into its base and flags ("IDLE+DRAIN+MAINTENANCE",
"DOWN+NOT_RESPONDING", older Slurm's "DOWN*"), the reason with who set it and when
("Prolog error [root@2023-12-24T06:51:08]"), CPUs, memory, Gres, partitions.

What scontrol prints instead of records ("Node x not found", "slurm_load_node
error: Unable to contact slurm controller") is a fact, not a parse error.

A fragment: Key=Value lines with no NodeName= above them (a paste that starts mid-record)
are some node's, which is not known: refused as a FragmentError where no record is whole. A
text that ends mid-line may end inside its last word (`RealMemory=10` of 1000, `Thread` of
ThreadsPerCore=, which would extend the value before it): that word is not read, and
`incomplete` says so.
"""

from __future__ import annotations

import re

import msgspec

from healthcheck.core.errors import FragmentError, ParseError
from healthcheck.core.inputs import clip
from healthcheck.parsers.lines import NOTHING_UNREAD, Unrecognized, UnrecognizedLines, cut_end_note, without_cut_end
from healthcheck.parsers.sinfo import slurm_int
from healthcheck.parsers.unread import mended_numbered

SOURCE = "scontrol show node"
VALUE_MAX = 4096  # Slurm's own values are short; a longer one is hostile input
_KEY = re.compile(r"^(?P<key>[A-Z][A-Za-z0-9_]{0,63})=")
# keys whose value may hold spaces: Slurm prints each on a line of its own
_LINE_KEYS = ("OS", "Reason", "Comment", "Extra")
_NOT_FOUND = re.compile(r"^Node (?P<name>\S{1,256}) not found$")
_ERRORS = ("slurm_load_node", "scontrol: error:", "scontrol: fatal:", "Unable to contact slurm controller")


class ScontrolNode(msgspec.Struct, frozen=True, omit_defaults=True):
    name: str
    state: str | None = None  # as printed: "IDLE+DRAIN+MAINTENANCE+RESERVED"
    base_state: str | None = None  # "IDLE", "MIXED", "ALLOCATED", "DOWN", ...
    state_flags: list[str] = []  # ["DRAIN", "MAINTENANCE", "RESERVED"]
    responding: bool = True  # False: NOT_RESPONDING, or a "*" after the state
    drain: bool = False  # a drain was asked for (DRAIN flag; DRAINED/DRAINING states)
    reason: str | None = None  # without the "[user@time]" suffix
    reason_user: str | None = None
    reason_time: str | None = None  # as printed ("2023-12-24T06:51:08")
    arch: str | None = None
    os: str | None = None
    version: str | None = None
    node_addr: str | None = None
    node_hostname: str | None = None
    cpu_alloc: int | None = None
    cpu_efctv: int | None = None
    cpu_tot: int | None = None
    cpu_load: float | None = None
    sockets: int | None = None
    boards: int | None = None
    cores_per_socket: int | None = None
    threads_per_core: int | None = None
    real_memory_mb: int | None = None
    alloc_mem_mb: int | None = None
    free_mem_mb: int | None = None
    tmp_disk_mb: int | None = None
    gres: str | None = None  # "gpu:8", "gpu:h100:8(S:0-1)"
    gres_used: str | None = None  # with --details
    available_features: list[str] = []
    active_features: list[str] = []
    partitions: list[str] = []
    boot_time: str | None = None
    slurmd_start_time: str | None = None
    last_busy_time: str | None = None
    comment: str | None = None
    extra: str | None = None
    reservation: str | None = None
    fields: dict[str, str] = {}  # every Key=Value of the record, as printed


class ScontrolNodes(msgspec.Struct, frozen=True, omit_defaults=True):
    source: str = SOURCE
    nodes: list[ScontrolNode] = []
    not_found: list[str] = []  # "Node x not found"
    error: str | None = None  # scontrol could not ask Slurm
    # lines before the first record, or inside one with no Key= and no value to continue
    unrecognized: Unrecognized = NOTHING_UNREAD
    incomplete: str | None = None  # why what was read is partial: the text ends inside a value, not read


class _Record:
    """One node's Key=Value words as they come; a value is kept to VALUE_MAX characters
    (words appended past it are dropped, so a hostile run of words costs its length)."""

    def __init__(self) -> None:
        self.words: dict[str, list[str]] = {}
        self.size: dict[str, int] = {}
        self.last: str | None = None  # the key a word without "=" continues

    def set(self, key: str, value: str) -> None:
        self.words[key] = [value[:VALUE_MAX]]
        self.size[key] = min(len(value), VALUE_MAX)
        self.last = key

    def extend(self, word: str) -> None:
        if self.last is None or self.size[self.last] >= VALUE_MAX:
            return
        self.words[self.last].append(word[:VALUE_MAX])
        self.size[self.last] += len(word) + 1

    def fields(self) -> dict[str, str]:
        return {key: " ".join(words)[:VALUE_MAX] for key, words in self.words.items()}

    def line(self, line: str) -> None:
        """The Key=Value words of one line; a word with no "Key=" continues the value
        before it (OS, Reason, Comment with -o)."""
        m = _KEY.match(line)
        if m and m.group("key") in _LINE_KEYS:
            self.set(m.group("key"), line[m.end():].rstrip())
            self.last = None  # the value ran to the end of the line
            return
        in_reason = False
        for word in line.split():
            m = _KEY.match(word) if not in_reason else None
            if m is None:
                self.extend(word)
                # with -o a reason runs on, "=" words included, to its "[user@time]"
                in_reason = in_reason and not _is_stamp(word)
                continue
            self.set(m.group("key"), word[m.end():])
            in_reason = m.group("key") == "Reason" and not _is_stamp(word)


def _is_stamp(word: str) -> bool:
    """ "[root@2023-12-24T06:51:08]": the word that ends a reason."""
    return word.startswith("[") and word.endswith("]") and "@" in word


def _reason_suffix(value: str) -> tuple[str, str, str] | None:
    """ "Prolog error [root@2023-12-24T06:51:08]" -> ("Prolog error", "root", "2023-...")."""
    if not value.endswith("]"):
        return None
    i = value.rfind("[")
    user, sep, when = value[i + 1:-1].partition("@")
    if i < 0 or not sep or not user or not when or " " in user:
        return None
    return value[:i].rstrip(), user, when




def _float(value: str | None) -> float | None:
    text = (value or "").strip()
    try:
        return float(text) if 0 < len(text) <= 32 and text[0].isdigit() else None
    except ValueError:
        return None


def _none(value: str | None) -> str | None:
    text = (value or "").strip()
    return None if not text or text in {"(null)", "N/A", "None", "n/a"} else text


def _list(value: str | None) -> list[str]:
    text = _none(value)
    return [part for part in text.split(",") if part] if text else []


def _node(fields: dict[str, str]) -> ScontrolNode:
    state = _none(fields.get("State"))
    parts = state.split("+") if state else []
    base = parts[0].rstrip("*~#!%$@^-") if parts else None
    flags = parts[1:]
    responding = not (parts and parts[0].endswith("*")) and "NOT_RESPONDING" not in flags
    reason = _none(fields.get("Reason"))
    user = when = None
    split = _reason_suffix(reason) if reason else None
    if split is not None:
        reason, user, when = split
    return ScontrolNode(
        name=fields["NodeName"],
        state=state,
        base_state=base,
        state_flags=flags,
        responding=responding,
        drain="DRAIN" in flags or base in {"DRAINED", "DRAINING", "DRAIN"},
        reason=reason or None,
        reason_user=user,
        reason_time=when,
        arch=_none(fields.get("Arch")),
        os=_none(fields.get("OS")),
        version=_none(fields.get("Version")),
        node_addr=_none(fields.get("NodeAddr")),
        node_hostname=_none(fields.get("NodeHostName")),
        cpu_alloc=slurm_int(fields.get("CPUAlloc")),
        cpu_efctv=slurm_int(fields.get("CPUEfctv")),
        cpu_tot=slurm_int(fields.get("CPUTot")),
        cpu_load=_float(fields.get("CPULoad")),
        sockets=slurm_int(fields.get("Sockets")),
        boards=slurm_int(fields.get("Boards")),
        cores_per_socket=slurm_int(fields.get("CoresPerSocket")),
        threads_per_core=slurm_int(fields.get("ThreadsPerCore")),
        real_memory_mb=slurm_int(fields.get("RealMemory")),
        alloc_mem_mb=slurm_int(fields.get("AllocMem")),
        free_mem_mb=slurm_int(fields.get("FreeMem")),
        tmp_disk_mb=slurm_int(fields.get("TmpDisk")),
        gres=_none(fields.get("Gres")),
        gres_used=_none(fields.get("GresUsed")),
        available_features=_list(fields.get("AvailableFeatures")),
        active_features=_list(fields.get("ActiveFeatures")),
        partitions=_list(fields.get("Partitions")),
        boot_time=_none(fields.get("BootTime")),
        slurmd_start_time=_none(fields.get("SlurmdStartTime")),
        last_busy_time=_none(fields.get("LastBusyTime")),
        comment=_none(fields.get("Comment")),
        extra=_none(fields.get("Extra")),
        reservation=_none(fields.get("ReservationName")),
        fields=fields,
    )


def parse_scontrol_show_node(text: str) -> ScontrolNodes:
    """`scontrol show node` (one node, many, or -o) -> ScontrolNodes. ParseError on garbage."""
    if not text or not text.strip():
        raise ParseError("scontrol show node: empty output")
    records: list[_Record] = []
    not_found: list[str] = []
    error: str | None = None
    unread = UnrecognizedLines()
    headless = 0  # Key=Value lines before any NodeName=: a record whose name line a cut took
    text, cut = without_cut_end(text)  # `RealMemory=10` of 1000, `Partit` of the next key: not read
    for numbered in mended_numbered(text):
        line = numbered.text.replace("\x00", "").strip()
        if not line:
            if records:
                records[-1].last = None
            continue
        if line.startswith("NodeName="):
            records.append(_Record())
        elif not records or not _KEY.match(line):
            m = _NOT_FOUND.match(line)
            if m:
                not_found.append(m.group("name"))
                continue
            if line.startswith(_ERRORS):
                error = error or clip(line)
                continue
            if _continues_nothing(records):
                unread.note(numbered)  # another program's line, not a reason to refuse the nodes around it
                headless += not records and _KEY.match(line) is not None
                continue
        records[-1].line(line)
    nodes = [_node(fields) for fields in (r.fields() for r in records) if fields.get("NodeName")]
    if not nodes and not not_found and error is None:
        if headless:
            raise FragmentError(f"scontrol show node: {headless} Key=Value line(s) of a record whose NodeName= "
                                f"line is not in the text: whose values they are is not known")
        raise ParseError(_refusal(unread))
    return ScontrolNodes(nodes=nodes, not_found=not_found, error=error, unrecognized=unread.frozen_or_nothing(),
                         incomplete=cut_end_note(cut) if cut else None)


def _continues_nothing(records: list[_Record]) -> bool:
    """A line with no Key= first: the words of the value before it where one is open
    (-o's reason, a wrapped value), else no line of scontrol's."""
    return not records or records[-1].last is None


def _refusal(unread: UnrecognizedLines) -> str:
    if not unread.sample:
        return "scontrol show node: no NodeName= record"
    return f"scontrol show node: not a node record (starts {clip(unread.sample[0].text, 60)!r})"
