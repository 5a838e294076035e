"""The preflight's straggler test: a short all-reduce + barrier across every rank of the job.

Each of `iters` steps: a fixed local computation (a few small matmuls, on the rank's
GPU under NCCL), timed; an all-reduce of 1 MiB, timed; a barrier. A rank's step time is
its median over the steps; ranks slower than `factor` x the median of all ranks (and
by at least `min_excess_s`) are named. A collective evens out the ranks' times (the fast
wait for the slow inside it), so the local step, not the collective, is what tells a
slow rank from the others; the all-reduce time is reported beside it.

Every rank's preflight verdict (PASS/WARN/FAIL and its line) is exchanged first: a FAIL
on any rank stops every rank with that rank's line.

The rendezvous reuses the job's MASTER_ADDR/MASTER_PORT (torch_sweep.discover_ranks: torchrun,
Open MPI, srun), under a key prefix of its own so nothing it writes can be read by the job:
- under torchrun (TORCHELASTIC_USE_AGENT_STORE=True) the agent's store outlives this
  process; the prefix carries the restart count;
- otherwise rank 0 serves the store on MASTER_PORT itself. The job's own store will be
  served there by the same process after exec, so no rank may leave before rank 0's
  store is gone: each tells rank 0 it is done and waits until the store stops answering;
  rank 0 waits for all of them, closes its store and checks that the port is free again.

The process group is destroyed before the command is exec'd. The whole test is bounded:
the rendezvous and every collective by `timeout_s` (a watchdog ends the process, exit 3,
when torch's own timeout does not), the closing handshake by HANDSHAKE_S.

Test hook (tests only): HC_RUN_TEST_DELAY_RANK=N makes rank N sleep HC_RUN_TEST_DELAY_S
(default 0.3) in each local step, so the test must name it.
"""

from __future__ import annotations

import inspect
import socket
import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import msgspec

from healthcheck.bandwidth import torch_sweep as ts
from healthcheck.bandwidth.rendezvous import open_store, part, wait_port_free
from healthcheck.core.errors import UsageError
from healthcheck.jobwrap.preflight import PreflightError, PreflightFail

DELAY_RANK_ENV = "HC_RUN_TEST_DELAY_RANK"
DELAY_S_ENV = "HC_RUN_TEST_DELAY_S"
STORE_PREFIX = "hc-run-preflight"
_ELEMS = 1 << 18  # 1 MiB of float32


@dataclass(frozen=True)
class StragglerOptions:
    iters: int = 10
    timeout_s: float = 120.0
    factor: float = 3.0
    min_excess_s: float = 0.05
    backend: str = "auto"  # auto | nccl | gloo


@dataclass(frozen=True)
class StragglerResult:
    rank: int
    ranks: int
    launcher: str
    backend: str
    hosts: list[str]
    step_s: list[float]  # per rank, median local step
    allreduce_s: list[float]  # per rank, median all-reduce
    stragglers: list[int]
    verdicts: list[tuple[str, str]] = field(default_factory=list)  # per rank (status, line)

    def summary(self) -> str:
        med = statistics.median(self.step_s)
        text = (f"straggler test: {self.ranks} ranks ({self.backend}), step median {med * 1e3:.1f} ms, "
                f"all-reduce median {statistics.median(self.allreduce_s) * 1e3:.1f} ms")
        if not self.stragglers:
            return text + ", no straggler"
        named = ", ".join(f"rank {r} ({self.hosts[r]}) {self.step_s[r] * 1e3:.0f} ms" for r in self.stragglers)
        return f"{text}; slower than {med * 1e3:.1f} ms x the factor: {named}"


def stragglers(times: list[float], factor: float, min_excess_s: float) -> list[int]:
    """Ranks whose time is above factor x the median and above the median by min_excess_s."""
    if len(times) < 2:
        return []
    med = statistics.median(times)
    return [r for r, t in enumerate(times) if t > factor * med and t - med > min_excess_s]


