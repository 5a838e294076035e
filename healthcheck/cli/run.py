"""`hc run [OPTIONS] -- CMD [ARGS...]`: set the debug variables, check every rank, then exec CMD.

The command replaces hc in the same process (os.execvpe): its argv, pid and exit code are
the job's own. Everything hc says goes to stderr; stdout is the job's.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click

from healthcheck.bandwidth.torch_sweep import SweepError
from healthcheck.cli.params import number
from healthcheck.core.errors import HcError, UsageError
from healthcheck.jobwrap import envset, launcher, straggler, tee
from healthcheck.jobwrap import preflight as pf
from healthcheck.jobwrap.envset import DEFAULT_SUBSYS, Who
from healthcheck.jobwrap.tee import HOW
from healthcheck.parsers import run_output

if TYPE_CHECKING:  # the preflight itself is imported where it runs: `hc run --help` stays fast
    from healthcheck.jobwrap.preflight import Problem

EPILOG = """\b
Inside a job script, around each rank or around the launcher:
  srun hc run -- python train.py --lr 3e-4
  mpirun -np 16 hc run -- python train.py
  torchrun --nproc-per-node 8 -m healthcheck run -- python train.py
  hc run -- torchrun --nproc-per-node 8 train.py
  srun --ntasks-per-node 1 hc run -- torchrun --nnodes 4 ... train.py

\b
Sets, unless already set: NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS (--nccl-subsys),
NCCL_DEBUG_FILE=<log dir>/nccl.%h.%p.log, the Flight Recorder
(TORCH_FR_BUFFER_SIZE=2000, TORCH_NCCL_DUMP_ON_TIMEOUT=1,
TORCH_FR_DUMP_TEMP_FILE=<log dir>/fr/nccl_trace_rank_; for torch < 2.8
TORCH_NCCL_TRACE_BUFFER_SIZE and TORCH_NCCL_DEBUG_INFO_TEMP_FILE instead,
never both: torch >= 2.8 warns on every rank about the old names) and, with
--debug-desync, TORCH_DISTRIBUTED_DEBUG=DETAIL and TORCH_NCCL_DESYNC_DEBUG=1.
A variable with two names is set only when neither name is. Each rank writes
<log dir>/hc-run.rank<R>.<host>.<pid>.json: what it set, its rank, local
rank, world size, host, pid (NCCL's %p: the command keeps hc's pid) and the
command; and <log dir>/hc-run.rank<R>.<host>.<pid>.log: its stdout and
stderr, each line with its time, and how it exited (--no-tee: not kept; the
console sees the output as before).

