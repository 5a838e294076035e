"""ProcessGroupNCCL's watchdog and torch's collective checks, one handler each: the
WorkNCCL timeout, the group's progress, the heartbeat monitor, the abort, the desync
report, DETAIL's collective mismatch and monitoredBarrier."""

from __future__ import annotations

import re

import msgspec

from healthcheck.core.inputs import clip
from healthcheck.parsers.lines import Handler, Line
from healthcheck.parsers.torch_log.facts import (
    CollectiveFingerprint,
    CollectiveMismatch,
    DesyncKind,
    DesyncLine,
    FingerprintRan,
    MonitoredBarrierFailure,
    ProgressKind,
    WatchdogAbort,
    WatchdogCaught,
    WatchdogProgress,
    WatchdogStuck,
    WatchdogTimeout,
)
from healthcheck.parsers.torch_log.state import OPEN_MAX, TorchState, group_where, where
from healthcheck.parsers.torch_log.text import MAX_LINE, MESSAGE_MAX, rank_list, to_int

_WORK_SPAN = 600  # characters after `WorkNCCL(` its fields are looked for in

_WORK_FIELD = re.compile(r"(SeqNum|OpType|NumelIn|NumelOut|Timeout\(ms\))=([\w\-]{1,64})")
_RAN_FOR = re.compile(r"\) ran for (\d{1,20}) milliseconds")
# torch 1.8-1.10's record, before SeqNum: `WorkNCCL(OpType=ALLREDUCE, TensorShape=[1],
# Timeout(ms)=2000)` (field/issues-13, quoted by `NCCL communicator was aborted on rank 1.
# Original reason for failure was: Work: ... timed out in call to wait().`): the same timeout,
# its collective's sequence number not printed
_IN_WAIT = re.compile(r"\) timed out in call to wait\(\)")
_PROGRESS = re.compile(
    r"(?:at (?:NCCL )?work(?: sequence id)?: (-?\d{1,20})[,.]?\s{0,4}(?:PG status: )?)?"
    r"last enqueued (?:NCCL )?work: (-?\d{1,20}), last completed (?:NCCL )?work: (-?\d{1,20})",
    re.IGNORECASE,
)
# the watchdog's exception report without the group's counters: 2.3's `Exception hit in NCCL work: 2`,
# and 2.4-2.5's `Exception (either an error or timeout) detected by watchdog at` cut before them
_EXCEPTION_AT = re.compile(r"(?:Exception hit in NCCL work|detected by watchdog at(?: work)?)(?::\s{0,4}(-?\d{1,20}))?")
_DUMP_FROM = re.compile(r"collective timeout from\s{1,4}(?:rank (\d{1,9})|this local rank)")
_STUCK = re.compile(r"got stuck for (\d{1,20}) seconds")
_WORK_LIST = re.compile(r"workMetaList_\.size\(\) ?= ?(\d{1,20})")
_DESYNC_TIMEOUT = re.compile(r"\[(\d{1,9})\] Timeout at collective: ([^,]{1,64}), #(\d{1,20})")
_DESYNC_MISSING = re.compile(r"ranks \[([\d, ]{0,65536})\] are the lagging ranks")
_DESYNC_UNFINISHED = re.compile(r"\[([\d, ]{0,65536})\] joined but didn't finish collective #(\d{1,20})")
_DESYNC_UNJOINED = re.compile(
    r"\[([\d, ]{0,65536})\] finished collective #(\d{1,20}), but didn't join collective #(\d{1,20})"
)
_DESYNC_SNAPSHOT = re.compile(r"#(\d{1,20}) (started|finished) ranks:")
_DESYNC_STATE = re.compile(r"\[([\d, ]{0,65536})\] (started|finished) (\S{1,64})$")
# the report's lines naming ranks: (pattern, kind, the group holding the seq; 0: none)
_DESYNC_RANKS: tuple[tuple[re.Pattern[str], DesyncKind, int], ...] = (
    (_DESYNC_MISSING, "never-joined", 0), (_DESYNC_UNFINISHED, "not-finished", 2), (_DESYNC_UNJOINED, "not-joined", 3))
