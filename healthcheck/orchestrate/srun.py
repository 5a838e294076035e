"""Check nodes through Slurm: one `srun` task per node runs `hc node --local`, and the
labelled output of every task is merged. This is how a sweep scales to thousands of
nodes: Slurm does the fan-out, hc adds no machinery of its own.

Slurm cannot place a task on every node: a node hc drained (the normal state after any
`--act`) takes no new job, so srun would pend until its timeout and nothing would be
checked. The nodes are therefore sorted first, from one `sinfo`:

- placeable (up, responding, not drained): one srun task each, inside the caller's
  allocation where there is one, else in a new allocation whose wait is bounded
  (`srun --immediate`), with a time limit from the sweep's where the partition allows,
  and cancelled if srun does not finish or hc is stopped (orchestrate/allocations.py);
- drained by hc: checked over SSH, so a fixed node can be resumed;
- anyone else's (drained for another reason, DOWN, not responding), nodes busy with a
  job, and nodes outside the caller's allocation: not checked, and named as skipped
  with the reason.

The deep tier takes its nodes to itself: the allocation hc submits asks for them whole
(`srun --exclusive`), so no user's job shares them while the bandwidth tests run, and a
node with any job on it (mixed too) is skipped rather than waited for. Inside the
caller's allocation hc submits nothing: `hc node --local` on each node then runs the
deep tests only if that allocation is exclusive (orchestrate/busy.py).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import msgspec

from healthcheck.actions.slurm import SlurmClient
from healthcheck.core import catalogue
from healthcheck.core.config import Config
from healthcheck.core.errors import HcError
from healthcheck.core.model import Finding, NodeResult
from healthcheck.core.nodes import expand, fold
from healthcheck.orchestrate.allocations import OwnJob
from healthcheck.orchestrate.busy import DEEP, skipped_result
from healthcheck.orchestrate.engine import unreachable_result
from healthcheck.orchestrate.localrun import AGENT_ENV
from healthcheck.orchestrate.remote import check_over_ssh
from healthcheck.report.build import action_finding
from healthcheck.report.jsonio import decode
from healthcheck.runners.launch import Launch, LaunchResult, launch, srun_launch


@dataclass
class SrunOutcome:
    results: list[NodeResult]
    run_findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # one line each for stderr


def srun_argv(config: Config, nodes: list[str], *, tier: str, only: Iterable[str], since: float | None,
              job_name: str = "hc-sweep", wait_s: int | None = None, exclusive: bool = False,
              time_args: tuple[str, ...] = ()) -> list[str]:
    """`srun --label`, one task per node, running `hc node --local --format json` there;
    `exclusive`: the nodes whole (`--exclusive`), for the deep tier's own allocation;
    `time_args`: the own allocation's time limit (OwnJob.srun_args)."""
    return list(_srun_launch(config, nodes, tier=tier, only=only, since=since, job_name=job_name,
                             wait_s=wait_s, exclusive=exclusive, time_args=time_args).argv)


def _srun_launch(config: Config, nodes: list[str], *, tier: str, only: Iterable[str], since: float | None,
                 job_name: str, wait_s: int | None, exclusive: bool = False,
                 time_args: tuple[str, ...] = ()) -> Launch:
    s = config.main.slurm
    program = [s.remote_hc, "node", "--local", "--format", "json", "--tier", tier, *config.remote_args()]
    only = list(only)
    if only:
        program += ["--checks", ",".join(only)]
    if since is not None:
        program += ["--since", str(since)]
    # AGENT_ENV: this hc judges and records the run, not each task (srun passes hc's environment on)
    return srun_launch(program, srun=s.srun, nodelist=fold(nodes), nodes=len(nodes), ntasks=len(nodes),
                       ntasks_per_node=1, job_name=job_name, immediate_s=wait_s, env={AGENT_ENV: "1"},
                       extra=(*(("--exclusive",) if exclusive else ()), *time_args))


def check_over_srun(config: Config, nodes: list[str], *, tier: str, only: Iterable[str] = (),
                    since: float | None = None, env: dict | None = None, mode: str = "auto") -> SrunOutcome:

    only = list(only)
    run_env = dict(env) if env is not None else dict(os.environ)
    states, error = SlurmClient(config.main.slurm, env=run_env).nodes(fold(nodes))
    out = SrunOutcome(results=[])
    if error is not None:
        # without states nothing can be sorted: try them all, bounded as always
        out.notes.append(f"cannot read node states from Slurm ({error}); trying srun on every node")
        placeable, over_ssh, skipped = list(nodes), list[str](), dict[str, str]()
    else:
        placeable, over_ssh, skipped = _sort(nodes, states, _allocation(run_env), whole=tier == DEEP)
    by_node: dict[str, NodeResult] = {}
    if placeable:
        for r in _run_srun(config, placeable, tier=tier, only=only, since=since, env=run_env, out=out):
            by_node[r.node] = r
    if over_ssh:
        out.notes.append(f"checking {fold(over_ssh)} over SSH: drained by hc, so Slurm cannot place a task there")
        for r in check_over_ssh(config, over_ssh, tier=tier, only=only, mode=mode, params={"since": since}):
            by_node[r.node] = r
    for node, why in skipped.items():
        out.notes.append(f"skipped {node} ({why})")
        by_node[node] = skipped_result(node, config.fabric_of(node), why, "slurm")
    out.results = [by_node[n] for n in nodes if n in by_node]
    return out