\b
Around a launcher hc is not a rank. Around torchrun it starts each rank
through hc run (PYTHON_EXEC points at a script in the log directory; the
rank's command sees PYTHON_EXEC as it was), so every rank is recorded as
torchrun numbered it; torchrun's own output is kept as
hc-run.launcher.<host>.<pid>.log. Around mpirun or srun (or torchrun
--no-python) the ranks are not recorded: hc says so and how to (hc run
inside the launcher); the launcher's output is kept.
Log dir: --log-dir, else $HC_RUN_LOG_DIR, else $SLURM_SUBMIT_DIR/hc-job-<jobid>,
else <tmp>/hc-run-<uid>/<job>: the job named alike on every rank by
TORCHELASTIC_RUN_ID, PMIX_NAMESPACE (mpirun), or MASTER_ADDR-MASTER_PORT; where
nothing names it (or the ranks span nodes' temp dirs) rank 0 says so.

\b
Preflight (every rank, --no-preflight skips it): the launcher's variables
(RANK < WORLD_SIZE, LOCAL_RANK < LOCAL_WORLD_SIZE, MASTER_ADDR/PORT, Slurm
or Open MPI agreeing), CUDA_VISIBLE_DEVICES under torchrun (one GPU for
several local ranks), MASTER_PORT already in use (rank 0, on the master's
host), the node's quick tier (local rank 0; its ERROR only warns), a short
all-reduce + barrier naming ranks slower than --straggler-factor x the
median (a warning: the job runs). Rank 0 prints the NCCL/TORCH variables in
effect and the command that diagnoses the job if it fails or hangs
(hc diagnose logs <log dir>), and says it again once rank 0 (or the launcher
hc runs) has exited other than 0. Around a launcher: its variables and the
node's quick tier only (the ranks check the rest).

\b
Exit codes (before the command starts; afterwards they are the command's):
  2    preflight FAIL on this or another rank (one line names it)
  3    the straggler test could not complete (rendezvous or collective
       failed or timed out after --straggler-timeout)
  4    usage error, or the log directory cannot be created
  126  the command cannot be executed; 127: it was not found

\b
HC_RUN_TEST_DELAY_RANK=N (tests only): rank N sleeps HC_RUN_TEST_DELAY_S
(0.3) in each step of the straggler test."""


def _say(line: str) -> None:
    click.echo(f"hc run: {line}", err=True)


def _log_dir(explicit: Path | None, env: dict[str, str]) -> Path:
    if explicit is not None:
        return envset.make_log_dir(explicit)
    chosen = envset.default_log_dir(env)
    try:
        return envset.make_log_dir(chosen)
    except envset.UsageError as exc:
        job = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID") or ""
        if not job:
            raise
        fallback = Path(tempfile.gettempdir()) / f"hc-run-{os.getuid()}" / envset.safe_key(f"job-{job}")
        _say(f"warning: {exc}; logging to {fallback} on each node instead")
        return envset.make_log_dir(fallback)


def _log_dir_option(ctx: click.Context, param: click.Parameter, value: str | None) -> Path | None:
    """--log-dir as a Path; an empty one is refused (exit 4): Path('') is '.', and the job's
    NCCL files and manifests would land in whatever directory it was started from."""
    if value is None:
        return None
    if not value.strip():
        raise click.BadParameter("is empty: name the directory for the logs (or leave the option out for the "
                                 "default)")
    return Path(value)


def _rank_label(rank: int | None, world: int | None) -> str:
    return f"rank {rank}: " if rank not in (None, 0) and (world or 0) > 1 else ""


@dataclass(frozen=True)
class RunOptions:
    """What `hc run` was asked to do besides the command (passed on to the ranks torchrun starts)."""

    nccl_debug: str
    nccl_subsys: str
    debug_desync: bool
    preflight: bool
    node_check: bool
    node_timeout: float
    straggler_test: bool
    straggler_timeout: float
    straggler_factor: float
    straggler_backend: str
    tee: bool
    inner: bool

    def for_ranks(self, log_dir: Path) -> list[str]:
        """`hc run` options for each rank under a launcher hc wraps (its node check is done already)."""
        argv = ["run", "--inner", "--log-dir", str(log_dir), "--no-node-check", "--nccl-debug", self.nccl_debug,
                "--nccl-subsys", self.nccl_subsys, "--straggler-timeout", f"{self.straggler_timeout:g}",
                "--straggler-factor", f"{self.straggler_factor:g}", "--straggler-backend", self.straggler_backend]
        for flag, on in (("--debug-desync", self.debug_desync), ("--no-preflight", not self.preflight),
                         ("--no-straggler-test", not self.straggler_test), ("--no-tee", not self.tee)):
            if on:
                argv.append(flag)
        return argv


@click.command(epilog=EPILOG, context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.option("--log-dir", type=click.Path(file_okay=False), envvar="HC_RUN_LOG_DIR", callback=_log_dir_option,
              help="Where NCCL debug files, Flight Recorder dumps, manifests and output go [env HC_RUN_LOG_DIR].")
@click.option("--nccl-debug", type=click.Choice(["INFO", "WARN"], case_sensitive=False), default="INFO",
              show_default=True, help="NCCL_DEBUG, unless set: WARN keeps only the warnings.")
@click.option("--nccl-subsys", default=DEFAULT_SUBSYS, show_default=True, metavar="LIST",
              help="NCCL_DEBUG_SUBSYS, unless set. Add COLL for one line per collective per rank (very verbose).")
@click.option("--debug-desync", is_flag=True,
              help="Also TORCH_DISTRIBUTED_DEBUG=DETAIL and TORCH_NCCL_DESYNC_DEBUG=1 (slower collectives).")
@click.option("--preflight/--no-preflight", default=True, show_default=True, help="Check before the job starts.")
@click.option("--node-check/--no-node-check", default=True, show_default=True,
              help="Run this node's quick tier (local rank 0).")
@click.option("--node-timeout", type=number(1, 600), default=60.0, show_default=True,
              help="Seconds the quick tier may take (past it: a warning).")
@click.option("--straggler-test/--no-straggler-test", default=True, show_default=True,
              help="The all-reduce + barrier across every rank.")
@click.option("--straggler-timeout", type=number(1, 3600), default=120.0, show_default=True,
              help="Seconds for its rendezvous and each collective.")
@click.option("--straggler-factor", type=number(1.1, 1000), default=3.0, show_default=True,
              help="A rank whose step takes this many times the median is named.")
@click.option("--straggler-backend", type=click.Choice(["auto", "nccl", "gloo"]), default="auto", show_default=True,
              help="auto: NCCL where there is a GPU, else gloo.")
@click.option("--tee/--no-tee", default=True, show_default=True,
              help="Keep each rank's stdout and stderr, with times, in the log directory (the console sees them "
                   "as before).")
@click.option("--inner", is_flag=True, hidden=True)  # a rank torchrun started through hc's PYTHON_EXEC
@click.option("--python-exec-was", default=None, hidden=True)  # the user's PYTHON_EXEC, for the rank's command
def run(command: tuple[str, ...], log_dir: Path | None, nccl_debug: str, nccl_subsys: str, debug_desync: bool,
        preflight: bool, node_check: bool, node_timeout: float, straggler_test: bool, straggler_timeout: float,
        straggler_factor: float, straggler_backend: str, tee: bool, inner: bool, python_exec_was: str | None) -> int:
    """Run CMD with NCCL/torch debugging on and a preflight on every rank (exec: CMD's exit code is the job's)."""

    env = dict(os.environ)
    if "/" not in command[0] and shutil.which(command[0], path=env.get("PATH", os.defpath)) is None:
        click.echo(f"hc: error: {command[0]}: command not found", err=True)  # before any rank waits on it
        return 127
    if inner:  # torchrun ran this through hc's PYTHON_EXEC: the rank's own command sees the user's
        env.pop("PYTHON_EXEC", None)
        if python_exec_was is not None:
            env["PYTHON_EXEC"] = python_exec_was
    opts = RunOptions(nccl_debug=nccl_debug.upper(), nccl_subsys=nccl_subsys.strip(), debug_desync=debug_desync,
                      preflight=preflight, node_check=node_check, node_timeout=node_timeout,
                      straggler_test=straggler_test, straggler_timeout=straggler_timeout,
                      straggler_factor=straggler_factor, straggler_backend=straggler_backend, tee=tee, inner=inner)
    directory = _log_dir(log_dir, env)
    kind = None if inner else launcher.launcher_of(command)
    if kind is not None:
        return _around_launcher(command, kind, env, directory, opts)
    if log_dir is None:
        _say_where_ranks_log(env, directory)
    return _as_rank(command, env, directory, opts)


def _say_where_ranks_log(env: dict[str, str], directory: Path) -> None:
    """Rank 0 says where the default log directory leaves ranks out of `hc diagnose logs DIR`:
    nothing the ranks share names the job (each logs in a directory of its own), or the
    directory is in each node's temp dir and the ranks are on several nodes."""

    info = envset.who(env)
    world = info.world_size or 1
    if info.rank not in (0, None) or world == 1 or env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID"):
        return
    same = "give every rank the same --log-dir (or HC_RUN_LOG_DIR)"
    if envset.job_key(env) is None:
        _say(f"warning: no variable names this job to all its {world} ranks (SLURM_JOB_ID, TORCHELASTIC_RUN_ID, "
             f"PMIX_NAMESPACE, MASTER_ADDR/MASTER_PORT): each rank logs in a directory of its own, this one's "
             f"in {directory}; to have them in one: {same}")
    elif (info.local_world_size or world) < world and directory.is_relative_to(tempfile.gettempdir()):
        _say(f"warning: {directory} is on each node (the temp dir) and the {world} ranks are on several: "
             f"hc diagnose logs reads one node's; to have them in one place: {same} on a shared file system")


_TEES: list[int] = []  # the tee this hc run started: told to say nothing if hc exits without exec


def _tee(path: Path, info: Who | None, kind: str, label: str, after_failure: str = "") -> Path | None:
    """Send this process's stdout/stderr (the command's, after exec) through the tee into `path`;
    `after_failure`: the line the tee says once the command has failed."""

    host, pid = socket.gethostname(), os.getpid()
    head = run_output.header(rank=info.rank if info else None, world=info.world_size if info else None,
                             local_rank=info.local_rank if info else None, host=host, pid=pid, launcher=kind)
    try:
        _TEES.append(tee.start(path, head, after_failure=after_failure))
    except tee.TeeError as exc:  # bookkeeping: the job still runs, its output as it was
        _say(f"warning: {label}output not kept: {exc}")
        return None
    return path


def _no_command(func: Callable[[], int]) -> int:
    """Run up to the exec: where hc exits itself (a preflight FAIL, a command it cannot start),
    the tee must not say that the command failed."""

    try:
        code = func()
    except BaseException:
        tee.quiet(_TEES)
        raise
    tee.quiet(_TEES)  # exec returned: the command never started
    return code


def _after_failure(who: str, directory: Path) -> str:
    return f"hc run: {who} {HOW}: hc diagnose logs {directory}"


def _as_rank(command: tuple[str, ...], env: dict[str, str], directory: Path, opts: RunOptions) -> int:
    """One rank (or a one-process job): its variables, output, manifest and preflight, then exec."""

    info = envset.who(env)
    label = _rank_label(info.rank, info.world_size)
    host, pid = socket.gethostname(), os.getpid()
    env_set = envset.debug_env(env, directory, nccl_debug=opts.nccl_debug, subsys=opts.nccl_subsys,
                               desync=opts.debug_desync, release=envset.torch_release())
    env_kept = envset.kept_env(env, desync=opts.debug_desync)
    env.update(env_set)
    lead = info.rank in (0, None)
    who = "the command" if (info.world_size or 1) == 1 else f"rank {info.rank}"
    after = _after_failure(who, directory) if lead and not opts.inner else ""
    output = (_tee(envset.output_path(directory, info, host, pid), info, info.launcher, label, after)
              if opts.tee else None)
    try:
        envset.write_manifest(directory, info, command, env, env_set, env_kept, output=output)
    except HcError as exc:  # bookkeeping: the job still runs
        _say(f"warning: {label}no manifest: {exc}")
    if lead:
        if not opts.inner:
            _say(f"logs in {directory}")
        _say(f"env: {envset.shown_env(env)}")
    return _no_command(lambda: _preflight_and_exec(command, env, info, label, opts, directory, lead))


def _preflight_and_exec(command: tuple[str, ...], env: dict[str, str], info: Who, label: str, opts: RunOptions,
                        directory: Path, lead: bool) -> int:
    if opts.preflight:
        _preflight(env, info, label, opts)
    if lead and not opts.inner:
        _say(_next_step(directory, env))
    return exec_command(command, env)


def _around_launcher(command: tuple[str, ...], kind: str, env: dict[str, str], directory: Path,
                     opts: RunOptions) -> int:
    """hc around torchrun, mpirun or srun: not a rank. Its output is kept; torchrun's ranks are
    wrapped through PYTHON_EXEC; the others' ranks are not recorded, and hc says so."""

    info = envset.who(env)  # this process's own place: an srun task per node, or nothing
    lead = info.rank in (0, None)
    label = "" if lead else f"task {info.rank}: "
    host, pid = socket.gethostname(), os.getpid()
    if opts.tee:
        after = _after_failure(kind, directory) if lead else ""
        _tee(envset.output_path(directory, None, host, pid), None, kind, label, after)
    why = _delegate(command, env, directory, opts) if kind == "torchrun" else "it starts the ranks itself"
    if why is not None:  # the ranks inherit the variables; who they are stays unknown
        env.update(envset.debug_env(env, directory, nccl_debug=opts.nccl_debug, subsys=opts.nccl_subsys,
                                    desync=opts.debug_desync, release=envset.torch_release()))
    if lead:
        _say(f"logs in {directory}")
        if why is None:
            _say("ranks: each rank torchrun starts runs under hc run (PYTHON_EXEC): its manifest and output "
                 "are kept per rank")
        else:
            _say(f"warning: {kind}: ranks not recorded ({why}); to record them, run hc inside it: "
                 f"{_INSIDE[kind]}")
            _say(f"env: {envset.shown_env(env)}")

    def preflight_and_exec() -> int:
        if opts.preflight:
            _launcher_preflight(env, info, label, opts)
        if lead:
            _say(_next_step(directory, env))
        return exec_command(command, env)

    return _no_command(preflight_and_exec)


_INSIDE = {"torchrun": "torchrun ... -m healthcheck run -- python train.py",
           "mpirun": "mpirun ... hc run -- python train.py", "srun": "srun ... hc run -- python train.py"}


def _delegate(command: tuple[str, ...], env: dict[str, str], directory: Path, opts: RunOptions) -> str | None:
    """Point torchrun's PYTHON_EXEC at hc's shim; None when done, else why not."""

    why = launcher.why_not_delegated(command, env)
    if why is not None:
        return why
    python = launcher.torchrun_python(command, env)
    if python is None:
        return "cannot tell which Python torchrun starts the ranks with"
    argv = opts.for_ranks(directory)
    if "PYTHON_EXEC" in env:
        argv += ["--python-exec-was", env["PYTHON_EXEC"]]
    try:
        shim = launcher.write_shim(directory, socket.gethostname(), os.getpid(), argv, python)
    except HcError as exc:
        return str(exc)
    env["PYTHON_EXEC"] = str(shim)
    return None


def _next_step(directory: Path, env: dict[str, str]) -> str:
    job = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    live = f"; while it runs: hc diagnose job {job}" if job else ""
    return f"if this job fails or hangs: hc diagnose logs {directory}{live}"


def _say_warnings(problems: list[Problem], label: str) -> None:
    """The preflight's WARN problems, a line each (they never stop the job)."""
    for p in problems:
        if p.status == "WARN":
            _say(f"warning: preflight: {label}{p.message}")


def _launcher_preflight(env: dict[str, str], info: Who, label: str, opts: RunOptions) -> None:
    """Around a launcher: its own variables and the node's quick tier (once per node); the
    ranks' checks and straggler test are theirs to run (inside, where hc wraps them)."""

    problems = pf.check_launcher_env(env)
    if opts.node_check and info.local_rank in (0, None):
        found = pf.quick_tier(env, opts.node_timeout)
        if found is not None:
            problems.append(found)
    _say_warnings(problems, label)
    failed = [p for p in problems if p.status == "FAIL"]
    if failed:
        raise pf.PreflightFail(f"preflight: {label}{failed[0].message}")


def _preflight(env: dict[str, str], info: Who, label: str, opts: RunOptions) -> None:
    launcher = pf.check_launcher_env(env)
    _say_warnings(launcher, label)
    bad = [p for p in launcher if p.status == "FAIL"]
    if bad:  # no rendezvous is possible with these: stop now
        more = f" (+{len(bad) - 1} more)" if len(bad) > 1 else ""
        raise pf.PreflightFail(f"preflight: {label}{bad[0].message}{more}")
    problems = pf.check_cuda_mapping(env, pf.node_has_nvidia_gpus())
    if info.rank in (0, None):  # the process that will listen on MASTER_PORT
        port_problems, _ = pf.check_master_port(env)
        problems += port_problems
    if opts.node_check and (info.local_rank in (0, None)):
        found = pf.quick_tier(env, opts.node_timeout)
        if found is not None:
            problems.append(found)
    _say_warnings(problems, label)
    failed = [p for p in problems if p.status == "FAIL"]
    verdict = ("FAIL", failed[0].message) if failed else ("PASS", "")
    if opts.straggler_test and (info.world_size or 1) > 1:
        _straggler(env, info, label, verdict, opts.straggler_timeout, opts.straggler_factor, opts.straggler_backend)
    if failed:
        raise pf.PreflightFail(f"preflight: {label}{failed[0].message}")


def _straggler(env: dict[str, str], info: Who, label: str, verdict: tuple[str, str], timeout_s: float, factor: float,
               backend: str) -> None:

    opts = straggler.StragglerOptions(timeout_s=timeout_s, factor=factor, backend=backend)
    try:
        result = straggler.run(env, verdict, opts)
    except (SweepError, UsageError) as exc:  # no torch, no backend, no rendezvous address
        _say(f"warning: preflight: {label}straggler test not run: {exc}")
        return
    if result is None:
        return
    if result.stragglers:
        if result.rank == 0 or result.rank in result.stragglers:
            _say(f"warning: preflight: {label}{result.summary()}")
    elif result.rank == 0:
        _say(f"preflight: {result.summary()}")


def exec_command(command: tuple[str, ...], env: dict[str, str]) -> int:
    """Replace this process with the command; returns only when it cannot start (126, 127)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    # Python ignores SIGPIPE and SIGXFSZ; an exec'd program would inherit that
    for name in ("SIGPIPE", "SIGXFSZ"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
    try:
        os.execvpe(command[0], list(command), env)
    except FileNotFoundError:
        click.echo(f"hc: error: {command[0]}: command not found", err=True)
        return 127
    except OSError as exc:
        click.echo(f"hc: error: {command[0]}: cannot execute: {exc.strerror or exc}", err=True)
        return 126
    return 126  # not reached: execvpe returns only by raising
