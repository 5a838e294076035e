"""The `hc` command line. Subcommands are imported only when invoked, so `hc --help`
and `hc prologue` stay fast; this module imports no click: main() hands the command lines
cli/lean.py takes (the hooks, `hc node --local`) to it, the rest to the click group
(cli/group.py, loaded when used; `cli` and `LazyGroup` are its names here too)."""

from __future__ import annotations

import atexit
import errno
import functools
import importlib
import io
import os
import select
import sys
import threading
from collections.abc import Callable
from typing import Any

from healthcheck.cli.echo import echo
from healthcheck.core.errors import ExitCode, HcError

# name -> (module, attribute, one-line help): listed here so `hc --help` needs no imports
COMMANDS: dict[str, tuple[str, str, str]] = {
    "node": ("healthcheck.cli.node", "node", "Check nodes: this one (--local) or named ones over SSH."),
    "sweep": ("healthcheck.cli.sweep", "sweep",
              "Check many nodes (hostlist, hostfile, partition); fleet findings; --act."),
    "checks": ("healthcheck.cli.checks", "checks", "The catalogue of checks and finding IDs."),
    "config": ("healthcheck.cli.config", "config", "Validate the configuration; show a node's limits."),
    "parse": ("healthcheck.cli.parse", "parse", "Parse a captured tool output and print its facts."),
    "prologue": ("healthcheck.cli.hook_commands", "prologue",
                 "Slurm Prolog: quick checks before a job; drain on FAIL."),
    "epilogue": ("healthcheck.cli.hook_commands", "epilogue", "Slurm Epilog: what the job left behind; drain on FAIL."),
    "health": ("healthcheck.cli.hook_commands", "health",
               "HealthCheckProgram/cron: check, drain on FAIL, resume when fixed."),
    "gpu": ("healthcheck.cli.gpu", "gpu", "Record NVML on a GPU node, for replay where there are none."),
    "report": ("healthcheck.cli.report", "report",
               "Saved reports: show one, diff two runs, an HTML page, the run history, ticket records."),
    "bw": ("healthcheck.cli.bw", "bw", "Bandwidth tests: hc bw allreduce sweeps collectives with torch.distributed."),
    "diagnose": ("healthcheck.cli.diagnose", "diagnose",
                 "Diagnose a hung or failed distributed job from its logs."),
    "run": ("healthcheck.cli.run", "run",
            "Job wrapper: NCCL/torch debug logs, a preflight on every rank, then exec CMD."),
    "baseline": ("healthcheck.cli.baseline", "baseline",
                 "Learn a fabric's thresholds from sweep reports; write them as a fabric file."),
    "completion": ("healthcheck.cli.completion", "completion",
                   "Print the shell completion script: eval \"$(hc completion bash)\" (or zsh, fish)."),
}


# Modules only some invocations need, loaded by import path where the invocation is known
# (as COMMANDS are): `hc --help` and the hooks import neither.
VERSIONS_MODULE = "healthcheck.probes.versions"  # --version; reads metadata and /proc, imports no torch
STOP_MODULE = "healthcheck.runners.stop"  # the signal handling of the commands in _STOPPABLE
GROUP_MODULE = "healthcheck.cli.group"  # the click group: every command line lean.plan does not take
LEAN_MODULE = "healthcheck.cli.lean"  # the command lines run without click, asked only for these commands
LEAN_COMMANDS = ("prologue", "epilogue", "health", "node")
_GROUP_NAMES = ("cli", "LazyGroup")


