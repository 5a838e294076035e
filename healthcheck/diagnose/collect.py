"""Live collection on one node: every rank process of a job, its state and its Python stack.

Runs ON the node (locally; `hc diagnose job` reaches each node over SSH or `srun
--overlap --jobid`), bounded in time (`timeout_s` for the whole node, `per_rank_timeout_s`
per py-spy) and in output (environ, command lines, py-spy output and the RAS reply are
read to fixed limits). Nothing here raises on a node's state: a process that vanishes,
an environ we may not read, a py-spy that is missing or refused ptrace, a RAS port with
nothing behind it are facts in the result (`NodeCollection.errors`, `RankProcess`,
`NodeCollection.ras`), each error naming its fix.

This module composes the node's collection; each part has a module of its own:
- diagnose/nodeschema.py: what a node reports (`NodeCollection`, `RankProcess`,
  `CollectError`, ...), the JSON `hc diagnose collect` prints;
- diagnose/procs.py: reading /proc (state, parent, command, cgroup, netns, environ,
  where stdout/stderr go, start times);
- diagnose/rankenv.py: what a rank's environment says (rank, local rank, world size,
  debug files, the launch variables kept: never the whole environment, it may hold secrets);
- diagnose/discovery.py: which processes are the job's ranks (pids given, or the job's
  cgroup / SLURM_JOB_ID; helpers and launcher agents told apart);
- diagnose/stackdump.py: py-spy dumps (`--nonblocking` for a stopped or D-state
  process) and py-spy's errors with their fix; diagnose/sampling.py samples them;
- diagnose/kernel_log.py: the node's kernel log in the job's window (OOM kills, Xid,
  mlx5 link events);
- diagnose/ras_client.py: NCCL's RAS service on 127.0.0.1:28028 (refused is absent
  evidence, not an error);
- diagnose/launchers.py: torchrun agents whose ranks never started (`--local` with no
  rank here), their stack and who holds their rendezvous port (the port-taken hang).

Per rank: host, pid, ppid, rank, local_rank, world_size, state from /proc/PID/stat (R
running, S sleeping, D disk sleep, T stopped: a SIGSTOPped rank, t traced, Z zombie),
CUDA_VISIBLE_DEVICES, the debug files it was told to write, the launch-relevant
variables, where its stdout/stderr go, and its stack sampled over a short window (the
last dump is `stack`). Zombies are not dumped.
"""

from __future__ import annotations

import concurrent.futures
import datetime as _dt
import socket
import sys
import time
from collections.abc import Sequence
from typing import Any

from healthcheck.core.inputs import clip
from healthcheck.diagnose.discovery import MAX_SKIPPED, find_ranks, local_rank_pids
from healthcheck.diagnose.kernel_log import (
    KERNEL_FIX,
    KERNEL_SLACK_S,
    KERNEL_TIMEOUT_S,
    MAX_KERNEL_EVENTS,
    MAX_KERNEL_TEXT,
    job_window,
    kernel_events,
    kernel_sources,
    read_kernel,
)
from healthcheck.diagnose.launchers import (
    MAX_FD_SCAN_S,
    MAX_LAUNCHERS,
    find_launchers,
    launcher_endpoint,
    listening_inodes,
    socket_owner,
)
from healthcheck.diagnose.motion import StackSample
from healthcheck.diagnose.nodeschema import (
    PTRACE_FIX,
    PY_SPY_FIX,
    CollectError,
    DebugFiles,
    DumpMode,
    ErrorKind,
    FoundBy,
    KernelKind,
    KernelLine,
    KernelLog,
    LauncherProcess,
    NodeCollection,
    PortHolder,
    RankProcess,
    SkippedProcess,
    decode_collection,
)
from healthcheck.diagnose.procs import (
    GONE_STATES,
    MAX_CMDLINE,
    MAX_ENVIRON,
    STATE_NAMES,
    ProcInfo,
    cgroup_job,
    is_python,
    machine_boot_time,
    output_files,
    parse_environ,
    parse_int,
    process_start,
    read_environ,
    read_stat,
)
from healthcheck.diagnose.rankenv import (
    LOCAL_VARS,
    MAX_KEPT_VARS,
    MAX_VALUE,
    WORLD_VARS,
    debug_files,
    first_int,
    kept_env,
    rank_of,
    slurm_job_of,
)
from healthcheck.diagnose.ras_client import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    DEFAULT_RAS_TIMEOUT_S,
    RasEvidence,
    ask_ras,
)
from healthcheck.diagnose.sampling import MARGIN_S, Sampled, SamplingSpec, sample_ranks
from healthcheck.diagnose.stackdump import (
    MAX_PY_SPY_OUTPUT,
    StackDump,
    dump_stack,
    process_main_thread,
    ptrace_scope,
    py_spy_error,
    resolve_py_spy,
)
from healthcheck.parsers.py_spy import PySpyFrame
from healthcheck.probes.gpu import Source

