"""torch Flight Recorder (FR) dumps -> FlightRecorderDump; several ranks' dumps ->
FrComparison; the text of `torchfrtrace` and of NVRx's attribution -> FrAnalysis.

What a dump is (torch's FlightRecorder.hpp / FlightRecorderDetail.cpp as shipped; real
dumps in tests/fixtures/flight-recorder and tests/fixtures/h100-captures):

* `torch._C._distributed_c10d._dump_nccl_trace()` (NCCL, <= 2.7 by that name) or
  `_dump_fr_trace()` (2.13, any backend), and the files written on a timeout
  (`TORCH_NCCL_DEBUG_INFO_TEMP_FILE` / `TORCH_FR_DUMP_TEMP_FILE` + rank): a **pickled
  dict** keyed on `version` ("2.x": "2.5" in the tutorial, "2.9" in NVRx's tests, "2.10"
  from torch 2.11 and 2.13). Keys: version, pg_config {key: {name, desc, ranks: "[0, 1]"}},
  pg_status {pg name: {last_enqueued_collective, last_started_collective,
  last_completed_collective}}, entries, comm_lib_version ("2.28.9", "" for gloo; older
  dumps, NVRx's "2.9", name it nccl_version), nccl_comm_state (NCCL, not kept).
* each entry: record_id, pg_id, process_group (name, desc), collective_seq_id,
  p2p_seq_id, op_id, profiling_name ("nccl:all_reduce", "gloo:broadcast"),
  time_created_ns, input_sizes/dtypes, output_sizes/dtypes, state
  (scheduled/started/completed), time_discovered_started_ns/completed_ns, retired,
  timeout_ms, is_p2p, frames [{name, filename, line}], thread_id, thread_name,
  duration_ms when timing is on. `seq_id` is read where `collective_seq_id` is absent.
* `_dump_fr_trace_json()` / `_dump_nccl_trace_json()`: the same as JSON, without frames;
  process_group is a list, pg_status values are strings, undiscovered times are 0.

**A dump is untrusted input.** It is unpickled by an Unpickler whose `find_class`
refuses every global, so no constructor or function is ever looked up, let alone
called (a pickle that would call os.system is a ParseError and runs nothing); what
comes out is walked once, and a graph that is not plain data (dict, list, tuple, str,
int, float, bool, None, bytes), is nested deeper than MAX_DEPTH, or (through the memo's
shared references, or a cycle) holds more nodes than the input has bytes, is refused.
Input above MAX_DUMP_BYTES is refused before it is read, and before the unpickler runs,
parsers/pickle_bounds.py refuses a memo index or a stated size that would make it
allocate by a number in the stream rather than by the stream's length, and the opcodes
that build sets (no dump holds one).

gloo dumps of torch 2.13 have quirks kept as they are: pg_config has one key '' with
empty name and desc (ranks '[]' once a second group exists), entries stay
state "scheduled" when done (pg_status has the progress), and p2p is not recorded.
"""

from __future__ import annotations

import gc
import io
import pickle
import re
from collections.abc import Callable, Mapping
from typing import Any, Literal

import msgspec

from healthcheck.core import typed
from healthcheck.core.errors import FragmentError, ParseError
from healthcheck.core.inputs import clip
from healthcheck.parsers.lines import NOTHING_UNREAD, Unrecognized, UnrecognizedLines
from healthcheck.parsers.pickle_bounds import check_bounds
from healthcheck.parsers.unread import mended_numbered

MiB = 1024 * 1024
MAX_DUMP_BYTES = 256 * MiB  # 20,000 entries with deep stacks are ~50 MB
MAX_DEPTH = 32  # a dump nests 6 deep (dict > entries > entry > frames > frame > str)
MAX_NAME = 512
MAX_TEXT = 2048
MAX_LISTED = 100  # missing seqs and mismatches listed per process group (counts are exact)

Format = Literal["pickle", "json"]
_PLAIN = (str, int, float, bool, type(None), bytes, bytearray)


# ---------------------------------------------------------------- facts


class FrFrame(msgspec.Struct, frozen=True, omit_defaults=True):
    name: str
    filename: str = ""
    line: int | None = None


