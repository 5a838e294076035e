"""`py-spy dump` output (text and `--json`) -> PySpyDump: processes, threads, frames, errors.

What py-spy prints (benfred/py-spy src/dump.rs, src/stack_trace.rs, src/main.rs @ v0.4.2;
the same shapes in 0.3.14; real captures of 0.4.3 in tests/fixtures/corpus/py-spy):

* text, per process: `Process PID: CMDLINE`, `Python vX.Y.Z (EXE)`, with `--subprocesses`
  `Parent Process PID: CMDLINE` and a line of dashes before each child; then a blank line
  and one block per thread: `Thread ID (STATUS): "NAME"` (STATUS is idle, active or
  active+gil; `(gil)` alone where the activity is not shown; no `: "NAME"` when the
  thread has none). ID is the OS thread id in decimal on Linux, `0x...` (the pthread id)
  on macOS or when the OS id is unknown. Frames follow, innermost first, four spaces in:
  `NAME (FILE:LINE)`, or `NAME (FILE)` when the line is 0 (`--native` frames:
  `pthread_cond_wait (libc.so.6)`; demangled C++ names may hold parentheses). With
  `--locals`, `        Arguments:` / `        Locals:` and `            NAME: REPR` under
  a frame. A fragment that starts at a `Thread` line (pasted into a ticket) parses too.
* `--json`: `serde_json::to_string_pretty(Vec<StackTrace>)`: a list of threads, each
  `{pid, thread_id, thread_name, os_thread_id, active, owns_gil, frames: [{name,
  filename, module, short_filename, line, locals: [{name, addr, arg, repr}] | null,
  is_entry, is_shim_entry}], process_info: {pid, command_line, parent} | null}` (0.3.x
  has no is_entry/is_shim_entry). No version header; `--subprocesses` is ignored with
  `--json` (one process). Several arrays one after another (one per rank) are read as
  several processes.
* errors, on stderr (py-spy exits 1): `Error: MESSAGE` then either `Reason: ...` lines
  (older anyhow) or `Caused by:` and indented (`    0: ...`) lines, then with
  RUST_BACKTRACE a `Stack backtrace:` block; `Permission Denied: Try running again with
  elevated permissions by going 'sudo env "PATH=$PATH" !!'` (not root) or `Permission
  Denied` + a docker SYS_PTRACE hint (root in a container). Each is a PySpyError fact,
  never a ParseError. RUST_LOG lines (` INFO ...`, `[... INFO  py_spy::...]`) are skipped.

A text holding no process header, no thread and no error is garbage (ParseError).
Linear time: lines are cut at MAX_LINE, patterns are anchored at a literal and bounded,
frames are split with one rfind.
"""

from __future__ import annotations

import functools
import os
import re
import stat
from typing import Literal

import msgspec

from healthcheck.core import typed
from healthcheck.core.errors import ParseError
from healthcheck.core.inputs import clip
from healthcheck.parsers.lines import NOTHING_UNREAD, Line, Unrecognized, UnrecognizedLines, read_lines

MAX_LINE = 64 * 1024  # a demangled C++ frame name can run to kilobytes; nothing is longer
MAX_NAME = 512  # frame and thread names kept (long demangled names are cut, see `clip`)
MAX_TEXT = 2048  # command lines, paths, reprs and error messages kept
MAX_REASONS = 16  # `Reason:` / `Caused by:` lines kept per error

ThreadStatus = Literal["idle", "active", "active+gil", "gil", "unknown"]
PySpyErrorKind = Literal["permission", "no-python", "no-process", "other"]
Format = Literal["text", "json"]


class PySpyLocal(msgspec.Struct, frozen=True, omit_defaults=True):
    """One argument or local variable of a frame (`--locals`)."""

    name: str
    repr: str | None = None  # as py-spy printed it ("?" in text where it could not format it)
    arg: bool = False  # listed under `Arguments:` (text) / `"arg": true` (JSON)