_FP_SIDE = re.compile(r"Rank (\d{1,9}) is running (inconsistent )?collective: ")
_FP_SEQ = re.compile(r"SequenceNumber=(\d{1,20})")
_FP_OP = re.compile(r"OpType=(\w{1,64})")
_FP_SHAPE = re.compile(r"TensorShape=\[([^\]]{0,1024})\]")
_FP_DTYPES = re.compile(r"TensorDtypes=([^=]{0,512}?), TensorDeviceTypes=")
_FP_DEVICE = re.compile(r"device=(\w{1,32})")
_FP_DIFFERS = "Collectives differ in the following aspects:"
_BARRIER = re.compile(
    r"(?:\[Rank (\d{1,9})\]: )?Ranks? ((?:\d{1,9}, ){0,4096}+\d{1,9}) failed to pass monitoredBarrier in (\d{1,20}) ms"
)
_BARRIER_TIMEOUT = re.compile(r"Rank (\d{1,9}) timed out in monitoredBarrier after (\d{1,20}) ms")
# a rank that arrived, then waited on rank 0 in vain (ProcessGroupGloo.cpp, libtorch_cpu strings)
_BARRIER_REACHED = re.compile(r"Rank (\d{1,9}) successfully reached monitoredBarrier, but received errors while "
                              r"waiting for send/recv from rank (\d{1,9})")


# ---------------------------------------------------------------- the watchdog


def read_work(state: TorchState, line: Line, wrapped: bool = False) -> bool:
    """`WorkNCCL(SeqNum=, OpType=, ..., Timeout(ms)=) ran for N milliseconds`, and every
    older form of the record (no SeqNum before torch 1.11, a TensorShape in 1.8-1.10, the
    timeout seen `in call to wait()`); a line cut before its `Timeout(ms)=` field is held
    (`pending_work`) for the line finishing it."""
    b = line.text
    start = b.find("WorkNCCL(")
    at = b.find("Timeout(ms)=", start, start + _WORK_SPAN)
    end = b.find(")", at + 12, at + 40) if at >= 0 else -1
    if end < 0:
        if not wrapped and state.pending_work is None and len(b) - start < _WORK_SPAN:
            state.pending_work = line  # hard-wrapped: the rest is on the next line
            return True
        return False
    fields: dict[str, str] = {}
    for m in _WORK_FIELD.finditer(b, start, end + 1):
        fields.setdefault(m.group(1), m.group(2))
    if "OpType" not in fields:
        return False
    ran = _RAN_FOR.match(b, end)
    state.add("timeouts", WatchdogTimeout(
        **group_where(line, b), seq=to_int(fields.get("SeqNum")), op_type=fields["OpType"],
        numel_in=to_int(fields.get("NumelIn")), numel_out=to_int(fields.get("NumelOut")),
        timeout_ms=to_int(fields.get("Timeout(ms)")), ran_for_ms=to_int(ran.group(1)) if ran else None,
        in_wait=_IN_WAIT.match(b, end) is not None,
        terminated="watchdog thread terminated with exception" in b[:start],
        wrapped=wrapped or "hard-wrap" in line.repairs,  # joined by lines.hard_unwrapped
    ))
    return True


def read_wrapped_work(state: TorchState, line: Line) -> bool:
    """The line after a WorkNCCL line a terminal hard-wrapped: joined with it when it starts
    no record of its own (True: read), else the held line is read alone (False)."""
    first = state.pending_work
    if first is None:
        return False
    state.pending_work = None
    body = line.text
    if "WorkNCCL(" not in body and "Watchdog caught" not in body and len(body) < 4096:
        read_work(state, msgspec.structs.replace(first, text=first.text + body), wrapped=True)
        return True
    read_work(state, first, wrapped=False)
    return False


_CAUGHT = "Watchdog caught"


def read_caught(state: TorchState, line: Line) -> bool:
    """`Watchdog caught collective operation timeout` with no `WorkNCCL(` after it (a line
    cut before its record, `WatchdogCaught`): the rank's timeout, its collective unknown."""
    b = line.text
    at = b.find(_CAUGHT)
    if at < 0:
        return False
    state.add("cut_timeouts", WatchdogCaught(**group_where(line, b), text=clip(b[at:].strip(), MESSAGE_MAX)))
    return True


def flush_work(state: TorchState) -> None:
    """At the end of the text: a held WorkNCCL line is read as it is."""
    if state.pending_work is not None:
        first, state.pending_work = state.pending_work, None
        read_work(state, first, wrapped=True)


def _progress_kind(b: str) -> ProgressKind:
    if "Received a dump signal" in b:
        return "dump-signal"
    if "Timeout at NCCL work" in b:
        return "timeout-at"
    return "failure-at" if "sequence id" in b else "exception-at"


