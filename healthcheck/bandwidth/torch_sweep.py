"""A collective sweep in pure PyTorch (`hc bw allreduce`): nccl-tests' method and numbers
without nccl-tests, on whatever launcher started the ranks.

Every rank runs the same sweep. Per collective and size: `warmup` untimed runs, a
barrier, `iters` timed runs back to back (GPU: CUDA events around them and a
synchronize; CPU: perf_counter, gloo's calls being blocking), then one checked run on
fresh data (as nccl-tests checks after timing). Each rank's mean time per run is
gathered to every rank: the reported time is the slowest rank's (nccl-tests `-a 3`), and
every rank's time is kept (`BandwidthSample.rank_times_us`) so a straggler stands out.

Sizes and bandwidths follow nccl-tests (collectives.md §1.6): `size` is max(send, recv)
bytes per rank (all_gather: the whole gathered buffer; reduce_scatter and alltoall: the
whole send buffer), rounded down to whole float32 elements and, for the collectives that
split a buffer in `ranks` chunks, to a multiple of `ranks` elements (at least one per
chunk); `count` is nccl-tests' count column (elements per chunk where a buffer is
split). algbw = size / time and busbw = algbw x bus_factor(collective, ranks); GB = 1e9.
torch's all_reduce and broadcast work in place, so those samples say "in-place".

Checking: rank r's data at flat index i is `(i + r) % P + 1` (small integers, P = 8191
while ranks <= 2048, else a prime <= 2**24 / ranks), so every sum any rank computes is
an integer below 2**24 and exact in float32 whatever the reduction order, and a chunk
from the wrong rank or the wrong offset differs. Outputs start as -1 (never a valid
value), so an element that was not written counts too. `#wrong` is the number of output
elements that differ from the exact expectation, summed over the ranks (as nccl-tests).

Rank discovery (first match wins; options beat the environment):
- torchrun: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT (torchrun sets them).
- Open MPI mpirun: OMPI_COMM_WORLD_RANK/_SIZE/_LOCAL_RANK; the rendezvous address must be
  given: --master-addr/--master-port, or MASTER_ADDR/MASTER_PORT exported with `-x`.
  (Checked before Slurm: ranks mpirun starts inside an allocation inherit the batch
  step's SLURM_PROCID.)
- srun: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID; the address is the option, else
  MASTER_ADDR, else the first host of SLURM_STEP_NODELIST (task 0's node), else of
  SLURM_JOB_NODELIST; the port is the option, else MASTER_PORT, else `derived_port()`
  from SLURM_JOB_ID and SLURM_STEP_ID (the same on every task, outside Linux's
  ephemeral range).
- none of these: one rank (rank 0 of 1) on 127.0.0.1 and a free port.

Backend: NCCL on GPUs (one rank per GPU: cuda:LOCAL_RANK, or cuda:0 where each rank sees
one GPU), eagerly initialised with `device_id=` so NCCL errors show at the rendezvous,
except on 2.6.0 < torch < 2.7.1 where that hangs (pytorch#153960); gloo on CPU tensors.
`timeout_s` is init_process_group's timeout: the rendezvous and every collective give up
after it, so a dead or hung peer is an error, not a hang.

Test hook (tests only, never in production): HC_BW_TEST_CORRUPT_RANK=N makes rank N add
1 to the first element it sends in every checked run, which the check must count.

torch is imported inside the functions: this module imports without it.
"""

from __future__ import annotations

import inspect
import os
import re
import socket
import sys
import threading
import time
import warnings
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import msgspec

from healthcheck.bandwidth import checkdata, rendezvous
from healthcheck.core.errors import ExitCode, HcError, UsageError
from healthcheck.core.nodes import expand
from healthcheck.core.units import parse_size
from healthcheck.parsers.bandwidth_common import BandwidthSample, Placement, bus_factor

# what the torch sweep measures (bandwidth_common.COLLECTIVES names)
SWEEP_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "alltoall")
DEFAULT_SIZES = {"nccl": "1M,16M,256M,1G", "gloo": "64K,1M,4M"}
ELEMENT_BYTES = 4  # float32, nccl-tests' "float"
ROOT = 0  # broadcast's root
MAX_SIZE = 1 << 40
MAX_SIZES = 64
PORT_BASE, PORT_SPAN = 20000, 10000  # derived ports: 20000-29999, below the ephemeral range
CORRUPT_ENV = "HC_BW_TEST_CORRUPT_RANK"
RENDEZVOUS_GRACE_S = 2.0  # past --timeout, before the watchdog ends a rendezvous torch has not
SENTINEL = -1.0
_SOURCE_PREFIX = re.compile(r"^\[[^\]\s]*\.(?:cc|cpp|cu|h|hpp):\d+\]\s*")
_UNSUPPORTED = re.compile(r"not (?:yet )?(?:supported|implemented)|does not support|unsupported", re.I)


