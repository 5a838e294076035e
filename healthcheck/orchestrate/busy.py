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

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from healthcheck.actions.slurm import SlurmClient
from healthcheck.core import catalogue
from healthcheck.core.config import Config
from healthcheck.core.model import Finding, NodeResult
from healthcheck.core.nodes import HostlistError, fold, parse_hostlist
from healthcheck.core.stamp import stamp
from healthcheck.core.status import Status
from healthcheck.orchestrate.allocations import asked_by_this_hc
from healthcheck.report.build import run_finding

if TYPE_CHECKING:
    from healthcheck.actions.slurm import SlurmJob

DEEP = "deep"
BUSY_REASON = "node busy: job(s) running"


def skipped_result(node: str, fabric: str, why: str, mode: str) -> NodeResult:
    """A node hc did not check, and why: SKIP, never a verdict (the Slurm transport's shape)."""
    return NodeResult(node=node, fabric=fabric, status=Status.SKIP, mode=mode, error=f"not checked: {why}")


def _slurm_failed(message: str, scope: str, evidence: str) -> Finding:
    return run_finding(catalogue.SLURM_FAILED, message, scope=scope or "run", evidence=evidence)


# what a deep run that could not ask Slurm did, in the words of its run finding and notes
NOT_ASKED = "deep tests not run on {nodes}: Slurm cannot be asked whether a job runs there ({error}); hc does " \
    "not run them beside a job it cannot see (SLURM_CONF, or slurm.sinfo, must reach the cluster's controller)"


def _cannot_ask(nodes: str, error: str) -> Finding:
    """act.E003 (ERROR) for a deep run whose nodes' jobs Slurm could not tell: nothing deep was tested."""
    return _slurm_failed(NOT_ASKED.format(nodes=nodes, error=error), nodes, error)


def no_slurm(config: Config, nodes: str) -> Finding:
    """act.E009 (WARN): no Slurm here (sinfo not installed), so deep tests ran without asking about jobs."""

    message = (f"{config.main.slurm.sinfo} not found: no Slurm here to ask whether a job runs on {nodes}; its "
               "deep tests ran without that check")
    return stamp(catalogue.NO_SLURM(Status.WARN, message), check="hc.run", subject=nodes or "run")


@dataclass
class SweepGuard:
    """A deep sweep's nodes sorted by Slurm: those to test, those skipped (node -> why)."""

    allowed: list[str]
    skipped: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # one line each for stderr
    run_findings: list[Finding] = field(default_factory=list)  # ERROR: the run could not do what was asked
    watch: JobWatch | None = None  # asks again before the sweep's tests between nodes


def guard_sweep(config: Config, nodes: list[str], *, env: dict | None = None, client=None) -> SweepGuard:
    """Which of `nodes` a deep sweep may test: one sinfo; busy nodes skipped, named with their state."""

    client = client or SlurmClient(config.main.slurm, env=env)
    answer = client.node_states(fold(nodes))
    watch = JobWatch(config, env, client, off=answer.not_installed)
    if answer.not_installed:
        return SweepGuard(allowed=list(nodes), watch=watch, run_findings=[no_slurm(config, fold(nodes))], notes=[
            f"{config.main.slurm.sinfo} not found (no Slurm here): deep tests run without checking the nodes "
            "for jobs"])
    if answer.error is not None:
        why = f"Slurm cannot be asked whether a job runs there ({answer.error}): deep tests do not run blind"
        return SweepGuard(allowed=[], skipped={n: why for n in nodes}, notes=[f"not testing {fold(nodes)}: {why}"],
                          run_findings=[_cannot_ask(fold(nodes), answer.error)])
    guard = SweepGuard(allowed=[], watch=watch)
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
        return LocalGuard(run_findings=[no_slurm(config, node)], notes=[
            f"{config.main.slurm.sinfo} not found (no Slurm here): deep tests run without checking the node for "
            "jobs"])
    if answer.error is not None:
        return LocalGuard(f"Slurm cannot be asked whether a job runs here ({answer.error}): deep tests do not run "
                          "blind", run_findings=[_cannot_ask(node, answer.error)])
    state = answer.nodes.get(node)
    if state is None:
        return LocalGuard(notes=[f"{node}: not a node Slurm knows; deep tests run without knowing whether a job "
                                 "is running"])
    if state.busy:
        return LocalGuard(f"{BUSY_REASON} ({state.state})")
    return LocalGuard()


