"""Python tracebacks and C++ terminations, one handler each (their guards exclude each other):
a traceback's header, its frames (the program's own innermost frame and the
torch.distributed function it was in), `terminate called ...`, and the exception a
traceback ends with. Several ranks' tracebacks interleaved are counted apart."""

from __future__ import annotations

import re

from healthcheck.core.inputs import clip
from healthcheck.core.launcher_labels import TORCH_RANK
from healthcheck.parsers.lines import Handler, Line
from healthcheck.parsers.torch_log.bindsetup import note_frame, traceback_opened
from healthcheck.parsers.torch_log.facts import ExceptionRaised, TracebackCut
from healthcheck.parsers.torch_log.setupframes import checked_step, frame_step, message_step, source_step
from healthcheck.parsers.torch_log.state import RankKey, TorchState, rank_key, said_by, where
from healthcheck.parsers.torch_log.text import MESSAGE_MAX, basename, exception_head

TRACEBACKS_MAX = 64  # tracebacks open at once per rank
FRAMED_RANKS_MAX = 4096  # ranks whose frames are followed
CHAIN_MAX = 32  # own frames kept per traceback (outermost first): deeper recursion is not read
THREAD_NAME_MAX = 128

_HEADER = "Traceback (most recent call last):"
_THREAD_HEAD = "Exception in thread "  # threading.excepthook's line before a thread's traceback
_TERMINATE_WORDS = "terminate called"
_TERMINATE = re.compile(r"terminate called after throwing an instance of '([^']{1,256})'")
_TERMINATE_BARE = ("terminate called without an active exception", "terminate called recursively")
_FRAME = re.compile(r"\s{1,16}File \"")
_FRAME_AT = re.compile(r"\s{1,16}File \"([^\"]{1,1024})\", line (\d{1,9}), in ([^\s]{1,256})")
# rich's traceback (rich.traceback.install(), Typer/accelerate consoles): a box drawn at the
# console's width, `╭─── Traceback (most recent call last) ───╮`, each frame's `│ PATH:N in
# FUNC │` row, its source rows `│   247 │ ...` (`│ ❱ 250 │ ...` the frame's line), `╰───╯`,
# then the exception line as Python prints it
_RICH_EDGES = ("│", "╰")
_RICH_FRAME = re.compile(r"│ {1,4}(\S{1,1024}):(\d{1,9}) in (\S{1,256}) {0,1024}│?$")
_RICH_SOURCE = re.compile(r"│ {1,4}(?:❱ {1,4})?\d{1,9} │")
_LIBRARY_PATH = re.compile(r"/(?:site|dist)-packages/|/lib/python\d|^<")
_C10D_FILES = ("distributed_c10d.py", "c10d_logger.py")
_CHILD_FILE = "multiprocessing/process.py"


def read_header(state: TorchState, line: Line) -> bool:
    """`Traceback (most recent call last):`: a traceback opens for this rank."""
    key = rank_key(line)
    state.tracebacks[key] = min(state.tracebacks.get(key, 0) + 1, TRACEBACKS_MAX)
    _opened(state, key, line)
    if key in state.traceback_at:
        state.traceback_at[key] = {**state.traceback_at[key], "headed": True}
    state.frames.pop(key, None)
    state.chains.pop(key, None)
    state.setup_steps.pop(key, None)
    state.children.discard(key)
    traceback_opened(state, key, line.number)
    state.torch = True
    return True


def _opened(state: TorchState, key: RankKey, line: Line) -> None:
    if len(state.traceback_at) < FRAMED_RANKS_MAX or key in state.traceback_at:
        state.traceback_at[key] = where(line)


def cut_tracebacks(state: TorchState) -> list[TracebackCut]:
    """The tracebacks still open where the text ends, one per rank (its last one opened):
    no exception line followed its frames."""
    return [TracebackCut(**at) for key, at in state.traceback_at.items() if state.tracebacks.get(key, 0) > 0]


def read_thread_head(state: TorchState, line: Line) -> bool:
    """`Exception in thread NAME:` (threading.excepthook): the traceback after it ends that
    thread only; the process goes on."""
    b = line.text.rstrip()
    if not b.endswith(":"):
        return False
    key = rank_key(line)
    if len(state.threads) < FRAMED_RANKS_MAX or key in state.threads:
        state.threads[key] = clip(b[len(_THREAD_HEAD):-1], THREAD_NAME_MAX)
    return True


def read_frame(state: TorchState, line: Line) -> bool:
    """An indented line: a traceback's `File "PATH", line N, in FUNC` (a fragment may start
    inside a traceback) or, in an open traceback, the source line under it; any other
    indented line is no exception."""
    b = line.text
    if not _FRAME.match(b):  # the frame's source line (`    main()`) in an open traceback
        _source_line(state, rank_key(line), b)
        return bool(state.tracebacks) and bool(state.tracebacks.get(rank_key(line)))
    key = rank_key(line)
    if not state.tracebacks.get(key):
        state.tracebacks[key] = 1  # a fragment that starts inside a traceback
        _opened(state, key, line)
        if _outermost(b) and key in state.traceback_at:  # it starts at the process's top: its start
            state.traceback_at[key] = {**state.traceback_at[key], "headed": True}
        traceback_opened(state, key, line.number)
    _frame(state, key, b)
    return True