def _allocation(env: Mapping[str, str]) -> set[str] | None:
    """The nodes of the allocation hc runs in (an sbatch or salloc), or None outside one."""
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not env.get("SLURM_JOB_ID") or not nodelist:
        return None

    return set(expand([nodelist]))


def _sort(nodes: list[str], states: Mapping, allocation: set[str] | None, whole: bool = False
          ) -> tuple[list[str], list[str], dict[str, str]]:
    """whole: hc's allocation will ask for the nodes whole (deep tier), so a node sharing
    any job (mixed) cannot be placed either."""
    placeable: list[str] = []
    over_ssh: list[str] = []
    skipped: dict[str, str] = {}
    for node in nodes:
        state = states.get(node)
        if state is None:
            skipped[node] = "not a node Slurm knows"
        elif state.hands_off:
            skipped[node] = f"{state.hands_off}{f': {state.reason}' if state.reason else ''}"
        elif state.drained_by_hc:
            over_ssh.append(node)
        elif state.drained:
            skipped[node] = f"drained by someone else: {state.reason or 'no reason'}"
        elif allocation is not None:
            if node in allocation:
                placeable.append(node)
            else:
                skipped[node] = f"{state.state}, not in this job's allocation"
        elif state.state.split("+", 1)[0] in ("allocated", "completing") or (whole and state.busy):
            skipped[node] = f"{state.state}: busy with a job"
        else:
            placeable.append(node)
    return placeable, over_ssh, skipped


def _run_srun(config: Config, nodes: list[str], *, tier: str, only: list[str], since: float | None,
              env: dict, out: SrunOutcome) -> list[NodeResult]:

    settings = config.main.slurm
    inside = _allocation(env) is not None
    # outside an allocation, a job of hc's own: named to be cancelled without touching others,
    # time-limited, and cancelled on a stop (orchestrate/allocations.py)
    job = None if inside else OwnJob(settings, env, "sweep", settings.sweep_timeout_s)
    job_name = job.name if job is not None else f"hc-sweep-{uuid.uuid4().hex[:12]}"
    wait_s = None if inside else settings.sweep_wait_s
    # the deep tier's own allocation holds its nodes whole; inside the caller's, that job decides
    spec = _srun_launch(config, nodes, tier=tier, only=only, since=since, job_name=job_name, wait_s=wait_s,
                        exclusive=tier == DEEP and not inside, time_args=job.srun_args() if job else ())
    result: LaunchResult | None = None
    try:
        # SIGTERM first at the timeout: srun then cancels its step before it is killed
        result = launch(spec, timeout_s=settings.sweep_timeout_s, env=env)
    finally:
        if job is not None:  # srun killed: the job it asked for may pend or run on
            settled = job.settle_launch(result, "the sweep's job")
            if settled:
                out.notes.append(settled)
    if result.not_found:
        raise HcError(f"{spec.argv[0]} not found: the Slurm transport needs srun (or use --via ssh)")
    by_node: dict[str, NodeResult] = {}
    problems: list[str] = []
    for task, lines in sorted(result.ranks.items()):
        try:
            report = decode("\n".join(lines).encode(), f"srun task {task}")
        except HcError as exc:
            problems.append(str(exc))
            continue
        for n in report.nodes:
            by_node[n.node] = msgspec.structs.replace(n, mode="slurm")
    missing = [n for n in nodes if n not in by_node]
    if missing:
        said = [line for line in result.stderr.splitlines() if line.strip()]
        why = "; ".join(problems) or (said[-1] if said else f"srun exited {result.returncode}")
        if result.timed_out:
            why = f"srun did not finish within {settings.sweep_timeout_s:g}s" + (f": {why}" if why else "")
        # one launcher failure is one finding for the run, not one row per node
        out.run_findings.append(action_finding(
            catalogue.LAUNCH_FAILED, f"no report from srun for {fold(missing)}: {why}", scope=fold(missing),
            evidence=result.stderr[-2000:] or None))
    return [by_node.get(n) or unreachable_result(n, config.fabric_of(n), "no report from srun (see act.E006)",
                                                 "slurm") for n in nodes]