class FrEntry(msgspec.Struct, frozen=True, omit_defaults=True):
    """One recorded operation. `pg_name` is process_group[0] (the group's name, the same on
    every rank: what ranks are compared on), `pg_id` the local index."""

    profiling_name: str  # "nccl:all_reduce"
    state: str = ""  # scheduled / started / completed
    pg_name: str = ""
    pg_desc: str = ""  # "default_pg", "dp", NVRx's "EXPERT_MODEL_PARALLEL_GROUP"...
    pg_id: int | None = None
    record_id: int | None = None
    collective_seq_id: int | None = None
    p2p_seq_id: int | None = None
    op_id: int | None = None
    is_p2p: bool = False
    input_sizes: tuple[tuple[int, ...], ...] = ()
    input_dtypes: tuple[str, ...] = ()
    output_sizes: tuple[tuple[int, ...], ...] = ()
    output_dtypes: tuple[str, ...] = ()
    time_created_ns: int | None = None
    time_discovered_started_ns: int | None = None
    time_discovered_completed_ns: int | None = None
    duration_ms: float | None = None
    retired: bool | None = None
    timeout_ms: int | None = None
    thread_id: str | None = None
    thread_name: str | None = None
    frames: tuple[FrFrame, ...] = ()

    @property
    def backend(self) -> str:
        """"nccl", "gloo"... ("" when the name has no prefix)."""
        head, sep, _ = self.profiling_name.partition(":")
        return head if sep else ""

    @property
    def op(self) -> str:
        """"all_reduce" of "nccl:all_reduce"."""
        return self.profiling_name.partition(":")[2] or self.profiling_name

    @property
    def seq(self) -> int | None:
        return self.p2p_seq_id if self.is_p2p else self.collective_seq_id


class FrProcessGroup(msgspec.Struct, frozen=True, omit_defaults=True):
    """A pg_config item: its key, name, desc and global ranks (parsed from "[0, 1]")."""

    key: str
    name: str = ""
    desc: str = ""
    ranks: tuple[int, ...] = ()


class FrPgStatus(msgspec.Struct, frozen=True, omit_defaults=True):
    """pg_status of one group (keyed on its name); -1 (nothing yet) reads as None."""

    pg: str
    last_enqueued: int | None = None
    last_started: int | None = None
    last_completed: int | None = None


class FlightRecorderDump(msgspec.Struct, frozen=True, omit_defaults=True):
    format: Format
    version: str  # "2.10"
    comm_lib_version: str = ""  # NCCL's version ("2.28.9"); "" for gloo
    nccl_version: str = ""  # the dump's `nccl_version` (older dumps' name), else comm_lib_version of NCCL entries
    process_groups: tuple[FrProcessGroup, ...] = ()
    pg_status: tuple[FrPgStatus, ...] = ()
    entries: tuple[FrEntry, ...] = ()
    bad_entries: int = 0  # entries whose fields had the wrong types (skipped)

    @property
    def backends(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(e.backend for e in self.entries if e.backend))

    def status_of(self, pg_name: str) -> FrPgStatus | None:
        return next((s for s in self.pg_status if s.pg == pg_name), None)


# ---------------------------------------------------------------- safe loading