def _outermost(body: str) -> bool:
    """A frame that is a process's outermost: a script's `<module>`, or multiprocessing's
    `_bootstrap` (a child process's, vLLM's workers'); a fragment that opens at it shows its
    traceback from the top, only the header line above it left out."""
    m = _FRAME_AT.match(body)
    return m is not None and (m.group(3) == "<module>"
                              or (m.group(3) == "_bootstrap" and m.group(1).replace("\\", "/").endswith(_CHILD_FILE)))


def _source_line(state: TorchState, key: RankKey, code: str) -> None:
    """A source line that calls a set-up call names the step as its frame would (setupframes.py),
    in an open traceback or above the first frame of a paste cut inside one; a traceback's
    header forgets it, a framed exception takes it."""
    step = source_step(code) if "nccl" in code or "MPI_Init" in code else ""
    if step and key not in state.setup_steps and len(state.setup_steps) < FRAMED_RANKS_MAX:
        state.setup_steps[key] = step


def read_rich_header(state: TorchState, line: Line) -> bool:
    """rich's `╭─── Traceback (most recent call last) ───╮`: a traceback opens, as Python's header."""
    return _HEADER[:-1] in line.text and read_header(state, line)


def read_rich_row(state: TorchState, line: Line) -> bool:
    """A row of rich's traceback box: a frame's `│ PATH:N in FUNC │`, a source row (either
    opens a traceback where none is open: a paste that starts inside the box), or, in an
    open traceback, any other row and the closing `╰───╯`."""
    b = line.text.rstrip()
    key = rank_key(line)
    m = _RICH_FRAME.match(b)
    if m is None and _RICH_SOURCE.match(b) is None:
        return bool(state.tracebacks.get(key))
    if not state.tracebacks.get(key):
        state.tracebacks[key] = 1
        _opened(state, key, line)
        traceback_opened(state, key, line.number)
        state.torch = True
    if m is not None:
        _frame_at(state, key, *m.groups())
    return True


def _frame(state: TorchState, key: RankKey, body: str) -> None:
    """The innermost frame of the program's own code (not a library's) and the
    torch.distributed function it is in, so far."""
    m = _FRAME_AT.match(body)
    if m is not None:
        _frame_at(state, key, *m.groups())


def _frame_at(state: TorchState, key: RankKey, path: str, number: str, func: str) -> None:
    """One frame (`_frame`): its file, line and function (a Windows path read with slashes)."""
    path = path.replace("\\", "/")
    note_frame(state, key, path, func)
    step = frame_step(path, func)  # setupframes.py: the outermost set-up frame names the step
    if step and key not in state.setup_steps and (len(state.setup_steps) < FRAMED_RANKS_MAX):
        state.setup_steps[key] = step
    if func == "_bootstrap" and path.endswith(_CHILD_FILE) and len(state.children) < FRAMED_RANKS_MAX:
        state.children.add(key)  # multiprocessing's child process runs its target under _bootstrap
    own, collective, library = state.frames.get(key, ("", "", ""))
    if path.endswith(_C10D_FILES) and "/distributed/" in path:
        if func != "wrapper":
            collective = clip(func, 64)
    elif _LIBRARY_PATH.search(path):
        library = clip(func, 64)
    else:
        own, collective, library = f"{clip(basename(path), 128)}:{number} in {clip(func, 128)}", "", ""
        chain = state.chains.setdefault(key, []) if len(state.chains) < FRAMED_RANKS_MAX or key in state.chains else []
        if len(chain) < CHAIN_MAX:
            chain.append(own)
    if len(state.frames) < FRAMED_RANKS_MAX or key in state.frames:
        state.frames[key] = (own, collective, library)


def read_terminate(state: TorchState, line: Line) -> bool:
    """C++ `terminate called after throwing an instance of 'T'` (its `what():` is read after
    it, continued.py), or a bare `terminate called recursively`."""
    b = line.text
    m = _TERMINATE.match(b)
    if m is None and b.rstrip() not in _TERMINATE_BARE:
        return False
    index = state.add("exceptions", ExceptionRaised(
        **where(line), type=m.group(1) if m else "", native=True, message="" if m else clip(b.strip(), MESSAGE_MAX),
        uncaught=m is not None))  # std::terminate after a throw nothing caught: it aborts the process
    if m and index >= 0:
        key = rank_key(line)
        # two processes' terminate lines before either's what() (unlabelled, interleaved): the
        # second's waits for the what() after the first's (continued.read_what)
        waiting = state.open.get(("terminate", key)) is not None
        state.start("terminate-next" if waiting else "terminate", index, key)
    return True


def _unframed(name: str, message: str | None) -> bool:
    """Whether an exception's head read outside a traceback is one: an `...Error` or
    `...Exception` type, and not a bare word alone with no traceback around it."""
    return name.rsplit(".", 1)[-1].endswith(("Error", "Exception")) and (message is not None or "." in name)


