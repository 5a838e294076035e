"""The torch log read line by line through one table of handlers (lines.Handler, read with
lines.dispatch): the lines that finish something opened before them first (a hard-wrapped
WorkNCCL line, the failure box, an NCCL error's detail, a `what():`, Flight Recorder frames),
then the messages and tracebacks.

A line can hold several messages (a watchdog timeout, its abort and the NCCL error that
ended it), so the message handlers are chained (lines.chained): `dispatch` names the first that reads the
line and that one lets every later handler whose words the line holds read it too. A line
no handler reads is counted and sampled in `unrecognized`.

Before the table each line is made torch's: the launcher labels the line layer leaves on
(torchx's, a label behind a whole paste's indent) taken off, Python logging's prefix and
Ray's `[repeated Nx across cluster]` taken off (lines.python_logging, without_ray_repeat),
and a c10 line a word wrap cut right after its `[PG ... Rank N]` group joined with the
line finishing it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

import msgspec

from healthcheck.core.errors import ParseError
from healthcheck.core.inputs import clip
from healthcheck.parsers.lines import (
    Handler,
    HandlersByText,
    Line,
    chained,
    hard_unwrapped,
    python_logging,
    read_every,
    read_lines,
    recorded,
    relabelled,
    uncollapsed,
    without_ray_repeat,
)
from healthcheck.parsers.torch_log import (
    agent,
    box,
    coordination,
    coordlost,
    crashreports,
    ddpstart,
    errors,
    launchreports,
    memberends,
    mpiabort,
    mpireports,
    mvapichsignal,
    rankends,
    setupfail,
    signalreport,
    sizereports,
    spawn,
    stall,
    steps,
    store,
    taskstates,
    tracebacks,
    watchdog,
)
from healthcheck.parsers.torch_log.continued import read_fr_frame, read_nccl_detail, read_what
from healthcheck.parsers.torch_log.facts import FACT_KINDS, TorchLog
from healthcheck.parsers.torch_log.sentences import sentences_unwrapped
from healthcheck.parsers.torch_log.state import PG_PREFIX, PREFIXED_MAX, TorchState
from healthcheck.parsers.torch_log.text import MAX_LINE
from healthcheck.parsers.torch_log.wraps import wrap_width

# ---------------------------------------------------------------- a line made torch's


def torch_line(state: TorchState, line: Line) -> Line:
    """The line as torch's handlers read it; whether it is torch's own is noted on `state`
    (a `[rankN]:` prefix, a c10 log prefix, the agent's glog source, torch's logger)."""
    torch = line.rank is not None
    if line.level:  # glog: c10's `[E1218 ... ProcessGroupNCCL.cpp:629]` or the agent's `E0325 ... api.py:869]`
        torch = torch or line.logger == "c10" or "torch" in line.source
    else:
        line = python_logging(line)  # lines': `WARNING:torch.distributed.run:`, `[INFO] date name: `
        torch = torch or (line.logger == "pylog" and line.source.startswith("torch"))
    state.torch = state.torch or torch
    if not line.noise and agent.job_line(line.text):
        state.job_lines += 1
    rank = line.global_rank
    if rank is not None and len(state.prefixed) < PREFIXED_MAX:
        state.prefixed.add(rank)
    return spawn.spawn_labelled(state, without_ray_repeat(line))


# ---------------------------------------------------------------- labels the layer leaves on

# torchx's `ROLE/N [L]:` and a label behind a whole paste's indent: lines.relabelled


# ---------------------------------------------------------------- word wraps after a group

_HEAD_TAIL = 40  # characters after a `[PG ... Rank N]` group of a c10 line cut by a word wrap


def _cut_after_group(line: Line) -> bool:
    """A c10 line that ends a few words after its `[PG ... Rank N]` group, at a terminal's
    width: a message a word wrap cut (`[Rank 0] Watchdog`, `[PG 0 Rank 0]`)."""
    text = line.text.rstrip()
    if line.logger != "c10" or len(line.raw) < 40 or not text.endswith(("]", *"abcdefghijklmnopqrstuvwxyz")):
        return False
    m = PG_PREFIX.search(text, max(0, len(text) - 200))
    return m is not None and len(text) - m.end() <= _HEAD_TAIL and text[m.end():].count(" ") <= 3


# torch's WorkNCCL record, the rest of a `Watchdog caught collective operation timeout:` that a
# runner or a paste broke after its colon (field/issues-8's milabench log)
_WORK_REST = "WorkNCCL("
_LOWER_WORD = re.compile(r"[a-z]{1,32} ")


def _cut_mid_sentence(line: Line) -> bool:
    """A c10 line whose message stops where its words ask for more, wherever that is: after
    a colon (`... collective operation timeout:`) or a lowercase word (`... detected`): a
    line a runner or a paste broke at a blank, the rest on the next line with no prefix."""
    if line.logger != "c10" or len(line.raw) < 40 or _WORK_REST in line.text:
        return False  # a WorkNCCL record cut anywhere is read_work's to finish (`pending_work`)
    text = line.text.rstrip()
    return text.endswith(":") or text[-1:].islower()


def _finishes(head: Line, line: Line) -> bool:
    """`line` finishes `head`'s cut sentence: no prefix of its own, not a new record, and
    lowercase where the head had words after its group (the group alone: any word), or
    the WorkNCCL record after a head's colon; never a step a training loop printed."""
    text = line.text
    if line.labels or line.number == head.number or not text.strip() or text[:1] in " \t[" or line.noise:
        return False
    end = head.text.rstrip()[-1:]
    if end == "]" or (end == ":" and text.startswith(_WORK_REST)):
        return True
    if _cut_after_group(head):
        return text[:1].islower()
    # a whole lowercase word then a blank (`by watchdog at work: ...`): a break at a blank, never
    # the rest of a word a terminal cut (`OpTy` / `pe=BROADCAST`), nor a loop's step
    return _LOWER_WORD.match(text) is not None and not steps.looks_like_step(text)


