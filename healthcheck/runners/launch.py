"""Start one program on many ranks through srun, mpirun or torchrun, and read it back per rank.

A `Launch` is the launcher's argv, the variables its ranks need and how its labelled
output reads; `launch()` runs it and returns a `LaunchResult`: each rank's lines, exit
codes where the launcher says them, and whether it timed out.

- srun (inside an allocation, or asking for one): `--label` prefixes every task line
  with `N: `; the ranks get srun's own environment (`--export=ALL` is Slurm's default),
  so variables are set on the srun process. Failed tasks: `srun: error: NODE: task N:
  Exited with exit code C`.
- mpirun (Open MPI 4.x, hosts or a hostfile): `--tag-output` prefixes every line and
  every chunk with `[job,rank]<stdout>:`; a chunk need not end a line (a rank's print
  may arrive in pieces, the next tag then follows mid-line), so tagged text is joined
  per rank and only then split into lines; untagged lines are mpirun's own.
  Variables are exported with `-x NAME` (values stay out of the argv). The first failed
  rank is named in the `Process name: [[job,1],N]` / `Exit code: C` block.
- torchrun (torch 2.x): `--tee 3` makes it prefix each worker line with `[<role><local
  rank>]:` (without it nothing is prefixed); with one node (`--standalone`) local ranks
  are the ranks. Its failure summary names `rank : N (local_rank: L)` / `exitcode : C`.

The timeout kills every rank: the launcher runs in its own process group; at the
timeout the group and every descendant (found through /proc, since torchrun starts its
workers in sessions of their own) get SIGTERM, which srun forwards to its step and
mpirun to its daemons and ranks, then, after `grace_s`, SIGKILL. The child dies with hc
(PR_SET_PDEATHSIG), is registered with runners.local so `kill_children` reaches it, and
with runners.stop, in the same step as its fork, so a stop signal kills its tree.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from healthcheck.core.launcher_labels import MPIRUN_TAG, SRUN_LABEL, torchrun_role
from healthcheck.runners import local, stop
from healthcheck.runners.proctree import children_by_parent, descendants

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# bounded: a task list, rank or exit code past its bound is no launcher's line (int() of
# 5,000 digits raises, a task range of a billion ids is a billion-item list)
_SRUN_EXIT = re.compile(r"^srun: error: \S{1,256}: tasks? ([\d,\-]{1,4096}): Exited with exit code (\d{1,3})", re.M)
_MPI_EXIT = re.compile(
    r"Process name:[ \t]{0,64}\[\[\d{1,9},\d{1,9}\],(\d{1,9})\][ \t]{0,64}\n"
    r"[ \t]{0,64}Exit code:[ \t]{0,64}(-?\d{1,12})"
)
_TORCH_EXIT = re.compile(
    r"rank[ \t]{0,64}:[ \t]{0,64}(\d{1,9}) \(local_rank: \d{1,9}\)[ \t]{0,64}\n[ \t]{0,64}exitcode[ \t]{0,64}:"
    r"[ \t]{0,64}(-?\d{1,12})"
)
_TASKS_MAX = 65_536  # task ids read from one srun error line
_TAIL = 4000

Ranks = dict[int, list[str]]


@dataclass(frozen=True)
class Launch:
    """A launcher command line, the variables for its ranks and how its output is labelled."""

    kind: str  # srun | mpirun | torchrun
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)  # set on the launcher, which hands them on
    nranks: int | None = None  # how many ranks it starts, where the argv says
    role: str = "default"  # torchrun's label prefix


@dataclass(frozen=True)
class LaunchResult:
    """What came back: per-rank output, exit codes where known, and how the launcher ended."""

    kind: str
    argv: tuple[str, ...]
    ranks: Ranks  # rank -> its stdout lines (srun: stdout and stderr, both labelled alike)
    rank_stderr: Ranks  # rank -> its stderr lines, where the launcher labels them apart
    exit_codes: dict[int, int]  # rank -> exit code, where the launcher said it
    returncode: int | None  # the launcher's own; None when it was killed or never started
    stdout: str
    stderr: str  # the launcher's stderr, whole (its own messages and any unlabelled lines)
    duration_s: float
    timed_out: bool = False
    not_found: bool = False
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not (self.timed_out or self.not_found or self.error)

    @property
    def stderr_tail(self) -> str:
        return self.stderr[-_TAIL:]


# ------------------------------------------------------------------------------ command lines


def check_env(env: Mapping[str, str] | None) -> dict[str, str]:
    """Environment names must be [A-Za-z_][A-Za-z0-9_]* and values str without NUL; ValueError."""
    out: dict[str, str] = {}
    for name, value in (env or {}).items():
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            raise ValueError(f"invalid environment variable name {name!r}")
        if not isinstance(value, str) or "\0" in value:
            raise ValueError(f"invalid value for environment variable {name}: {value!r}")
        out[name] = value
    return out


def srun_launch(program: Sequence[str], *, srun: str = "srun", nodelist: str | None = None,
                nodes: int | None = None, ntasks: int | None = None, ntasks_per_node: int | None = 1,
                job_name: str | None = None, immediate_s: int | None = None, extra: Iterable[str] = (),
                env: Mapping[str, str] | None = None, label: bool = True) -> Launch:
    """`srun --label ...` starting program once per task (one per node by default); label=False
    for one task whose output is read as it comes (a persistent worker's protocol lines)."""
    argv = [srun]
    if nodelist:
        argv.append(f"--nodelist={nodelist}")
    if nodes is not None:
        argv.append(f"--nodes={nodes}")
    if ntasks is not None:
        argv.append(f"--ntasks={ntasks}")
    if ntasks_per_node is not None:
        argv.append(f"--ntasks-per-node={ntasks_per_node}")
    # one task's failure must not kill the others: each rank's answer is wanted
    argv += ["--label", "--kill-on-bad-exit=0"] if label else ["--kill-on-bad-exit=0"]
    if job_name:
        argv.append(f"--job-name={job_name}")
    if immediate_s is not None:
        argv.append(f"--immediate={immediate_s}")
    argv += [*extra, *_program(program)]
    return Launch("srun", tuple(argv), check_env(env), ntasks)


def mpirun_launch(program: Sequence[str], *, np: int, hosts: Sequence[str] | None = None,
                  hostfile: str | None = None, mpirun: str = "mpirun", oversubscribe: bool = False,
                  allow_run_as_root: bool = False, extra: Iterable[str] = (),
                  env: Mapping[str, str] | None = None, tag_output: bool = True) -> Launch:
    """`mpirun -np N --tag-output [-x NAME]... --host/--hostfile` (Open MPI) starting program;
    tag_output=False for one rank whose output is read as it comes (its tags cut lines in pieces)."""
    if hosts and hostfile:
        raise ValueError("give hosts or a hostfile, not both")
    variables = check_env(env)
    argv = [mpirun, "-np", str(int(np))] + (["--tag-output"] if tag_output else [])
    if hosts:
        argv += ["--host", ",".join(hosts)]  # host or host:slots each
    if hostfile:
        argv += ["--hostfile", hostfile]
    if oversubscribe:
        argv.append("--oversubscribe")
    if allow_run_as_root:
        argv.append("--allow-run-as-root")
    for name in variables:
        argv += ["-x", name]  # the value comes from mpirun's own environment, not the argv
    argv += [*extra, *_program(program)]
    return Launch("mpirun", tuple(argv), variables, int(np))


def torchrun_launch(program: Sequence[str], *, nproc_per_node: int, nnodes: int = 1,
                    rdzv_endpoint: str | None = None, rdzv_id: str | None = None,
                    torchrun: str = "torchrun", no_python: bool = False, log_dir: str | None = None,
                    shutdown_timeout_s: int | None = None, extra: Iterable[str] = (),
                    env: Mapping[str, str] | None = None) -> Launch:
    """`torchrun --tee 3 ...`: `--standalone` without an endpoint, else c10d rendezvous at HOST:PORT."""
    argv = [torchrun, f"--nnodes={nnodes}", f"--nproc-per-node={nproc_per_node}"]
    if rdzv_endpoint is None:
        if nnodes != 1:
            raise ValueError("torchrun over several nodes needs a rendezvous endpoint (HOST:PORT)")
        argv.append("--standalone")
    else:
        argv += ["--rdzv-backend=c10d", f"--rdzv-endpoint={rdzv_endpoint}"]
        if rdzv_id:
            argv.append(f"--rdzv-id={rdzv_id}")
    # --tee 3 is what makes torchrun label worker lines ("[default0]:..."); it also writes
    # them under log_dir (a tempdir of torchrun's own when None)
    argv += ["--tee", "3"]
    if log_dir:
        argv.append(f"--log-dir={log_dir}")
    if shutdown_timeout_s is not None:
        argv.append(f"--shutdown-timeout={shutdown_timeout_s}")  # SIGTERM -> SIGKILL for its workers
    if no_python:
        argv.append("--no-python")
    argv += [*extra, *_program(program)]
    ranks = nproc_per_node * nnodes if isinstance(nproc_per_node, int) else None
    return Launch("torchrun", tuple(argv), check_env(env), ranks)


def _program(program: Sequence[str]) -> list[str]:
    words = list(program)
    if not words or not all(isinstance(w, str) and "\0" not in w for w in words):
        raise ValueError(f"invalid program {program!r}")
    return words


# ------------------------------------------------------------------------------ output parsing


def parse_srun(stdout: str, stderr: str) -> tuple[Ranks, Ranks, dict[int, int]]:
    """`srun --label` output -> (ranks, rank stderr, exit codes from srun's error lines)."""
    return _labelled(stdout), _labelled(stderr), _srun_exits(stderr)


def _labelled(text: str) -> Ranks:
    tasks: Ranks = defaultdict(list)
    for line in text.splitlines():
        m = SRUN_LABEL.match(line)
        if m:
            tasks[int(m.group(1))].append(line[m.end():])
    return dict(tasks)


def _srun_exits(stderr: str) -> dict[int, int]:
    codes: dict[int, int] = {}
    for m in _SRUN_EXIT.finditer(stderr):
        for rank in _task_ids(m.group(1)):
            codes[rank] = int(m.group(2))
    return codes


def _task_ids(spec: str) -> list[int]:
    """srun's task list ("3", "0-2", "1,4-5") -> [task ids]."""
    ids: list[int] = []
    for part in spec.split(",", _TASKS_MAX)[:_TASKS_MAX]:
        lo, _, hi = part.partition("-")
        if lo.isdigit() and (not hi or hi.isdigit()) and len(lo) <= 9 and len(hi) <= 9:
            first = int(lo)
            ids += range(first, min(int(hi or lo), first + _TASKS_MAX - len(ids) - 1) + 1)
        if len(ids) >= _TASKS_MAX:
            break
    return ids


def parse_mpirun(stdout: str, stderr: str) -> tuple[Ranks, Ranks, dict[int, int]]:
    """`mpirun --tag-output` output -> (ranks, rank stderr, the failed rank's exit code)."""
    streams: dict[str, defaultdict[int, str]] = {"stdout": defaultdict(str), "stderr": defaultdict(str)}
    for text in (stdout, stderr):
        tags = list(MPIRUN_TAG.finditer(text))
        for i, tag in enumerate(tags):
            end = tags[i + 1].start() if i + 1 < len(tags) else len(text)
            chunk = text[tag.end():end]
            # Open MPI tags every line it forwards: what follows a chunk's newline untagged
            # is mpirun's own text (its error banners), not the rank's
            newline = chunk.find("\n")
            chunk = chunk if newline < 0 else chunk[:newline + 1]
            stream = "stdout" if tag.group(2) == "stdout" else "stderr"
            streams[stream][int(tag.group(1))] += chunk
    ranks = {r: t.splitlines() for r, t in sorted(streams["stdout"].items())}
    errs = {r: t.splitlines() for r, t in sorted(streams["stderr"].items())}
    codes = {int(m.group(1)): int(m.group(2)) for m in _MPI_EXIT.finditer(stderr + "\n" + stdout)}
    return ranks, errs, codes


def parse_torchrun(stdout: str, stderr: str, role: str = "default") -> tuple[Ranks, Ranks, dict[int, int]]:
    """`torchrun --tee 3` output -> (local ranks, their stderr, exit codes from its failure summary)."""
    label = torchrun_role(role)

    def split(text: str) -> Ranks:
        out: Ranks = defaultdict(list)
        for line in text.splitlines():
            m = label.match(line)
            if m:
                out[int(m.group(1))].append(line[m.end():])
        return dict(out)

    codes = {int(m.group(1)): int(m.group(2)) for m in _TORCH_EXIT.finditer(stderr + "\n" + stdout)}
    return split(stdout), split(stderr), codes


def parse(spec: Launch, stdout: str, stderr: str) -> tuple[Ranks, Ranks, dict[int, int]]:
    """Per-rank output and exit codes for `spec`'s kind of launcher."""
    if spec.kind == "srun":
        return parse_srun(stdout, stderr)
    if spec.kind == "mpirun":
        return parse_mpirun(stdout, stderr)
    if spec.kind == "torchrun":
        return parse_torchrun(stdout, stderr, spec.role)
    raise ValueError(f"unknown launcher {spec.kind!r}")


# ------------------------------------------------------------------------------ running


def launch(spec: Launch, *, timeout_s: float, env: Mapping[str, str] | None = None,
           cwd: str | None = None, grace_s: float = 3.0) -> LaunchResult:
    """Run spec's launcher (env: its base environment, default hc's) and read it back per rank."""
    run_env = dict(os.environ if env is None else env)
    run_env.update(spec.env)
    if cwd is not None and not os.path.isdir(cwd):
        return _result(spec, None, "", "", 0.0, error=f"{cwd}: no such directory")
    proc: subprocess.Popen | None = None
    forget = _nothing
    try:
        # the fork and its registration for a stop (SIGINT, SIGTERM, SIGHUP: runners/stop.py)
        # are one step, and a stop arriving during them is raised after, inside this try
        with stop.deferred(), local.starting() as register:
            try:
                started, forget = stop.start_registered(lambda: _popen(spec, run_env, cwd),
                                                         lambda p: kill_tree(p, grace_s))
                proc = started
            except FileNotFoundError:
                return _result(spec, None, "", f"{spec.argv[0]}: command not found", 0.0, not_found=True)
            except OSError as exc:
                return _result(spec, None, "", "", 0.0, error=f"{spec.argv[0]}: {exc.strerror or exc}")
            except stop.StopRefused as exc:
                return _result(spec, None, "", "", 0.0, error=str(exc))
            register(proc.pid)
        assert proc is not None
        start = time.monotonic()
        out, err, timed_out = _wait(proc, timeout_s, grace_s)
    except BaseException:  # Ctrl-C, a hook's deadline: the ranks die with it
        if proc is not None:
            kill_tree(proc, 0.0)
        raise
    finally:
        forget()
        if proc is not None:
            local.untrack_group(proc.pid)
    return _result(spec, None if timed_out else proc.returncode, out, err, time.monotonic() - start,
                   timed_out=timed_out)


def _popen(spec: Launch, env: Mapping[str, str], cwd: str | None) -> subprocess.Popen:
    return subprocess.Popen(spec.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, cwd=cwd,
                            start_new_session=True,  # its own group: the timeout reaches all of it
                            preexec_fn=local.die_with_hc())


def _nothing() -> None:
    return None


def _wait(proc: subprocess.Popen, timeout_s: float, grace_s: float) -> tuple[str, str, bool]:
    """(stdout, stderr, timed_out); at the timeout kill every rank, then collect what they printed."""
    try:
        out, err = proc.communicate(timeout=timeout_s)
        return _text(out), _text(err), False
    except subprocess.TimeoutExpired:
        pass
    kill_tree(proc, grace_s)
    try:
        # output printed before the kill; a process that escaped may still hold the pipes
        out, err = proc.communicate(timeout=1.0)
    except subprocess.TimeoutExpired:
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        out, err = b"", b""
        proc.wait(timeout=1.0)
    return _text(out), _text(err), True


def kill_tree(proc: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM the group and its descendants (launchers clean up on it), then SIGKILL them all."""
    seen = set(descendants(proc.pid, children_by_parent()))
    _signal(proc.pid, seen, signal.SIGTERM)
    if grace_s > 0:
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
    seen |= set(descendants(proc.pid, children_by_parent()))  # what it started during the grace
    _signal(proc.pid, seen, signal.SIGKILL)
    _wait_gone(seen, 2.0)


def _signal(pgid: int, pids: set[int], sig: int) -> None:
    """Send sig to the group, to each pid, and to the group each pid leads (torchrun's workers)."""
    targets = [(os.killpg, pgid)] + [(os.kill, p) for p in pids]
    for pid in pids:
        try:
            if os.getpgid(pid) == pid:  # a worker in a session of its own leads its children
                targets.append((os.killpg, pid))
        except OSError:
            pass
    for send, target in targets:
        try:
            send(target, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _wait_gone(pids: set[int], limit_s: float) -> None:
    """Wait (bounded) until the killed pids are gone or zombies, so callers see them dead."""
    until = time.monotonic() + limit_s
    while time.monotonic() < until:
        if not any(_alive(p) for p in pids):
            return
        time.sleep(0.02)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    state = stat[stat.rfind(b")") + 2:stat.rfind(b")") + 3]
    return state not in (b"Z", b"X")


def _text(data: bytes | None) -> str:
    return (data or b"").decode("utf-8", errors="replace")


def _result(spec: Launch, returncode: int | None, out: str, err: str, duration: float, *,
            timed_out: bool = False, not_found: bool = False, error: str | None = None) -> LaunchResult:
    ranks, rank_err, codes = parse(spec, out, err)
    if returncode == 0 and spec.nranks:
        # a launcher that exits 0 saw every rank exit 0
        codes = {**{r: 0 for r in range(spec.nranks)}, **codes}
    return LaunchResult(spec.kind, spec.argv, ranks, rank_err, codes, returncode, out, err, duration,
                        timed_out=timed_out, not_found=not_found, error=error)