@dataclass
class JobWatch:
    """A deep sweep's check, before each round of tests between nodes, that no job took a
    node since the sweep's idle check (a job that starts five seconds in would share the
    node with hc's bandwidth tests, which would measure the job and slow it down).

    One sinfo for the round's nodes; for those it shows busy, one squeue naming the jobs.
    A job of this hc's own (its workers' and tests' allocations, whose names carry its pid
    and host: allocations.OwnJob; the allocation hc runs in) is not one; another hc's is
    (a sweep beside this one measures the same links, and would be measured with them).
    A node a job took is not tested again in the sweep (`taken`); a round where Slurm
    does not answer tests nothing it could not vouch for (`check` says why), and the next
    round asks again. Where sinfo is not installed there is nothing to ask."""

    config: Config
    env: Mapping[str, str] | None = None
    client: SlurmClient | None = None  # built from config and env when None
    taken: dict[str, str] = field(default_factory=dict)  # node -> the job(s) that took it
    off: bool = False  # no Slurm here: nothing to watch

    @property
    def slurm(self) -> SlurmClient:
        if self.client is None:
            self.client = SlurmClient(self.config.main.slurm, env=dict(self.env) if self.env is not None else None)
        return self.client

    def check(self, nodes: Iterable[str]) -> dict[str, str]:
        """node -> why it must not be tested now, for the nodes of `nodes` that must not."""
        nodes = list(dict.fromkeys(nodes))
        out = {n: self.taken[n] for n in nodes if n in self.taken}
        ask = [n for n in nodes if n not in self.taken]
        if self.off or not ask:
            return out
        answer = self.slurm.node_states(fold(ask))
        if answer.not_installed:
            self.off = True
            return out
        if answer.error is not None:
            why = f"Slurm did not say whether a job took the node ({answer.error}): not tested blind"
            return {**out, **{n: why for n in ask}}
        busy = [n for n in ask if (s := answer.nodes.get(n)) is not None and s.busy]
        if busy:
            out.update(self._jobs_on(busy))
        return out

    def _jobs_on(self, busy: list[str]) -> dict[str, str]:
        """For nodes sinfo shows busy: the ones a job other than hc's own took (for good),
        or, where squeue does not answer, why they are not tested this round."""

        jobs, error = self.slurm.jobs_on(fold(busy))
        if error is not None:
            why = f"Slurm shows a job on the node and did not say whose ({error}): not tested beside it"
            return {n: why for n in busy}
        out: dict[str, str] = {}
        for node in busy:
            theirs = []
            for job in jobs:
                try:
                    on_node = node in parse_hostlist(job.nodes)
                except HostlistError:
                    on_node = True  # squeue listed it for these nodes: a hostlist hc cannot read is no alibi
                if on_node and not self._own(job):
                    theirs.append(job)
            if theirs:
                ids = ", ".join(j.id for j in theirs[:5]) + (f" and {len(theirs) - 5} more" if len(theirs) > 5 else "")
                self.taken[node] = out[node] = (f"job {ids} took {node} during the sweep: its tests between "
                                                "nodes stop there")
        return out

    def _own(self, job: SlurmJob) -> bool:
        """A job this hc started for its sweep (a worker's or a test's allocation), or the one it runs in."""

        inside = (self.env if self.env is not None else os.environ).get("SLURM_JOB_ID", "")
        if inside and job.id.split(".")[0] == inside:
            return True
        return job.uid == os.getuid() and asked_by_this_hc(job.name)
