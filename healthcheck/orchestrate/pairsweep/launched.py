"""`LauncherTransport`: torch tests started by a launcher (`bandwidth.pairs.launcher: mpirun |
srun`) rather than by hc's own SSH: one launcher process starts `hc bw allreduce` once per
member node, `runners.launch` reads each rank's output back and kills every rank at the
test's timeout. A TorchOutcome (transport.py): rank 0's samples, or None and one line
naming the members (the launcher missing, the timeout, a rank failing, no readable
result), with what the launcher printed, whole (bounded), as the test's evidence. Also
the command lines a launcher starts a persistent worker with (`serve_spec`, workers.py).

- mpirun (Open MPI): `--host a,b`, one rank per host in the members' order, so rank 0
  is the first member and the rendezvous is its address (as over SSH); the torch
  variables go with `-x`; as root it needs `--allow-run-as-root`; its ssh gets hc's
  view of the nodes (`--mca plm_rsh_args`, runners/ompi.py) unless the site set its own.
- srun: inside the allocation hc runs in (SLURM_JOB_ID set) a step of it (`--jobid
  --overlap`); else an allocation of its own, whole nodes (`--exclusive`), a bounded
  wait (`--immediate`) and a time limit from the test's where the partition allows,
  cancelled if srun had to be killed or hc is stopped (orchestrate/allocations.py).
  Slurm, not the members' order, decides which node runs task 0, so the worker takes
  the rendezvous host from the step (SLURM_STEP_NODELIST's first node is task 0's).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from healthcheck.orchestrate.allocations import OwnJob, needs_own_job
from healthcheck.orchestrate.pairsweep.plan import PairPlan, node_address, worker_argv
from healthcheck.orchestrate.pairsweep.transport import TorchOutcome, samples_from_json
from healthcheck.runners.launch import Launch, LaunchResult, launch, mpirun_launch, srun_launch
from healthcheck.runners.ompi import site_args
from healthcheck.runners.ssh import SshError

if TYPE_CHECKING:
    from healthcheck.core.config import Config


# torchrun's variables in hc's own environment would reach the ranks (srun hands its whole
# environment on) and the worker reads them before any launcher's: each rank alone
_TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
                  "MASTER_PORT")
_SAID = 300  # characters of a rank's or the launcher's last words kept in a why


class LauncherTransport:
    """Every torch test of a sweep started through plan.pairs.launcher (mpirun or srun)."""

    def __init__(self, config: Config, plan: PairPlan) -> None:
        self.config = config
        self.plan = plan

    def run(self, members: Sequence[str]) -> TorchOutcome:
        """One test: rank 0's samples, or None and why."""

        config, plan = self.config, self.plan
        kind = plan.pairs.launcher
        who = ",".join(members)
        env = launch_env(os.environ)
        # outside an allocation srun asks for a job of hc's own: named, time-limited, cancelled
        # if srun had to be killed or hc is stopped
        job = OwnJob(config.main.slurm, env, "pair", plan.pairs.timeout_s) if needs_own_job(kind, env) else None
        result: LaunchResult | None = None
        try:
            spec = mpirun_spec(config, plan, members, env) if kind == "mpirun" else srun_spec(
                config, plan, members, env, job.name if job is not None else f"hc-pair-{uuid.uuid4().hex[:12]}",
                time_args=job.srun_args() if job is not None else ())
            result = launch(spec, timeout_s=plan.pairs.timeout_s, env=env)
            got = outcome(result, members, plan.pairs.timeout_s)
        except SshError as exc:  # the rendezvous address: the ssh config names members[0] badly
            got = TorchOutcome(None, f"{who}: {exc.message}")
        except Exception as exc:  # one test's surprise is this test's ERROR, not the sweep's end
            got = TorchOutcome(None, f"{who}: {kind}: {type(exc).__name__}: {exc}")
        finally:
            # srun killed or never started: the allocation it asked for may outlive it
            settled = job.settle_launch(result) if job is not None else ""
        if job is not None and settled and not job.ended:  # a cancel that failed is said, never dropped
            got = replace(got, why=f"{got.why}; {settled}" if got.why else f"{who}: {settled}")
        return got

    def release(self, node: str) -> None:
        """Nothing is held between tests: each test's launcher ends with it."""

    def close(self) -> list[str]:
        return []