class _NoGlobals(pickle.Unpickler):
    """Plain data only: every global (GLOBAL, STACK_GLOBAL, INST, OBJ, EXT*) goes through
    find_class, which refuses it; REDUCE, BUILD and NEWOBJ then have nothing to call."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(
            f"refused global {clip(module, 60)}.{clip(name, 60)}: a Flight Recorder dump holds only plain data")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("refused persistent id: a Flight Recorder dump holds only plain data")


# torch's pickler (IValues) writes no set: a set is 216 bytes built from EMPTY_SET's one, a
# flood of them ~240x the input in memory, where a real dump is ~40x
_NOT_IN_A_DUMP = ("EMPTY_SET", "ADDITEMS", "FROZENSET")


def _unpickle(data: bytes) -> Any:
    # a dump is many small containers: the cyclic collector would run over all of them again
    # and again while they are built (a real dump has no cycles; the walk after refuses any)
    enabled = gc.isenabled()
    gc.disable()
    try:
        # the C unpickler sizes its memo by the indices in the stream (a 71-byte input made
        # it touch 2.7 GB): every stated index and count is checked before it runs
        check_bounds(data, refused=_NOT_IN_A_DUMP)
        return _NoGlobals(io.BytesIO(data)).load()
    except RecursionError:
        raise ParseError("Flight Recorder dump: nested too deeply") from None
    except Exception as exc:  # anything the unpickler raises on hostile bytes is garbage
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ParseError(f"Flight Recorder dump: not a readable pickle ({clip(message, 200)})") from None
    finally:
        if enabled:
            gc.enable()


def _check_plain(obj: Any, budget: int) -> None:
    """Walk the graph once, without recursion: plain types only, bounded depth, and at
    most `budget` nodes (the memo lets a pickle share one subtree many times, or make a
    cycle: either blows the budget)."""
    stack = [(obj, 0)]
    seen = 0
    while stack:
        node, depth = stack.pop()
        seen += 1
        if seen > budget:
            raise ParseError("Flight Recorder dump: shared references expand it beyond its size (or it holds a cycle)")
        if isinstance(node, _PLAIN):
            continue
        if depth >= MAX_DEPTH:
            raise ParseError(f"Flight Recorder dump: nested deeper than {MAX_DEPTH}")
        if type(node) is dict:
            for k, v in node.items():
                stack.append((k, depth + 1))
                stack.append((v, depth + 1))
        elif type(node) in (list, tuple):
            stack.extend((item, depth + 1) for item in node)
        else:
            raise ParseError(f"Flight Recorder dump: holds a {type(node).__name__}, not plain data")


# ---------------------------------------------------------------- conversion


class _RawFrame(msgspec.Struct):
    name: str = ""
    filename: str = ""
    line: int | None = None


class _RawEntry(msgspec.Struct):
    profiling_name: str = ""
    state: str = ""
    process_group: list[str] | None = None
    pg_id: int | None = None
    record_id: int | None = None
    collective_seq_id: int | None = None
    seq_id: int | None = None  # the oldest dumps' name for it
    p2p_seq_id: int | None = None
    op_id: int | None = None
    is_p2p: bool = False
    input_sizes: list[list[int]] | None = None
    input_dtypes: list[str] | None = None
    output_sizes: list[list[int]] | None = None
    output_dtypes: list[str] | None = None
    time_created_ns: int | None = None
    time_discovered_started_ns: int | None = None
    time_discovered_completed_ns: int | None = None
    duration_ms: float | None = None
    retired: bool | None = None
    timeout_ms: int | None = None
    thread_id: str | int | None = None
    thread_name: str | None = None
    frames: list[_RawFrame] | None = None


class _RawStatus(msgspec.Struct):
    last_enqueued_collective: int | None = None
    last_started_collective: int | None = None
    last_completed_collective: int | None = None


class _RawConfig(msgspec.Struct):
    name: str = ""
    desc: str = ""
    ranks: str | list[int] | None = None


_VERSION = re.compile(r"(\d{1,4})\.(\d{1,4})")
_INT = re.compile(r"-?\d{1,12}")


def _nonneg(value: int | None) -> int | None:
    return value if value is not None and value >= 0 else None


def _entry(raw: _RawEntry, json: bool) -> FrEntry:
    pg = raw.process_group or []
    started, completed = raw.time_discovered_started_ns, raw.time_discovered_completed_ns
    if json:  # the JSON dump writes 0 for "not discovered"
        started, completed = started or None, completed or None
    return FrEntry(
        profiling_name=clip(raw.profiling_name, MAX_NAME),
        state=clip(raw.state, 40),
        pg_name=clip(pg[0], MAX_NAME) if pg else "",
        pg_desc=clip(pg[1], MAX_NAME) if len(pg) > 1 else "",
        pg_id=raw.pg_id,
        record_id=raw.record_id,
        collective_seq_id=raw.collective_seq_id if raw.collective_seq_id is not None else raw.seq_id,
        p2p_seq_id=raw.p2p_seq_id,
        op_id=raw.op_id,
        is_p2p=raw.is_p2p,
        input_sizes=tuple(tuple(s) for s in raw.input_sizes or ()),
        input_dtypes=tuple(clip(d, 40) for d in raw.input_dtypes or ()),
        output_sizes=tuple(tuple(s) for s in raw.output_sizes or ()),
        output_dtypes=tuple(clip(d, 40) for d in raw.output_dtypes or ()),
        time_created_ns=raw.time_created_ns,
        time_discovered_started_ns=started,
        time_discovered_completed_ns=completed,
        duration_ms=raw.duration_ms,
        retired=raw.retired,
        timeout_ms=raw.timeout_ms,
        thread_id=None if raw.thread_id is None else clip(str(raw.thread_id), 40),
        thread_name=None if raw.thread_name is None else clip(raw.thread_name, MAX_NAME),
        frames=tuple(FrFrame(name=clip(f.name, MAX_NAME), filename=clip(f.filename, MAX_TEXT),
                             line=f.line) for f in raw.frames or ()),
    )


def _ranks(value: str | list[int] | None) -> tuple[int, ...]:
    if isinstance(value, list):
        return tuple(value)
    if not value:
        return ()
    return tuple(int(m.group()) for m in _INT.finditer(value[:1_000_000]))


def _convert(obj: Any, fmt: Format) -> FlightRecorderDump:
    if type(obj) is not dict:
        raise ParseError(f"Flight Recorder dump: expected a dict keyed on 'version', got a {type(obj).__name__}")
    version = obj.get("version")
    if not isinstance(version, str) or not (m := _VERSION.fullmatch(version)):
        raise ParseError(f"Flight Recorder dump: no 'version' \"2.x\" (got {clip(repr(version), 40)})")
    if m.group(1) != "2":
        raise ParseError(f"Flight Recorder dump: version {version}: only the 2.x format is known")
    try:
        configs = typed.convert(obj.get("pg_config") or {}, dict[str, _RawConfig], strict=False)
        statuses = typed.convert(obj.get("pg_status") or {}, dict[str, _RawStatus], strict=False)
        comm_lib = typed.convert(obj.get("comm_lib_version") or "", str, strict=False)
        legacy_nccl = typed.convert(obj.get("nccl_version") or "", str, strict=False)
        raw_entries = typed.convert(obj.get("entries") or [], list[Any])
    except msgspec.ValidationError as exc:
        raise ParseError(f"Flight Recorder dump: {clip(str(exc), 200)}") from None
    entries, bad = [], 0
    for raw in raw_entries:
        try:
            entries.append(_entry(typed.convert(raw, _RawEntry, strict=False), fmt == "json"))
        except (msgspec.ValidationError, TypeError, ValueError, IndexError):
            bad += 1
    nccl = legacy_nccl or (comm_lib if any(e.backend == "nccl" for e in entries) else "")
    return FlightRecorderDump(
        format=fmt,
        version=version,
        comm_lib_version=clip(comm_lib or legacy_nccl, 64),
        nccl_version=clip(nccl, 64),
        process_groups=tuple(FrProcessGroup(key=clip(k, MAX_NAME), name=clip(c.name, MAX_NAME),
                                            desc=clip(c.desc, MAX_NAME), ranks=_ranks(c.ranks))
                             for k, c in configs.items()),
        pg_status=tuple(FrPgStatus(pg=clip(k, MAX_NAME), last_enqueued=_nonneg(s.last_enqueued_collective),
                                   last_started=_nonneg(s.last_started_collective),
                                   last_completed=_nonneg(s.last_completed_collective))
                        for k, s in statuses.items()),
        entries=tuple(entries),
        bad_entries=bad,
    )


def parse_flight_recorder(data: bytes | str) -> FlightRecorderDump:
    """A Flight Recorder dump: the pickle (bytes, as written) or the JSON form.

    A str is taken as the JSON form (or a pickle that went through text: a ParseError)."""
    if isinstance(data, str):
        data = data.encode("utf-8", errors="surrogateescape")
    if len(data) > MAX_DUMP_BYTES:
        raise ParseError(f"Flight Recorder dump: {len(data)} bytes, more than the {MAX_DUMP_BYTES} accepted")
    if not data.strip():
        raise ParseError("Flight Recorder dump: empty input")
    if data.lstrip()[:1] == b"{":
        try:
            obj = typed.decode_json(data, Any)  # bounded nesting, and bytes that are not UTF-8: one line
        except msgspec.DecodeError as exc:
            raise ParseError(f"Flight Recorder JSON: {clip(str(exc), 200)}") from None
        fmt: Format = "json"
    else:
        obj = _unpickle(data)
        fmt = "pickle"
    _check_plain(obj, len(data) + 1024)
    return _convert(obj, fmt)


_RANK_SUFFIX = re.compile(r"(\d{1,9})(?:\.(?:pkl|pickle|json))?$")


def rank_from_filename(name: str) -> int | None:
    """The rank FR appends to its dump files (`nccl_trace_rank_3`, `fr_trace_rank_3.json`):
    the digits that end the file name; None without them."""
    m = _RANK_SUFFIX.search(name.rsplit("/", 1)[-1][-64:])
    return int(m.group(1)) if m is not None else None


# ---------------------------------------------------------------- several ranks


class FrRankProgress(msgspec.Struct, frozen=True, omit_defaults=True):
    """How far one rank got in one group: the highest collective_seq_id enqueued,
    started and completed (entries' states and pg_status together: gloo entries stay
    "scheduled", a dump's pg_status may lag its entries), and the oldest seq still in
    its ring buffer (`first_seq`; older ones were overwritten and are never judged)."""

    rank: int
    last_enqueued: int | None = None
    last_started: int | None = None
    last_completed: int | None = None
    first_seq: int | None = None
    entries: int = 0


class FrMissing(msgspec.Struct, frozen=True, omit_defaults=True):
    """A seq some ranks recorded and others did not (beyond their last, or skipped)."""

    seq: int
    op: str  # the profiling_name the present ranks recorded (the first, if they disagree)
    present: tuple[int, ...]
    missing: tuple[int, ...]


class FrVariant(msgspec.Struct, frozen=True):
    value: str
    ranks: tuple[int, ...]


class FrMismatch(msgspec.Struct, frozen=True):
    """Ranks that recorded different things at one seq: each variant and the ranks that
    recorded it, most ranks first. Which side is wrong is not decided here."""

    seq: int
    field: Literal["op", "input_sizes", "input_dtypes", "output_sizes", "output_dtypes"]
    variants: tuple[FrVariant, ...]


class FrGroupComparison(msgspec.Struct, frozen=True, omit_defaults=True):
    pg_name: str
    pg_desc: str = ""
    ranks: tuple[int, ...] = ()  # the ranks judged (a dump, with entries or a pg_status for the group)
    no_dump: tuple[int, ...] = ()  # members by pg_config with no dump given
    unknown: tuple[int, ...] = ()  # a dump, but nothing about this group in it
    progress: tuple[FrRankProgress, ...] = ()
    missing: tuple[FrMissing, ...] = ()  # the first MAX_LISTED, in seq order
    missing_count: int = 0
    mismatches: tuple[FrMismatch, ...] = ()  # the first MAX_LISTED, in seq order
    mismatch_count: int = 0

    @property
    def behind(self) -> tuple[int, ...]:
        """Ranks whose last enqueued seq is below the group's highest."""
        tops = {p.rank: p.last_enqueued for p in self.progress if p.last_enqueued is not None}
        if not tops:
            return ()
        high = max(tops.values())
        return tuple(r for r, top in sorted(tops.items()) if top < high)


class FrComparison(msgspec.Struct, frozen=True):
    ranks: tuple[int, ...]
    groups: tuple[FrGroupComparison, ...]

    @property
    def consistent(self) -> bool:
        return all(not g.missing_count and not g.mismatch_count for g in self.groups)


# Ops whose sizes (and dtype lists) legitimately differ between ranks: the root's list
# of tensors against the others' empty one, uneven all-to-all splits. Only the op is
# compared for them.
_ASYMMETRIC = frozenset({
    "gather", "scatter", "all_to_all", "all_to_all_single", "alltoall", "alltoall_base", "all_to_allv",
    "coalesced", "allgather_coalesced", "reduce_scatter_tensor_coalesced",
})
_FIELDS: tuple[Literal["input_sizes", "input_dtypes", "output_sizes", "output_dtypes"], ...] = (
    "input_sizes", "input_dtypes", "output_sizes", "output_dtypes")


def _max(*values: int | None) -> int | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def _sort_key(name: str) -> tuple[int, int, str]:
    return (0, int(name), "") if name.isascii() and name.isdigit() and len(name) < 18 else (1, 0, name)


def compare_ranks(dumps: Mapping[int, FlightRecorderDump]) -> FrComparison:
    """Per process group (by name), across ranks' dumps: each rank's progress, the seqs
    some ranks lack, and the seqs where ranks recorded different ops, sizes or dtypes
    (reported as the rank sets that disagree, never one "culprit"). Collectives only:
    p2p seqs are per pair and not compared."""
    per_pg: dict[str, dict[int, dict[int, list[FrEntry]]]] = {}
    desc: dict[str, str] = {}
    for rank, dump in dumps.items():
        for e in dump.entries:
            if e.is_p2p or e.collective_seq_id is None:
                continue
            per_pg.setdefault(e.pg_name, {}).setdefault(rank, {}).setdefault(e.collective_seq_id, []).append(e)
            desc.setdefault(e.pg_name, e.pg_desc)
        for s in dump.pg_status:
            per_pg.setdefault(s.pg, {})
    groups = []
    for pg in sorted(per_pg, key=_sort_key):
        groups.append(_compare_group(pg, desc.get(pg, ""), per_pg[pg], dumps))
    return FrComparison(ranks=tuple(sorted(dumps)), groups=tuple(groups))


def _members(pg: str, dumps: Mapping[int, FlightRecorderDump]) -> set[int]:
    """Global ranks pg_config names for the group (gloo's '' key with '[]' names none)."""
    found: set[int] = set()
    for dump in dumps.values():
        for c in dump.process_groups:
            if pg and pg in (c.key, c.name):
                found.update(c.ranks)
    return found


def _compare_group(pg: str, pg_desc: str, seqs_by_rank: dict[int, dict[int, list[FrEntry]]],
                   dumps: Mapping[int, FlightRecorderDump]) -> FrGroupComparison:
    members = _members(pg, dumps)
    progress: list[FrRankProgress] = []
    windows: dict[int, tuple[int | None, int | None]] = {}  # rank -> (first retained seq, last enqueued)
    unknown = []
    for rank in sorted(set(dumps) & (members | set(seqs_by_rank) | {r for r, d in dumps.items() if d.status_of(pg)})):
        seqs = seqs_by_rank.get(rank, {})
        status = dumps[rank].status_of(pg)
        if not seqs and status is None:
            unknown.append(rank)
            continue
        states = [(seq, e.state) for seq, es in seqs.items() for e in es]
        top = _max(max(seqs, default=None), status.last_enqueued if status else None)
        started = _max(max((s for s, st in states if st in ("started", "completed")), default=None),
                       status.last_started if status else None)
        completed = _max(max((s for s, st in states if st == "completed"), default=None),
                         status.last_completed if status else None)
        first = min(seqs, default=None)
        windows[rank] = (first, top)
        progress.append(FrRankProgress(rank=rank, last_enqueued=top, last_started=started, last_completed=completed,
                                       first_seq=first, entries=sum(len(es) for es in seqs.values())))
    missing: list[FrMissing] = []
    mismatches: list[FrMismatch] = []
    missing_count = mismatch_count = 0
    every_seq = sorted({s for seqs in seqs_by_rank.values() for s in seqs})
    judged = sorted(windows)
    for seq in every_seq:
        present = [r for r in judged if seq in seqs_by_rank.get(r, {})]
        absent = []
        for r in judged:
            if seq in seqs_by_rank.get(r, {}):
                continue
            first, top = windows[r]
            if top is None or seq > top or (first is not None and first <= seq):
                absent.append(r)  # never got there, or skipped it inside its window
        if absent and present:
            missing_count += 1
            if len(missing) < MAX_LISTED:
                op = seqs_by_rank[present[0]][seq][0].profiling_name
                missing.append(FrMissing(seq=seq, op=op, present=tuple(present), missing=tuple(absent)))
        if len(present) > 1:
            for mismatch in _mismatches(seq, {r: seqs_by_rank[r][seq] for r in present}):
                mismatch_count += 1
                if len(mismatches) < MAX_LISTED:
                    mismatches.append(mismatch)
    return FrGroupComparison(
        pg_name=pg, pg_desc=pg_desc, ranks=tuple(judged), no_dump=tuple(sorted(members - set(dumps))),
        unknown=tuple(unknown), progress=tuple(progress), missing=tuple(missing), missing_count=missing_count,
        mismatches=tuple(mismatches), mismatch_count=mismatch_count,
    )


def _variants(values: dict[int, str]) -> tuple[FrVariant, ...]:
    by_value: dict[str, list[int]] = {}
    for rank, value in sorted(values.items()):
        by_value.setdefault(value, []).append(rank)
    return tuple(FrVariant(value=v, ranks=tuple(rs))
                 for v, rs in sorted(by_value.items(), key=lambda item: (-len(item[1]), item[0])))


def _mismatches(seq: int, at_seq: dict[int, list[FrEntry]]) -> list[FrMismatch]:
    found = []
    ops = {r: ", ".join(e.profiling_name for e in es) for r, es in at_seq.items()}
    if len(set(ops.values())) > 1:
        found.append(FrMismatch(seq=seq, field="op", variants=_variants(ops)))
        return found  # different ops: their sizes differ for that reason alone
    if any(e.op in _ASYMMETRIC for es in at_seq.values() for e in es):
        return found
    for field in _FIELDS:
        values = {r: "; ".join(clip(str([list(x) if isinstance(x, tuple) else x for x in getattr(e, field)]), 200)
                               for e in es) for r, es in at_seq.items()}
        if len(set(values.values())) > 1:
            found.append(FrMismatch(seq=seq, field=field, variants=_variants(values)))
    return found


# ---------------------------------------------------------------- analyzers' text


class FrAnalysisError(msgspec.Struct, frozen=True, omit_defaults=True):
    """One `Culprit rank R; Error type: TYPE, DETAIL` of torchfrtrace. R is the rank whose
    entry differed from the one torchfrtrace took as reference: one side of a
    disagreement, not necessarily the rank at fault."""

    rank: int
    error_type: str  # COLLECTIVE_TYPE_MISMATCH, SIZE_OR_SYNTAX_MISMATCH, COLLECTIVE_DTYPE_MISMATCH, ...
    detail: str = ""


class FrAnalysisFinding(msgspec.Struct, frozen=True, omit_defaults=True):
    """One torchfrtrace report: `missing-ranks` (Not all ranks joining collective ...),
    `errors` (Collective sequence number: N has errors), `io-mismatch` (Input/output
    mismatch in the collective sequence number: N, all-to-all), or `undecided` (dumps
    missing from `ranks_without_dumps`)."""

    kind: Literal["missing-ranks", "errors", "io-mismatch", "undecided"]
    seq: int | None = None
    entry: int | None = None  # "at entry M" (older torchfrtrace)
    record_id: int | None = None
    group: str = ""  # "0:default_pg"
    collective: str = ""  # "nccl:all_reduce"
    missing_ranks: tuple[int, ...] = ()
    input_sizes: str = ""
    output_sizes: str = ""
    world_size: int | None = None
    expected_ranks: tuple[int, ...] = ()
    state: str = ""
    errors: tuple[FrAnalysisError, ...] = ()
    frames: tuple[str, ...] = ()  # "all_reduce at /path/distributed_c10d.py:3245"
    ranks_without_dumps: tuple[int, ...] = ()


class FrAttributionRow(msgspec.Struct, frozen=True, omit_defaults=True):
    """A row of NVRx's FR attribution table: the group, its op, and the ranks missing
    (or, in its `Completed Ranks` table, completed)."""

    pg_id: int
    pg_desc: str
    op: str
    size: str
    dtype: str
    ranks: tuple[int, ...]
    column: Literal["missing", "completed"] = "missing"


class FrAnalysis(msgspec.Struct, frozen=True, omit_defaults=True):
    tool: Literal["torchfrtrace", "nvrx"]
    findings: tuple[FrAnalysisFinding, ...] = ()
    attribution: tuple[FrAttributionRow, ...] = ()
    entries_without_errors: int = 0  # "No errors found for this collective entry, ..."
    unrecognized: Unrecognized = NOTHING_UNREAD  # lines that are none of the report's (omitted when none)

    @property
    def missing_ranks(self) -> tuple[int, ...]:
        ranks = {r for f in self.findings for r in f.missing_ranks}
        ranks.update(r for row in self.attribution if row.column == "missing" for r in row.ranks)
        return tuple(sorted(ranks))


_FINDING_HEADS = (
    # `, sequence number:` as torchfrtrace prints it now; `: sequence number:` in its first
    # form (pytorch/pytorch#140969's test plan, field-3's fr-trace paste)
    (re.compile(r"Not all ranks joining collective[,:] sequence number: (\d{1,12})"), "missing-ranks"),
    (re.compile(r"Not all ranks joining collective (\d{1,12}) at entry (\d{1,12})"), "missing-ranks"),
    (re.compile(r"Collective sequence number: (\d{1,12}) has errors"), "errors"),
    (re.compile(r"Input/output mismatch in the collective sequence number: (\d{1,12})"), "io-mismatch"),
)
_UNDECIDED = re.compile(r"We cannot decide what's wrong with this collective entry because we missed FR dumps "
                        r"from ranks \(([^)]{0,100000})\)")
_CULPRIT = re.compile(r"Culprit rank (\d{1,9}); Error type: ([A-Z_]{1,64})")
_FRAME = re.compile(r"(\S{1,512}) at (\S.{0,2048}):(\d{1,9})")
_LOGGER_PREFIX = re.compile(r"(?:INFO|DEBUG|WARNING):[\w.]{0,64}:")
# torchfrtrace's own lines hc does not read: its progress, and the titles of `-v`'s tables
# (their rows follow, up to the next title or report)
_PROGRESS = ("loaded ", "built groups, memberships", "built collectives, nccl_calls",
             "appending a non-matching collective")
_VERBOSE_TABLES = frozenset({"Groups", "Memberships", "Collectives", "NCCLCalls"})


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(m.group()) for m in _INT.finditer(text[:1_000_000]) if m.group()[0] != "-")