class PySpyFrame(msgspec.Struct, frozen=True, omit_defaults=True):
    """One frame. `file` is what the text shows (py-spy's short file name: relative to
    sys.path, so `torch/distributed/distributed_c10d.py`, `threading.py`); JSON also
    gives the full `filename`. `line` is None where py-spy printed none (native frames,
    `--nolineno`)."""

    name: str
    file: str
    line: int | None = None
    filename: str = ""  # the full path (JSON only)
    native: bool = False  # a C/C++ frame of `--native` (`pthread_cond_wait (libc.so.6)`)
    locals: tuple[PySpyLocal, ...] = ()

    @property
    def library(self) -> bool:
        """A frame of the machinery a stuck thread waits in, not of the program: native,
        the standard library's threading/queue/selectors/sockets/futures/multiprocessing/
        asyncio/contextlib, or torch itself."""
        return self.native or is_library_file(self.file or self.filename)


class PySpyThread(msgspec.Struct, frozen=True, omit_defaults=True):
    """One thread: `id` as printed (decimal OS tid on Linux, `0x...` pthread id else),
    the status py-spy showed, and its frames innermost first."""

    id: str
    status: ThreadStatus = "unknown"
    name: str | None = None
    os_thread_id: int | None = None  # the decimal id (text) / os_thread_id (JSON)
    thread_id: int | None = None  # the 0x... id (text) / thread_id (JSON): the pthread id
    frames: tuple[PySpyFrame, ...] = ()

    @property
    def active(self) -> bool | None:
        return None if self.status in ("unknown", "gil") else self.status != "idle"

    @property
    def owns_gil(self) -> bool | None:
        return None if self.status == "unknown" else self.status in ("gil", "active+gil")

    @property
    def user_frame(self) -> PySpyFrame | None:
        """The innermost frame of the program itself: the first that is not library
        (`PySpyFrame.library`). None when every frame is library."""
        return user_frame(self.frames)

    @property
    def collective(self) -> str | None:
        """The torch.distributed call the thread is inside (`all_reduce`, `barrier`,
        `wait`, ...), None when it is in none. A blocked collective shows as idle."""
        return collective(self.frames)

    @property
    def in_collective(self) -> bool:
        return self.collective is not None


class PySpyProcess(msgspec.Struct, frozen=True, omit_defaults=True):
    """One process of the dump (a text fragment without a `Process` line: pid None)."""

    pid: int | None = None
    command: str = ""
    python_version: str | None = None  # "3.11.7" (text only)
    executable: str | None = None  # "/usr/bin/python3.11" (text only)
    parent_pid: int | None = None  # `--subprocesses`: "Parent Process PID: CMD"
    parent_command: str = ""
    threads: tuple[PySpyThread, ...] = ()

    @property
    def main_thread(self) -> PySpyThread | None:
        return next((t for t in self.threads if t.name == "MainThread"), None)


class PySpyError(msgspec.Struct, frozen=True, omit_defaults=True):
    """What py-spy said instead of a dump. `kind`: permission (ptrace refused: not root,
    no CAP_SYS_PTRACE, Yama; an `Operation not permitted (os error 1)` reason counts,
    whatever the message), no-python (`Failed to find python version from target
    process`: not a Python process, e.g. a bash wrapper or the launcher, or a Python
    py-spy does not know), no-process (the pid is gone: `Failed to open process`,
    `No such file or directory (os error 2)`), other."""

    kind: PySpyErrorKind
    message: str
    reasons: tuple[str, ...] = ()


class PySpyDump(msgspec.Struct, frozen=True, omit_defaults=True):
    format: Format
    processes: tuple[PySpyProcess, ...] = ()
    errors: tuple[PySpyError, ...] = ()
    unrecognized: Unrecognized = NOTHING_UNREAD  # text: lines none of py-spy's (omitted when none)

    @property
    def threads(self) -> tuple[PySpyThread, ...]:
        return tuple(t for p in self.processes for t in p.threads)

    @property
    def error(self) -> PySpyError | None:
        return self.errors[0] if self.errors else None


# ---------------------------------------------------------------- what a frame is

_STDLIB_FILES = frozenset({
    "threading.py", "queue.py", "selectors.py", "socket.py", "ssl.py", "subprocess.py", "contextlib.py",
})
_LIBRARY_DIRS = ("torch/", "concurrent/futures/", "multiprocessing/", "asyncio/")

