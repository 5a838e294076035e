"""Which transport a sweep's torch tests take, decided once per sweep from the plan:
persistent workers where `bandwidth.pairs.persistent_workers` is on (the default), each
started as `bandwidth.pairs.launcher` says; else `hc bw allreduce` per test, over hc's
own SSH or through mpirun or srun."""

from __future__ import annotations

from typing import TYPE_CHECKING

from healthcheck.orchestrate.pairsweep.launched import LauncherTransport
from healthcheck.orchestrate.pairsweep.plan import PairPlan
from healthcheck.orchestrate.pairsweep.ssh import SshTransport
from healthcheck.orchestrate.pairsweep.transport import PairTransport
from healthcheck.orchestrate.pairsweep.workers import WorkerPool, WorkerTransport

if TYPE_CHECKING:
    from healthcheck.core.config import Config


def per_test_transport(config: Config, plan: PairPlan) -> PairTransport:
    """`hc bw allreduce` started for each test by the fabric's launcher (ssh, mpirun, srun)."""
    if plan.pairs.launcher == "ssh":
        return SshTransport(config, plan)
    return LauncherTransport(config, plan)


def open_transport(config: Config, plan: PairPlan, nodes: int) -> PairTransport:
    """The transport for one sweep over `nodes` nodes; the caller closes it."""
    per_test = per_test_transport(config, plan)
    if not plan.pairs.persistent_workers:
        return per_test
    return WorkerTransport(config, plan, WorkerPool(config, plan, nodes), per_test)
