"""The `hc` command line. Subcommands are imported only when invoked, so `hc --help`
and `hc prologue` stay fast."""

from __future__ import annotations

import importlib
import io
import os
import select
import sys
from typing import TYPE_CHECKING, Any

import click

from healthcheck import __version__
from healthcheck.core.errors import ExitCode, HcError

if TYPE_CHECKING:  # pragma: no cover
    from click.shell_completion import CompletionItem

# name -> (module, attribute, one-line help): listed here so `hc --help` needs no imports
COMMANDS: dict[str, tuple[str, str, str]] = {
    "node": ("healthcheck.cli.node", "node", "Check nodes: this one (--local) or named ones over SSH."),
    "sweep": ("healthcheck.cli.sweep", "sweep",
              "Check many nodes (hostlist, hostfile, partition); fleet findings; --act."),
    "checks": ("healthcheck.cli.checks", "checks", "The catalogue of checks and finding IDs."),
    "config": ("healthcheck.cli.config", "config", "Validate the configuration; show a node's limits."),
    "parse": ("healthcheck.cli.parse", "parse", "Parse a captured tool output and print its facts."),
    "prologue": ("healthcheck.cli.hooks", "prologue", "Slurm Prolog: quick checks before a job; drain on FAIL."),
    "epilogue": ("healthcheck.cli.hooks", "epilogue", "Slurm Epilog: what the job left behind; drain on FAIL."),
    "health": ("healthcheck.cli.hooks", "health", "HealthCheckProgram/cron: check, drain on FAIL, resume when fixed."),
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


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, attr, _ = COMMANDS[name]
        return getattr(importlib.import_module(module), attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][2]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[CompletionItem]:
        """Subcommand names (with their help) from COMMANDS, then the group's options.

        click's own Group.shell_complete looks every subcommand up for its help line, which
        here imports all of them (torch's checks included) on each TAB.
        """

        from click.shell_completion import CompletionItem  # noqa: PLC0415 -- on TAB only; not for hc --help

        items = [CompletionItem(name, help=COMMANDS[name][2]) for name in self.list_commands(ctx)
                 if name.startswith(incomplete)]
        return items + click.Command.shell_complete(self, ctx, incomplete)


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


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return

    click.echo("\n".join(importlib.import_module(VERSIONS_MODULE).version_lines(__version__)))
    ctx.exit()


@click.group(cls=LazyGroup, epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show hc's version and the Python, torch, NCCL and NVIDIA driver versions it sees, and exit.")
def cli() -> None:
    """hc: find broken GPU cluster nodes before jobs do, and take them out safely."""


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
    click.echo("hc: error: standard output is closed: nothing was run (redirect it to a file or /dev/null)",
               err=True)
    return True


# click 8.2+ raises this (a UsageError) for a group invoked alone; older click prints the
# help and exits 0 by itself, and an empty tuple catches nothing
_NO_ARGS_IS_HELP: Any = getattr(click.exceptions, "NoArgsIsHelpError", ())


def main(argv: list[str] | None = None) -> None:
    if _command_name(argv) in _STOPPABLE:
        importlib.import_module(STOP_MODULE).install()  # before anything is started
    if _stdout_closed() and _closed_stdout(argv):
        sys.exit(int(ExitCode.BAD_INPUT))
    _guard_stdout(tolerant=_command_name(argv) in _HOOKS)
    code: Any
    try:
        code = cli.main(args=argv, prog_name="hc", standalone_mode=False)
        sys.stdout.flush()  # inside the guarded section: a full stdout is reported here
    except _NO_ARGS_IS_HELP as exc:
        # `hc`, `hc report`, `hc config` alone: the help the operator asked for, not an error
        click.echo(exc.ctx.get_help() if exc.ctx is not None else exc.format_message())
        code = _flushed(ExitCode.OK)
    except click.exceptions.UsageError as exc:
        if exc.ctx is not None:
            click.echo(exc.ctx.get_usage(), err=True)
        click.echo(f"hc: error: {exc.format_message()}", err=True)
        code = ExitCode.BAD_INPUT
    except click.ClickException as exc:
        click.echo(f"hc: error: {exc.format_message()}", err=True)
        code = ExitCode.BAD_INPUT
    except click.exceptions.Abort:  # click's word for a KeyboardInterrupt (a stop included)
        code = _interrupted()
    except StdoutError as exc:
        click.echo(f"hc: error: {exc}", err=True)
        code = ExitCode.BAD_INPUT
    except HcError as exc:
        click.echo(f"hc: error: {exc}", err=True)
        code = exc.exit_code
    except KeyboardInterrupt:
        code = _interrupted()
    except Exception as exc:  # never a traceback for the operator unless asked
        if os.environ.get("HC_DEBUG") == "1":
            raise
        click.echo(f"hc: internal error: {type(exc).__name__}: {exc} (HC_DEBUG=1 shows the traceback)", err=True)
        code = ExitCode.ERROR
    stopping = _stop_module()
    if stopping is not None and stopping.stopping():  # a stop whose exception never reached here
        _exit_stopped()                                # (swallowed, or in a finalizer)
    sys.exit(int(code) if isinstance(code, int) else 0)


def _interrupted() -> int:
    """Ctrl-C, or a stop signal: where hc handles them (_STOPPABLE), the stop's cleanup is
    waited for and hc exits 128 + the signal at once; else "interrupted", 130."""
    stop = _stop_module()
    if stop is not None and stop.installed():
        _exit_stopped()
    click.echo("hc: interrupted", err=True)
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


def _flushed(code: int) -> int:
    """`code`, or 4 when what was just printed cannot reach stdout."""
    try:
        sys.stdout.flush()
    except StdoutError as exc:
        click.echo(f"hc: error: {exc}", err=True)
        return 4
    return code