# torch.distributed functions a rank blocks in (the last part of py-spy's qualified name)
COLLECTIVES = frozenset({
    "all_reduce", "all_reduce_coalesced", "all_gather", "all_gather_into_tensor", "all_gather_coalesced",
    "all_gather_object", "_all_gather_base", "reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base",
    "broadcast", "broadcast_object_list", "reduce", "gather", "gather_object", "scatter", "scatter_object_list",
    "all_to_all", "all_to_all_single", "barrier", "monitored_barrier", "_store_based_barrier", "send", "recv",
    "isend", "irecv", "batch_isend_irecv", "send_object_list", "recv_object_list", "wait", "wait_tensor",
    "all_reduce_inplace", "all_gather_tensor", "reduce_scatter_tensor_coalesced",
    # torch 2.13's single-tensor forms (distributed_c10d.py; FSDP2's all_gather and
    # reduce-scatter call them: captured, tests/fixtures/diagnose/rules11 fsdppoll)
    "all_gather_single", "reduce_scatter_single",
})
_C10D_FILES = ("torch/distributed/distributed_c10d.py", "torch/distributed/_functional_collectives.py",
               "torch/distributed/c10d_logger.py")


def is_library_file(path: str) -> bool:
    """threading.py, queue.py, selectors.py, socket.py, ssl.py, subprocess.py,
    contextlib.py, concurrent/futures/*, multiprocessing/*, asyncio/*, torch/* (py-spy's
    short names; a full path is judged by its site-packages or lib/pythonX.Y tail)."""
    if not path:
        return False
    for marker in ("/site-packages/", "/dist-packages/"):
        cut = path.rfind(marker)
        if cut >= 0:
            path = path[cut + len(marker):]
            break
    else:
        cut = path.find("/lib/python")
        if cut >= 0:  # /usr/lib/python3.11/threading.py -> threading.py
            rest = path[cut + len("/lib/python"):]
            path = rest.partition("/")[2]
    if path.startswith(_LIBRARY_DIRS):
        return True
    return path in _STDLIB_FILES


def user_frame(frames: tuple[PySpyFrame, ...]) -> PySpyFrame | None:
    """The first (innermost) frame that is not library, or None."""
    return next((f for f in frames if not f.library), None)


def collective(frames: tuple[PySpyFrame, ...]) -> str | None:
    """The c10d call a stack is inside: a torch.distributed frame named after a
    collective (`all_reduce`, `barrier`, `wait`...), else a native `c10d::...` frame
    (`--native`: `c10d::Work::wait` -> "wait"). `wait (threading.py)` is not one."""
    native = None
    for f in frames:
        path = f.file or f.filename
        if not f.native and path.endswith(_C10D_FILES):
            name = f.name.rsplit(".", 1)[-1]
            if name in COLLECTIVES:
                return name
        elif f.native and native is None and f.name.startswith("c10d::"):
            native = f.name.partition("(")[0].rsplit("::", 1)[-1][:MAX_NAME] or "c10d"
    return native or hidden_collective(frames)


# A wait on a collective with no c10d frame of its own, told by the locals py-spy
# `--locals` shows (a type's name and an address, no value):
# - `req.wait()` on the Work of an isend/irecv/async collective: `wait` is native, so the
#   program's own frame is innermost, holding the Work;
# - DDP's gradient all_reduce: the reducer launches it from an autograd hook and waits for
#   it at the end of `backward()`, so the stack ends in autograd's engine, and a caller
#   holds the DistributedDataParallel model.
_WORK_REPRS = ("<torch._C._distributed_c10d.Work ", "<Work ")
# `work.get_future()` is a torch._C.Future: `fut.then(cb).wait()` waits in native code too,
# the program's frame holding the Future (a DeepSpeed-style engine's loss, a gradient
# scaled in a callback); torch.futures.Future's own `wait` frame sits above it
_FUTURE_REPRS = ("<torch._C.Future ", "<torch.futures.Future ")  # not concurrent.futures' or asyncio's
_FUTURE_FILES = ("torch/futures/__init__.py",)
_DATA_PARALLEL_REPRS = ("<DistributedDataParallel ", "<FullyShardedDataParallel ")
BACKWARD_FRAMES = frozenset({"_engine_run_backward", "run_backward"})
AUTOGRAD_FILES = ("torch/autograd/graph.py", "torch/autograd/__init__.py")


def _holds(frame: PySpyFrame, prefixes: tuple[str, ...]) -> bool:
    return any((v.repr or "").startswith(prefixes) for v in frame.locals)


# the async c10d calls a `.wait()` chained on them names (first match wins: isend before send)
_ASYNC_CALLS = ("batch_isend_irecv", "isend", "irecv", "all_reduce", "broadcast", "all_gather", "reduce_scatter",
                "all_to_all", "barrier")
