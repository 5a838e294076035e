"""`hc bw`: bandwidth tests. `hc bw allreduce`: the pure-PyTorch collective sweep
(healthcheck/bandwidth/torch_sweep.py), run on every rank of a torchrun, srun or mpirun."""

from __future__ import annotations

import os

import click

from healthcheck.bandwidth import torch_sweep as ts
from healthcheck.bandwidth.serve import serve as run
from healthcheck.bandwidth.torch_sweep import parse_sizes
from healthcheck.cli.params import integer, number
from healthcheck.core.errors import UsageError

# the sweep's collectives (torch_sweep.SWEEP_COLLECTIVES), here so `--help` imports nothing
_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "alltoall")

ALLREDUCE_EPILOG = """\b
Launch it once per rank (one per GPU on NCCL):
  torchrun --nproc-per-node 8 -m healthcheck bw allreduce
  srun --ntasks-per-node 8 hc bw allreduce
  mpirun -np 16 --host a:8,b:8 hc bw allreduce --master-addr a --master-port 29400
Ranks come from torchrun's RANK/WORLD_SIZE/LOCAL_RANK, Open MPI's
OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK or srun's SLURM_PROCID/NTASKS/LOCALID;
alone, it is one rank. MASTER_ADDR/MASTER_PORT stand in for the options.
Under srun the address defaults to the first node of SLURM_STEP_NODELIST
(else SLURM_JOB_NODELIST) and the port to one derived from SLURM_JOB_ID and
SLURM_STEP_ID (20000-29999); under mpirun both must be given.

\b
Sizes: bytes per rank as nccl-tests' size column (max of send and receive:
all_gather's whole gathered buffer), with binary units: K=KiB, M=MiB, G=GiB,
T=TiB (KB, KiB alike); "A:B" is every doubling from A to B. Default
1M,16M,256M,1G on NCCL and 64K,1M,4M on gloo. Bandwidths in GB/s (1e9):
algbw = size/time of the slowest rank, busbw = algbw x nccl-tests' factor.

\b
Output: rank 0 prints the table (or --format json); the others print only
errors. Each result is checked against exact values (--no-check to skip).

\b
Exit codes (every rank):
  0  the sweep ran and every checked result was exact
  2  wrong results: some collective returned data that differs (#wrong > 0)
  3  could not run: rendezvous failed or timed out, a collective failed or
     timed out (--timeout), no torch or backend, a collective unsupported
  4  usage error: bad options, or the launcher's variables are incomplete

\b
HC_BW_TEST_CORRUPT_RANK=N (tests only): rank N adds 1 to the first element
it sends in each checked run, so the check must report wrong results."""


def _sizes(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[int, ...] | None:
    if value is None:
        return None

    try:
        return parse_sizes(value)
    except ValueError as exc:
        raise UsageError(f"--sizes {value[:80]!r}: {exc}") from None


def _collectives(ctx: click.Context, param: click.Parameter, value: str) -> tuple[str, ...]:
    names = [n.strip().lower().replace("all_to_all", "alltoall") for n in value.split(",")]
    if names == ["all"]:
        return _COLLECTIVES
    unknown = [n for n in names if n not in _COLLECTIVES]
    if unknown or not names:
        raise UsageError(f"--collectives: {', '.join(repr(n) for n in unknown) or 'none given'} not among "
                         f"{', '.join(_COLLECTIVES)} (or all)")
    return tuple(dict.fromkeys(names))


@click.group()
def bw() -> None:
    """Bandwidth tests: collective sweeps across ranks."""


@bw.command(epilog=ALLREDUCE_EPILOG)
@click.option("--collectives", default="all_reduce", show_default=True, callback=_collectives,
              help=f"Comma-separated: {', '.join(_COLLECTIVES)}, or all.")
@click.option("--sizes", callback=_sizes, metavar="LIST",
              help="Sizes in bytes per rank, e.g. 1M,16M,1G or 1K:1M (see below).")
@click.option("--iters", type=integer(1, 100000), default=20, show_default=True,
              help="Timed iterations per size.")
@click.option("--warmup", type=integer(0, 100000), default=5, show_default=True,
              help="Untimed iterations before them.")
@click.option("--check/--no-check", default=True, show_default=True,
              help="Check every result against exact expected values.")
@click.option("--backend", type=click.Choice(["auto", "nccl", "gloo"]), default="auto", show_default=True,
              help="auto: NCCL where there is a GPU, else gloo (CPU).")
@click.option("--timeout", "timeout_s", type=number(1, 86400), default=120.0, show_default=True,
              help="Seconds before the rendezvous or any one collective gives up (init_process_group's timeout).")
@click.option("--master-addr", metavar="HOST", help="Rank 0's host [env MASTER_ADDR].")
@click.option("--master-port", type=integer(1, 65535), metavar="PORT",
              help="The rendezvous port on it [env MASTER_PORT].")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", envvar="HC_FORMAT",
              show_default=True, help="Output format on rank 0's stdout [env HC_FORMAT].")
