"""Helpers shared by the tests: fixture paths and running the real `hc` command."""

from __future__ import annotations

import atexit
import contextlib
import functools
import io
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
import warnings
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from click import formatting as click_formatting
from click.testing import CliRunner

import healthcheck.cli as hc_cli
from healthcheck.runners import local as local_runner
from healthcheck.runners import stop

FIXTURES = Path(__file__).parent / "fixtures"
CORPUS = FIXTURES / "corpus"
REPO = Path(__file__).resolve().parents[1]


def torch_installed() -> bool:
    """torch, with its distributed package, is installed here; found, not imported: a module
    that imports torch (or starts a Python to try) to decide a skip costs every xdist worker
    ~2 s of CPU while it collects, and no test starts before every worker has collected. The
    tests that need torch start it in processes of their own."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    return spec is not None and spec.origin is not None and (Path(spec.origin).parent / "distributed").is_dir()


def corpus_files(folder: str) -> list[Path]:
    return sorted((CORPUS / folder).glob("*.txt"))


def best_time(fn: Callable[[Any], Any], arg: Any, runs: int = 3, enough: float = 0.0) -> float:
    """The fastest of `runs` calls of fn(arg), in seconds of this process's CPU time, a
    ParseError counting as done; the collector is paused during each call, so a cycle
    collection that happens to land in one measurement does not count against the parser.
    CPU time, not the wall clock: on a shared machine (CI's workers on two cores) the wall
    clock also counts the time other processes held the CPU, which stretched one measurement
    and not the other. A call faster than `enough` ends it early: a caller asking "was any
    call under this?" has its answer."""
    import gc
    import time

    from healthcheck.core.errors import ParseError

    took = []
    # what was alive before (in a whole suite's worker: every collected test, ~1 s of a full
    # collection) is set aside, so each collection below costs what the runs left, not that
    gc.freeze()
    try:
        for _ in range(runs):
            gc.collect()
            gc.disable()
            start = time.process_time()
            try:
                fn(arg)
            except ParseError:
                pass
            finally:
                took.append(time.process_time() - start)
                gc.enable()
            if took[-1] < enough:
                break
    finally:
        gc.unfreeze()
    return min(took)


def assert_linear(fn: Callable[[Any], Any], small: Any, large: Any, *, slack: float = 0.2,
                  what: object = None, attempts: int = 3) -> None:
    """Assert that fn costs about linear time, `large` being 10x `small`: linear is ~10x the
    time, quadratic ~100x, and the bound is 25x (plus `slack` seconds for tiny inputs). No
    absolute time is asserted. The times are CPU times (best_time), which other processes on
    the machine do not stretch; the ratio still moves with caches and frequency (CI once saw a
    linear parser take 28x in one wall-clock measurement), so a failed comparison is measured
    again, the small input with it: only a ratio over the bound in every attempt fails."""
    seen = []
    for _ in range(attempts):
        t_small = best_time(fn, small, 3)
        bound = 25 * t_small + slack
        # the second call of the large input only where the first was over the bound: the
        # verdict is the one min() over both gives, at half the cost when it passes
        t_large = best_time(fn, large, 2, enough=bound)
        if t_large < bound:
            return
        seen.append((round(t_small, 4), round(t_large, 4)))
    label = f" ({what!r})" if what is not None else ""
    raise AssertionError(f"not linear{label}: seconds for the 1x and 10x inputs, each attempt: {seen}")


@functools.cache
def fixture_texts() -> tuple[tuple[str, str], ...]:
    """(path under tests/fixtures, text) of every text fixture up to 4 MiB, in path order:
    what the parsers' differential tests read both ways (binary files and empty ones left out).
    Read once per process: four differentials in one worker read the same ~3,000 files."""
    from healthcheck.diagnose.sources import _is_binary  # the test of binary hc diagnose uses

    out = []
    for path in sorted(p for p in FIXTURES.rglob("*") if p.is_file()):
        data = path.read_bytes()
        if len(data) <= 4 * 2**20 and data.strip() and not _is_binary(data):
            out.append((str(path.relative_to(FIXTURES)), data.decode("utf-8", errors="replace")))
    return tuple(out)


def lean_hook_env(tmp_path: Path, fabric: str) -> dict[str, str]:
    """The environment of a dry-run prologue on node1, job 7, with its own config (the fabric
    `t` from `fabric`'s YAML), state, audit log, reports and cache under tmp_path, no history,
    no syslog: what the lean-run tests start `hc` with."""
    (tmp_path / "fabrics").mkdir(exist_ok=True)
    (tmp_path / "fabrics" / "t.yaml").write_text(fabric)
    cfg = tmp_path / "hc.yaml"
    cfg.write_text(f"default_fabric: t\nslurm:\n  state_dir: {tmp_path}/state\n  audit_log: {tmp_path}/audit.jsonl\n"
                   f"  report_dir: {tmp_path}/reports\nhistory: {{path: null}}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HC_", "SLURM"))}
    env.update({"HC_CONFIG": str(cfg), "HC_NODE_NAME": "node1", "SLURM_JOB_ID": "7", "HC_DRY_RUN": "1",
                "HC_SYSLOG_SOCKET": "", "HC_CACHE_DIR": str(tmp_path / "cache")})
    return env


