"""The settings every test of one sweep between nodes shares, read once from the first
node's fabric (`PairPlan`), and the two things each transport derives from them: the
worker's command line (`worker_argv`) and the address the members meet at
(`node_address`). Settings only: what is built from them (a worker pool, a transport)
lives elsewhere and for the sweep's length."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from healthcheck.bandwidth.judge import Floor, floors
from healthcheck.core.units import format_size, parse_size
from healthcheck.runners.ssh import resolve_target

if TYPE_CHECKING:
    from healthcheck.core.config import Config
    from healthcheck.core.config.schema import PairSettings, TorchSweepSettings

SCOPE = "pair"  # the floors' scope: bandwidth.<collective>.pair


@dataclass(frozen=True)
class PairPlan:
    """The settings every test of the run shares, from the first node's fabric."""

    collective: str
    floors: tuple[Floor, ...]
    sizes: tuple[int, ...]  # bytes, ascending: what each test measures
    judged: int  # the size a test is judged at: the largest with a floor, else the largest measured
    floor: float | None  # the pair floor at `judged` (GB/s); None: judged against its peers
    limit_key: str  # the fabric key that set `floor` ("" where none)
    peer_fraction: float
    repeats: int
    torch: TorchSweepSettings
    pairs: PairSettings
    # the first tool listed is the one the pair matrix shows and localization compares with peers
    tools: tuple[str, ...]
    gpus: int  # nccl-tests between nodes runs one rank per GPU the fabric names

    @classmethod
    def from_config(cls, config: Config, node: str) -> PairPlan:
        """The plan `node`'s fabric gives (the sweep's first node's)."""
        limits = config.for_node(node).limits
        bw = limits.bandwidth
        collective = bw.collectives[0]
        wanted = tuple(floors(bw, collective, SCOPE))
        sizes = tuple(sorted({parse_size(s) for s in bw.sizes} | {f.size_bytes for f in wanted}))
        judged = wanted[-1].size_bytes if wanted else sizes[-1]
        floor = next((f for f in wanted if f.size_bytes == judged), None)
        return cls(collective=collective, floors=wanted, sizes=sizes, judged=judged,
                   floor=floor.gbytes_per_s if floor else None, limit_key=floor.key if floor else "",
                   peer_fraction=bw.peer_fraction, repeats=bw.repeats, torch=bw.torch, pairs=bw.pairs,
                   # the torch sweep needs bandwidth.torch enabled
                   tools=tuple(t for t in bw.pairs.tests if t != "torch" or bw.torch.enabled),
                   gpus=limits.gpu.count or 0)


def worker_argv(remote_hc: str, plan: PairPlan, master: str) -> tuple[str, ...]:
    """`hc bw allreduce` as one member of a test runs it, meeting the others at `master`."""
    torch = plan.torch
    return (remote_hc, "bw", "allreduce", "--format", "json", "--collectives", plan.collective,
            "--sizes", ",".join(format_size(s) for s in plan.sizes), "--iters", str(torch.iters),
            "--warmup", str(torch.warmup), "--backend", torch.backend,
            "--timeout", str(max(5, int(plan.pairs.timeout_s) - 10)),
            "--master-addr", master, "--master-port", str(plan.pairs.port))


def node_address(config: Config, node: str) -> str:
    """How the other members reach `node`: the host name SSH would connect to."""

    return resolve_target(node, config.main.ssh).hostname