def word_unwrapped(lines: Iterator[Line]) -> Iterator[Line]:
    """The lines, each c10 line a word wrap cut after its group, or mid-sentence, joined
    with the next line where that finishes it."""
    held: Line | None = None
    for line in lines:
        if held is not None:
            head, held = held, None
            if _finishes(head, line):
                yield msgspec.structs.replace(head, text=head.text.rstrip() + " " + line.text.strip())
                continue
            yield head
        if _cut_after_group(line) or _cut_mid_sentence(line):
            held = line
        else:
            yield line
    if held is not None:
        yield held


# ---------------------------------------------------------------- lines collapsed into one

# the lines of an NCCL error torch raises, each the start of a line a terminal may have put
# beside the one before it (lines.uncollapsed; field/issues-10's DistBackendError): NCCL's
# result name and its detail, `Last error:`, the C++ exception's `Exception raised from` and
# its `frame #N:` lines
COLLAPSED_LINES = re.compile(rf"{errors.NCCL_RESULTS}: |Last error:|Exception raised from |frame #\d{{1,6}}: ")


# ---------------------------------------------------------------- the table


def _names_torch(b: str) -> bool:
    return ("torch.distributed" in b or "torchrun" in b or "ProcessGroupNCCL" in b or "torch/distributed" in b
            or "torchelastic" in b or "c10d" in b)


# `c10d` with any two digits: the table's test blind to digits' values (HandlersByText), the
# handler reading the word itself
_C_DD_D = re.compile(r"c\d\dd")


def _may_name_torch(b: str) -> bool:
    return ("torch.distributed" in b or "torchrun" in b or "ProcessGroupNCCL" in b or "torch/distributed" in b
            or "torchelastic" in b or _C_DD_D.search(b) is not None)


def _torch_words(state: TorchState, line: Line) -> bool:
    """A line that names torch.distributed, torchrun, ProcessGroupNCCL, c10d: torch's output
    (the text is not refused), though no handler may read it."""
    if _names_torch(line.text):
        state.torch = True
    return False


# every message handler whose words a line holds reads it, in this order
MESSAGE_HANDLERS: tuple[Handler[TorchState], ...] = (
    *watchdog.HANDLERS, *errors.HANDLERS, *store.HANDLERS, *agent.HANDLERS, *spawn.HANDLERS, *launchreports.HANDLERS,
    *rankends.HANDLERS, *stall.HANDLERS, *mpiabort.HANDLERS, *mpireports.HANDLERS, *coordination.HANDLERS,
    *coordlost.HANDLERS, *mvapichsignal.HANDLERS,
    *taskstates.HANDLERS,
    *ddpstart.HANDLERS,
    *setupfail.HANDLERS,
    *memberends.HANDLERS,
    *sizereports.HANDLERS,
    *crashreports.HANDLERS,
    Handler("desync-snapshot", lambda b: True, watchdog.read_desync_snapshot),  # its state decides
    Handler("nccl-version", lambda b: "NCCL version " in b, errors.read_nccl_version),
    Handler("step", steps.looks_like_round, steps.read_step),
    Handler("warning", steps.looks_like_warning, steps.read_warning),
    Handler("torch-words", _may_name_torch, _torch_words),
)