def __getattr__(name: str) -> Any:
    """`healthcheck.cli.cli` and `healthcheck.cli.LazyGroup`: the click group's, loaded when asked for."""
    if name in _GROUP_NAMES:
        return getattr(importlib.import_module(GROUP_MODULE), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


EPILOG = """\b
Exit codes:
  0  healthy (or only WARN without --fail-level warn)
  1  WARN with --fail-level warn
  2  FAIL: evidence that a node is bad
  3  ERROR: a check could not run (and nothing failed), or an --output or
     --prometheus file could not be written (a FAIL still exits 2)
  4  usage, configuration or input error
  5  an action was refused by the blast-radius guard
  128+N  hc sweep / hc node stopped by signal N (130 Ctrl-C, 143 SIGTERM,
     129 SIGHUP): what hc started was ended, its Slurm jobs cancelled

\b
Environment (an option given on the command line wins over its variable):
  HC_CONFIG        the main config file (--config)
  HC_FORMAT        table or json on stdout (--format)
  HC_TIER          quick, standard or deep (--tier)
  HC_FAIL_LEVEL    the lowest status that exits non-zero (--fail-level)
  HC_MODE          auto, agent or agentless for remote nodes (--mode)
  HC_VIA           ssh or slurm: how hc sweep reaches its nodes (--via)
  HC_DRY_RUN       print the scontrol commands instead of running them
  HC_RUN_LOG_DIR   where hc run keeps NCCL logs, dumps and output (--log-dir)
  HC_NODE_NAME     this node's name (else SLURMD_NODENAME, else the hostname)
  HC_HOST          the host a report says it was made on (else the hostname)
  HC_AGENT=1       set by hc for the hc it starts on a node (agent mode, a sweep's
                   tasks): that run neither reads nor records the run history
  HC_NVML_REPLAY   replay this NVML recording instead of asking NVML
  HC_SYSLOG_SOCKET where the hooks' syslog line goes (/dev/log; empty: none)
  HC_CACHE_DIR     where parsed config files are kept (root: /var/cache/hc/config;
                   empty: none)
  HC_DEBUG=1       tracebacks for internal errors; torch's own C++ logging
  COLUMNS          the width tables fit (else the terminal's; none on a pipe)
  NO_COLOR         no colour in tables, even on a terminal
  RANK, OMPI_COMM_WORLD_RANK, SLURM_PROCID
                   hc bw allreduce: this process's rank, named in its errors
  HOME, OPAL_PREFIX, PATH
                   where hc looks for mpirun and Open MPI's parameter files
  SHELL            runs an ssh_config ProxyCommand, as ssh does (else /bin/sh)
  HC_BW_TEST_CORRUPT_RANK, HC_RUN_TEST_DELAY_RANK, HC_RUN_TEST_DELAY_S
                   hc's own tests only: fault injection, never in production"""


class StdoutError(Exception):
    """Standard output could not be written (a full disk, an I/O error): one line, exit 4."""

    def __init__(self, exc: OSError) -> None:
        super().__init__(f"cannot write to standard output: {exc.strerror or exc}")


class _GuardedStdout(io.RawIOBase):
    """File descriptor 1 as the raw stream under sys.stdout.

    A reader that went away (EPIPE: `hc node ... | head`) is not hc's failure: the rest
    of the output goes to /dev/null (as Python's documentation recommends) and the exit
    code stays the verdict's. Any other failure (ENOSPC on `> /dev/full`, EIO) raises
    StdoutError, which main() turns into one line and exit 4. Either way, later writes
    (interpreter shutdown flushes the buffer again) go to /dev/null instead of failing
    a second time.
    """

    def __init__(self, fd: int = 1, *, tolerant: bool = False) -> None:
        super().__init__()
        self._fd = fd
        self._tolerant = tolerant  # hooks: warn on stderr, keep the verdict
        self.broken = False

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return os.isatty(self._fd)

    def write(self, data) -> int:
        size = len(memoryview(data).cast("B"))
        if self.broken:
            return size
        while True:
            try:
                return os.write(self._fd, data)
            except BlockingIOError:  # a non-blocking stdout inherited from the caller
                select.select([], [self._fd], [])
            except BrokenPipeError:
                self._discard()
                return size
            except OSError as exc:
                self._discard()
                if not self._tolerant:
                    raise StdoutError(exc) from None
                _warn(f"hc: warning: {StdoutError(exc)}; the output was dropped")
                return size

    def _discard(self) -> None:
        self.broken = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._fd)
            os.close(devnull)
        except OSError:
            pass