# The names callers import from here (cli/diagnose.py, diagnose/live.py, the tests), kept
# where they were before collect.py was split; new code imports them from their modules.
__all__ = [
    "DEFAULT_HOST", "DEFAULT_PORT", "DEFAULT_RAS_TIMEOUT_S", "KERNEL_FIX", "KERNEL_SLACK_S", "KERNEL_TIMEOUT_S",
    "MAX_CMDLINE", "MAX_ENVIRON", "MAX_FD_SCAN_S", "MAX_KEPT_VARS", "MAX_KERNEL_EVENTS", "MAX_KERNEL_TEXT",
    "MAX_LAUNCHERS", "MAX_PY_SPY_OUTPUT", "MAX_SKIPPED", "MAX_VALUE", "PTRACE_FIX", "PY_SPY_FIX",
    "CollectError", "DebugFiles", "DumpMode", "ErrorKind", "FoundBy", "KernelKind", "KernelLine", "KernelLog",
    "LauncherProcess", "NodeCollection", "PortHolder", "RankProcess", "RasEvidence", "SkippedProcess",
    "ask_ras", "cgroup_job", "collect_here", "collect_node", "debug_files", "decode_collection", "dump_stack",
    "find_launchers", "find_ranks", "is_python", "job_window", "kept_env", "kernel_events", "kernel_sources",
    "launcher_endpoint", "listening_inodes", "local_rank_pids", "machine_boot_time", "output_files",
    "parse_environ", "process_start", "ptrace_scope", "py_spy_error", "rank_of", "read_environ", "read_kernel",
    "read_stat", "resolve_py_spy", "socket_owner",
]
DEFAULT_PARALLEL = 8
DEFAULT_TIMEOUT_S = 20.0
DEFAULT_PER_RANK_TIMEOUT_S = 10.0


