"""Check the node hc runs on: resolve its limits, run the tier's checks, build the report."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path

from healthcheck.core.config import Config
from healthcheck.core.facts import ProbeContext
from healthcheck.core.model import Report
from healthcheck.core.registry import select, skip_deep_only
from healthcheck.orchestrate.engine import run_checks
from healthcheck.report.build import make_report, utc_now
from healthcheck.runners.local import LocalRunner

# Set by an hc that runs `hc node --local` on a node for a run of its own (agent mode over
# SSH, a sweep's srun tasks): that hc judges the whole run against its history and records
# it, so the run on the node neither reads nor writes the history (its findings would be
# added twice, its results recorded twice, and a sweep's 2,000 tasks would all write one
# SQLite file, often on a shared home).
AGENT_ENV = "HC_AGENT"


def check_this_node(
    config: Config,
    *,
    node: str,
    tier: str,
    only: Iterable[str] = (),
    command: str = "node --local",
    deadline_s: float | None = None,
    root: Path = Path("/"),
    params: dict | None = None,
    require_checks: bool = True,
    skip_deep: str | None = None,
) -> tuple[Report, bool]:
    """Run the checks of `tier` on this machine as `node`; returns the report and whether
    a probe had to be abandoned (the caller should then exit without waiting for it).

    skip_deep: the deep-only checks SKIP for this reason (a job runs on the node, see
    orchestrate/busy.py); the other checks run."""
    started = utc_now()
    deadline = time.monotonic() + deadline_s if deadline_s is not None else None
    node_config = config.for_node(node)
    specs = select(tier, only)
    if skip_deep:
        specs = skip_deep_only(specs, skip_deep)
    ctx = ProbeContext(runner=LocalRunner(), transport="local", root=root, env=dict(os.environ),
                       params={k: v for k, v in (params or {}).items() if v is not None})
    result, abandoned = run_checks(node_config, specs, ctx, deadline=deadline, mode="local")
    report = make_report(
        command=command,
        tier=tier,
        config_digest=config.digest,
        config_path=str(config.path),
        started=started,
        finished=utc_now(),
        nodes=[result],
        require_checks=require_checks,
    )
    return report, abandoned