def _delay(env: Mapping[str, str], rank: int) -> float:
    value = env.get(DELAY_RANK_ENV, "").strip()
    if not value:
        return 0.0
    if not value.isdigit():
        raise UsageError(f"${DELAY_RANK_ENV}={value[:40]!r} is not a rank")
    if int(value) != rank:
        return 0.0
    try:
        return max(0.0, float(env.get(DELAY_S_ENV) or 0.3))
    except ValueError:
        raise UsageError(f"${DELAY_S_ENV}={env.get(DELAY_S_ENV, '')[:40]!r} is not seconds") from None


# where each launcher says how many of its ranks share this node
LOCAL_SIZE_VARS = ("LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE")


def local_world_size(env: Mapping[str, str]) -> int | None:
    """How many ranks of the job run on this node, where the launcher says."""
    for name in LOCAL_SIZE_VARS:
        value = env.get(name, "").strip()
        if value.isdigit() and int(value) > 0:
            return int(value)
    return None


def preflight_backend(torch: Any, requested: str, env: Mapping[str, str]) -> str:
    """`auto` is NCCL only where each local rank can have a GPU of its own (as many visible
    as ranks here, or this rank bound to one by CUDA_VISIBLE_DEVICES), else gloo: a job whose
    ranks share one GPU (or use none) runs, and the test must not fail where the job would
    not (NCCL refuses two ranks on one GPU: "Duplicate GPU detected")."""
    if requested != "auto" or not torch.cuda.is_available():
        return requested
    visible = torch.cuda.device_count()
    local = local_world_size(env)
    bound = visible == 1 and env.get("CUDA_VISIBLE_DEVICES", "").strip() not in ("", "all")
    return "nccl" if local is None or local <= visible or bound else "gloo"


def run(env: Mapping[str, str], verdict: tuple[str, str], opts: StragglerOptions) -> StragglerResult | None:
    """Run the test on this rank (None: one rank, nothing to compare). Raises PreflightFail when any
    rank's verdict is FAIL, PreflightError when the test cannot complete."""

    info = ts.discover_ranks(env)
    if info.world_size < 2:
        return None
    delay = _delay(env, info.rank)
    torch, dist = ts.import_torch()
    backend, device = ts.choose_device(torch, dist, preflight_backend(torch, opts.backend, env), info)
    agent_store = env.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    serve = info.rank == 0 and not agent_store
    where = f"rendezvous at {info.master_addr}:{info.master_port} ({info.world_size} ranks, {info.launcher})"
    watchdog = ts.Watchdog(opts.timeout_s + ts.RENDEZVOUS_GRACE_S,
                            f"preflight: {ts.rank_prefix(info)}the straggler test's {where} did not complete "
                            f"within {opts.timeout_s:g} s (are all {info.world_size} ranks started? "
                            "--no-straggler-test skips it)")
    timeout = timedelta(seconds=opts.timeout_s)
    base: Any = None
    ok = False
    try:
        try:
            prefix = f"{STORE_PREFIX}/{env.get('TORCHELASTIC_RESTART_COUNT', '0')}"
            base, store = open_store(dist, info.master_addr, info.master_port, info.world_size, serve,
                                     opts.timeout_s, prefix)
            kwargs: dict[str, Any] = dict(backend=backend, store=store, rank=info.rank,
                                          world_size=info.world_size, timeout=timeout)
            store = None
            if device.type == "cuda" and ts.eager_init_ok(torch.__version__):
                if "device_id" in inspect.signature(dist.init_process_group).parameters:
                    kwargs["device_id"] = device
            dist.init_process_group(**kwargs)
            kwargs.clear()  # no reference to the store but `base`: rank 0 drops it to free the port
        except Exception as exc:
            raise PreflightError(f"preflight: {ts.rank_prefix(info)}the straggler test's {where} failed: "
                                 f"{ts.one_line(exc)}") from None
        stage = "exchanging the preflight verdicts"
        try:
            gather = ts.gather_fn(dist, info.world_size)
            mine = msgspec.json.encode([socket.gethostname(), verdict[0], verdict[1]])
            peers = [msgspec.json.decode(b) for b in _all_gather_bytes(torch, gather, device, info.world_size, mine)]
            watchdog.cancel()  # every rank answered: torch's timeout bounds the collectives now
            verdicts = [(str(p[1]), str(p[2])) for p in peers]
            hosts = [str(p[0]) for p in peers]
            failed = [r for r, v in enumerate(verdicts) if v[0] == "FAIL"]
            if failed:
                ok = True
                first = failed[0]
                others = f" (and {len(failed) - 1} more ranks)" if len(failed) > 1 else ""
                raise PreflightFail(f"preflight: rank {first} ({hosts[first]}): {verdicts[first][1]}{others}")
            stage = "the all-reduce steps"
            step, reduce = _steps(torch, dist, device, opts.iters, delay, backend == "nccl")
            stage = "gathering the step times"
            times = _all_gather_floats(torch, gather, device, info.world_size, [step, reduce])
            ok = True
        except PreflightFail:
            raise
        except Exception as exc:
            raise PreflightError(f"preflight: {ts.rank_prefix(info)}the straggler test failed in {stage}: "
                                 f"{ts.one_line(exc)}") from None
    finally:
        watchdog.cancel()
        ts.shutdown(dist, backend, ok)
        if base is not None and not agent_store:
            part(base, info.rank, info.world_size)
            base = None
            if serve:
                wait_port_free(info.master_port)
    step_s = [t[0] for t in times]
    return StragglerResult(rank=info.rank, ranks=info.world_size, launcher=info.launcher, backend=backend,
                           hosts=hosts, step_s=step_s, allreduce_s=[t[1] for t in times],
                           stragglers=stragglers(step_s, opts.factor, opts.min_excess_s), verdicts=verdicts)


