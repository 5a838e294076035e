"""Saved files -> JobEvidence (`hc diagnose logs DIR|FILE...`).

The files come from `walk.py`: a bounded walk that never enters /proc, /sys, /dev or
any kernel pseudo file system, never follows a link out of the directory named, opens
nothing but regular files and shows every name escaped. Each file is sniffed by name
and content:

* Flight Recorder dumps (`nccl_trace_rank_N`, pickle or JSON; rank from the name);
* py-spy dumps, text or `--json` (rank from the name: `rank3`, `py-spy-3.json`; else
  from its pid, mapped through the other files);
* torchrun `@record` error files (`{"message": {"message", "extraInfo": {"py_callstack",
  "timestamp"}}}`);
* NCCL RAS replies (`ncclras`, text or JSON);
* kernel logs (OOM kills, Xid);
* `hc run`'s output of a rank (`hc-run.rank<R>.<host>.<pid>.log`) or of a launcher it
  wrapped: each line stamped with its time, the rank in its first line (parsers/run_output.py);
  read as the console showed it, with those times; its shim for torchrun is passed over;
* any other text is read as an NCCL debug log and as a PyTorch/torchrun log (a job's
  stdout holds both); per-rank files (`rank3.log`, a `[rank3]:`-only file) give their
  rank to every line.

A file that gives nothing (binary, unreadable, cut, of no known kind) is listed in
`unreadable` with why. Nothing here raises on bad input.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import signal
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from healthcheck.core import typed
from healthcheck.core.errors import HcError, ParseError
from healthcheck.core.inputs import clip, read_bounded
from healthcheck.diagnose.attempts import blanked_before, last_attempt
from healthcheck.diagnose.condense import condensed
from healthcheck.diagnose.evidence import (
    ErrorFile,
    FrAnalysisText,
    JobEvidence,
    KernelEvent,
    NcclLogFile,
    RankEvidence,
    RasReply,
    TorchLogFile,
    Unreadable,
)
from healthcheck.diagnose.jsonlines import is_json_lines, record_head
from healthcheck.diagnose.loggednumbers import Logged, merge_logged, read_logged, same_reading
from healthcheck.diagnose.runmanifest import launcher_manifest
from healthcheck.diagnose.stacklabel import label_rank
from healthcheck.diagnose.stampseries import StampSeries, shared
from healthcheck.diagnose.taskfiles import task_ranks
from healthcheck.diagnose.walk import MAX_FILE_BYTES, Progress, Skip, read_all, shown, walk
from healthcheck.parsers.flight_recorder import parse_flight_recorder, parse_fr_analysis, rank_from_filename
from healthcheck.parsers.kernlog import split_prefix
from healthcheck.parsers.lines import labels_of, numbered_as, shapes_kept, worker_labelled
from healthcheck.parsers.nccl_log import NcclLog, parse_nccl_log
from healthcheck.parsers.nccl_ras import parse_nccl_ras
from healthcheck.parsers.py_spy import PySpyDump, parse_py_spy
from healthcheck.parsers.run_output import HEADER_START, SHIM_MARK, parse_run_output
from healthcheck.parsers.torch_log import ChildFailure, TorchLog, parse_torch_log, read_torch_lines
from healthcheck.parsers.xid import parse_kernel_log

MAX_STAMPS = 200_000  # timestamped lines indexed per file
# NCCL's parser reads only the lines its marks find (parsers/nccl_log.NCCL_MARKS): the same
# facts; its count of unread lines, which no rule reads, is of the lines it read. False: every
# line (tests/unit/diagnose/test_diagnose_marked_reading.py compares the two on every fixture)
NCCL_MARKED_ONLY = True
_RANK_NAME = re.compile(r"(?:^|[^a-z])rank[_\-.]?(\d{1,7})(?!\d)", re.IGNORECASE)
# a directory that is one rank's: `rank3`, `rank_3`, `rank.3`, `worker-rank3`, `py-spy-3`
_RANK_DIR = re.compile(r"(?:[a-z0-9]{1,32}[_\-.])?(?:rank|py-?spy)[_\-.]?(?:rank[_\-.]?)?\d{1,7}", re.IGNORECASE)
_PYSPY_NAME = re.compile(r"py-?spy[_\-.](?:rank[_\-.]?)?(\d{1,7})(?!\d)", re.IGNORECASE)
_OOM = re.compile(r"(Out of memory|Memory cgroup out of memory): Killed process (\d{1,10}) \(([^)]{0,64})\)")
_STEP_OOM = re.compile(r"Detected (\d{1,9}) oom[_-]kill events? in (?:StepId=)?(\S{1,64})")
_ISO_STAMP = re.compile(r"(?:\[)?(\d{4}-\d\d-\d\d)[ T_](\d\d:\d\d:\d\d)(?:[.,](\d{1,9}))?")
_GLOG_STAMP = re.compile(r"(?:\[rank\d{1,7}\]:)?\[?[FEWIV](\d\d)(\d\d) (\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?")
_PY_SPY_HEAD = re.compile(r"(?:Process \d{1,10}: |Thread (?:0[xX][0-9A-Fa-f]{1,20}|\d{1,20}) \((?:idle|active|gil))")
_RAS_HEAD = ("SERVER PROTOCOL", "Communicators...", "compiled with CUDA", "Job summary", "ncclras")
# the flight recorder analyser's report heads (parsers/flight_recorder.parse_fr_analysis)
_FR_ANALYSIS_HEAD = ("Not all ranks joining collective", "Collective sequence number: ",
                     "Input/output mismatch in the collective", "PGID | ")


@dataclass
class TextStamps:
    """Where a text log says what time it is: (line, epoch seconds) of its stamped lines,
    in line order; and the same per rank, for the lines a rank label (`[rank3]:`, srun's
    `3: `, mpirun's `[1,3]<stderr>:`) names, and for the lines none names.

    `at(line)`: the time of the last stamped line at or before it. `at(line, rank)`: the
    last one of that rank, else of the unlabelled lines (a job's console where only the
    ranks' tracebacks carry a label is one stream in time order; a per-rank file is all
    the rank's own), else of any line (stamps given whole: `hc run`'s copy of one rank)."""

    stamps: StampSeries = field(default_factory=StampSeries)
    by_rank: dict[int, StampSeries] = field(default_factory=dict)
    unlabelled: StampSeries = field(default_factory=StampSeries)

    def at(self, line: int, rank: int | None = None) -> float | None:
        if rank is None:
            return self.stamps.last_at(line)
        return (self.by_rank.get(rank) or self.unlabelled or self.stamps).last_at(line)


@dataclass
class Collected:
    """JobEvidence plus what only the classifier needs: the times of log lines."""

    evidence: JobEvidence
    stamps: dict[str, TextStamps] = field(default_factory=dict)  # source -> its stamps
    pid_ranks: dict[int, int] = field(default_factory=dict)  # pid -> global rank
    pending: list[tuple[str, PySpyDump]] = field(default_factory=list)  # py-spy dumps only a pid can place
    logged: Logged = field(default_factory=dict)  # rank -> what it logged of its own sizes (loggednumbers.py)
    attempts: list[str] = field(default_factory=list)  # earlier attempts a restart got past (attempts.py)
    cut_attempts: bool = True  # read a restarted console's last attempt only (attempts.py)
    whole: Collected | None = None  # where attempts were cut: every attempt read, for a last one naming no one
    earlier_pids: set[int] = field(default_factory=set)  # the workers of attempts a restart replaced
    run_pids: set[int] = field(default_factory=set)  # the pids of `hc run` rank outputs and manifests read
    skip_pids: frozenset[int] = frozenset()  # earlier attempts' pids whose `hc run` files are left out
    lone_runs: set[str] = field(default_factory=set)  # `hc run` files of rank 0 of world 1, no launcher seen
    as_launcher: frozenset[str] = frozenset()  # `hc run` files read as a launcher's (lone_wrapper)


def _epoch(date: str, clock: str, frac: str | None) -> float | None:
    try:
        t = _dt.datetime.fromisoformat(f"{date}T{clock}").replace(tzinfo=_dt.timezone.utc).timestamp()
    except ValueError:
        return None
    return t + (int(frac) / 10 ** len(frac) if frac else 0.0)


def _label(head: str, workers: bool = False) -> tuple[int | None, str, bool]:
    """A line's labels taken off by the line layer (parsers/lines.py): (the rank they name,
    the rest, whether it had any). `[rankN]:` names the rank; a launcher's label alone
    (srun, mpirun, a worker's `NAME-N | ` where `workers`) too; torchrun's `[default3]:` is
    a local rank: the rank alone, under srun's node label nothing."""
    labels = labels_of(head, workers=workers)
    return labels.global_rank, labels.rest, labels.labelled


def _stamp_of(head: str, year: int) -> float | None:
    m = _ISO_STAMP.match(head) or _ISO_STAMP.match(head, head.find("]:") + 2 if head.startswith("[rank") else 0)
    if m:
        return _epoch(m.group(1), m.group(2), m.group(3))
    g = _GLOG_STAMP.match(head)
    if g:
        return _epoch(f"{year:04d}-{g.group(1)}-{g.group(2)}", g.group(3), g.group(4))
    return None


def _line_stamp(line: str, year: int, workers: bool) -> tuple[int | None, float | None, bool]:
    """(the rank a line's labels name, its time, whether it is labelled); a JSON record's
    rank and time are the record's (jsonlines.record_head)."""
    head = line[:120]
    if "{" in head:
        record = record_head(line)
        if record is not None:
            rank, stamp, labelled = record
            return rank, _stamp_of(stamp, year) if stamp else None, labelled
    if not head or not (head[0].isdigit() or head[0] in "[ " or (workers and head[0].isalpha())):
        return None, None, False
    rank, rest, labelled = _label(head, workers)
    return rank, _stamp_of(rest, year) if rest[:1].isdigit() or rest[:1] == "[" else None, labelled


def _stamps(text: str, year: int, numbers: Sequence[int] | None = None) -> TextStamps:
    """The stamped lines of `text`; `numbers`: each line's number in the whole text, where
    `text` is a condensed one (condense.py)."""
    out = TextStamps()
    lines = text.split("\n")
    workers = worker_labelled(lines)  # `worker-3 | ` before each line names its rank
    for number, line in zip(numbers, lines, strict=False) if numbers is not None else enumerate(lines, 1):
        rank, t, labelled = _line_stamp(line, year, workers)
        if t is None:
            continue
        out.stamps.append((number, t))
        if not labelled:
            out.unlabelled.append((number, t))
        elif rank is None:
            pass  # a local rank under a node's label: whose it is, no label says
        elif rank in out.by_rank or len(out.by_rank) < 4096:
            out.by_rank.setdefault(rank, StampSeries()).append((number, t))
        if len(out.stamps) >= MAX_STAMPS:
            break
    out.unlabelled = shared(out.unlabelled, out.stamps)  # stampseries.py: one copy where they are equal
    out.by_rank = {rank: shared(series, out.stamps) for rank, series in out.by_rank.items()}
    return out


def rank_from_name(path: str) -> int | None:
    """`rank3.log`, `rank_3/`, `py-spy-3.json`, `nccl_trace_rank_3`: the rank a path names
    (its file name first, then its directories), None when it names none. A directory
    counts only where its whole name is a rank's label (`rank_3`, `worker-rank3`): a folder
    named in words (`oom-on-rank3-then-timeouts`, `root-cause-rank0`) describes a job whose
    files hold every rank's lines, and its words are no rank's."""
    parts = path.replace("\\", "/").split("/")
    for depth, part in enumerate(reversed(parts[-3:])):
        if depth and _RANK_DIR.fullmatch(part) is None:
            continue
        m = _PYSPY_NAME.search(part) or _RANK_NAME.search(part)
        if m:
            return int(m.group(1))
    return None


# ---------------------------------------------------------------- one file


def _is_binary(data: bytes) -> bool:
    head = data[:8192]
    if b"\x00" in head:
        return True
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start < len(head) - 4  # a multi-byte character cut at the end is fine
    return False


class _ErrorMessage(msgspec.Struct):
    message: str | dict | None = None


def _run_manifest(source: str, text: str, col: Collected) -> bool:
    """`hc run`'s manifest of one rank (schema hc.run/1): its rank, host, pid (NCCL's %p in
    the debug file names) and world size. True when the text was one."""
    if '"hc.run/1"' not in text[:4096]:
        return False
    try:
        doc = typed.decode_json(text.encode(), dict)
    except (msgspec.DecodeError, UnicodeEncodeError):
        return False
    rank = doc.get("rank")
    if doc.get("schema") != "hc.run/1" or not isinstance(rank, int) or isinstance(rank, bool) or rank < 0:
        return False
    if launcher_manifest(doc) or source in col.as_launcher:
        return True  # a launcher's (an older hc run around torchrun): no rank's world size
    host, pid, world, local = doc.get("host"), doc.get("pid"), doc.get("world_size"), doc.get("local_rank")
    if doc.get("launcher") == "none" and world == 1 and rank == 0:
        col.lone_runs.add(source)
    if _earlier_attempt(source, pid, col):
        return True
    ev = col.evidence.rank(rank)
    if isinstance(host, str) and host and not ev.host:
        ev.host = host[:255]
    if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 and ev.pid is None:
        ev.pid = pid
    if isinstance(world, int) and not isinstance(world, bool) and world > 0 and ev.world_size is None:
        ev.world_size = world
    if isinstance(local, int) and not isinstance(local, bool) and local >= 0 and ev.local_rank is None:
        ev.local_rank = local
    return True


def _read_run_output(source: str, data: bytes, col: Collected) -> None:
    """`hc run`'s copy of a rank's (or a launcher's) output, read as the console showed it with
    the time of each line; the rank its header names (a launcher's: none, whatever the file is
    called), and how the rank exited where the tee saw it. Its shim for torchrun: passed over."""
    run = parse_run_output(data.decode("utf-8", errors="replace"))
    if run is None:
        return  # hc run's shim: nothing of the job's
    if source in col.as_launcher:
        run.rank = run.world_size = None  # it started the ranks: its console is theirs, labelled or not
    elif run.launcher == "none" and run.world_size == 1 and run.rank == 0:
        col.lone_runs.add(source)
    if run.rank is not None and _earlier_attempt(source, run.pid, col):
        return  # attempts.py: a rank of an attempt torchrun restarted
    if run.rank is not None:
        r = col.evidence.rank(run.rank)
        r.host = r.host or run.host
        if r.pid is None:
            r.pid = run.pid
        if r.world_size is None:
            r.world_size = run.world_size
        if run.exit_code is not None:
            r.alive = False
            r.exit_code = run.exit_code
            if run.exit_code < 0:
                r.signal = signal_name(-run.exit_code)
    text = _last_attempt_only(source, run.text, run.rank, col)  # a launcher's copy of torchrun's console
    if not _read_text_log(source, text, run.rank, col, TextStamps(StampSeries(run.stamps))) and run.rank is not None:
        col.evidence.rank(run.rank).sources.append(source)  # read: the rank printed nothing hc knows


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _error_file(source: str, data: bytes, rank: int | None) -> ErrorFile | None:
    try:
        raw = typed.decode_json(data, _ErrorMessage)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    msg = raw.message
    if isinstance(msg, str):
        return ErrorFile(source=source, message=clip(msg, 500), rank=rank)
    if not isinstance(msg, dict):
        return None
    text = msg.get("message")
    extra = msg.get("extraInfo") if isinstance(msg.get("extraInfo"), dict) else {}
    stamp = extra.get("timestamp") if isinstance(extra, dict) else None
    try:
        timestamp = float(stamp) if stamp is not None else None
    except (TypeError, ValueError):
        timestamp = None
    code = msg.get("errorCode")
    return ErrorFile(source=source, message=clip(str(text or ""), 500), rank=rank,
                     traceback=clip(str(extra.get("py_callstack", "")), 4000) if isinstance(extra, dict) else "",
                     timestamp=timestamp, error_code=code if isinstance(code, int) else None)


# every line `_kernel` reads holds one of these; none holds a digit (a condensed text's kept
# lines hold each one that the whole text holds: `_read_text_log`)
_KERNEL_WORDS = ("Killed process", "oom", "NVRM:")


def _kernel(source: str, text: str) -> list[KernelEvent]:
    """The OOM kills and Xids of a text."""
    out: list[KernelEvent] = []
    if "Killed process" in text or "oom" in text:
        for number, line in enumerate(text.split("\n"), 1):
            m = _OOM.search(line[:4096])
            if m:
                stamp, _ = split_prefix(line[:4096], None, None)
                out.append(KernelEvent(source=source, line=number, kind="oom-kill", text=clip(line.strip(), 300),
                                       pid=int(m.group(2)), time=stamp.time))
                continue
            m = _STEP_OOM.search(line[:4096])
            if m:
                out.append(KernelEvent(source=source, line=number, kind="oom-kill", text=clip(line.strip(), 300)))
    if "NVRM:" in text:
        try:
            log = parse_kernel_log(text)
        except ParseError:
            return out
        lines = text.split("\n")
        index = {ln: i for i, ln in enumerate(lines, 1)}
        for x in log.xids:
            out.append(KernelEvent(source=source, line=index.get(x.line, 0), kind="xid", text=clip(x.line, 300),
                                   pid=x.pid, time=x.time, xid=x.code, pci_bus_id=x.pci_bus_id or ""))
    return out


def read_one(path: Path, col: Collected, year: int) -> None:
    """Sniff and parse one file into `col.evidence` (regular files only, never blocking)."""
    try:
        data = read_bounded(path, MAX_FILE_BYTES, what="log")
    except HcError as exc:  # its message starts with the path as Python holds it
        why = str(exc).removeprefix(f"{os.fspath(path)}: ")
        col.evidence.unreadable.append(Unreadable(shown(path), shown(why)))
        return
    read_data(shown(path), data, col, year)


def read_data(source: str, data: bytes, col: Collected, year: int, rank: int | None = None) -> None:
    """Sniff and parse one file's bytes (read already: a local file, or one fetched from a
    node as `host:/path`) into `col.evidence`. `rank`: the rank the file is known to belong
    to (a live rank's NCCL_DEBUG_FILE); None: from its name."""
    ev = col.evidence
    if not data.strip():
        ev.unreadable.append(Unreadable(source, "empty"))
        return
    if data.startswith((HEADER_START.encode(), b"#!/bin/sh\n" + SHIM_MARK.encode())):
        _read_run_output(source, data, col)
        return
    name = source.replace("\\", "/").rsplit("/", 1)[-1]
    if rank is None:
        rank = rank_from_name(source)
    head = data.lstrip()[:1]
    fr_name = "trace_rank" in name or name.startswith(("fr_", "fr-")) or name.endswith((".pkl", ".pickle"))
    if data[:1] == b"\x80" or (fr_name and head == b"{"):
        _read_flight_recorder(source, name, data, rank, col)
        return
    if _is_binary(data):
        ev.unreadable.append(Unreadable(source, "binary, not a log (no known dump format either)"))
        return
    text = data.decode("utf-8", errors="replace")
    if head == b"[":
        if _py_spy(source, text, rank, col):
            return
    if head == b"{" and not is_json_lines(text):  # jsonlines.py: a log of JSON lines is read as text
        _read_json(source, name, data, text, rank, col)
        return
    start = text[:65536]
    if _PY_SPY_HEAD.search(start) or start.lstrip().startswith("Error: "):
        if _py_spy(source, text, rank, col):
            return
    if any(h in start for h in _RAS_HEAD) and "NCCL INFO" not in start:
        try:
            ev.ras.append(RasReply(source=source, status=parse_nccl_ras(text)))
            return
        except ParseError:
            pass
    if any(h in start for h in _FR_ANALYSIS_HEAD) and _fr_analysis(source, text, col):
        return
    if not _read_log_text(source, data, text, rank, col, year):
        _nothing_known(source, rank, col)


def _read_log_text(source: str, data: bytes, text: str, rank: int | None, col: Collected, year: int) -> bool:
    """A text log (`data` decoded), its last attempt only; above condense.BIG_TEXT_BYTES read
    condensed, each line with its number in the whole file; at or below, whole as ever."""
    whole = _last_attempt_only(source, text, rank, col)
    big = condensed(data if whole is text else whole.encode(), whole)  # condense.py: None at or below its size
    if big is None:
        return _read_text_log(source, whole, rank, col, _stamps(whole, year))
    stamps = _stamps(big.text, year, big.numbers)
    return _read_text_log(source, big.text, rank, col, stamps, whole=whole, numbers=big.numbers)


def _fr_analysis(source: str, text: str, col: Collected) -> bool:
    """The flight recorder analyser's report, through the parser `hc parse
    flight-recorder-analysis` uses; False where the text holds none of its findings (a log
    that only quotes its words is read as a log)."""
    try:
        analysis = parse_fr_analysis(text)
    except ParseError:  # FragmentError too
        return False
    if not analysis.findings and not analysis.attribution:
        return False
    col.evidence.fr_analyses.append(FrAnalysisText(source=source, analysis=analysis))
    return True


_RESTART_WORDS = ("failed (exitcode: ", "will restart worker group")


def _last_attempt_only(source: str, text: str, rank: int | None, col: Collected) -> str:
    """A console torchrun restarted the workers in: its last attempt only, the earlier ones
    blanked (their lines kept as empty ones) and said in `col.attempts` (attempts.py)."""
    if not col.cut_attempts or not any(w in text for w in _RESTART_WORDS):
        return text
    try:
        log = parse_torch_log(text, rank_output=rank is not None)
    except ParseError:
        return text
    found = last_attempt(text, log)
    if found is None:
        return text
    col.attempts.append(f"{source}: {found.note()}")
    col.earlier_pids.update(found.pids)
    return blanked_before(text, found.start)


def _earlier_attempt(source: str, pid: object, col: Collected) -> bool:
    """Whether an `hc run` file of process `pid` is an earlier attempt's (left out, said so);
    the pid is noted either way, for collect() to know whether to read again without them."""
    if not isinstance(pid, int) or isinstance(pid, bool):
        return False
    col.run_pids.add(pid)
    if pid not in col.skip_pids:
        return False
    col.evidence.unreadable.append(Unreadable(source, f"an earlier attempt's (pid {pid}): torchrun restarted "
                                                      "the workers, only the last attempt is judged"))
    return True


def _nothing_known(source: str, rank: int | None, col: Collected) -> None:
    """A text of no known kind; a rank's own file (by its name) of no known kind is still
    that rank's output with no failure in it (it finished, or left early): the rank was
    heard, which the rules that compare ranks need."""
    why = "no NCCL, PyTorch, torchrun, py-spy, Flight Recorder, RAS or kernel log content"
    if rank is not None:
        col.evidence.rank(rank).sources.append(source)
        why += f" (counted as rank {rank}'s output)"
    col.evidence.unreadable.append(Unreadable(source, why))


def _read_flight_recorder(source: str, name: str, data: bytes, rank: int | None, col: Collected) -> None:
    """A Flight Recorder dump (pickle, or JSON by its name): its rank from the name, else `rank`."""
    ev = col.evidence
    try:
        dump = parse_flight_recorder(data)
    except ParseError as exc:
        ev.unreadable.append(Unreadable(source, f"Flight Recorder dump: {_why(exc)}"))
        return
    fr_rank = rank_from_filename(name)
    if fr_rank is None:
        fr_rank = rank
    if fr_rank is None:
        ev.unreadable.append(Unreadable(source, "Flight Recorder dump whose file name gives no rank "
                                                "(expected nccl_trace_rank_N)"))
        return
    r = ev.rank(fr_rank)
    r.flight_recorder = dump
    r.sources.append(source)


def _read_json(source: str, name: str, data: bytes, text: str, rank: int | None, col: Collected) -> None:
    """A JSON file: a Flight Recorder dump, `hc run`'s manifest, a torchrun error file or a RAS reply."""
    ev = col.evidence
    if "\"entries\"" in text[:1_000_000] and "\"version\"" in text[:1_000_000]:
        try:
            dump = parse_flight_recorder(data)
        except ParseError as exc:
            ev.unreadable.append(Unreadable(source, f"Flight Recorder dump: {_why(exc)}"))
            return
        fr_rank = rank_from_filename(name) if rank is None else rank
        if fr_rank is None:
            ev.unreadable.append(Unreadable(source, "Flight Recorder dump whose file name gives no rank"))
            return
        ev.rank(fr_rank).flight_recorder = dump
        ev.rank(fr_rank).sources.append(source)
        return
    if _run_manifest(source, text, col):
        return
    err = _error_file(source, data, rank)
    if err is not None and err.message:
        ev.error_files.append(err)
        if rank is not None:
            ev.rank(rank).sources.append(source)
        return
    try:
        ev.ras.append(RasReply(source=source, status=parse_nccl_ras(text)))
        return
    except ParseError:
        pass
    ev.unreadable.append(Unreadable(source, "JSON of no known kind (not py-spy, Flight Recorder, "
                                            "a torchrun error file or NCCL RAS)"))


def _read_text_log(source: str, text: str, rank: int | None, col: Collected, stamps: TextStamps,
                   whole: str | None = None, numbers: Sequence[int] | None = None) -> bool:
    """A job's output or a log: kernel events, NCCL and PyTorch/torchrun lines. False: none of them.
    `whole`: the whole text where `text` is its condensed lines (condense.py), `numbers` their
    numbers in it, which the parsers read them by (`lines.numbered_as`); the kernel's lines
    are read in the whole text, and the parsers' line counts are its."""
    ev = col.evidence
    scan = text if whole is None else whole
    # a condensed text's left-out lines share a kept line's words (condense.py): where the kept
    # lines hold none of the kernel scan's words, the whole text holds none (no 3 MB searches)
    quiet = whole is not None and not any(word in text for word in _KERNEL_WORDS)
    events = [] if quiet else _kernel(source, scan)
    ev.kernel.extend(events)
    got = bool(events)
    with numbered_as(numbers), shapes_kept():  # None: the text's own numbers; its shapes decided once
        nccl, torch, logged = _parsed(text, rank)
    merge_logged(col.logged, logged)
    if whole is not None:  # the counts of the whole text's lines, as the parsers count them
        newlines, ends = whole.count("\n"), whole.endswith("\n")
        nccl = nccl and msgspec.structs.replace(nccl, lines=newlines + (not ends))
        torch = torch and msgspec.structs.replace(torch, lines=newlines + 1)
    if nccl is not None:
        ev.nccl_logs.append(NcclLogFile(source=source, rank=rank, log=nccl))
    if torch is not None:
        if rank is None and len(torch.prefixed_ranks) == 1 and torch.prefixed_ranks[0] is not None:
            only = torch.prefixed_ranks[0]
            rank = only if all(x in (None, only) for x in torch.ranks) else None
        ev.torch_logs.append(TorchLogFile(source=source, rank=rank, log=torch))
    if nccl is not None or torch is not None:
        col.stamps[source] = stamps
        if rank is not None:
            ev.rank(rank).sources.append(source)
        return True
    return got


def _parsed(text: str, rank: int | None) -> tuple[NcclLog | None, TorchLog | None, Logged]:
    """The NCCL log (where the text holds NCCL's words), the torch log (None: none there) and,
    where either is, what each rank logged of its sizes (loggednumbers.read_logged, this text
    alone: merged in file order by merge_logged), from the torch parser's lines of `text`
    (read once where `same_reading`)."""
    nccl = torch = None
    if " NCCL " in text or "NCCL version" in text:
        try:
            nccl = parse_nccl_log(text, marked_only=NCCL_MARKED_ONLY)
        except ParseError:
            nccl = None
    lines = read_torch_lines(text)
    try:
        torch = parse_torch_log(text, rank_output=rank is not None, lines=lines)  # a rank's own file: its own lines
    except ParseError:
        torch = None
    logged: Logged = {}
    if nccl is not None or torch is not None:
        read_logged(text, rank, logged, lines if same_reading(text, lines) else None)
    return nccl, torch, logged


def _why(exc: Exception) -> str:
    text = str(exc)
    for prefix in ("Flight Recorder dump: ", "Flight Recorder JSON: "):
        text = text.removeprefix(prefix)
    return clip(text, 200)


# py-spy's own words for a refused ptrace or a missing tool -> the fix
PTRACE_FIX = ("ptrace refused: run as root, or give hc CAP_SYS_PTRACE (docker --cap-add SYS_PTRACE), "
              "or set kernel.yama.ptrace_scope=0")


def stack_error_text(dump: PySpyDump) -> str:
    err = dump.error
    if err is None:
        return ""
    if err.kind == "permission":
        return PTRACE_FIX
    if err.kind == "no-process":
        return f"py-spy: the process was gone ({clip(err.message, 120)})"
    if err.kind == "no-python":
        return f"py-spy: not a Python process ({clip(err.message, 120)})"
    return f"py-spy: {clip(err.message, 160)}"


def _py_spy(source: str, text: str, rank: int | None, col: Collected) -> bool:
    try:
        dump = parse_py_spy(text)
    except ParseError:
        return False
    ev = col.evidence
    if not dump.processes:
        if rank is not None:
            r = ev.rank(rank)
            r.stack_error = stack_error_text(dump)
            r.sources.append(source)
        else:
            ev.unreadable.append(Unreadable(source, stack_error_text(dump) or "py-spy output without a stack"))
        return True
    if rank is None and len(dump.processes) == 1:
        rank = label_rank(text)  # stacklabel.py: `The stack for rank0:` right above the one stack
    if rank is not None and len(dump.processes) == 1:
        r = ev.rank(rank)
        r.stack = dump.processes[0]
        r.sources.append(source)
        if dump.processes[0].pid is not None and r.pid is None:
            r.pid = dump.processes[0].pid
        return True
    col.pending.append((source, dump))
    return True


# ---------------------------------------------------------------- the ranks


def _link_ranks(col: Collected) -> None:
    """Fill RankEvidence from the parsed logs: host, pid, world size, GPU, exits."""
    _link_nccl_processes(col)
    _link_child_failures(col)
    for rank, r in col.evidence.ranks.items():
        if r.pid is not None:
            col.pid_ranks.setdefault(r.pid, rank)
        _world_from_flight_recorder(r)
    _place_pending_dumps(col)


def _link_nccl_processes(col: Collected) -> None:
    """Each NCCL process of one rank: its host, pid, world size and GPU."""
    ev = col.evidence
    for f in ev.nccl_logs:
        if f.log is None:
            continue
        for p in f.log.processes:
            ranks = p.ranks or ((f.rank,) if f.rank is not None else ())
            if len(ranks) != 1:
                continue
            r = ev.rank(ranks[0])
            r.host = r.host or p.host
            if r.pid is None:
                r.pid = p.pid
            col.pid_ranks.setdefault(p.pid, ranks[0])
            if p.world_size is not None:
                r.world_size = p.world_size
            if not r.gpu and p.devices:
                r.gpu = f"cuda:{p.devices[0]}"
            if f.source not in r.sources:
                r.sources.append(f.source)


def _link_child_failures(col: Collected) -> None:
    """torchrun's ChildFailedError boxes: each failed rank's host, pid, local rank and exit."""
    ev = col.evidence
    for t in ev.torch_logs:
        if t.log is None:
            continue
        for block in t.log.child_failed:
            for fail in block.failures:
                if fail.rank is not None:
                    _link_child_failure(col, fail.rank, fail, t.source)


def _link_child_failure(col: Collected, rank: int, fail: ChildFailure, source: str) -> None:
    """One failed rank of a ChildFailedError box: its host, pid, local rank and exit."""
    r = col.evidence.rank(rank)
    r.host = r.host or fail.host
    if fail.pid is not None:
        r.pid = fail.pid
        col.pid_ranks[fail.pid] = rank
    if fail.local_rank is not None:
        r.local_rank = fail.local_rank
    r.exit_code = fail.exitcode
    r.signal = fail.signal
    r.alive = False
    if source not in r.sources:
        r.sources.append(source)


def _world_from_flight_recorder(r: RankEvidence) -> None:
    """A rank's world size from its Flight Recorder dump, where nothing else said it: the
    default group's size, else its largest group's."""
    if r.flight_recorder is None or r.world_size is not None:
        return
    sizes = [len(g.ranks) for g in r.flight_recorder.process_groups if g.ranks]
    default = [len(g.ranks) for g in r.flight_recorder.process_groups if g.ranks and g.desc in ("default_pg", "")]
    if default or sizes:
        r.world_size = max(default or sizes)


def _place_pending_dumps(col: Collected) -> None:
    """py-spy dumps of several processes, each placed at the rank whose pid it is."""
    ev = col.evidence
    for source, dump in col.pending:
        for proc in dump.processes:
            placed = col.pid_ranks.get(proc.pid) if proc.pid is not None else None
            if placed is None:
                ev.unreadable.append(Unreadable(source, f"py-spy dump of pid {proc.pid}: no file says which rank "
                                                        "it is (name the file rankN or py-spy-N.json)"))
                continue
            r = ev.rank(placed)
            r.stack = proc
            r.sources.append(source)


def link_task_exits(col: Collected) -> None:
    """srun's `task N: Killed | Aborted | Exited with exit code C` -> rank N's exit status
    and host, where nothing better said them. A kill srun made after it aborted the step is
    its own (collateral): the status is kept, the signal is not. A rank whose process hc
    saw alive (live) is left alone: srun spoke of an earlier step's task, not of it.
    Hydra's boxes keep no signal here either: its cleanup kills the others with SIGKILL and
    boxes them too, so its one box alone names a death (signals.hydra_kills)."""
    for t in (t for f in col.evidence.torch_logs if f.log is not None for t in f.log.task_exits):
        if t.pid is not None and len(t.tasks) == 1:
            col.pid_ranks.setdefault(t.pid, t.tasks[0])  # a supervisor's `worker R (pid P) exited ...`
        for task in t.tasks[:4096]:
            seen = col.evidence.ranks.get(task)
            if seen is not None and seen.alive:
                continue
            r = col.evidence.rank(task)
            r.host = r.host or t.host
            if r.exit_code is None and not r.signal:
                r.alive = False
                r.exit_code = t.exitcode if t.exitcode is not None else (
                    -9 if t.signal == "SIGKILL" else -6 if t.signal == "SIGABRT" else None)
                r.signal = "" if t.after_abort or t.launcher == "hydra" else (
                    "SIGKILL (out of memory)" if t.oom else t.signal)


def collect(paths: list[Path], *, now: _dt.datetime | None = None, progress: Progress | None = None) -> Collected:
    """Read DIR|FILE... into evidence. HcError (exit 4) only for a path that does not exist,
    is not a file or directory, or is a kernel pseudo file system (/proc); everything
    inside is judged, never raised. `progress` hears how far the walk and the reading got."""
    now = now or _dt.datetime.now(_dt.timezone.utc)
    col = _collect(paths, now, progress, cut_attempts=True)
    placed = task_ranks(_files_read(col))  # taskfiles.py: `1.out` beside `0.out` that says [rank0]
    wrapper = lone_wrapper(col)
    if placed or wrapper:
        col = _collect(paths, now, None, cut_attempts=True, placed=placed, as_launcher=wrapper)
    if col.earlier_pids & col.run_pids:  # `hc run` kept an earlier attempt's ranks: read again without them
        col = _collect(paths, now, None, cut_attempts=True, skip_pids=frozenset(col.earlier_pids), placed=placed,
                       as_launcher=wrapper)
    if col.attempts:  # attempts.py: a restarted job, read whole too (verdict.py judges the last attempt first)
        col.whole = _collect(paths, now, None, cut_attempts=False, placed=placed, as_launcher=wrapper)
    return col


def lone_wrapper(col: Collected) -> frozenset[str]:
    """The `hc run` files to read as a launcher's: `hc run` wrapped around a program that
    starts the ranks itself (a launcher of the job's own, `mpirun --output-filename` run
    from the script) saw no launcher's variables and wrote rank 0 of a world of 1; where the
    ranks' own output shows a rank past 0, that world is not the job's and the files are
    the starting process's, not rank 0's (their console holds the ranks' lines)."""
    if not col.lone_runs or not any(r > 0 for r in col.evidence.ranks):
        return frozenset()
    return frozenset(col.lone_runs)


def _files_read(col: Collected) -> list[tuple[str, int | None]]:
    """Every text file read or refused, with the rank it was read as (None: none)."""
    ev = col.evidence
    out: list[tuple[str, int | None]] = [(f.source, f.rank) for f in (*ev.torch_logs, *ev.nccl_logs)]
    return out + [(u.source, None) for u in ev.unreadable]


def _collect(paths: list[Path], now: _dt.datetime, progress: Progress | None, *, cut_attempts: bool,
             skip_pids: frozenset[int] = frozenset(), placed: dict[str, int] | None = None,
             as_launcher: frozenset[str] = frozenset()) -> Collected:
    ev = JobEvidence(job="logs: " + " ".join(shown(p) for p in paths)[:500],
                     collected_at=now.strftime("%Y-%m-%dT%H:%M:%SZ"))
    col = Collected(evidence=ev, cut_attempts=cut_attempts, skip_pids=skip_pids, as_launcher=as_launcher)
    found = walk(paths, progress=progress)
    ev.unreadable.extend(found.unreadable())
    ev.inputs = len(found.files)
    placed = placed or {}
    for f, data in read_all(found.files, pseudo=found.pseudo, is_binary=_is_binary, progress=progress):
        if isinstance(data, Skip):
            ev.unreadable.append(Unreadable(f.name, str(data)))
            continue
        read_data(f.name, data, col, now.year, rank=placed.get(f.name))
    for err in ev.error_files:
        if err.rank is not None:
            ev.rank(err.rank)
    _link_ranks(col)
    link_task_exits(col)
    ev.ranks = dict(sorted(ev.ranks.items()))
    return col