def collect_node(*, job_id: str | int | None = None, pids: Sequence[int] | None = None,
                 py_spy: str | None = "py-spy", native: bool = False, timeout_s: float = DEFAULT_TIMEOUT_S,
                 per_rank_timeout_s: float = DEFAULT_PER_RANK_TIMEOUT_S, parallel: int = DEFAULT_PARALLEL,
                 ras: bool = False, ras_host: str = DEFAULT_HOST, ras_port: int = DEFAULT_PORT,
                 raw: bool = False, same_netns: bool = True, host: str | None = None,
                 proc: str = "/proc", kernel: bool = True, since: float | None = None,
                 kernel_sources: Sequence[Source] | None = None,
                 sampling: SamplingSpec | None = None) -> NodeCollection:
    """Every rank of job `job_id` (or the processes `pids`) on this node, with its stack.

    py_spy: the py-spy binary (name or path; None: no stacks). timeout_s bounds the whole
    collection; each py-spy gets per_rank_timeout_s (less when the node's time runs out),
    `parallel` of them at once. ras: also ask NCCL RAS at ras_host:ras_port. raw: keep
    py-spy's JSON text per rank (fixtures, bug reports). kernel: also read the node's
    kernel log from the job's start (`since`, epoch seconds, else the earliest start of
    the job's processes here) through `kernel_sources` (default: kernel_sources()).
    sampling: how many times, over how long, every rank's stack is dumped (sampling.py).
    """
    if (job_id is None) == (not pids):
        raise ValueError("give exactly one of job_id and pids")
    start = time.monotonic()
    deadline = start + max(1.0, timeout_s)
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")
    host = host or socket.gethostname()
    job = str(job_id) if job_id is not None else None
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, parallel) + (1 if ras else 0)
                                                 + (1 if kernel else 0), thread_name_prefix="hc-collect")
    ras_future = pool.submit(ask_ras, ras_host, ras_port, min(DEFAULT_RAS_TIMEOUT_S, timeout_s)) if ras else None
    try:
        found, skipped, find_errors, agents, helpers = find_ranks(job_id=job_id, pids=pids, proc=proc,
                                                                  same_netns=same_netns)
        errors = list(find_errors)
        kernel_future = None
        if kernel:
            since, since_from = _window_start(since, found, skipped, agents, job, proc)
            kernel_future = pool.submit(read_kernel, since, since_from=since_from, sources=kernel_sources,
                                        timeout_s=max(0.5, min(KERNEL_TIMEOUT_S, deadline - time.monotonic())))
        binary = resolve_py_spy(py_spy)
        if py_spy and binary is None and found:
            errors.append(CollectError("py-spy-missing", f"py-spy not found (looked for {py_spy!r} on PATH and next "
                                       f"to {sys.executable}): no stacks from {host}", fix=PY_SPY_FIX))
        sampled = _sample(binary, found, sampling or SamplingSpec(), pool, deadline, per_rank_timeout_s, native,
                          raw, proc) if binary else Sampled()
        ranks = []
        for p, how in found:
            dump = sampled.last.get(p.pid)
            errors.extend(_rank_errors(p, dump, stacks_wanted=bool(binary), timeout_s=timeout_s))
            ranks.append(_rank_process(p, how, host, agents.get(p.pid), helpers.get(p.pid, []), dump,
                                       tuple(sampled.samples.get(p.pid, ())), output_files(p.pid, proc)))
        if not ranks and not any(e.kind == "process-gone" for e in errors):
            what = f"job {job_id}" if job_id is not None else f"pids {', '.join(map(str, pids or ()))}"
            errors.append(CollectError("no-ranks", f"no Python rank process of {what} on {host}"))
        ras_evidence = _ras_answer(ras_future, deadline, f"{ras_host}:{ras_port}") if ras_future is not None else None
        if ras_evidence is not None and ras_evidence.outcome == "error":
            errors.append(CollectError("ras-error", f"NCCL RAS at {ras_evidence.address}: {ras_evidence.reason}"))
        kernel_log = _kernel_answer(kernel_future, deadline, since) if kernel_future is not None else None
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    ranks.sort(key=lambda r: (r.rank is None, r.rank if r.rank is not None else 0, r.pid))
    return NodeCollection(
        host=host, collected_at=started, duration_s=round(time.monotonic() - start, 3),
        job_id=job, pids=tuple(int(p) for p in pids or ()),
        ranks=tuple(ranks), ras=ras_evidence, errors=tuple(errors), skipped=tuple(skipped),
        py_spy=binary, ptrace_scope=ptrace_scope(), kernel=kernel_log)


def _window_start(since: float | None, found: list[tuple[ProcInfo, FoundBy]], skipped: list[SkippedProcess],
                  agents: dict[int, int], job: str | None, proc: str) -> tuple[float | None, str]:
    """Where the kernel log's window starts: `since` as given, else the earliest start of the
    job's processes here (its ranks, their agents, the job's other processes)."""
    if since is not None:
        return since, "argument"
    job_pids = [p.pid for p, _ in found] + list(agents.values()) + \
        [s.pid for s in skipped if s.reason not in ("collector", "other-netns")]
    return job_window(job_pids, job_id=job, proc=proc)


def _rank_errors(p: ProcInfo, dump: StackDump | None, *, stacks_wanted: bool, timeout_s: float) \
        -> list[CollectError]:
    """What is missing of one rank: its stack (the node's time ran out, or py-spy's error), its environ."""
    errors = []
    if stacks_wanted and dump is None and p.state not in GONE_STATES:
        errors.append(CollectError("deadline", f"no stack of pid {p.pid}: the node's {timeout_s:g} s "
                                   "ran out first", fix="raise --timeout", pid=p.pid))
    if dump is not None and dump.error is not None:
        errors.append(dump.error)
    if p.environ is None and p.environ_error:
        errors.append(CollectError("environ-unreadable", f"cannot read /proc/{p.pid}/environ "
                                   f"({p.environ_error}): no rank or debug files for it",
                                   fix=PTRACE_FIX, pid=p.pid))
    return errors


def _ras_answer(future: concurrent.futures.Future[RasEvidence], deadline: float, address: str) -> RasEvidence:
    """The RAS query's answer, waited for until the node's deadline (and a second)."""
    try:
        return future.result(timeout=max(0.1, deadline - time.monotonic()) + 1.0)
    except concurrent.futures.TimeoutError:
        return RasEvidence("error", address, "RAS query outlived the node's time")