def _steps(torch: Any, dist: Any, device: Any, iters: int, delay: float, cuda: bool) -> tuple[float, float]:
    """(median local step, median all-reduce) in seconds on this rank."""
    a = torch.full((128, 128), 0.5, device=device)
    buf = torch.zeros(_ELEMS, dtype=torch.float32, device=device)

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    def barrier() -> None:
        if cuda:
            dist.barrier(device_ids=[device.index])
        else:
            dist.barrier()

    dist.all_reduce(buf)  # warm-up: connections and kernels
    sync()
    barrier()
    if not cuda:
        # one thread per rank on the CPU, as torchrun sets OMP_NUM_THREADS=1 for several ranks
        # a node: ranks whose thread pools each span every core spin against each other, and
        # a 128x128 product then took 1.4 s in every rank of a loaded 2-core box, drowning the
        # slow rank the test must name
        torch.set_num_threads(1)
    steps, reduces = [], []
    for _ in range(iters):
        t0 = time.perf_counter()
        b = a
        for _ in range(4):
            b = torch.mm(b, a)
        sync()
        if delay:
            time.sleep(delay)
        t1 = time.perf_counter()
        dist.all_reduce(buf)
        sync()
        t2 = time.perf_counter()
        barrier()
        steps.append(t1 - t0)
        reduces.append(t2 - t1)
    return statistics.median(steps), statistics.median(reduces)


def _all_gather_bytes(torch: Any, gather: Any, device: Any, n: int, data: bytes) -> list[bytes]:
    lengths = torch.empty(n, dtype=torch.int64, device=device)
    gather(lengths, torch.tensor([len(data)], dtype=torch.int64, device=device))
    longest = max(1, int(lengths.max().item()))
    mine = torch.zeros(longest, dtype=torch.uint8, device=device)
    if data:
        mine[:len(data)] = torch.tensor(list(data), dtype=torch.uint8, device=device)
    out = torch.empty(n * longest, dtype=torch.uint8, device=device)
    gather(out, mine)
    rows = out.cpu().view(n, longest).tolist()
    return [bytes(row[:length]) for row, length in zip(rows, lengths.cpu().tolist(), strict=True)]


def _all_gather_floats(torch: Any, gather: Any, device: Any, n: int, values: list[float]) -> list[list[float]]:
    mine = torch.tensor(values, dtype=torch.float64, device=device)
    out = torch.empty(n * len(values), dtype=torch.float64, device=device)
    gather(out, mine)
    return [row.tolist() for row in out.cpu().view(n, len(values))]