def _read_what(state: TorchState, line: Line) -> bool:
    """A C++ exception's `what():` (continued.py); its message is also read as a message (the
    watchdog's own text)."""
    if not read_what(state, line):
        return False
    read_every(MESSAGE_HANDLERS, state, line)
    return True


def _always(text: str) -> bool:
    return True


def _read_box(state: TorchState, line: Line) -> bool:
    """A line of torchrun's failure box; a fingerprint check's report in an entry's
    error-file traceback (`  traceback : ...` then the indented lines, the exception last)
    is also read as the report it is: the rank that raised it is the entry's."""
    if not box.read_box(state, line):
        return False
    if _FINGERPRINT_WORDS in line.text:
        watchdog.read_mismatch(state, line)
    return True


_FINGERPRINT_WORDS = "Detected mismatch between collectives"


def _blank(state: TorchState, line: Line) -> bool:
    return True


HANDLERS: tuple[Handler[TorchState], ...] = (
    Handler("wrapped-work", _always, watchdog.read_wrapped_work),
    Handler("failure-box", _always, _read_box),
    Handler("blank", lambda b: not b.strip(), _blank),
    Handler("failure-box-title", _always, box.read_box_title),
    Handler("border", lambda b: b.startswith("========"), box.read_box_border),
    Handler("nccl-detail", _always, read_nccl_detail),
    Handler("what", _always, _read_what),
    Handler("fr-frame", _always, read_fr_frame),
    *signalreport.HANDLERS,
    *chained((*MESSAGE_HANDLERS, *tracebacks.HANDLERS)),
)


# the table's tests per text, kept for every parse of the process (a test is of the text alone;
# the ranks' files of one job log the same lines but for their digits), every test blind to
# digits' values
TESTED: HandlersByText[TorchState] = HandlersByText(HANDLERS, digit_blind=True)

# the handlers that read no line while nothing is open (`idle`) unless its text alone says so
# (`quiet`): each returns False and changes no state then. An NCCL INFO line, most of a big
# log's kept lines, is tested by these alone and read by none of them
IDLE_QUIET = frozenset({
    "wrapped-work",  # a WorkNCCL line held (pending_work)
    "failure-box",  # an open box (box), else a box's tail: box.opens_tail
    "failure-box-title",  # a border or `ChildFailedError:` before (border, after_child_error): box.before_title
    "nccl-detail", "what", "fr-frame",  # an open fact (open)
    "horovod-stall-ranks",  # its block open (stall_block), else its head: stall.opens_block
    "desync-snapshot",  # its snapshot open (desync_seq)
    "glog-fatal",  # a glog FATAL line (line.level "F")
    "exception",  # a traceback open (tracebacks), else an exception's head: tracebacks.raises_unframed
})
IDLE_SKIP = True  # the differential test reads every fixture with it off too
QUIET_TEXTS_MAX = 8192  # distinct texts (and tested tables) whose quiet answer the process keeps
_QUIET: dict[str, bool] = {}
_QUIET_TABLES: dict[int, tuple[tuple[Handler[TorchState], ...], bool]] = {}  # by the table's id, it held


def quiet(text: str) -> bool:
    """Whether no handler of the table reads a line of `text` while the parser is `idle`:
    every handler whose test holds is one of IDLE_QUIET (asked once a tested table), and
    the text is none of those that read it anyway (kept per text for every parse of the
    process, bounded)."""
    table = TESTED.table(text)
    known = _QUIET_TABLES.get(id(table))
    if known is None or known[0] is not table:
        known = (table, all(h.name in IDLE_QUIET for h in table))
        if len(_QUIET_TABLES) >= QUIET_TEXTS_MAX:
            _QUIET_TABLES.clear()
        _QUIET_TABLES[id(table)] = known
    if not known[1]:
        return False
    found = _QUIET.get(text)
    if found is None:
        found = not (box.opens_tail(text) or box.before_title(text) or stall.opens_block(text)
                     or tracebacks.raises_unframed(text))
        if len(_QUIET) >= QUIET_TEXTS_MAX:
            _QUIET.clear()
        _QUIET[text] = found
    return found