class SweepError(HcError):
    """The sweep could not run (rendezvous, a collective failed or timed out, no torch): exit 3."""

    exit_code = ExitCode.ERROR


class WrongResults(HcError):
    """A collective returned wrong data: evidence against a rank or the fabric, exit 2."""

    exit_code = ExitCode.FAIL


# ------------------------------------------------------------------------------ sizes


def parse_sizes(text: str) -> tuple[int, ...]:
    """'1M,16M,1G' or '1K:1M' (every doubling from 1K to 1M) -> sorted distinct byte counts."""
    sizes: set[int] = set()
    items = [item for item in text.split(",")]
    if not text.strip() or any(not item.strip() for item in items):
        raise ValueError(f"{text!r}: an empty size")
    for item in items:
        lo_text, colon, hi_text = item.partition(":")
        lo = parse_size(lo_text)
        if not colon:
            sizes.add(lo)
            continue
        hi = parse_size(hi_text)
        if hi < lo:
            raise ValueError(f"{item.strip()!r}: the range ends below its start")
        while lo <= hi and len(sizes) <= MAX_SIZES:
            sizes.add(lo)
            lo *= 2
    if len(sizes) > MAX_SIZES:
        raise ValueError(f"more than {MAX_SIZES} sizes")
    return tuple(sorted(sizes))


def human_size(size: int) -> str:
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale}{unit}"
    return f"{size}B"


# ------------------------------------------------------------------------------ geometry


@dataclass(frozen=True)
class Geometry:
    """One collective at one size: nccl-tests' size and count columns, the buffers' elements."""

    collective: str
    size_bytes: int  # max(send, recv) bytes per rank, as nccl-tests' size column
    count: int  # nccl-tests' count column: elements per chunk where a buffer is split
    send_elems: int
    recv_elems: int
    in_place: bool  # torch's all_reduce and broadcast work in place

    @property
    def placement(self) -> Placement:
        return "in-place" if self.in_place else "out-of-place"