def read_progress(state: TorchState, line: Line) -> bool:
    """The group's last enqueued and completed work (WatchdogProgress's kinds)."""
    b = line.text
    m = _PROGRESS.search(b, 0, 4096)
    if not m:
        return False
    kind = _progress_kind(b)
    from_rank = None
    if kind == "dump-signal":
        d = _DUMP_FROM.search(b, 0, 1024)
        from_rank = to_int(d.group(1)) if d else None
    state.add("progress", WatchdogProgress(
        **group_where(line, b), kind=kind, seq=to_int(m.group(1)), last_enqueued=to_int(m.group(2)),
        last_completed=to_int(m.group(3)), from_rank=from_rank,
    ))
    return True


def exception_words(b: str) -> bool:
    return ("Exception hit in NCCL work" in b or "detected by watchdog at" in b) and "enqueued" not in b


def read_exception(state: TorchState, line: Line) -> bool:
    """The watchdog's exception report with no counters after it (`_EXCEPTION_AT`): the
    group's `exception-at` progress with the work's seq where the line names it, and only
    the rank and group where a cut took the rest (2.6+'s `failure detected ...` always
    carries its counters: `read_progress`)."""
    b = line.text
    m = _EXCEPTION_AT.search(b, 0, 4096)
    if not m or "sequence id" in b:
        return False
    state.add("progress", WatchdogProgress(**group_where(line, b), kind="exception-at", seq=to_int(m.group(1))))
    return True


def read_stuck(state: TorchState, line: Line) -> bool:
    """The heartbeat monitor: `Heartbeat monitor timed out!`, `watchdog got stuck for N seconds`."""
    b = line.text
    m = _STUCK.search(b, 0, 2048)
    works = _WORK_LIST.search(b)
    state.add("stuck", WatchdogStuck(
        **group_where(line, b), kind="stuck" if m else "heartbeat-timeout",
        seconds=to_int(m.group(1)) if m else None, pending_works=to_int(works.group(1)) if works else None,
    ))
    return True


def read_abort(state: TorchState, line: Line) -> bool:
    state.add("aborts", WatchdogAbort(**group_where(line, line.text)))
    return True


# ---------------------------------------------------------------- TORCH_NCCL_DESYNC_DEBUG


def desync_words(b: str) -> bool:
    return ("collective" in b and ("#" in b or "lagging" in b)) or "started ranks:" in b or "finished ranks:" in b


def read_desync(state: TorchState, line: Line) -> bool:
    """A line of the desync report; its continuation lines carry no prefix: the reporting
    rank (`- [R] Timeout at collective`) is theirs."""
    b = line.text
    at = where(line)
    m = _DESYNC_TIMEOUT.search(b)
    if m:
        reporter = to_int(m.group(1))
        state.desync_reporter, state.desync_seq = reporter, None
        if at["rank"] is None:
            at["rank"] = reporter
        state.add("desync", DesyncLine(**at, kind="timeout-at", ranks=(reporter,) if reporter is not None else (),
                                       seq=to_int(m.group(3)), op=m.group(2).strip()))
        return True
    if at["rank"] is None:
        at["rank"] = state.desync_reporter
    for pattern, kind, seq_group in _DESYNC_RANKS:
        m = pattern.search(b)
        if m:
            state.add("desync", DesyncLine(**at, kind=kind, ranks=rank_list(m.group(1)),
                                           seq=to_int(m.group(seq_group)) if seq_group else None))
            return True
    m = _DESYNC_SNAPSHOT.search(b)
    if m:
        state.desync_seq = to_int(m.group(1))
        return True
    return _snapshot_line(state, b, at)


def _snapshot_line(state: TorchState, b: str, at: dict) -> bool:
    """The snapshot's `[0, 1] started ALLREDUCE` under `#SEQ started ranks:`; anything else ends it."""
    if state.desync_seq is None:
        return False
    m = _DESYNC_STATE.search(b.rstrip())
    if m is None:
        state.desync_seq = None
        return False
    state.add("desync", DesyncLine(**at, kind="started" if m.group(2) == "started" else "finished",
                                   ranks=rank_list(m.group(1)), seq=state.desync_seq, op=m.group(3)))
    return True


def read_desync_snapshot(state: TorchState, line: Line) -> bool:
    """A line while the report's snapshot is read that names no collective: a snapshot line
    (`[0, 1] started ALLREDUCE`), else the snapshot has ended."""
    b = line.text
    if state.desync_seq is None or desync_words(b):
        return False
    if " started " in b or " finished " in b:
        return read_desync(state, line)
    state.desync_seq = None
    return False


# ---------------------------------------------------------------- TORCH_DISTRIBUTED_DEBUG=DETAIL