def _errors(message: str) -> tuple[FrAnalysisError, ...]:
    found = list(_CULPRIT.finditer(message))
    out = []
    for i, m in enumerate(found):
        end = found[i + 1].start() if i + 1 < len(found) else len(message)
        detail = message[m.end():end].strip().strip(",").strip()
        out.append(FrAnalysisError(rank=int(m.group(1)), error_type=m.group(2), detail=clip(detail, MAX_TEXT)))
    return tuple(out)


def _small_int(value: str, digits: int) -> int | None:
    """`value` as an int when it is a plain number of fewer than `digits` digits."""
    return int(value) if value.isascii() and value.isdigit() and len(value) < digits else None


def _set_record_id(finding: dict[str, Any], value: str) -> None:
    if (n := _small_int(value, 13)) is not None:
        finding["record_id"] = n


def _set_world_size(finding: dict[str, Any], value: str) -> None:
    if (n := _small_int(value, 10)) is not None:
        finding["world_size"] = n


def _set_expected_ranks(finding: dict[str, Any], value: str) -> None:
    if value.startswith("{"):
        finding["expected_ranks"] = _ints(value)
    else:
        _set_world_size(finding, value)  # older torchfrtrace printed the count


# a finding's `key: value` lines, each to the field it fills (collective stack trace: below)
_FINDING_FIELDS: dict[str, Callable[[dict[str, Any], str], None]] = {
    "internal record id": _set_record_id,
    "group info": lambda f, v: f.__setitem__("group", clip(v, MAX_NAME)),
    "collective": lambda f, v: f.__setitem__("collective", clip(v, MAX_NAME)),
    "missing ranks": lambda f, v: f.__setitem__("missing_ranks", _ints(v)),
    "input sizes": lambda f, v: f.__setitem__("input_sizes", clip(v, MAX_TEXT)),
    "output sizes": lambda f, v: f.__setitem__("output_sizes", clip(v, MAX_TEXT)),
    "world size": _set_world_size,
    "expected ranks": _set_expected_ranks,
    "collective state": lambda f, v: f.__setitem__("state", clip(v, 40)),
    "error msg": lambda f, v: f.__setitem__("errors", _errors(v)),
}