MAX_SOURCE_LINE = 1000


def waited_call(frame: PySpyFrame) -> str | None:
    """The async c10d call whose Work the frame's own source line waits on in one
    expression (`dist.irecv(x, src=1).wait()` -> "irecv", which leaves no local to hold the
    Work); read where the file is at its absolute path, as on the rank's node."""
    path = frame.filename or frame.file
    if frame.line is None or not path.startswith("/") or not path.endswith(".py"):
        return None
    text = source_line(path, frame.line)
    if ".wait(" not in text:
        return None
    return next((call for call in _ASYNC_CALLS if f"{call}(" in text), None)


MAX_SOURCE_BYTES = 4 * 1024 * 1024


@functools.lru_cache(maxsize=64)
def _source_lines(path: str) -> tuple[str, ...]:
    """A regular file's lines, read once; () where it is not one, too large or unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO at the path does not block the open
    except OSError:
        return ()
    try:
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_SOURCE_BYTES:
                return ()
            data = f.read(MAX_SOURCE_BYTES)
    except OSError:
        return ()
    return tuple(data.decode("utf-8", errors="replace").splitlines())


def source_line(path: str, line: int) -> str:
    """Line `line` (1-based) of a source file, cut at MAX_SOURCE_LINE; "" where there is none."""
    lines = _source_lines(path)
    return lines[line - 1][:MAX_SOURCE_LINE] if 0 < line <= len(lines) else ""


def in_backward(frames: tuple[PySpyFrame, ...]) -> bool:
    """The stack is inside autograd's backward (`loss.backward()`)."""
    return any(f.name.rsplit(".", 1)[-1] in BACKWARD_FRAMES and (f.file or f.filename).endswith(AUTOGRAD_FILES)
               for f in frames if not f.native)


def hidden_collective(frames: tuple[PySpyFrame, ...]) -> str | None:
    """The async call ("irecv", ...) whose Work the innermost program frame (under native
    frames only) waits on, by its source line; else "wait" where that frame holds a c10d
    Work; "backward" where the stack is in autograd's backward and a caller holds a
    DistributedDataParallel/FSDP model; None otherwise (or without locals)."""
    for f in frames:
        if f.native or (f.file or f.filename).endswith(_FUTURE_FILES):
            continue
        if f.library:
            break
        called = waited_call(f)
        if called or _holds(f, _WORK_REPRS + _FUTURE_REPRS):
            return called or "wait"
        break
    if in_backward(frames) and any(_holds(f, _DATA_PARALLEL_REPRS) for f in frames):
        return "backward"
    return None


# ---------------------------------------------------------------- text

_NATIVE_SOURCES = (".c", ".cc", ".cpp", ".cxx", ".h", ".hpp", ".cu", ".rs")
_ANSI = re.compile(r"\x1b\[[0-9;]{0,32}m")
_PROCESS = re.compile(r"Process (\d{1,10}): ?(.*)")
_PARENT = re.compile(r"Parent Process (\d{1,10}): ?(.*)")
_PYTHON = re.compile(r"Python v(\S{1,64})(?: \((.*)\))?")
_THREAD = re.compile(r"Thread (0[xX][0-9A-Fa-f]{1,20}|\d{1,20})(?: \((idle|active\+gil|active|gil)\))?(?:: \"(.*)\")?")
_INDEXED = re.compile(r"\d{1,4}: ")  # anyhow's `Caused by:` list: "    0: No such file ..."


def _kind(message: str, reasons: list[str]) -> PySpyErrorKind:
    text = " ".join([message, *reasons])
    if "Failed to find python version" in text:
        return "no-python"
    if "Permission Denied" in text or "Permission denied" in text or "(os error 1)" in text \
            or "(os error 13)" in text or "requires root" in text:
        return "permission"
    if ("Failed to open process" in text or "(os error 2)" in text or "(os error 3)" in text
            or "Check that the process is running" in text or "No such process" in text):
        return "no-process"
    return "other"