def raises_unframed(text: str) -> bool:
    """Whether a line's text is an exception read_exception reads with no traceback open."""
    head = exception_head(text)
    return head is not None and _unframed(*head)


def read_exception(state: TorchState, line: Line) -> bool:
    """The exception a traceback ends with (framed), or an `...Error:` / `...Exception:` line
    with no traceback read before it for this rank."""
    b = line.text
    key = rank_key(line)
    framed = state.tracebacks.get(key, 0) > 0
    head = exception_head(b, in_traceback=framed)
    if head is None:
        return False
    name, message = head
    if not framed and not _unframed(name, message):
        return False
    own, collective, library = state.frames.pop(key, ("", "", "")) if framed else ("", "", "")
    thread = state.threads.pop(key, "") if framed else ""
    child = framed and key in state.children
    state.children.discard(key)
    chain = tuple(state.chains.pop(key, ())) if framed else ()
    setup = (state.setup_steps.pop(key, "") if framed else "") or message_step(message or "")
    if framed:
        state.tracebacks[key] -= 1
    at = where(line)
    at |= said_by(message or "", at["rank"])  # no label: the message may name its rank
    state.add("exceptions", ExceptionRaised(**at, type=name, message=clip((message or "").strip(), MESSAGE_MAX),
                                            framed=framed, frame=own, collective=collective, library=library,
                                            thread=thread, chain=chain, child_process=child,
                                            uncaught=by_excepthook(line), setup=setup))
    return True


# glog's (and c10's) prefix before a FATAL line: its thread id, the process's pid where the
# main thread logged it (`F1128 14:18:35.294319 11006 fused_attn.cc:212] `)
# torch's own FATALs are its reactions to a collective's trouble (the heartbeat monitor's
# `[F ProcessGroupNCCL.cpp:1169] ... watchdog got stuck`: heartbeat.py's), read by their own
# handlers; c10's bracketed `[F...]` prefix is torch's logger, never read here
_TORCH_FATAL = ("ProcessGroup", "NCCLUtils", "TCPStore", "socket.cpp", "Utils.hpp", "reducer.cpp", "Backend")
_GLOG_TID = re.compile(r"\[?F(?:\d{4})?\d{3,4} \d\d:\d\d:\d\d(?:\.\d{1,9})? {1,8}(\d{1,10}) ")


def read_glog_fatal(state: TorchState, line: Line) -> bool:
    """A glog FATAL line of native code (not torch's own, _TORCH_FATAL): `F1128 12:00:00.123
    11006 fused_attn.cc:212] Check failed: x == y`. Native code's own check failed and glog
    aborts the process right after it, so it is the rank's death with its reason, an
    exception of its own (native, framed by no traceback). Its rank is its label's or its
    file's; else its thread id, which is the process's pid when the main thread failed, for
    the caller to place (`pid`). A check of a set-up call's result (`Check failed:
    ncclCommInitRank(...) : unhandled system error`) failed in that set-up step (`setup`)."""
    if line.level != "F" or line.logger != "glog" or not line.text.strip() or line.source.startswith(_TORCH_FATAL):
        return False
    m = _GLOG_TID.search(line.labels)
    pid = int(m.group(1)) if m else None
    kind = "Check failed" if line.text.startswith("Check failed") else "FATAL"
    message = line.text.removeprefix("Check failed").lstrip(": ").strip() if kind == "Check failed" else line.text
    setup = checked_step(message) if kind == "Check failed" else ""  # the check of a set-up call's result
    state.add("exceptions", ExceptionRaised(**where(line), type=kind, native=True, frame=clip(line.source, 160),
                                            message=clip(message.strip(), MESSAGE_MAX), pid=pid, setup=setup))
    return True


def by_excepthook(line: Line) -> bool:
    """The line came through torch's own sys.excepthook: torch's `[rankN]: ` label (not
    Lightning's `[rank: N] `, not a launcher's) with no c10 or glog prefix after it. That
    hook prints only exceptions nothing caught (distributed_c10d.py, torch >= 2.2)."""
    return line.rank is not None and not line.logger and TORCH_RANK.search(line.labels) is not None


def _may_end_traceback(b: str) -> bool:
    return b[:1] not in " \t" and not b.startswith((_HEADER, _TERMINATE_WORDS))


HANDLERS: tuple[Handler[TorchState], ...] = (
    # the header alone, or ending a line that says why (SGLang's `Scheduler hit an exception:
    # Traceback (most recent call last):`)
    Handler("traceback", lambda b: b.startswith(_HEADER) or b.rstrip().endswith(": " + _HEADER), read_header),
    Handler("thread-exception", lambda b: b.startswith(_THREAD_HEAD), read_thread_head),
    Handler("traceback-frame", lambda b: b[:1] in " \t", read_frame),
    Handler("rich-traceback", lambda b: b.startswith("╭"), read_rich_header),
    Handler("rich-traceback-row", lambda b: b.startswith(_RICH_EDGES), read_rich_row),
    Handler("terminate", lambda b: b.startswith(_TERMINATE_WORDS), read_terminate),
    Handler("glog-fatal", lambda b: True, read_glog_fatal),
    Handler("exception", _may_end_traceback, read_exception),
)