def launch_env(environ: Mapping[str, str]) -> dict[str, str]:
    """hc's environment for the launcher, less torchrun's variables (see _TORCHRUN_VARS)."""
    return {k: v for k, v in environ.items() if k not in _TORCHRUN_VARS}


def mpirun_spec(config: Config, plan: PairPlan, members: Sequence[str], env: Mapping[str, str] | None = None
                ) -> Launch:
    """`mpirun -np N --host a,b ... hc bw allreduce ... --master-addr <members[0]>`; env: the
    launcher's environment (default hc's), which says whether the site set mpirun's ssh itself."""

    program = worker_argv(config.main.ssh.remote_hc, plan, node_address(config, members[0]))
    # one rank per member in the members' order (rank 0 on members[0], the rendezvous), and
    # unpinned: Open MPI binds a rank to one core by default, which ssh and srun do not
    extra = (*site_args(config.main.ssh, os.environ if env is None else env), "--map-by", "ppr:1:node",
             "--bind-to", "none")
    return mpirun_launch(program, np=len(members), hosts=members, allow_run_as_root=os.geteuid() == 0,
                         extra=extra, env=plan.torch.env)


def srun_spec(config: Config, plan: PairPlan, members: Sequence[str], env: Mapping[str, str],
              job_name: str, time_args: tuple[str, ...] = ()) -> Launch:
    """`srun --nodes=N --ntasks=N --ntasks-per-node=1 --nodelist=a,b ... hc bw allreduce ...`:
    a step of hc's own allocation where env has one, else a job of its own (`time_args`:
    its time limit, OwnJob.srun_args)."""
    s = config.main.slurm
    program = _without_master_addr(worker_argv(s.remote_hc, plan, ""))
    job = env.get("SLURM_JOB_ID")
    if job:
        extra: tuple[str, ...] = (f"--jobid={job}", "--overlap")  # beside hc's own step, on its nodes
        wait_s: int | None = None
    else:
        extra = ("--exclusive", *time_args)  # no user's job shares the nodes while they are measured
        # a busy node fails the test fast instead of queueing, and leaves the test time to run
        wait_s = max(1, min(s.sweep_wait_s, int(plan.pairs.timeout_s) // 3))
    return srun_launch(program, srun=s.srun, nodelist=",".join(members), nodes=len(members),
                       ntasks=len(members), ntasks_per_node=1, job_name=job_name, immediate_s=wait_s,
                       extra=extra, env=plan.torch.env)


def serve_spec(config: Config, plan: PairPlan, node: str, program: Sequence[str], env: Mapping[str, str],
               job_name: str, time_args: tuple[str, ...] = ()) -> tuple[Launch, bool]:
    """One persistent worker (`hc bw serve`, workers.py) as one task on `node`, its output
    unlabelled (read as it comes); and whether srun asked for an allocation of its own
    (named job_name, limited by `time_args`: OwnJob)."""
    if plan.pairs.launcher == "mpirun":
        return mpirun_launch(program, np=1, hosts=[node], allow_run_as_root=os.geteuid() == 0,
                             extra=(*site_args(config.main.ssh, env), "--bind-to", "none"), env=plan.torch.env,
                             tag_output=False), False
    s = config.main.slurm
    job = env.get("SLURM_JOB_ID")
    if job:
        extra: tuple[str, ...] = (f"--jobid={job}", "--overlap")
        wait_s: int | None = None
    else:
        # the node held, whole, for the sweep: no user's job lands on it between two of its tests
        extra = ("--exclusive", *time_args)
        wait_s = max(1, min(s.sweep_wait_s, int(plan.pairs.timeout_s) // 3))
    spec = srun_launch(program, srun=s.srun, nodelist=node, nodes=1, ntasks=1, ntasks_per_node=1,
                       job_name=None if job else job_name, immediate_s=wait_s, extra=extra, env=plan.torch.env,
                       label=False)
    return spec, not job


def _without_master_addr(argv: Sequence[str]) -> list[str]:
    """The worker's argv less `--master-addr X`: under srun it takes task 0's node from the step."""
    words = list(argv)
    if "--master-addr" in words:
        i = words.index("--master-addr")
        del words[i:i + 2]
    return words


def outcome(result: LaunchResult, members: Sequence[str], timeout_s: float) -> TorchOutcome:
    """Rank 0's samples with what went wrong on the way, or None and why; `why` names the
    members and, where something went wrong, the launcher's output is the evidence."""
    who = ",".join(members)
    if result.not_found:
        return TorchOutcome(None, f"{who}: {result.argv[0]} not found (bandwidth.pairs.launcher: {result.kind})")
    if result.error:
        return TorchOutcome(None, f"{who}: {result.kind}: {result.error}")
    problems = _problems(result, members)
    evidence = launcher_evidence(result)
    if result.timed_out:
        return TorchOutcome(None, f"{who}: {result.kind} did not finish within {timeout_s:g}s"
                            + (f"; {problems}" if problems else ""), evidence)
    samples = samples_from_json("\n".join(result.ranks.get(0, [])))
    if not samples:
        return TorchOutcome(None, f"{who}: {problems or 'the torch sweep printed no result'}", evidence)
    return TorchOutcome(samples, f"{who}: {problems}", evidence) if problems else TorchOutcome(samples)


def launcher_evidence(result: LaunchResult) -> str:
    """The command line, how it ended, and what the launcher and the ranks said on stderr, whole
    (bounded by TorchOutcome): Open MPI's banners say why in their middle, not in their last line."""
    ended = "killed at hc's timeout" if result.timed_out else f"exit {result.returncode}"
    head = f"$ {' '.join(result.argv)}  ({ended}, {result.duration_s:.1f}s)"
    return "\n".join(part for part in (head, result.stderr.strip("\n")) if part)


def _problems(result: LaunchResult, members: Sequence[str]) -> str:
    """Each failed rank's exit code and last words, then the launcher's where it failed."""
    out = []
    for rank, code in sorted(result.exit_codes.items()):
        if code != 0:
            # mpirun's rank i runs on members[i]; Slurm orders srun's tasks itself
            where = f"{members[rank]} (rank {rank})" if result.kind == "mpirun" and rank < len(members) \
                else f"task {rank}"
            said = _said(result.rank_stderr.get(rank, []) or result.ranks.get(rank, []), members)
            out.append(f"{where} exited {code}" + (f": {said}" if said else ""))
    if not result.ok and not result.timed_out:
        said = launcher_said(result.kind, result.stderr, members)
        out.append(f"{result.kind} exited {result.returncode}" + (f": {said}" if said else ""))
    return "; ".join(out)


def launcher_said(kind: str, stderr: str, members: Sequence[str]) -> str:
    """The launcher's own line that says most: srun's last naming a member (`srun: error: b:
    task 1: Exited`); mpirun's first (ssh's complaint, `ssh: Could not resolve hostname b`,
    comes before the banners Open MPI adds, whose last line only names the node it gave up on)."""
    lines = stderr.splitlines()
    if kind != "mpirun":
        return _said(lines, members)
    words = [line.strip() for line in lines if any(c.isalnum() for c in line)]
    naming = [line for line in words if any(m in line for m in members)]
    return (naming or words or [""])[0][-_SAID:]


def _said(lines: Sequence[str], members: Sequence[str]) -> str:
    """The last line naming a member (which one failed: `ssh: connect to host b`, `srun:
    error: b: task 1: Exited`), else the last line with any word in it; one line, bounded."""
    words = [line.strip() for line in lines if any(c.isalnum() for c in line)]
    naming = [line for line in words if any(m in line for m in members)]
    return (naming or words or [""])[-1][-_SAID:]
