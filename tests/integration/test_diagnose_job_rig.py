"""`hc diagnose job` (srun-launched jobs on the rig's real Slurm, collected through `srun
--overlap --jobid`, and over SSH with `--via ssh`) and `hc diagnose hosts` (torchrun-launched
jobs, collected over SSH with `hc diagnose collect --local` on every host): the verdict names the odd rank and the class,
within 30 s of being called (the issue's target), and never a healthy rank.

The jobs are tests/rig/jobs/hang_job.py, started and ended (by pid, nothing left behind) by
the helpers of test_diagnose_live_rig.py. The scenarios whose hung job the live collector's
tests also need (skip, sleep, stop, kill under torchrun; sleep, stop, size, port under srun)
are diagnosed there, on the job those tests started: one four-rank start for both. So is
the sleeping srun job over SSH (`--via ssh`).
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import sys
import time
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_diagnose_live_rig as live_rig
from support import run_hc

from healthcheck.runners.launch import srun_launch

NODES = live_rig.NODES
PYTHON = live_rig.PYTHON
_PORTS = live_rig._PORTS
start_srun, start_torchrun = live_rig.start_srun, live_rig.start_torchrun
wait_hung, wait_until = live_rig.wait_hung, live_rig.wait_until
net, jobs, slurm = live_rig.net, live_rig.jobs, live_rig.slurm  # the fixtures, by name
site_config, diagnose, check, hosts = live_rig.site_config, live_rig.diagnose, live_rig.check, live_rig.hosts
_job_id, BOUND_S = live_rig.job_id, live_rig.BOUND_S

pytestmark = pytest.mark.rig


# ------------------------------------------------------------------------------ srun + hc diagnose job


def test_job_that_does_not_exist_on_real_slurm(slurm, net, tmp_path):
    r = run_hc("diagnose", "job", "987654", "--config", str(site_config(net, tmp_path)), env=slurm.env, timeout=60)
    assert r.returncode == 4 and b"no such job" in r.stdout, (r.stdout, r.stderr)


def start_sbatch(slurm, net, tmp_path: Path, scenario: str, odd: int, *extra: str) -> tuple[live_rig.Job, int]:
    """The job as most sites run one: a batch script whose srun starts the ranks, its
    output in a file Slurm names (StdOut), written on the batch host."""
    job = live_rig.Job(scenario, "sbatch", tmp_path / f"{scenario}-sbatch-{uuid.uuid4().hex[:6]}", odd)
    job.out.mkdir()
    env = {**live_rig.GLOO_ENV, "MASTER_ADDR": net.host("node1").addr, "MASTER_PORT": str(next(_PORTS))}
    step = srun_launch(live_rig.program(job, *extra), nodes=len(NODES), ntasks=len(NODES), ntasks_per_node=1)
    script = job.out / "job.sh"
    script.write_text("#!/bin/sh\n" + "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
                      + shlex.join(step.argv) + "\n")
    job_id = slurm.sbatch(f"--nodes={len(NODES)}", f"--ntasks={len(NODES)}", "--ntasks-per-node=1",
                          f"--job-name=hcdg-{scenario}", f"--output={job.out}/slurm-%j.out", script=script)
    return job, job_id


def test_job_size_sbatch_reads_the_job_output(slurm, net, jobs, tmp_path):
    """Rank 1's tensor has another size, in a batch job: gloo aborts the rank(s) whose size
    check failed, which live are only gone; `hc diagnose job` reads the job's StdOut on its
    batch host, where the abort is printed, and says shape-mismatch, never naming a rank that
    still runs. One gloo size report gives two ranks' sizes (the reporter and the neighbour it
    receives from) and no majority: the two are said, rank 1 among them, and neither is named;
    where two or more ranks reported, the one rank party to every report is named, rank 1
    (diagnose/ringsize.py)."""
    job, job_id = start_sbatch(slurm, net, tmp_path, "size", 1, "--linger", "120")
    jobs.append(job)
    try:
        out = job.out / f"slurm-{job_id}.out"
        wait_until("gloo's size check failing in the job's output",
                   lambda: out.exists() and "Received data size" in out.read_text(errors="replace"), 120, job)
        wait_until("every rank's info", lambda: len(job.rank_info()) == len(NODES), 60, job)
        time.sleep(1.5)
        v, elapsed, rc = diagnose("job", str(job_id), "--config", str(site_config(net, tmp_path)), env=slurm.env)
        named = [o["rank"] for o in v.get("odd_ranks", [])]
        # gone: missing, or exited as srun's own lines in the job's output say ("task 0: Aborted")
        alive = {row["rank"] for row in v["ranks"]
                 if row.get("state") not in ("missing", "", None) and not row["state"].startswith("exit")}
        print(f"job size/sbatch: {v['class']} odd {named}, alive {sorted(alive)} in {elapsed:.1f} s: "
              f"{v['summary'][:200]}")
        assert (v["class"], rc) == ("shape-mismatch", 0), (v["summary"], v.get("unreadable"))
        # one report: the two ranks it names, rank 1 among them; two or more: the one rank
        # party to every report, named (rank 1)
        pair = re.search(r"ranks (\d+) and (\d+) disagree", v["summary"])
        assert (pair and 1 in {int(pair[1]), int(pair[2])}) or named == [1], v["summary"]
        assert (not named or 1 in named) and not set(named) & alive, (named, alive)
        assert any(str(out) in e.get("source", "") for f in v["findings"] for e in f.get("lines", [])), v
        assert elapsed < BOUND_S, elapsed
    finally:
        for pid in [d["pid"] for d in job.rank_info().values()]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        slurm.scancel(job_id)


def test_hosts_port_taken_torchrun(net, jobs, tmp_path):
    """(f) under torchrun: another process holds the rendezvous port on node1, so no agent
    can host the c10d store and none starts a rank (each waits on a listener that never
    answers). `hc diagnose hosts` finds no rank, reads the agents (their py-spy stacks in
    the rendezvous) and who holds the port: init-failure naming node1's holder, no rank."""
    port = next(_PORTS)
    with live_rig.hold_port(net, "node1", port) as holder:
        job = start_torchrun(net, tmp_path, "healthy", 0, port=port)
        jobs.append(job)
        try:
            # the agents start torch (seconds on this machine) before they reach the rendezvous
            v, elapsed, rc = {}, 0.0, -1
            for _ in range(8):
                time.sleep(4)
                v, elapsed, rc = hosts(net, tmp_path)
                if v.get("class") == "init-failure":
                    break
            named = [o["rank"] for o in v.get("odd_ranks", [])]
            print(f"hosts port/torchrun: {v.get('class')} odd {named} in {elapsed:.1f} s: {v.get('summary', '')[:220]}")
            assert (v["class"], named, rc) == ("init-failure", [], 0), (v.get("summary"), v.get("unreadable"))
            assert f"port {port} on node1 is held by pid {holder.pid}" in v["summary"], v["summary"]
            assert elapsed < BOUND_S, elapsed
        finally:  # its agents would wait out their store timeout: end them (ours, by pid)
            for pid in live_rig.job_processes(job):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