class _Text:
    """The line-by-line reader of the text format."""

    def __init__(self) -> None:
        self.processes: list[PySpyProcess] = []
        self.errors: list[PySpyError] = []
        self.process: dict | None = None  # the process being read (its fields)
        self.threads: list[PySpyThread] = []
        self.thread: dict | None = None
        self.frames: list[PySpyFrame] = []
        self.frame: dict | None = None
        self.locals: list[PySpyLocal] = []
        self.arg = False
        self.error: dict | None = None
        self.mode = ""  # "causes" after "Caused by:", "backtrace" after "Stack backtrace:"

    # -- closing what is open, innermost first
    def close_frame(self) -> None:
        if self.frame is not None:
            self.frames.append(PySpyFrame(**self.frame, locals=tuple(self.locals)))
            self.frame, self.locals = None, []

    def close_thread(self) -> None:
        self.close_frame()
        if self.thread is not None:
            self.threads.append(PySpyThread(**self.thread, frames=tuple(self.frames)))
            self.thread, self.frames = None, []

    def close_process(self) -> None:
        self.close_thread()
        if self.process is not None or self.threads:
            self.processes.append(PySpyProcess(**(self.process or {}), threads=tuple(self.threads)))
        self.process, self.threads = None, []

    def close_error(self) -> None:
        if self.error is not None:
            # py-spy repeats a reason, and the message as its own reason
            reasons = [r for r in dict.fromkeys(self.error["reasons"]) if r != self.error["message"]][:MAX_REASONS]
            self.errors.append(PySpyError(kind=_kind(self.error["message"], reasons), message=self.error["message"],
                                          reasons=tuple(reasons)))
            self.error, self.mode = None, ""

    def new_error(self, message: str) -> None:
        self.close_error()
        self.error = {"message": clip(message.strip(), MAX_TEXT), "reasons": []}

    # -- one line
    def line(self, line: str) -> bool:
        """Read one line; False where it is none of py-spy's (counted in `unrecognized`)."""
        if len(line) > MAX_LINE:
            line = line[:MAX_LINE]
        body = line.strip()
        if not body:
            if self.mode == "causes":
                self.mode = ""
            return True
        indent = len(line) - len(line.lstrip(" "))
        if self.mode == "backtrace":
            if indent:
                return True  # the Rust backtrace of py-spy's own error
            self.mode = ""
        if self.mode == "causes" and indent:
            reason = body[len(m.group()):] if (m := _INDEXED.match(body)) else body
            if self.error is not None:
                self.error["reasons"].append(clip(reason, MAX_TEXT))
            return True
        if indent == 0:
            return self.top(line, body)
        if indent == 4 and self.thread is not None:
            return self.frame_line(body)
        if indent == 8 and self.frame is not None and body in ("Arguments:", "Locals:"):
            self.arg = body == "Arguments:"
            return True
        if indent >= 12 and self.frame is not None:
            name, sep, value = body.partition(": ")
            if not sep and body.endswith(":"):
                name, value = body[:-1], ""
            self.locals.append(PySpyLocal(name=name[:MAX_NAME], repr=clip(value, MAX_TEXT), arg=self.arg))
            return True
        return _is_rust_log(body)  # env_logger pads its level (` INFO ...`); anything else is noise

    def top(self, line: str, body: str) -> bool:
        return self.header(body) or self.error_line(body)

    def header(self, body: str) -> bool:
        """A thread, process, parent or Python line, or --subprocesses' separator: read."""
        if body.startswith("Thread ") and (m := _THREAD.fullmatch(body)):
            self.close_thread()
            ident, status, name = m.groups()
            self.thread = {
                "id": ident, "status": status or "unknown",
                "name": None if name is None else name[:MAX_NAME],
                "os_thread_id": None if ident[:2].lower() == "0x" else int(ident),
                "thread_id": int(ident, 16) if ident[:2].lower() == "0x" else None,
            }
        elif body.startswith("Process ") and (m := _PROCESS.fullmatch(body)):
            self.close_process()
            self.process = {"pid": int(m.group(1)), "command": clip(m.group(2).strip(), MAX_TEXT)}
        elif body.startswith("Parent Process ") and (m := _PARENT.fullmatch(body)) and self.process is not None:
            self.process["parent_pid"] = int(m.group(1))
            self.process["parent_command"] = clip(m.group(2).strip(), MAX_TEXT)
        elif body.startswith("Python v") and (m := _PYTHON.fullmatch(body)) and self.process is not None:
            self.process["python_version"] = m.group(1)
            if m.group(2) is not None:
                self.process["executable"] = clip(m.group(2), MAX_TEXT)
        elif len(body) >= 10 and body.count("-") == len(body):  # --subprocesses' separator
            self.close_process()
        else:
            return False
        return True

    def error_line(self, body: str) -> bool:
        """py-spy's own error report (Error:, its reasons and causes, its backtrace)."""
        if body.startswith("Error:"):
            self.new_error(body[len("Error:"):])
        elif body.startswith("Permission Denied"):
            self.new_error(body)
        elif body == "This program requires root on OSX.":
            self.new_error(body)
        elif body.startswith("Reason:") and self.error is not None:
            self.error["reasons"].append(clip(body[len("Reason:"):].strip(), MAX_TEXT))
        elif body == "Caused by:" and self.error is not None:
            self.mode = "causes"
        elif body == "Stack backtrace:":
            self.mode = "backtrace"
        elif body.startswith("It looks like you are running in a docker container") and self.error is not None:
            self.error["reasons"].append(clip(body, MAX_TEXT))
        else:
            # py-spy's own RUST_LOG lines (`INFO 2023-02-04T14:36:42Z: py_spy::python_spy: ...`,
            # `[2023-09-12T10:23:47.709741792Z INFO  py_spy::config] ...`) are its, not read;
            # anything else at column 0 is noise
            return _is_rust_log(body)
        return True

    def frame_line(self, body: str) -> bool:
        self.close_frame()
        if not body.endswith(")"):
            return False
        cut = body.rfind(" (")
        if cut <= 0:
            return False
        name, where = body[:cut], body[cut + 2:-1]
        file, line = where, None
        head, sep, tail = where.rpartition(":")
        if sep and tail.isascii() and tail.isdigit() and len(tail) <= 9:
            file, line = head, int(tail)
        # a shared object without a line, or a C/C++ source with one (symbolicated `--native`);
        # a Python file may lack the .py suffix (`<module> (torchrun:8)`)
        native = (line is None and not file.endswith((".py", ".pyx", ".pyw")) and not file.startswith("<")) \
            or file.endswith(_NATIVE_SOURCES)
        self.frame = {"name": clip(name, MAX_NAME), "file": clip(file, MAX_TEXT), "line": line, "native": native}
        return True

    def finish(self) -> PySpyDump:
        self.close_process()
        self.close_error()
        return PySpyDump(format="text", processes=tuple(self.processes), errors=tuple(self.errors))