def _warn(line: str) -> None:
    try:
        os.write(2, (line + "\n").encode(errors="replace"))
    except OSError:
        pass  # stderr gone too: the exit code is all that is left


def _guard_stdout(*, tolerant: bool) -> None:
    """Put _GuardedStdout under sys.stdout, where sys.stdout is the process's fd 1."""
    out = sys.stdout
    try:
        if out is None or out.fileno() != 1:
            return
    except (AttributeError, ValueError, OSError):
        return  # replaced by something without a descriptor (a test harness): leave it
    try:
        out.flush()
    except OSError:
        pass
    buffered = io.BufferedWriter(_GuardedStdout(1, tolerant=tolerant))
    sys.stdout = io.TextIOWrapper(buffered, encoding=out.encoding, errors=out.errors,
                                  line_buffering=bool(out.line_buffering))


# Slurm acts on these commands' exit codes (a non-zero prologue drains the node), and
# slurmd reads nothing from their stdout: a closed or full stdout must not change their verdict.
_HOOKS = ("prologue", "epilogue", "health")
# the commands that start launchers and Slurm allocations on other nodes: SIGINT, SIGTERM and
# SIGHUP end all of them, bounded, and exit 128 + the signal (runners/stop.py); the hooks
# keep their own contract (cli/hooks.py), `hc run` becomes the job, the workers are srun's
_STOPPABLE = ("sweep", "node")


def _stdout_closed() -> bool:
    try:
        os.fstat(1)
    except OSError:
        return True
    return sys.stdout is None


def _command_name(argv: list[str] | None) -> str:
    args = sys.argv[1:] if argv is None else argv
    return next((a for a in args if not a.startswith("-")), "")


