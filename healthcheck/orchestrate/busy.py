"""Deep tests only where no one else's job runs.

The deep tier's tests (bandwidth, and the pair tests of a sweep) take a node's GPUs and
HCAs to themselves: run beside a user's job they slow the job down and measure the job's
traffic, not the node. So before a deep run hc asks Slurm, with one `sinfo`, which nodes
have a job (allocated, mixed, completing, draining), and:

- a sweep (`hc sweep --tier deep`, `hc node NODES --tier deep` over SSH) skips every busy
  node, named with its state (the same SKIP result the Slurm transport gives a node it
  cannot place), so neither its own deep tests nor any pair test touch it;
- `hc node --local --tier deep` on a busy node runs its other checks and SKIPs the
  deep-only ones (those whose tiers do not include standard) with the reason
  "node busy: job(s) running". Inside a job ($SLURM_JOB_ID set: `hc sweep --via slurm`
  or an operator's sbatch/salloc) the node is busy with that job, so deep tests run only
  when the job holds its nodes alone: `scontrol show job` says OverSubscribe=NO (the job
  was submitted with `--exclusive`, as `--via slurm` does for the deep tier).

Without an answer from Slurm: where `sinfo` is not installed at all (no Slurm on this
site) the deep tests run, with a warning; where Slurm is installed but does not answer,
hc cannot tell whether a job runs, so deep tests do not run blind: they are skipped, with
an ERROR run finding (act.E003) naming Slurm's message. A node Slurm does not know runs no
Slurm job: it is tested, with a warning naming it (a node whose name differs from
Slurm's should be named as Slurm names it, or HC_NODE_NAME set). Quick and standard
tiers never ask.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from healthcheck.core import catalogue
from healthcheck.core.config import Config
from healthcheck.core.model import Finding, NodeResult
from healthcheck.core.nodes import fold
from healthcheck.core.registry import CheckSpec
from healthcheck.core.status import Status

DEEP = "deep"
BUSY_REASON = "node busy: job(s) running"


def skipped_result(node: str, fabric: str, why: str, mode: str) -> NodeResult:
    """A node hc did not check, and why: SKIP, never a verdict (the Slurm transport's shape)."""
    return NodeResult(node=node, fabric=fabric, status=Status.SKIP, mode=mode, error=f"not checked: {why}")


def deep_only(spec: CheckSpec) -> bool:
    """A check of the deep tier that the standard tier does not run (a bandwidth test)."""
    return DEEP in spec.tiers and "standard" not in spec.tiers


def skip_deep_only(specs: Iterable[CheckSpec], reason: str) -> list[CheckSpec]:
    """`specs` with every deep-only check skipped for `reason` before anything is gathered."""
    def skip(_limits: object) -> str:
        return reason

    return [dataclasses.replace(s, applies=skip) if deep_only(s) else s for s in specs]


def _slurm_failed(message: str, scope: str, evidence: str) -> Finding:
    from healthcheck.report.build import run_finding

    return run_finding(catalogue.SLURM_FAILED, message, scope=scope or "run", evidence=evidence)


@dataclass
class SweepGuard:
    """A deep sweep's nodes sorted by Slurm: those to test, those skipped (node -> why)."""

    allowed: list[str]
    skipped: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # one line each for stderr
    run_findings: list[Finding] = field(default_factory=list)  # ERROR: the run could not do what was asked


def guard_sweep(config: Config, nodes: list[str], *, env: dict | None = None, client=None) -> SweepGuard:
    """Which of `nodes` a deep sweep may test: one sinfo; busy nodes skipped, named with their state."""
    from healthcheck.actions.slurm import SlurmClient

    client = client or SlurmClient(config.main.slurm, env=env)
    answer = client.node_states(fold(nodes))
    if answer.not_installed:
        return SweepGuard(allowed=list(nodes), notes=[
            f"{config.main.slurm.sinfo} not found (no Slurm here): deep tests run without checking the nodes "
            "for jobs"])
    if answer.error is not None:
        why = f"Slurm did not answer ({answer.error}): deep tests do not run where a job may be running"
        finding = _slurm_failed(f"deep tests not run on {fold(nodes)}: cannot read node states from Slurm: "
                                f"{answer.error}", fold(nodes), answer.error)
        return SweepGuard(allowed=[], skipped={n: why for n in nodes}, notes=[f"not testing {fold(nodes)}: {why}"],
                          run_findings=[finding])
    guard = SweepGuard(allowed=[])
    unknown: list[str] = []
    for node in nodes:
        state = answer.nodes.get(node)
        if state is not None and state.busy:
            guard.skipped[node] = f"{BUSY_REASON} ({state.state})"
            guard.notes.append(f"skipped {node} ({guard.skipped[node]})")
            continue
        if state is None:
            unknown.append(node)
        guard.allowed.append(node)
    if unknown:
        guard.notes.append(f"{fold(unknown)}: not a node Slurm knows; deep tests run there without knowing "
                           "whether a job is running")
    return guard


@dataclass
class LocalGuard:
    """Whether this node's deep-only checks may run: None, or why they skip."""

    skip_reason: str | None = None
    notes: list[str] = field(default_factory=list)
    run_findings: list[Finding] = field(default_factory=list)


def guard_this_node(config: Config, node: str, env: Mapping[str, str], *, client=None) -> LocalGuard:
    """`hc node --local --tier deep`: may this node's deep-only checks run now?

    Inside a job ($SLURM_JOB_ID) only when that job holds the node alone (OverSubscribe=NO);
    outside one, only when sinfo shows no job on the node."""
    from healthcheck.actions.slurm import SlurmClient

    client = client or SlurmClient(config.main.slurm, env=dict(env))
    job = (env.get("SLURM_JOB_ID") or "").strip()
    if job:
        exclusive, error = client.job_exclusive(job)
        if error is not None:
            why = f"inside job {job}, but Slurm did not say whether it holds the node alone ({error})"
            return LocalGuard(f"{why}: deep tests do not run beside other jobs", run_findings=[_slurm_failed(
                f"deep tests not run on {node}: {why}", node, error)])
        if not exclusive:
            return LocalGuard(f"{BUSY_REASON} (job {job} is not exclusive: submit it with --exclusive)")
        return LocalGuard()
    answer = client.node_states(node)
    if answer.not_installed:
        return LocalGuard(notes=[f"{config.main.slurm.sinfo} not found (no Slurm here): deep tests run without "
                                 "checking the node for jobs"])
    if answer.error is not None:
        return LocalGuard(f"Slurm did not answer ({answer.error}): deep tests do not run where a job may be running",
                          run_findings=[_slurm_failed(f"deep tests not run on {node}: cannot read its state from "
                                                      f"Slurm: {answer.error}", node, answer.error)])
    state = answer.nodes.get(node)
    if state is None:
        return LocalGuard(notes=[f"{node}: not a node Slurm knows; deep tests run without knowing whether a job "
                                 "is running"])
    if state.busy:
        return LocalGuard(f"{BUSY_REASON} ({state.state})")
    return LocalGuard()