def _read_text(lines: list[Line], unread: UnrecognizedLines) -> PySpyDump:
    reader = _Text()
    for line in lines:
        if not reader.line(line.text):
            unread.note(line)
    return reader.finish()


_RUST_LOG_MODULE = "py_spy::"  # the module a RUST_LOG line of py-spy's names after its stamp and level
_RUST_LOG_REACH = 80


def _is_rust_log(body: str) -> bool:
    """A RUST_LOG line of py-spy's own: its module named after the stamp and level."""
    return _RUST_LOG_MODULE in body[:_RUST_LOG_REACH]


_RUST_LISTS = re.compile(r"^(?:Caused by:|Stack backtrace:)", re.MULTILINE)


def _read_labelled(text: str) -> PySpyDump:
    """Dumps read through the line layer: `srun -l py-spy dump` on many nodes interleaves
    their lines, so each launcher task's lines are read as one dump of their own, in the
    order the tasks first spoke (timestamps are left on: no py-spy line starts with one)."""
    # py-spy's own errors number their causes and frames `    0: ` (anyhow): printed
    # straight, not under srun, those are no labels
    srun = _RUST_LISTS.search(text) is None
    tasks: dict[int | None, list[Line]] = {}
    for line in read_lines(text, stamps=False, srun=srun):
        if not line.noise:
            tasks.setdefault(line.task, []).append(line)
    unread = UnrecognizedLines()
    dumps = [_read_text(lines, unread) for lines in tasks.values()]
    return PySpyDump(format="text", processes=tuple(p for d in dumps for p in d.processes),
                     errors=tuple(e for d in dumps for e in d.errors), unrecognized=unread.frozen_or_nothing())


def _parse_text(text: str) -> PySpyDump:
    dump = _read_labelled(text)
    if not dump.processes and not dump.errors:
        raise ParseError(f"py-spy: no process, thread or error in the output (starts with {clip(text.strip(), 60)!r})")
    return dump


# ---------------------------------------------------------------- JSON


class _JLocal(msgspec.Struct):
    name: str
    arg: bool = False
    repr: str | None = None


class _JFrame(msgspec.Struct):
    name: str
    filename: str
    line: int = 0
    module: str | None = None
    short_filename: str | None = None
    locals: list[_JLocal] | None = None