def allreduce(collectives: tuple[str, ...], sizes: tuple[int, ...] | None, iters: int, warmup: int,
              check: bool, backend: str, timeout_s: float, master_addr: str | None,
              master_port: int | None, fmt: str) -> int:
    """Sweep all_reduce (or --collectives) over sizes with torch.distributed, nccl-tests style.

    Each size: warm-up runs, timed runs, then one run checked against exact values.
    The time is the slowest rank's; every rank's time is kept, so a straggler stands out.
    """

    opts = ts.SweepOptions(collectives=collectives, sizes=sizes, iters=iters, warmup=warmup, check=check,
                           backend=backend, timeout_s=timeout_s, master_addr=master_addr,
                           master_port=master_port)
    try:
        info, report = ts.run_sweep(opts, os.environ)
    except ts.HcError as exc:
        rank = os.environ.get("RANK") or os.environ.get("OMPI_COMM_WORLD_RANK") or os.environ.get("SLURM_PROCID")
        if rank and rank != "0" and not isinstance(exc, ts.UsageError):
            raise type(exc)(f"rank {rank}: {exc}") from None
        raise
    problem = ts.report_error(report)
    if info.rank != 0:
        return int(problem.exit_code) if problem else 0
    if fmt == "json":
        ts.write_stdout(ts.encode_json(report))
    else:
        click.echo(ts.render_table(report))
    if problem:
        raise problem
    return 0


SERVE_EPILOG = """\b
hc sweep starts one on every node of a deep sweep's tests between nodes
(bandwidth.pairs.persistent_workers), over SSH, so torch is imported and
the device set up once per node for the whole sweep, not once per test.
By hand:
  hc bw serve --backend gloo
then one request per line on stdin, e.g.
  {"id": "t1", "rank": 0, "world_size": 2, "master_addr": "a",
   "master_port": 29517, "sizes": [4194304]}
Every line it prints for hc starts with "hc-bw-serve ": once "ready" (or
why not, exit 3), then one reply per request with the exit code
`hc bw allreduce` would give (0, 2, 3, or 4 for a bad request) and its
report. It ends at the end of its input, after --idle-timeout seconds
without a request, or with exit 3 when a rendezvous or collective hangs
past the request's timeout_s."""


@bw.command(epilog=SERVE_EPILOG)
@click.option("--backend", type=click.Choice(["auto", "nccl", "gloo"]), default="auto", show_default=True,
              help="auto: NCCL where there is a GPU, else gloo (CPU).")
@click.option("--local-rank", type=integer(0, 1023), default=0, show_default=True,
              help="The GPU (cuda:N) on NCCL.")
@click.option("--idle-timeout", "idle_s", type=number(1, 86400), default=900.0, show_default=True,
              help="Seconds without a request before it ends.")
def serve(backend: str, local_rank: int, idle_s: float) -> int:
    """Run torch sweeps on request, one JSON line each (for a deep sweep's pair tests)."""

    return run(backend, local_rank, idle_s)