def run_hc(*args: str, env: dict[str, str] | None = None, input: str | bytes | None = None,
           timeout: float = 60, cwd: str | None = None) -> subprocess.CompletedProcess:
    """Run the real `hc` entry point in a subprocess, as an operator would."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("HC_", "SLURM"))}
    # a crash in C code (a signal, not an exit) leaves its Python stack on stderr
    full_env["PYTHONFAULTHANDLER"] = "1"
    full_env.update(env or {})
    data = input.encode() if isinstance(input, str) else input
    r = subprocess.run(
        [sys.executable, "-m", "healthcheck", *args],
        input=data,
        capture_output=True,
        env=full_env,
        timeout=timeout,
        cwd=cwd,
    )
    if r.returncode < 0:  # shown in the failing test's captured output
        print(f"hc {' '.join(args)} died with signal {-r.returncode}; stderr:\n"
              f"{r.stderr.decode(errors='replace')}", file=sys.stderr)
    return r


class InProcessUnsupported(BaseException):
    """hc called os._exit in an in-process run (a hook's deadline or failure, a stop): that
    path ends the process, so its test belongs in a subprocess (`run_hc`). A BaseException, so
    no `except Exception` in hc can swallow it on its way out."""


# the signals whose handlers hc may change (SIGKILL and SIGSTOP have none)
_HANDLED_SIGNALS = tuple(s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP))


def _help_width(environ: dict[str, str | None]) -> int:
    """The width click formats help at in a real `hc` whose stdout is a pipe (run_hc's):
    $COLUMNS where it is a positive number, else shutil's fallback of 80, at most 80, less 2
    (click.formatting.HelpFormatter). CliRunner would force 80 instead."""
    try:
        columns = int(environ.get("COLUMNS") or 0)
    except ValueError:
        columns = 0
    return max(min(columns if columns > 0 else 80, 80) - 2, 50)


class _ProcessState:
    """What an in-process run of hc may change that a real process would take with it when it
    exits: signal handlers, the interval timer and the wakeup fd (the hooks' HookGuard,
    runners.stop), the cwd, the loggers, the warning filters, runners.stop's registry and the
    thread and pipe its install() starts. Taken before a run, put back after it."""

    def __init__(self) -> None:
        self.handlers = {sig: signal.getsignal(sig) for sig in _HANDLED_SIGNALS}
        self.timer = signal.getitimer(signal.ITIMER_REAL)  # pytest-timeout's, where it runs
        self.taken = time.monotonic()
        self.wakeup = signal.set_wakeup_fd(-1)
        signal.set_wakeup_fd(self.wakeup)
        self.cwd = os.getcwd()
        self.threads = set(threading.enumerate())
        self.loggers = {name: (lg.handlers[:], lg.level, lg.propagate, lg.disabled)
                        for name, lg in [("", logging.getLogger()), *logging.Logger.manager.loggerDict.items()]
                        if isinstance(lg, logging.Logger)}
        self.warning_filters = warnings.filters[:]
        # atexit.register during the run, recorded: atexit._ncallbacks() was seen to move in
        # runs that registered nothing, so the count cannot tell
        self.atexit_register, self.at_exit = atexit.register, []

        def recording_register(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
            self.at_exit.append(fn)
            return self.atexit_register(fn, *args, **kwargs)

        atexit.register = recording_register  # type: ignore[assignment]
        self.stop_deferral = local_runner.stop_deferral

    def restore(self) -> list[str]:
        """Put everything back; what could not be (threads still running): the problems."""
        left, interval = self.timer
        if left > 0:  # the time the call took counts against the runner's timer as it would have
            left = max(left - (time.monotonic() - self.taken), 1e-3)
        signal.setitimer(signal.ITIMER_REAL, left, interval)
        wakeup = signal.set_wakeup_fd(self.wakeup)
        for sig, handler in self.handlers.items():
            if handler is not None and signal.getsignal(sig) is not handler:
                signal.signal(sig, handler)
        if stop.installed():  # hc node / hc sweep: runners.stop as it was before install()
            _uninstall_stop(wakeup if wakeup != self.wakeup else -1)
        local_runner.stop_deferral = self.stop_deferral
        os.chdir(self.cwd)
        for name, (handlers, level, propagate, disabled) in self.loggers.items():
            lg = logging.getLogger(name or None)
            lg.handlers[:], lg.level, lg.propagate, lg.disabled = handlers, level, propagate, disabled
        warnings.filters[:] = self.warning_filters
        problems = []
        atexit.register = self.atexit_register  # type: ignore[assignment]
        # weakref.finalize registers its class's exit hook once per process, at its first use,
        # and a standard library module its own at its first import (multiprocessing.util's
        # _exit_function): neither is hc's, and which test imports the module first is chance
        problems.extend(f"hc registered atexit function {fn!r} (it would run when the test worker exits)"
                        for fn in self.at_exit if fn != weakref.finalize._exitfunc and not _stdlib_own(fn))
        deadline = time.monotonic() + 5
        for thread in set(threading.enumerate()) - self.threads:
            # a real hc's exit ends its daemon threads; here each must end by itself
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                problems.append(f"hc left thread {thread.name!r} running")
        return problems


def _stdlib_own(fn: Callable[..., Any]) -> bool:
    """An exit hook a standard library module registers for itself (at its import)."""
    return str(getattr(fn, "__module__", "")).split(".")[0] in sys.stdlib_module_names


@contextlib.contextmanager
def process_state_restored() -> Iterator[list[str]]:
    """For a test that calls hc's main() in this process itself (not through run_hc_inproc):
    what the call changed (signal handlers, the wakeup fd, runners.stop's install, ...) is put
    back after the block, and what could not be is appended to the list it yields."""
    problems: list[str] = []
    state = _ProcessState()
    try:
        yield problems
    finally:
        problems.extend(state.restore())


def _uninstall_stop(wakeup_fd: int) -> None:
    """runners.stop as a fresh process has it: the `hc-stop` relay thread ends on its pipe's
    end (its write end was the wakeup fd), the registry and the flags start over. The
    os.register_at_fork hook stays (it only touches a forked child's copy)."""
    if wakeup_fd >= 0:
        os.close(wakeup_fd)
    with stop._lock:
        stop._cleanups.clear()
    stop._installed = False
    stop._stopping = stop._received = stop._pending = None
    stop._raised = stop._said = False
    stop._defer_depth = 0
    stop._notes.clear()
    stop._done = threading.Event()


def run_hc_inproc(*args: str, env: dict[str, str] | None = None, input: str | bytes | None = None,
                  timeout: float = 60, cwd: str | os.PathLike[str] | None = None,
                  whole_env: bool = False) -> subprocess.CompletedProcess:
    """`run_hc` in this process: the same entry (healthcheck.cli.main, what `python -m
    healthcheck` runs), the same environment rules, the same CompletedProcess (returncode,
    stdout and stderr bytes), ~100x cheaper. The differences, each on purpose:

    - an exception that escapes main() (HC_DEBUG=1), or one main() turns into "hc: internal
      error", fails the calling test with its traceback instead of passing as an exit code;
    - a path that calls os._exit (a hook's deadline or failure, a stop) raises
      InProcessUnsupported: such tests stay in a subprocess;
    - stdin is empty, never a terminal, where `input` is None (run_hc's child inherits the
      runner's); `timeout` is not enforced (pytest's own per-test timeout is);
    - what a process hc starts writes to its inherited descriptors 1 and 2 is not in the
      result (this process's fds are not the captured streams): such tests stay in a subprocess.

    `whole_env`: `env` is the whole environment the run sees (a harness that builds one, as
    the diagnose replays' clean_env does, and passes it to its subprocess as `env=`); what
    os.environ holds beyond it is unset for the call.

    State a real process would take with it (signal handlers and timers, the cwd, loggers,
    warning filters, runners.stop) is put back after each call; a thread hc left running or an
    atexit function it registered fails the test. tests/unit/suite/test_inproc_parity.py holds
    the two runners to the same rc, stdout and stderr.
    """
    del timeout  # see above
    # as run_hc: the runner's HC_* and SLURM* are not hc's; PYTHONFAULTHANDLER for any child
    if whole_env:
        overrides: dict[str, str | None] = {k: None for k in os.environ if k not in (env or {})}
    else:
        overrides = {k: None for k in os.environ if k.startswith(("HC_", "SLURM"))}
        overrides["PYTHONFAULTHANDLER"] = "1"
    overrides.update(env or {})
    seen = {**os.environ, **overrides}
    state = _ProcessState()
    escaped: list[str] = []
    real_exit, real_main, real_lean = os._exit, hc_cli.cli.main, hc_cli.as_click_runs

    def refuse_exit(code: int) -> None:
        raise InProcessUnsupported(f"hc {' '.join(args)} called os._exit({code}): run it with run_hc")

    def recording_main(*a: Any, **kw: Any) -> Any:
        try:
            return real_main(*a, **kw)
        except Exception:
            escaped.append(traceback.format_exc())
            raise

    def recording_lean(run: Any) -> Any:  # the command lines main() runs without click
        return real_lean(lambda: recorded_run(run))

    def recorded_run(run: Any) -> Any:
        try:
            return run()
        except Exception:
            escaped.append(traceback.format_exc())
            raise

    code: int
    runner = CliRunner()
    try:
        with runner.isolation(input=input, env=overrides) as (out, err, _mixed):
            click_formatting.FORCED_WIDTH = _help_width(seen)
            os._exit = refuse_exit  # type: ignore[assignment]
            hc_cli.cli.main = recording_main  # type: ignore[method-assign]
            hc_cli.as_click_runs = recording_lean
            try:
                if cwd is not None:
                    os.chdir(cwd)
                hc_cli.main(list(args))
                code = 0
            except SystemExit as exc:  # as the interpreter exits with it
                code = _exit_status(exc.code)
            finally:
                os._exit = real_exit
                del hc_cli.cli.main  # the class's method again
                hc_cli.as_click_runs = real_lean
                for stream in (sys.stdout, sys.stderr):
                    stream.flush()
            stdout, stderr = out.getvalue(), err.getvalue()
    finally:
        problems = state.restore()
    if b"hc: internal error: " in stderr and escaped:
        raise AssertionError(f"hc {' '.join(args)}: internal error\n{escaped[-1]}")
    if problems:
        raise AssertionError(f"hc {' '.join(args)} in process: " + "; ".join(problems))
    return subprocess.CompletedProcess([sys.executable, "-m", "healthcheck", *args], code, stdout, stderr)


def _exit_status(code: object) -> int:
    """The status a process exits with for sys.exit(code): None 0, an int itself (mod 256, as
    the OS keeps it), anything else printed on stderr and 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def no_hardware_outputs() -> dict[str, tuple[str, str, int]]:
    """The recorded outputs of IB/GPU tools on a machine without the hardware.

    Returns command -> (stdout, stderr, exit code), from fixtures/no-hardware-outputs.txt.
    """
    import re

    out: dict[str, tuple[str, str, int]] = {}
    cmd = None
    stdout: list[str] = []
    stderr: list[str] = []
    code = 0
    for line in (FIXTURES / "no-hardware-outputs.txt").read_text().splitlines():
        m = re.match(r"^### \$ (.*?)\s+\(exit (\d+)\)\s*$", line)
        if m or line.startswith("### "):
            if cmd is not None:
                out[cmd] = ("".join(stdout), "".join(stderr), code)
            cmd, stdout, stderr = (m.group(1), [], []) if m else (None, [], [])
            code = int(m.group(2)) if m else 0
        elif cmd is not None and line.startswith("stdout| "):
            stdout.append(line[8:] + "\n")
        elif cmd is not None and line.startswith("stderr| "):
            stderr.append(line[8:] + "\n")
    if cmd is not None:
        out[cmd] = ("".join(stdout), "".join(stderr), code)
    return out


def make_fake_sysfs_ib(root: Path, specs: list[str], counters: dict[str, dict[str, int]] | None = None) -> Path:
    """A /sys/class/infiniband tree under `root`, laid out as the kernel does (and as the
    rig's fake-ib.sh does). spec: "ca[:state[:phys[:rate[:link_layer[:ca_type[:ports]]]]]]"."""
    states = {"Active": "4: ACTIVE", "Down": "1: DOWN", "Init": "2: INIT", "Armed": "3: ARMED"}
    phys = {"LinkUp": "5: LinkUp", "Disabled": "3: Disabled", "Polling": "2: Polling"}
    base = root / "sys/class/infiniband"
    base.mkdir(parents=True, exist_ok=True)
    for spec in specs:
        parts = (spec.split(":") + [""] * 7)[:7]
        ca, st, ph, rate, layer, ca_type, nports = parts
        d = base / ca
        (d / "ports").mkdir(parents=True, exist_ok=True)
        (d / "hca_type").write_text((ca_type or "MT4129") + "\n")
        (d / "fw_ver").write_text("28.39.1002\n")
        for n in range(1, int(nports or 1) + 1):
            p = d / "ports" / str(n)
            (p / "counters").mkdir(parents=True, exist_ok=True)
            (p / "state").write_text(states.get(st or "Active", st) + "\n")
            (p / "phys_state").write_text(phys.get(ph or "LinkUp", ph) + "\n")
            (p / "rate").write_text(f"{rate or 400} Gb/sec (4X NDR)\n")
            (p / "link_layer").write_text((layer or "InfiniBand") + "\n")
            (p / "lid").write_text(f"0x{16 + n:x}\n")
            for name, value in ((counters or {}).get(f"{ca}/{n}") or {}).items():
                (p / "counters" / name).write_text(f"{value}\n")
            # the counters real mlx5 sysfs (and the rig's fake-ib.sh) has
            for name in ("symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors",
                         "port_rcv_remote_physical_errors", "port_xmit_discards", "local_link_integrity_errors",
                         "excessive_buffer_overrun_errors", "port_xmit_data", "port_rcv_data"):
                if not (p / "counters" / name).exists():
                    (p / "counters" / name).write_text("0\n")
    return base


STOP_SIGNALS = ("SIGINT", "SIGHUP", "SIGTERM")


def default_signals() -> None:
    """A child's stop signals at their defaults before it execs (a Popen preexec_fn): a test
    that sends one must not inherit the runner's dispositions. Started under `nohup` or in a
    shell's background, the suite ignores SIGHUP and SIGINT, every child inherits that, and hc
    rightly keeps a signal ignored at its start ignored (nohup's meaning)."""
    import signal

    for name in STOP_SIGNALS:
        signal.signal(getattr(signal, name), signal.SIG_DFL)


def write_stub(directory: Path, name: str, script: str) -> Path:
    """An executable stand-in for a tool, for PATH-based tests."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)
    return path


def srun_stand_in(tmp_path: Path, script_tail: str = "", dead: str = "none") -> str:
    """A bin dir whose `srun` runs the real `hc` once per node of --nodelist, labelled
    like `srun --label` (the real srun is covered on the rig); `dead`: a node whose task
    never started."""
    bin_dir = tmp_path / "bin"
    # like `srun --label`: run the command once per node of --nodelist, prefix each line
    write_stub(bin_dir, "srun", f"""
nodes=""
while [ $# -gt 0 ]; do
  case "$1" in
    --nodelist=*) nodes="${{1#--nodelist=}}" ;;
    --*) ;;
    *) break ;;
  esac
  shift
done
shift  # the hc command itself
i=0
for n in $({sys.executable} -c 'import sys; from ClusterShell.NodeSet import NodeSet; print(" ".join(NodeSet(sys.argv[1])))' "$nodes"); do
  [ "$n" = "{dead}" ] && continue  # a node whose task never started
  HC_NODE_NAME=$n {sys.executable} -m healthcheck "$@" | sed "s/^/$i: /"
  i=$((i+1))
done
{script_tail}
exit 2
""")
    # the stand-in Slurm's queue is empty: no job a killed hc left (the real squeue, with no
    # controller to ask, would make every sweep warn that it could not look)
    write_stub(bin_dir, "squeue", "exit 0\n")
    return str(bin_dir)


def diagnose_saved(folder: Path) -> Any:
    """`hc diagnose logs FOLDER`'s verdict, in process (a saved job's output)."""
    from healthcheck.diagnose.sources import collect
    from healthcheck.diagnose.verdict import build

    return build(collect([folder]))


def diagnose_paste(tmp_path: Path, text: str) -> Any:
    """The verdict on one pasted text, read from a folder whose name says nothing."""
    job = tmp_path / "job"
    job.mkdir(parents=True)
    (job / "paste.log").write_text(text)
    return diagnose_saved(job)


def named_ranks(verdict: Any) -> list[int]:
    """The ranks a diagnosis verdict names, in its order."""
    return [o.rank for o in verdict.odd_ranks]


def assert_culprits(verdict: Any, cls: str, culprits: list[int], victims: list[int]) -> None:
    """The verdict's class, the culprits it names (exactly, in order), and none of the victims."""
    assert verdict.cls == cls, verdict.summary
    assert named_ranks(verdict) == culprits, verdict.summary
    assert not set(named_ranks(verdict)) & set(victims)


class Tty(io.StringIO):
    """An output stream that says it is a terminal (colour, wrapping, a live progress line)."""

    def isatty(self) -> bool:
        return True


class Pipe(io.StringIO):
    """An output stream that says it is not a terminal (a script's pipe, a captured stderr)."""

    def isatty(self) -> bool:
        return False


def open_mpi_mpirun() -> str:
    """Open MPI's mpirun (the rig tests start its daemons over the rig's sshd); the test is
    skipped where there is none, no orted beside it, or an mpirun of another MPI."""
    import pytest

    mpirun = shutil.which("mpirun")
    if mpirun is None or shutil.which("orted") is None:
        pytest.skip("Open MPI (mpirun, orted) is not installed")
    version = subprocess.run([mpirun, "--version"], capture_output=True, text=True, timeout=20, check=False)
    if "Open MPI" not in version.stdout + version.stderr:
        pytest.skip(f"{mpirun} is not Open MPI's: {(version.stdout + version.stderr).strip()[:100]!r}")
    return mpirun


def free_port() -> int:
    """A TCP port on loopback that nothing listened on a moment ago (the OS picked it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