class _JProcessInfo(msgspec.Struct):
    pid: int
    command_line: str = ""
    parent: _JProcessInfo | None = None


class _JTrace(msgspec.Struct):
    pid: int
    thread_id: int
    frames: list[_JFrame]
    thread_name: str | None = None
    os_thread_id: int | None = None
    active: bool = False
    owns_gil: bool = False
    process_info: _JProcessInfo | None = None


_DECODER = typed.decoder(list[_JTrace])


def _frame(f: _JFrame) -> PySpyFrame:
    return PySpyFrame(
        name=clip(f.name, MAX_NAME),
        file=clip(f.short_filename or f.filename, MAX_TEXT),
        line=f.line if f.line > 0 else None,
        filename=clip(f.filename, MAX_TEXT),
        native=f.module is not None,  # py-spy sets `module` (the shared library) on native frames only
        locals=tuple(PySpyLocal(name=lv.name[:MAX_NAME], repr=None if lv.repr is None else clip(lv.repr, MAX_TEXT),
                                arg=lv.arg) for lv in f.locals or ()),
    )


def _thread(t: _JTrace) -> PySpyThread:
    status: ThreadStatus = ("active+gil" if t.owns_gil else "active") if t.active else "idle"
    ident = str(t.os_thread_id) if t.os_thread_id is not None else f"0x{t.thread_id:X}"  # Rust {:#X}
    return PySpyThread(id=ident, status=status, name=None if t.thread_name is None else t.thread_name[:MAX_NAME],
                       os_thread_id=t.os_thread_id, thread_id=t.thread_id, frames=tuple(_frame(f) for f in t.frames))


def _segments(lines: list[str]) -> tuple[list[tuple[int, int]], list[int]]:
    """(first, last) line of each top-level JSON array (pretty: `[` and `]` alone at
    column 0; compact: one line `[...]`), and the lines outside them."""
    segments, outside, start = [], [], None
    for i, line in enumerate(lines):
        body = line.rstrip()
        if start is None:
            if body in ("[", "[]") or (body.startswith("[{") and body.endswith("}]")):
                if body == "[":
                    start = i
                else:
                    segments.append((i, i))
            else:
                outside.append(i)
        elif body == "]":
            segments.append((start, i))
            start = None
    if start is not None:
        raise ParseError(f"py-spy --json: the array opened at line {start + 1} is never closed (a cut capture?)")
    return segments, outside


def _parse_json(text: str) -> PySpyDump:
    lines = text.splitlines()
    segments, outside = _segments(lines)
    traces: list[_JTrace] = []
    for first, last in segments:
        try:
            traces.extend(_DECODER.decode("\n".join(lines[first:last + 1])))
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ParseError(f"py-spy --json: {clip(message)}") from None
        except RecursionError:
            raise ParseError("py-spy --json: nested too deeply") from None
    processes: dict[int, dict] = {}
    for t in traces:
        p = processes.setdefault(t.pid, {"pid": t.pid, "threads": []})
        info = t.process_info
        if info is not None and "command" not in p:
            p["command"] = clip(info.command_line, MAX_TEXT)
            if info.parent is not None:
                p["parent_pid"], p["parent_command"] = info.parent.pid, clip(info.parent.command_line, MAX_TEXT)
        p["threads"].append(_thread(t))
    unread = UnrecognizedLines()
    # py-spy's stderr, when captured with it
    errors = _read_text([Line(number=i + 1, raw=lines[i], text=lines[i]) for i in outside], unread).errors
    return PySpyDump(
        format="json",
        processes=tuple(PySpyProcess(**{**p, "threads": tuple(p["threads"])}) for p in processes.values()),
        errors=errors, unrecognized=unread.frozen_or_nothing(),
    )


def _is_json(text: str) -> bool:
    """A `--json` capture: an array opens at column 0 on a line of its own (or `[{`),
    possibly after RUST_LOG lines (which also start with `[`, but `[20..`)."""
    for line in text.splitlines():
        body = line.rstrip()
        if body in ("[", "[]") or body.startswith("[{"):
            return True
    return False


def parse_py_spy(text: str) -> PySpyDump:
    """`py-spy dump` output, text or `--json` (told apart by a `[` line), or its error."""
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    if _is_json(text):
        return _parse_json(text)
    return _parse_text(text)