def geometry(collective: str, size: int, ranks: int) -> Geometry:
    """The buffers measuring `collective` at `size` bytes over `ranks` ranks (see the module doc)."""
    if collective in ("all_reduce", "broadcast"):
        count = max(1, size // ELEMENT_BYTES)
        return Geometry(collective, count * ELEMENT_BYTES, count, count, count, True)
    if collective not in SWEEP_COLLECTIVES:
        raise ValueError(f"the torch sweep does not measure {collective!r}")
    chunk = max(1, size // (ELEMENT_BYTES * ranks))
    whole = chunk * ranks
    send, recv = {"all_gather": (chunk, whole), "reduce_scatter": (whole, chunk),
                  "alltoall": (whole, whole)}[collective]
    return Geometry(collective, whole * ELEMENT_BYTES, chunk, send, recv, False)


def bandwidths(collective: str, size_bytes: int, time_s: float, ranks: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s (1e9) for size_bytes (nccl-tests' size) moved in time_s."""
    if time_s <= 0:
        return 0.0, 0.0
    algbw = size_bytes / time_s / 1e9
    return algbw, algbw * bus_factor(collective, ranks)


# ------------------------------------------------------------------------------ check pattern


def pattern_period(ranks: int) -> int:
    """P: data values are 1..P and ranks x P <= 2**24, so every sum is exact in float32."""
    if ranks <= (1 << 24) // 8191:
        return 8191
    p = max(2, (1 << 24) // ranks)
    while p > 2 and any(p % d == 0 for d in range(2, int(p ** 0.5) + 1)):
        p -= 1
    return p


def reduced_pattern(ranks: int, period: int) -> list[int]:
    """E[k] = sum over r < ranks of ((k + r) % period + 1): all_reduce's output at index k (mod P)."""

    def run(a: int, b: int) -> int:  # a + ... + b
        return (a + b) * (b - a + 1) // 2 if b >= a else 0

    cycles, rest = divmod(ranks, period)
    base = cycles * period * (period - 1) // 2 + ranks
    out = []
    for k in range(period):
        end = k + rest - 1
        tail = run(k, min(end, period - 1)) + (run(0, end - period) if end >= period else 0)
        out.append(base + (tail if rest else 0))
    return out


# ------------------------------------------------------------------------------ ranks


@dataclass(frozen=True)
class RankInfo:
    launcher: str  # torchrun | mpirun | srun | none
    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int


def derived_port(job_id: str, step_id: str = "0") -> int:
    """The rendezvous port every task of a Slurm step agrees on without talking."""
    if job_id.isdigit() and step_id.isdigit():
        key = int(job_id) * 64 + int(step_id) % 64
    else:
        key = zlib.crc32(f"{job_id}.{step_id}".encode())
    return PORT_BASE + key % PORT_SPAN


def _int(env: Mapping[str, str], name: str, default: int | None = None) -> int:
    value = env.get(name)
    if value is None or value == "":
        if default is None:
            raise UsageError(f"${name} is not set")
        return default
    if not value.strip().isdigit():
        raise UsageError(f"${name}={value[:40]!r} is not a non-negative integer")
    return int(value)


def _port(value: Any, source: str) -> int:
    text = str(value).strip()
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise UsageError(f"{source}={text[:40]!r} is not a TCP port (1-65535)")
    return int(text)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def first_host(nodelist: str) -> str:
    """The first node of a Slurm hostlist ("gpu[003-004,010]" -> "gpu003")."""

    return expand([nodelist])[0]


def discover_ranks(env: Mapping[str, str], master_addr: str | None = None,
                   master_port: int | None = None) -> RankInfo:
    """This process's rank, the world and the rendezvous address, from the launcher's variables."""

    def addr_port(required: str) -> tuple[str | None, int | None]:
        addr = master_addr or env.get("MASTER_ADDR") or None
        if master_port is not None:
            port: int | None = _port(master_port, "--master-port")
        elif env.get("MASTER_PORT"):
            port = _port(env["MASTER_PORT"], "$MASTER_PORT")
        else:
            port = None
        if required and (addr is None or port is None):
            raise UsageError(required)
        return addr, port

    if "RANK" in env and "WORLD_SIZE" in env:
        launcher, rank, size = "torchrun", _int(env, "RANK"), _int(env, "WORLD_SIZE")
        local = _int(env, "LOCAL_RANK", 0)
        addr, port = addr_port("torchrun's MASTER_ADDR/MASTER_PORT are not set (or give --master-addr/--master-port)")
    elif "OMPI_COMM_WORLD_RANK" in env and "OMPI_COMM_WORLD_SIZE" in env:
        launcher, rank, size = "mpirun", _int(env, "OMPI_COMM_WORLD_RANK"), _int(env, "OMPI_COMM_WORLD_SIZE")
        local = _int(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0)
        addr, port = addr_port("under mpirun give --master-addr and --master-port (or export MASTER_ADDR "
                               "and MASTER_PORT with -x): rank 0's host and a free port")
    elif "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        launcher, rank, size = "srun", _int(env, "SLURM_PROCID"), _int(env, "SLURM_NTASKS")
        local = _int(env, "SLURM_LOCALID", 0)
        addr, port = addr_port("")
        if addr is None:
            nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
            if not nodelist:
                raise UsageError("under srun with no SLURM_STEP_NODELIST or SLURM_JOB_NODELIST: "
                                 "give --master-addr (task 0's host)")
            addr = first_host(nodelist)
        if port is None:
            job = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
            if not job:
                raise UsageError("under srun with no SLURM_JOB_ID: give --master-port")
            port = derived_port(job, env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID") or "0")
    else:
        launcher, rank, size, local = "none", 0, 1, 0
        addr, port = addr_port("")
        addr = addr or "127.0.0.1"
        port = port or _free_port()
    if size < 1 or rank >= size:
        raise UsageError(f"{launcher}: rank {rank} is not within a world of {size} ranks")
    assert addr is not None and port is not None
    return RankInfo(launcher, rank, size, local, addr, port)


def eager_init_ok(torch_version: str) -> bool:
    """Whether init_process_group(device_id=...) is safe: not on 2.6.0 < torch < 2.7.1 (pytorch#153960)."""
    numbers = tuple(int(x) for x in re.findall(r"\d+", torch_version.split("+")[0])[:3])
    return not ((2, 6, 0) < numbers < (2, 7, 1))


# ------------------------------------------------------------------------------ the result


class SweepReport(msgspec.Struct, frozen=True):
    """What `hc bw allreduce --format json` prints (rank 0): the samples and where they ran."""

    tool: str
    torch_version: str
    backend: str  # nccl | gloo
    launcher: str  # torchrun | mpirun | srun | none
    ranks: int
    hosts: list[str]  # per rank
    devices: list[str]  # per rank: "cpu", "cuda:3 NVIDIA H100 80GB HBM3"
    iters: int
    warmup: int
    check: bool
    timeout_s: float
    samples: list[BandwidthSample]
    wrong: int | None  # every sample's #wrong summed; None with --no-check
    unsupported: dict[str, str] = {}  # collective -> why this torch/backend cannot run it


@dataclass(frozen=True)
class SweepOptions:
    collectives: tuple[str, ...] = ("all_reduce",)
    sizes: tuple[int, ...] | None = None  # None: DEFAULT_SIZES of the backend
    iters: int = 20
    warmup: int = 5
    check: bool = True
    backend: str = "auto"  # auto | nccl | gloo
    timeout_s: float = 120.0
    master_addr: str | None = None
    master_port: int | None = None


def one_line(exc: BaseException, limit: int = 300) -> str:
    """The first meaningful line of an exception (torch's carry C++ stacks below it)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    text = _SOURCE_PREFIX.sub("", lines[0]) if lines else ""  # gloo's "[.../pair.cc:537] "
    text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text if len(text) <= limit else text[:limit] + "..."


# ------------------------------------------------------------------------------ running


def import_torch() -> tuple[Any, Any]:
    if os.environ.get("HC_DEBUG") != "1":
        # c10d logs each failed connect with a C++ stack: hc says what failed in one line
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*NumPy.*")  # a CPU build without numpy
            import torch
            import torch.distributed as dist
    except ImportError as exc:
        raise SweepError(f"hc bw needs torch (pip install 'hc[bandwidth]'): {exc}") from None
    if not dist.is_available():
        raise SweepError(f"this torch ({torch.__version__}) was built without torch.distributed")
    return torch, dist


def choose_device(torch: Any, dist: Any, backend: str, info: RankInfo) -> tuple[str, Any]:
    cuda = torch.cuda.is_available()
    nccl = cuda and dist.is_nccl_available()
    if backend == "auto":
        backend = "nccl" if nccl else "gloo"
    if backend == "nccl":
        if not nccl:
            raise SweepError("--backend nccl needs a GPU and a torch built with NCCL "
                             f"(torch {torch.__version__}, CUDA available: {cuda})")
        count = torch.cuda.device_count()
        if info.local_rank < count:
            index = info.local_rank
        elif count == 1:
            index = 0  # each rank was given its own GPU (CUDA_VISIBLE_DEVICES)
        else:
            raise SweepError(f"local rank {info.local_rank} but {count} GPUs visible: start one rank per GPU")
        torch.cuda.set_device(index)
        return backend, torch.device("cuda", index)
    if not dist.is_gloo_available():
        raise SweepError(f"this torch ({torch.__version__}) has no gloo backend")
    return backend, torch.device("cpu")


def corrupt_rank(env: Mapping[str, str]) -> int | None:
    value = env.get(CORRUPT_ENV)
    if not value:
        return None
    if not value.isdigit():
        raise UsageError(f"${CORRUPT_ENV}={value[:40]!r} is not a rank")
    return int(value)


@dataclass(frozen=True)
class Runtime:
    """torch imported and this process's device chosen: what every sweep in a process shares."""

    torch: Any
    dist: Any
    backend: str  # nccl | gloo
    device: Any


def open_runtime(backend: str, info: RankInfo) -> Runtime:
    """Import torch and choose the backend and device (cuda:LOCAL_RANK on NCCL); SweepError."""
    torch, dist = import_torch()
    chosen, device = choose_device(torch, dist, backend, info)
    return Runtime(torch, dist, chosen, device)


def run_sweep(opts: SweepOptions, env: Mapping[str, str] | None = None) -> tuple[RankInfo, SweepReport]:
    """Run the sweep on this rank; every rank returns the same report."""
    env = os.environ if env is None else env
    info = discover_ranks(env, opts.master_addr, opts.master_port)
    corrupt = corrupt_rank(env)
    runtime = open_runtime(opts.backend, info)
    os.environ.update(MASTER_ADDR=info.master_addr, MASTER_PORT=str(info.master_port), RANK=str(info.rank),
                      WORLD_SIZE=str(info.world_size), LOCAL_RANK=str(info.local_rank))
    return info, sweep_once(runtime, info, opts, corrupt)


def sweep_once(runtime: Runtime, info: RankInfo, opts: SweepOptions, corrupt: int | None = None,
               store_prefix: str | None = None) -> SweepReport:
    """One sweep in its own process group, destroyed after it. The rendezvous is torch's
    env:// (MASTER_ADDR/PORT in os.environ); with `store_prefix`, a store this rank opens
    itself under that prefix, which leaves the port free when the sweep ends (rendezvous.py):
    how a process that runs many sweeps on one port (`hc bw serve`) keeps them apart."""

    torch, dist, backend, device = runtime.torch, runtime.dist, runtime.backend, runtime.device
    sizes = opts.sizes or parse_sizes(DEFAULT_SIZES[backend])
    kwargs: dict[str, Any] = dict(backend=backend, rank=info.rank, world_size=info.world_size,
                                  timeout=timedelta(seconds=opts.timeout_s))
    if device.type == "cuda" and eager_init_ok(torch.__version__):
        if "device_id" in inspect.signature(dist.init_process_group).parameters:
            kwargs["device_id"] = device  # NCCL's communicator now, so its errors show here
    where = f"rendezvous at {info.master_addr}:{info.master_port} ({info.world_size} ranks, {info.launcher})"
    # torch's store client retries past its timeout (twice it, here): the watchdog keeps
    # the rendezvous (init and the first exchange) within timeout_s + RENDEZVOUS_GRACE_S
    watchdog = Watchdog(opts.timeout_s + RENDEZVOUS_GRACE_S,
                         f"{rank_prefix(info)}{where} did not complete within {opts.timeout_s:g} s "
                         f"(is rank 0 running there, and all {info.world_size} ranks started?)")
    base: Any = None
    ok = False
    try:
        base, failure = _open_group(dist, kwargs, info, opts.timeout_s, store_prefix)
        if failure:
            raise SweepError(f"{where} failed: {failure}")
        session = _Session(torch, dist, info, backend, device, opts, corrupt)
        try:
            report = session.run(sizes, where, watchdog)
            ok = True
            return report
        except HcError:
            raise
        except Exception as exc:
            raise SweepError(f"{session.where} failed: {one_line(exc)}") from None
    finally:
        watchdog.cancel()
        shutdown(dist, backend, ok)
        if base is not None:
            if ok:  # a failed sweep's peers may be gone: nobody to part from
                rendezvous.part(base, info.rank, info.world_size)
            base = None
            if info.rank == 0:
                rendezvous.wait_port_free(info.master_port)


def _open_group(dist: Any, kwargs: dict[str, Any], info: RankInfo, timeout_s: float,
                store_prefix: str | None) -> tuple[Any, str]:
    """init_process_group (kwargs: its arguments but the rendezvous'); (the store this rank
    opened itself or None, why it failed or ''). Failed or not, nothing here keeps a reference
    to the store but the one returned: a failure is returned as its one line, not raised with
    torch's exception, whose traceback holds init_process_group's frames and the store in them,
    and rank 0 would then wait (rendezvous.wait_port_free) for a port it still listens on itself."""

    base: Any = None
    try:
        if store_prefix is None:
            kwargs["init_method"] = "env://"
        else:
            base, kwargs["store"] = rendezvous.open_store(dist, info.master_addr, info.master_port,
                                                          info.world_size, info.rank == 0, timeout_s, store_prefix)
        dist.init_process_group(**kwargs)
        failure = ""
    except Exception as exc:
        failure = one_line(exc)
    finally:
        kwargs.clear()  # no reference to the store but `base`: rank 0 drops it to free the port
    return base, failure


def report_error(report: SweepReport) -> HcError | None:
    """Why a sweep that ran still exits non-zero: wrong results (2) before collectives not run (3)."""
    if report.wrong:
        bad = sorted({s.collective for s in report.samples if s.wrong})
        return WrongResults(f"{report.wrong} wrong elements ({', '.join(bad)}) over {report.ranks} ranks")
    if report.unsupported:
        return SweepError("not run: " + "; ".join(f"{c} ({why})" for c, why in report.unsupported.items()))
    return None


def rank_prefix(info: RankInfo) -> str:
    return f"rank {info.rank}: " if info.rank else ""


class Watchdog:
    """After `seconds`, print `message` as hc's one-line error and exit 3, unless cancelled."""

    def __init__(self, seconds: float, message: str) -> None:
        self._timer = threading.Timer(seconds, self._fire, args=(message,))
        self._timer.daemon = True
        self._timer.start()

    def cancel(self) -> None:
        self._timer.cancel()

    @staticmethod
    def _fire(message: str) -> None:
        try:
            sys.stdout.flush()
        except Exception:
            pass
        try:
            os.write(2, f"hc: error: {message}\n".encode(errors="replace"))
        finally:
            os._exit(int(ExitCode.ERROR))


def shutdown(dist: Any, backend: str, ok: bool) -> None:
    if not dist.is_initialized():
        return
    try:
        abort = getattr(dist.distributed_c10d, "_abort_process_group", None)
        if not ok and backend == "nccl" and abort is not None:
            abort()  # a failed NCCL communicator: destroying it may wait on the hung work
        else:
            dist.destroy_process_group()
    except Exception:
        pass


class _Session:
    def __init__(self, torch: Any, dist: Any, info: RankInfo, backend: str, device: Any,
                 opts: SweepOptions, corrupt: int | None) -> None:
        self.torch, self.dist, self.info, self.backend, self.device = torch, dist, info, backend, device
        self.opts, self.corrupt = opts, corrupt
        self.n, self.rank = info.world_size, info.rank
        self.cuda = device.type == "cuda"
        self.period = pattern_period(self.n)
        self.where = "rendezvous"
        self.all_gather = gather_fn(dist, self.n)
        self.reduce_scatter = _scatter_fn(dist, self.n)
        self.alltoall = _alltoall_fn(dist, self.n)
        self._reduced: Any = None

    # -- the sweep

    def run(self, sizes: Sequence[int], where: str, watchdog: Watchdog | None = None) -> SweepReport:
        torch = self.torch
        self.where = where
        me = (socket.gethostname(), self._device_name(),
              (self.opts.collectives, tuple(sizes), self.opts.iters, self.opts.warmup, self.opts.check, self.backend))
        # not all_gather_object: it needs numpy, which a CPU build of torch may lack
        peers = [msgspec.json.decode(b) for b in self._all_gather_bytes(msgspec.json.encode(me))]
        if watchdog is not None:
            watchdog.cancel()  # every rank answered: the collectives' own timeout takes over
        mine = msgspec.json.decode(msgspec.json.encode(me))
        for r, peer in enumerate(peers):
            if peer[2] != mine[2]:
                raise SweepError(f"rank {r} was started with other options than rank {self.rank} "
                                 "(collectives, sizes, iterations, check or backend differ)")
        unsupported: dict[str, str] = {}
        measured: list[tuple[Geometry, float, int]] = []
        for collective in self.opts.collectives:
            why = self._probe(collective)
            if why:
                unsupported[collective] = why
                continue
            for size in sizes:
                self.where = f"{collective} at {human_size(size)}"
                measured.append(self._measure(collective, size))
        self.where = "gathering the results"
        every = self._gather_results(measured)
        samples = []
        total_wrong: int | None = 0 if self.opts.check else None
        for i, (geo, _, _) in enumerate(measured):
            times = [every[r][i] for r in range(self.n)]
            wrong = int(sum(every[r][len(measured) + i] for r in range(self.n))) if self.opts.check else None
            slowest = max(times)
            algbw, busbw = bandwidths(geo.collective, geo.size_bytes, slowest, self.n)
            samples.append(BandwidthSample(
                collective=geo.collective, size_bytes=geo.size_bytes, busbw_gbytes_per_s=busbw,
                algbw_gbytes_per_s=algbw, time_us=slowest * 1e6, ranks=self.n, placement=geo.placement,
                wrong=wrong, dtype="float", redop="sum" if geo.collective in ("all_reduce", "reduce_scatter") else None,
                rank_times_us=tuple(t * 1e6 for t in times)))
            if wrong is not None and total_wrong is not None:
                total_wrong += wrong
        return SweepReport(
            tool="hc bw allreduce", torch_version=str(torch.__version__), backend=self.backend,
            launcher=self.info.launcher, ranks=self.n, hosts=[p[0] for p in peers], devices=[p[1] for p in peers],
            iters=self.opts.iters, warmup=self.opts.warmup, check=self.opts.check, timeout_s=self.opts.timeout_s,
            samples=samples, wrong=total_wrong, unsupported=unsupported)

    def _device_name(self) -> str:
        if not self.cuda:
            return "cpu"
        props = self.torch.cuda.get_device_properties(self.device)
        bus = getattr(props, "pci_bus_id", None)
        pci = f" [{getattr(props, 'pci_domain_id', 0):04x}:{bus:02x}:{getattr(props, 'pci_device_id', 0):02x}]" \
            if isinstance(bus, int) else ""
        return f"cuda:{self.device.index} {props.name}{pci}"

    def _all_gather_bytes(self, data: bytes) -> list[bytes]:
        """Every rank's `data`, in rank order."""
        torch = self.torch
        lengths = torch.empty(self.n, dtype=torch.int64, device=self.device)
        self.all_gather(lengths, torch.tensor([len(data)], dtype=torch.int64, device=self.device))
        longest = int(lengths.max().item())
        mine = torch.zeros(longest, dtype=torch.uint8, device=self.device)
        mine[:len(data)] = torch.tensor(list(data), dtype=torch.uint8, device=self.device)
        out = torch.empty(self.n * longest, dtype=torch.uint8, device=self.device)
        self.all_gather(out, mine)
        rows = out.cpu().view(self.n, longest).tolist()
        return [bytes(row[:length]) for row, length in zip(rows, lengths.cpu().tolist(), strict=True)]

    def _gather_results(self, measured: list[tuple[Geometry, float, int]]) -> list[list[float]]:
        torch = self.torch
        if not measured:
            return [[] for _ in range(self.n)]
        mine = torch.tensor([m[1] for m in measured] + [float(m[2]) for m in measured],
                            dtype=torch.float64, device=self.device)
        out = torch.empty(self.n * mine.numel(), dtype=torch.float64, device=self.device)
        self.all_gather(out, mine)
        return [row.tolist() for row in out.cpu().view(self.n, -1)]

    # -- one collective

    def _buffers(self, geo: Geometry) -> tuple[Any, Any]:
        torch = self.torch
        send = torch.zeros(geo.send_elems, dtype=torch.float32, device=self.device)
        recv = send if geo.in_place else torch.zeros(geo.recv_elems, dtype=torch.float32, device=self.device)
        return send, recv

    def _op(self, collective: str, send: Any, recv: Any) -> Callable[[], Any]:
        dist = self.dist
        if collective == "all_reduce":
            return lambda: dist.all_reduce(send)
        if collective == "broadcast":
            return lambda: dist.broadcast(send, src=ROOT)
        fn = {"all_gather": self.all_gather, "reduce_scatter": self.reduce_scatter,
              "alltoall": self.alltoall}[collective]
        return lambda: fn(recv, send)

    def _probe(self, collective: str) -> str | None:
        """Why this torch and backend cannot run `collective` (None: it ran once, on one element per chunk)."""
        self.where = f"{collective} (first call)"
        send, recv = self._buffers(geometry(collective, ELEMENT_BYTES * self.n, self.n))
        try:
            self._op(collective, send, recv)()
            self._sync()
        except (RuntimeError, NotImplementedError, AttributeError) as exc:
            if isinstance(exc, RuntimeError) and not _UNSUPPORTED.search(str(exc)):
                raise
            return f"{self.backend} in torch {self.torch.__version__}: {one_line(exc)}"
        return None

    def _sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def _barrier(self) -> None:
        if self.cuda:
            self.dist.barrier(device_ids=[self.device.index])
        else:
            self.dist.barrier()
        self._sync()

    def _measure(self, collective: str, size: int) -> tuple[Geometry, float, int]:
        """(geometry, this rank's seconds per run, wrong elements or -1 unchecked)."""
        torch = self.torch
        geo = geometry(collective, size, self.n)
        send, recv = self._buffers(geo)  # timed on zeros: all_reduce's in-place sums stay finite
        op = self._op(collective, send, recv)
        for _ in range(self.opts.warmup):
            op()
        self._sync()
        self._barrier()
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(self.opts.iters):
                op()
            end.record()
            torch.cuda.synchronize(self.device)
            seconds = start.elapsed_time(end) / 1e3 / self.opts.iters
        else:
            t0 = time.perf_counter()
            for _ in range(self.opts.iters):
                op()
            seconds = (time.perf_counter() - t0) / self.opts.iters
        wrong = self._check(geo, send, recv, op) if self.opts.check else -1
        del send, recv, op
        return geo, seconds, wrong

    # -- checking

    def _check(self, geo: Geometry, send: Any, recv: Any, op: Callable[[], Any]) -> int:
        """Run once on this rank's known data and count the output elements that differ."""
        torch = self.torch
        sends = not (geo.collective == "broadcast" and self.rank != ROOT)
        if sends:
            checkdata.fill_periodic(send[:geo.send_elems],
                                    checkdata.period_base(torch, self.period, self.rank, self.device))
            if self.corrupt == self.rank:
                send[0] += 1  # HC_BW_TEST_CORRUPT_RANK: the test hook
        if not geo.in_place or not sends:
            recv.fill_(SENTINEL)
        op()
        self._sync()
        if self._reduced is None:
            self._reduced = torch.tensor(reduced_pattern(self.n, self.period), dtype=torch.float32,
                                         device=self.device)
        return checkdata.count_wrong(torch, geo.collective, recv[:geo.recv_elems], geo.count, self.rank,
                                     self.n, self.period, self._reduced, ROOT)


def gather_fn(dist: Any, n: int) -> Callable[[Any, Any], Any]:
    """all_gather into one tensor: the newest name this torch has (2.13 deprecates the older)."""
    for name in ("all_gather_single", "all_gather_into_tensor", "_all_gather_base"):
        fn = getattr(dist, name, None)
        if fn is not None:
            return fn
    return lambda out, inp: dist.all_gather(list(out.chunk(n)), inp)


def _scatter_fn(dist: Any, n: int) -> Callable[[Any, Any], Any]:
    for name in ("reduce_scatter_single", "reduce_scatter_tensor", "_reduce_scatter_base"):
        fn = getattr(dist, name, None)
        if fn is not None:
            return fn
    return lambda out, inp: dist.reduce_scatter(out, list(inp.chunk(n)))


def _alltoall_fn(dist: Any, n: int) -> Callable[[Any, Any], Any]:
    fn = getattr(dist, "all_to_all_single", None)
    if fn is not None:
        return lambda out, inp: fn(out, inp)
    return lambda out, inp: dist.all_to_all(list(out.chunk(n)), list(inp.chunk(n)))


# ------------------------------------------------------------------------------ output


def render_table(report: SweepReport) -> str:
    """nccl-tests' table, per collective, with the slowest rank and the fastest rank's time."""
    lines = [(f"# hc bw allreduce: torch {report.torch_version}, {report.backend}, {report.ranks} ranks "
              f"({report.launcher}), {report.iters} iterations after {report.warmup} warm-up, "
              f"check {'on' if report.check else 'off'}"),
             "#",
             "# Using devices"]
    for r, (host, device) in enumerate(zip(report.hosts, report.devices, strict=False)):
        lines.append(f"#  Rank {r:2d} on {host:>10s} device {device}")
    for collective in dict.fromkeys(s.collective for s in report.samples):
        samples = [s for s in report.samples if s.collective == collective]
        lines += ["#", f"# Collective {collective} ({samples[0].placement})",
                  (f"# {'size':>10s}  {'count':>12s}  {'type':>6s}  {'redop':>6s}  {'root':>4s}  {'time':>10s}  "
                   f"{'algbw':>7s}  {'busbw':>7s}  {'#wrong':>6s}  {'slowest':>7s}  {'fastest':>10s}"),
                  (f"# {'(B)':>10s}  {'(elements)':>12s}  {'':>6s}  {'':>6s}  {'':>4s}  {'(us)':>10s}  "
                   f"{'(GB/s)':>7s}  {'(GB/s)':>7s}  {'':>6s}  {'rank':>7s}  {'(us)':>10s}")]
        for s in samples:
            geo = geometry(collective, s.size_bytes, s.ranks)
            times = s.rank_times_us or (s.time_us,)
            slowest = max(range(len(times)), key=times.__getitem__)
            root = str(ROOT) if collective == "broadcast" else "-1"
            wrong = "N/A" if s.wrong is None else str(s.wrong)
            lines.append(f"  {s.size_bytes:>10d}  {geo.count:>12d}  {s.dtype:>6s}  {s.redop or 'none':>6s}  "
                         f"{root:>4s}  {s.time_us:>10.1f}  {s.algbw_gbytes_per_s:>7.2f}  "
                         f"{s.busbw_gbytes_per_s:>7.2f}  {wrong:>6s}  {slowest:>7d}  {min(times):>10.1f}")
        wrong_total = sum(s.wrong or 0 for s in samples)
        verdict = "N/A" if not report.check else f"{wrong_total} {'OK' if wrong_total == 0 else 'FAILED'}"
        avg = sum(s.busbw_gbytes_per_s for s in samples) / len(samples)
        lines += [f"# Out of bounds values : {verdict}", f"# Avg bus bandwidth    : {avg:.3f}"]
    for collective, why in report.unsupported.items():
        lines += ["#", f"# Collective {collective}: not run: {why}"]
    return "\n".join(lines)


def encode_json(report: SweepReport) -> bytes:
    return msgspec.json.format(msgspec.json.encode(report), indent=2) + b"\n"


def write_stdout(data: bytes) -> None:
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
    sys.stdout.flush()