def _kernel_answer(future: concurrent.futures.Future[KernelLog], deadline: float, since: float | None) -> KernelLog:
    """The kernel log's reading, waited for until the node's deadline (and a second)."""
    try:
        return future.result(timeout=max(0.1, deadline - time.monotonic()) + 1.0)
    except concurrent.futures.TimeoutError:
        return KernelLog(since=since, note="kernel log not read: the node's time ran out first")


def _sample(binary: str, found: list[tuple[ProcInfo, FoundBy]], spec: SamplingSpec,
            pool: concurrent.futures.Executor, deadline: float, per_rank_s: float, native: bool, raw: bool,
            proc: str) -> Sampled:
    """Every found rank's stack, sampled (sampling.py); with --locals, and without where
    py-spy cannot read a process's locals."""
    ranks = {p.pid: rank_of(p.environ or {})[0] for p, _ in found}

    def dump(pid: int, state: str, timeout_s: float) -> StackDump:
        d = dump_stack(binary, pid, state, timeout_s=timeout_s, native=native, keep_raw=raw, rank=ranks.get(pid),
                       with_locals=True)
        if d.error is not None and d.error.kind == "py-spy-failed":
            d = dump_stack(binary, pid, state, timeout_s=timeout_s, native=native, keep_raw=raw,
                           rank=ranks.get(pid))
        return d

    return sample_ranks([(p.pid, p.state) for p, _ in found], dump, spec, pool=pool,
                        deadline=deadline - MARGIN_S, per_dump_s=per_rank_s, proc=proc)


def _frame_text(frame: PySpyFrame | None) -> str | None:
    """A frame as "fn (file.py:12)" (no line: "fn (file.py)")."""
    if frame is None:
        return None
    return f"{frame.name} ({frame.file}:{frame.line})" if frame.line is not None else f"{frame.name} ({frame.file})"


def _rank_process(p: ProcInfo, how: FoundBy, host: str, agent: int | None, helpers: list[int],
                  dump: StackDump | None, samples: tuple[StackSample, ...] = (),
                  outputs: tuple[str, ...] = ()) -> RankProcess:
    env = p.environ or {}
    rank, source = rank_of(env)
    stack = dump.stack if dump else None
    main = process_main_thread(stack, p.pid) if stack else None
    return RankProcess(
        pid=p.pid, host=host, state=p.state, state_name=STATE_NAMES.get(p.state, "unknown"),
        rank=rank, local_rank=first_int(env, LOCAL_VARS), world_size=first_int(env, WORLD_VARS),
        rank_source=source, ppid=p.ppid, agent_pid=agent, helpers=tuple(sorted(helpers)),
        command=clip(p.command, 1000), found_by=how,
        slurm_job_id=slurm_job_of(env),
        slurm_step_id=env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID"),
        cuda_visible_devices=env.get("CUDA_VISIBLE_DEVICES"), master_addr=env.get("MASTER_ADDR"),
        master_port=parse_int(env.get("MASTER_PORT")), debug_files=debug_files(env, p.pid, host, rank),
        env=kept_env(env), environ_truncated=p.environ_truncated,
        stack=stack, py_spy_mode=dump.mode if dump else None, py_spy_s=dump.seconds if dump else None,
        py_spy_raw=dump.raw if dump else None, samples=samples, outputs=outputs,
        collective=main.collective if main else None,
        user_frame=_frame_text(main.user_frame if main else None),
    )


def collect_here(*, job_id: str | None, pids: Sequence[int] | None, local: bool, py_spy: str | None,
                 timeout_s: float, same_netns: bool = True, **kw: Any) -> NodeCollection:
    """What `hc diagnose collect` reports for this node (its options are cli/diagnose.py's):
    the job's ranks (--job), those pids (--pids) or every rank process here (--local); where
    --local finds no rank, the torchrun agents whose ranks never started (their stack, who
    holds their rendezvous port) with a no-ranks error."""
    if local:
        pids = local_rank_pids(same_netns=same_netns)
        if not pids:
            host = socket.gethostname()
            when = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")
            launchers = find_launchers(host, py_spy=py_spy, timeout_s=timeout_s, same_netns=same_netns)
            return NodeCollection(host=host, collected_at=when, launchers=tuple(launchers),
                                  errors=(CollectError("no-ranks", f"no Python rank process on {host}"),))
    return collect_node(job_id=job_id, pids=pids, py_spy=py_spy, timeout_s=timeout_s, same_netns=same_netns, **kw)