def idle(state: TorchState, line: Line) -> bool:
    """Whether nothing is open that IDLE_QUIET's handlers read a line by (see there)."""
    return (state.pending_work is None and state.box is None and not state.open and not state.border
            and not state.after_child_error and not state.stall_block and state.desync_seq is None
            and line.level != "F" and not any(state.tracebacks.values()))


def _dispatch(state: TorchState, line: Line) -> str | None:
    """The handler that read the line (TESTED.dispatch), none asked where it is `quiet` while `idle`."""
    if IDLE_SKIP and idle(state, line) and quiet(line.text):
        recorded(line, None)
        return None
    return TESTED.dispatch(state, line)


# ---------------------------------------------------------------- the parse

def _result(state: TorchState, lines: int) -> TorchLog:
    watchdog.flush_work(state)
    box.end_box(state, complete=False)
    mpireports.after_parse(state)  # a world of one's signal report, several ranks' MPI fatal errors
    facts = {name: tuple(values) for name, values in state.facts.items()}
    return TorchLog(lines=lines, nccl_versions=tuple(state.versions), prefixed_ranks=tuple(sorted(state.prefixed)),
                    last_steps=tuple(state.last_step.values()),
                    loop_rounds=max((len(v) for v in state.rounds.values()), default=0),
                    launched_world=state.launched_world or None,
                    launched_np=state.launched_np or None,
                    last_warnings=tuple(state.last_warning.values()),
                    cut_tracebacks=tuple(tracebacks.cut_tracebacks(state)),
                    last_fingerprints=tuple(state.last_running.values()), dropped=state.dropped,
                    step_aborted=state.step_aborted,
                    unrecognized=state.unrecognized.freeze(), **facts)


def _commands_read(state: TorchState, lines: Iterable[Line]) -> Iterator[Line]:
    """The lines that are no noise; a command line (a prompt's, or its bare echo: noise)
    read first for the world a torchrun command in it launches (agent.read_launch_command)
    and the processes an MPI or Slurm launch command starts (agent.read_process_count)."""
    for line in lines:
        if not line.noise:
            yield line
        elif line.noise in ("command", "prompt"):
            if "--nproc" in line.text:
                agent.read_launch_command(state, line)
            agent.read_process_count(state, line)


def read_torch_lines(text: str) -> list[Line]:
    """The lines of `text` as the torch log parser reads them (the line layer's, JSON records
    read, a parallel shell's hosts taken off, one process's mpirun-tagged pieces glued back);
    a text that ends inside a word (`RuntimeError: Conne`) has its last word not read. A
    caller that also reads them (hc diagnose logs) passes them to `parse_torch_log` so that the text is read once."""
    return list(read_lines(text, max_line=MAX_LINE, cut_end=True, records=True, hosts=True, interleaved=True))


def parse_torch_log(text: str, *, rank_output: bool = False, lines: list[Line] | None = None) -> TorchLog:
    """A PyTorch distributed / torchrun log -> TorchLog (see the package's docstring).
    `rank_output`: the text is known to be one rank's own output (a file its name places),
    read though no line names torch where its loop or logging left a step or a warning
    (what it logged is that rank's, failure or none). `lines`: `read_torch_lines(text)`,
    where the caller read them already."""
    state = TorchState()
    lines = [relabelled(line, torchx=True)
             for line in _commands_read(state, read_torch_lines(text) if lines is None else lines)]
    for line in sentences_unwrapped(word_unwrapped(uncollapsed(hard_unwrapped(lines, wrap_width(lines)),
                                                                COLLAPSED_LINES))):
        line = torch_line(state, line)
        if _dispatch(state, line) is None:
            state.unrecognized.note(line)
        spawn.end_spawn_error(state, line)
    number = text.count("\n") + 1  # lines as "\n" splits them, an empty last one counted
    log = _result(state, number)
    # a stream of lines each labelled with its rank (torchrun's `[default3]:`, mpirun's
    # `[1,3]<stderr>:`, srun's `3: `) is a distributed job's ranks' output even where no line
    # names torch: a job that finished prints no torch words, and that it finished is news
    # a rank's own file counts when its loop or its logging said something (a step, a warning):
    # a file that only its name places, with nothing of a training process in it (a shopping
    # list), is not read as a rank that showed no failure; checking nothing is not healthy
    own_output = rank_output and bool(log.last_steps or log.last_warnings)
    if not (own_output or state.torch or state.prefixed) and not any(getattr(log, name) for name in FACT_KINDS):
        raise ParseError("torch-log: no PyTorch distributed, torchrun or Python traceback line "
                         f"(starts with {clip(text.strip(), 60)!r})")
    return log