def _closed_stdout(argv: list[str] | None) -> bool:
    """Handle a closed stdout before anything runs; True when hc must stop (exit 4).

    /dev/null is opened onto fd 1 either way: a file opened later (the history database)
    would otherwise get descriptor 1, and output would be written into it.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        if devnull != 1:
            os.dup2(devnull, 1)
            os.close(devnull)
    except OSError:
        pass
    if _command_name(argv) in _HOOKS:
        sys.stdout = open(1, "w", closefd=False)
        return False
    echo("hc: error: standard output is closed: nothing was run (redirect it to a file or /dev/null)", err=True)
    return True


def main(argv: list[str] | None = None) -> None:
    if _command_name(argv) in _STOPPABLE:
        importlib.import_module(STOP_MODULE).install()  # before anything is started
    if _stdout_closed() and _closed_stdout(argv):
        sys.exit(int(ExitCode.BAD_INPUT))
    _guard_stdout(tolerant=_command_name(argv) in _HOOKS)
    call = _lean_run(sys.argv[1:] if argv is None else list(argv))
    code = _guarded(call if call is not None else lambda: importlib.import_module(GROUP_MODULE).invoke(argv))
    stopping = _stop_module()
    if stopping is not None and stopping.stopping():  # a stop whose exception never reached here
        _exit_stopped()                                # (swallowed, or in a finalizer)
    status = int(code) if isinstance(code, int) else 0
    if call is not None and argv is None:  # a lean run as its own process (the console script)
        leave_now(status)
    sys.exit(status)


def leave_now(status: int) -> None:
    """End the process with `status` without the interpreter's teardown, where nothing can
    tell: freeing every module's objects one by one cost a prologue ~15 ms of CPU, about a
    sixth of its run (issue 22). What a teardown does that anyone can see is done first: the
    atexit functions run, the standard streams are flushed. A thread still running that is no
    daemon (a teardown waits for it) or a stream that cannot be flushed (Python reports it and
    exits 120) returns, and the caller leaves the ordinary way. Only for a process hc's main()
    started from its own command line: in-process callers (tests) get SystemExit as before.
    """
    main_thread = threading.main_thread()
    if any(t is not main_thread and not t.daemon and t.is_alive() for t in threading.enumerate()):
        return
    atexit._run_exitfuncs()  # and clears them: a return below does not run them twice
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return
    os._exit(status)


def _lean_run(args: list[str]) -> Callable[[], Any] | None:
    """cli/lean.py's run for this command line; lean.py is not even loaded for the other
    commands (`hc --help` stays as it was)."""
    if not args or args[0] not in LEAN_COMMANDS:
        return None
    run = importlib.import_module(LEAN_MODULE).plan(args, os.environ)
    return None if run is None else functools.partial(as_click_runs, run)


def as_click_runs(run: Callable[[], Any]) -> Any:
    """`run`, with what click's Command.main does around a command, so a lean run ends as
    the click command would: at EOF or Ctrl-C a blank line on stderr (it closes the
    terminal's ^C), then "hc: interrupted"; a broken pipe (EPIPE) exits 1, stdout and
    stderr quietened."""
    try:
        return run()
    except (EOFError, KeyboardInterrupt):
        echo(err=True)
        return interrupted()
    except OSError as exc:
        if exc.errno != errno.EPIPE:
            raise
        sys.stdout, sys.stderr = _Pacified(sys.stdout), _Pacified(sys.stderr)
        sys.exit(1)


class _Pacified:
    """A stream whose flush ignores a reader gone away (click's _PacifyFlushWrapper)."""

    def __init__(self, wrapped: Any) -> None:
        self.wrapped = wrapped

    def flush(self) -> None:
        try:
            self.wrapped.flush()
        except OSError as exc:
            if exc.errno != errno.EPIPE:
                raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)


def _guarded(run: Callable[[], Any]) -> Any:
    """The command's exit code; what it raised as one line and its documented code."""
    code: Any
    try:
        code = run()
        sys.stdout.flush()  # inside the guarded section: a full stdout is reported here
    except StdoutError as exc:
        echo(f"hc: error: {exc}", err=True)
        code = ExitCode.BAD_INPUT
    except HcError as exc:
        echo(f"hc: error: {exc}", err=True)
        code = exc.exit_code
    except KeyboardInterrupt:
        code = interrupted()
    except Exception as exc:  # never a traceback for the operator unless asked
        if os.environ.get("HC_DEBUG") == "1":
            raise
        echo(f"hc: internal error: {type(exc).__name__}: {exc} (HC_DEBUG=1 shows the traceback)", err=True)
        code = ExitCode.ERROR
    return code


def interrupted() -> int:
    """Ctrl-C, or a stop signal: where hc handles them (_STOPPABLE), the stop's cleanup is
    waited for and hc exits 128 + the signal at once; else "interrupted", 130."""
    stop = _stop_module()
    if stop is not None and stop.installed():
        _exit_stopped()
    echo("hc: interrupted", err=True)
    return 130


def _stop_module() -> Any:
    """runners.stop, where this command loaded it (_STOPPABLE: a hook never does, so the
    prologue imports nothing for it; unloaded, it handles no signal and nothing stops)."""
    return sys.modules.get(STOP_MODULE)


def _exit_stopped() -> None:
    """Wait for the stop's cleanup (bounded), say it, and leave without interpreter shutdown
    (threads of the sweep may still wait on what the cleanup ended)."""
    code = _stop_module().finish()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a closed or full stdout must not keep a stopped hc alive
            pass
    os._exit(code)


def flushed(code: int) -> int:
    """`code`, or 4 when what was just printed cannot reach stdout."""
    try:
        sys.stdout.flush()
    except StdoutError as exc:
        echo(f"hc: error: {exc}", err=True)
        return 4
    return code