class _AnalysisReader:
    """The state of one pass over torchfrtrace's report or NVRx's attribution table."""

    def __init__(self) -> None:
        self.findings: list[dict[str, Any]] = []
        self.rows: list[FrAttributionRow] = []
        self.column: Literal["missing", "completed"] | None = None
        self.headless = 0  # attribution rows before any header: whose last column is not known
        self.no_errors = 0
        self.current: dict[str, Any] | None = None
        self.in_stack = False
        self.in_table = False  # in one of `torchfrtrace -v`'s tables (Groups, NCCLCalls, ...)

    def read(self, body: str) -> bool:
        """Read one line (stripped); False where it is none of the report's."""
        if self.in_stack:
            if _FRAME.fullmatch(body) and self.current is not None:
                self.current["frames"].append(clip(body, MAX_TEXT))
                return True
            self.in_stack = False
        if not body:
            return True
        if self._attribution(body) or self._finding_head(body):
            self.in_table = False
            return True
        if body in _VERBOSE_TABLES or body.startswith(_PROGRESS):
            self.in_table = body in _VERBOSE_TABLES
            return True
        if self.in_table:
            return True  # a row of `-v`'s tables: its own, not read
        if body.startswith("No errors found for this collective entry"):
            self.no_errors += 1
        elif m := _UNDECIDED.match(body):
            self.findings.append({"kind": "undecided", "ranks_without_dumps": _ints(m.group(1)), "frames": []})
        elif self.current is not None:
            return self._finding_field(self.current, body)
        else:
            return False
        return True

    def _attribution(self, body: str) -> bool:
        """NVRx's table: its header sets the last column's meaning, each row is one group's op."""
        if "|" in body and body.startswith("PGID"):
            cells = [c.strip() for c in body.split("|")]
            self.column = "completed" if cells[-1].startswith("Completed") else "missing"
            return True
        if "|" not in body:
            return False
        cells = [c.strip() for c in body.split("|")]
        if len(cells) < 6 or (pg_id := _small_int(cells[0], 12)) is None:
            return False
        if self.column is None:  # a row whose header a cut took: missing or completed ranks, only it said
            self.headless += 1
            return False
        self.rows.append(FrAttributionRow(pg_id=pg_id, pg_desc=clip("|".join(cells[1:-4]), MAX_NAME),
                                          op=clip(cells[-4], MAX_NAME), size=clip(cells[-3], MAX_NAME),
                                          dtype=clip(cells[-2], 40), ranks=_ints(cells[-1]), column=self.column))
        return True

    def _finding_head(self, body: str) -> bool:
        for pattern, kind in _FINDING_HEADS:
            if m := pattern.fullmatch(body):
                self.current = {"kind": kind, "seq": int(m.group(1)), "frames": []}
                if m.lastindex == 2:
                    self.current["entry"] = int(m.group(2))
                self.findings.append(self.current)
                return True
        return False

    def _finding_field(self, current: dict[str, Any], body: str) -> bool:
        """A finding's `key: value` line; False for a line that is none of its fields."""
        key, sep, value = body.partition(": ")
        if not sep and body.endswith(":"):
            key, value = body[:-1], ""
        value = value.strip()
        if key == "collective stack trace":
            self.in_stack = True
            if value and _FRAME.fullmatch(value):
                current["frames"].append(clip(value, MAX_TEXT))
        elif (setter := _FINDING_FIELDS.get(key)) is not None:
            setter(current, value)
        else:
            return False
        return True