def read_mismatch(state: TorchState, line: Line) -> bool:
    """`Detected mismatch between collectives on ranks`: both fingerprints and their differences."""
    b = line.text
    sides = list(_FP_SIDE.finditer(b, 0, MAX_LINE))[:2]
    if not sides:
        return False
    diff_at = b.find(_FP_DIFFERS)
    prints = []
    for i, side in enumerate(sides):
        stop = sides[i + 1].start() if i + 1 < len(sides) else (diff_at if diff_at >= 0 else len(b))
        prints.append(fingerprint(int(side.group(1)), b[side.end():stop]))
    differences = " ".join(b[diff_at + len(_FP_DIFFERS):].split()) if diff_at >= 0 else ""
    state.add("mismatches", CollectiveMismatch(
        **where(line), local=prints[0], remote=prints[1] if len(prints) > 1 else None,
        differences=clip(differences, MESSAGE_MAX), old_wording=sides[0].group(2) is not None,
    ))
    return True


def fingerprint(rank: int, text: str) -> CollectiveFingerprint:
    seq = _FP_SEQ.search(text, 0, 4096)
    op = _FP_OP.search(text, 0, 4096)
    shape = _FP_SHAPE.search(text, 0, 4096)
    dtypes = _FP_DTYPES.search(text, 0, 4096)
    device = _FP_DEVICE.search(text, 0, 4096)
    return CollectiveFingerprint(
        rank=rank, op_type=op.group(1) if op else "", seq=to_int(seq.group(1)) if seq else None,
        shape=clip(shape.group(1), MESSAGE_MAX) if shape else "",
        dtypes=clip(dtypes.group(1).strip(), MESSAGE_MAX) if dtypes else "",
        device=device.group(1) if device else "",
    )


_RUNNING = "Running collective: CollectiveFingerPrint("
_RUNNING_RANK = re.compile(r"\[Rank (\d{1,7})\] " + re.escape(_RUNNING))


def read_running(state: TorchState, line: Line) -> bool:
    """DETAIL's ProcessGroupWrapper `[Rank R] Running collective: CollectiveFingerPrint(...)`:
    kept per rank, the last one only (a job logs one per collective), with how many it logged."""
    m = _RUNNING_RANK.search(line.text, 0, 4096)
    if m is None:
        return False
    rank = int(m.group(1))
    if rank not in state.last_running and len(state.last_running) >= OPEN_MAX:
        return True
    fp = fingerprint(rank, line.text[m.end():])
    before = state.last_running.get(rank)
    state.last_running[rank] = FingerprintRan(**(where(line) | {"rank": rank}), seq=fp.seq, op_type=fp.op_type,
                                              entered=before.entered + 1 if before is not None else 1)
    return True


def read_barrier(state: TorchState, line: Line) -> bool:
    """`Ranks 1, 3 failed to pass monitoredBarrier in N ms`, `Rank R timed out in monitoredBarrier`,
    `Rank R successfully reached monitoredBarrier, but received errors ... from rank 0`."""
    b = line.text
    m = _BARRIER.search(b)
    if m:
        state.add("barrier_failures", MonitoredBarrierFailure(
            **where(line), reporter=to_int(m.group(1)), ranks=rank_list(m.group(2)), timeout_ms=to_int(m.group(3))))
        return True
    m = _BARRIER_TIMEOUT.search(b)
    if m:
        state.add("barrier_failures", MonitoredBarrierFailure(
            **where(line), ranks=rank_list(m.group(1)), timeout_ms=to_int(m.group(2))))
        return True
    m = _BARRIER_REACHED.search(b)
    if m:
        state.add("barrier_failures", MonitoredBarrierFailure(
            **where(line), reporter=to_int(m.group(1)), waited_on=to_int(m.group(2))))
        return True
    return False


HANDLERS: tuple[Handler[TorchState], ...] = (
    Handler("watchdog-timeout", lambda b: "WorkNCCL(" in b, read_work),
    Handler("watchdog-cut", lambda b: _CAUGHT in b and "WorkNCCL(" not in b, read_caught),
    Handler("watchdog-progress", lambda b: "last enqueued" in b or "Last enqueued" in b, read_progress),
    Handler("watchdog-exception", exception_words, read_exception),
    Handler("watchdog-stuck", lambda b: "Heartbeat monitor timed out" in b or "watchdog got stuck for" in b,
            read_stuck),
    Handler("watchdog-abort", lambda b: "taking the entire process down" in b, read_abort),
    Handler("desync", desync_words, read_desync),
    Handler("collective-mismatch", lambda b: "Detected mismatch between collectives" in b, read_mismatch),
    Handler("monitored-barrier", lambda b: "monitoredBarrier" in b, read_barrier),
    Handler("wrapper-running", lambda b: _RUNNING in b, read_running),
)