def parse_fr_analysis(text: str) -> FrAnalysis:
    """The text `torchfrtrace DIR [-v]` prints (torch/distributed/flight_recorder:
    components/types.py EntryState.log, utils.py match_coalesced_groups_with_non_p2p), or
    NVRx's `PGID | Process Group Desc | Op Type | Size | Dtype | Missing Ranks` table
    (nvidia_resiliency_ext/attribution/trace_analyzer/fr_attribution.py)."""
    reader = _AnalysisReader()
    unread = UnrecognizedLines()
    for numbered in mended_numbered(text):
        line = numbered.text[:MAX_TEXT * 4]
        if prefix := _LOGGER_PREFIX.match(line):
            line = line[prefix.end():]
        if not reader.read(line.strip()):
            unread.note(numbered)
    findings, rows, no_errors = reader.findings, reader.rows, reader.no_errors
    if not findings and not rows and not no_errors and reader.headless:
        raise FragmentError(f"Flight Recorder analysis: {reader.headless} NVRx attribution row(s) with no "
                            "'PGID | ...' header: whether their ranks are the missing or the completed ones, "
                            "only the header says")
    if not findings and not rows and not no_errors:
        raise ParseError("Flight Recorder analysis: no torchfrtrace report and no NVRx attribution table "
                         f"(starts with {clip(text.strip(), 60)!r})")
    built = tuple(typed.convert({**f, "frames": tuple(f["frames"])}, FrAnalysisFinding) for f in findings)
    return FrAnalysis(tool="nvrx" if rows and not findings else "torchfrtrace", findings=built,
                      attribution=tuple(rows), entries_without_errors=no_errors,
                      unrecognized=unread.frozen_or_nothing())
