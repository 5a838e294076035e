"""`hc diagnose job` on the rig's real Slurm reads each rank's own output file on its node
(issue 19): the ranks of an srun-launched job print to files of their own (`> stdout$N`,
a regular file as each rank's stdout/stderr), and the collector's node fetches their
ends through `srun --overlap`, as `hc diagnose pids` reads them on one machine.

The job is tests/rig/jobs/hang_job.py (the helpers of test_diagnose_live_rig.py start and
end it, by pid, nothing left behind).
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_diagnose_job_rig as job_rig
import test_diagnose_live_rig as live_rig

from healthcheck.runners.launch import srun_launch

NODES = live_rig.NODES
net, jobs, slurm = live_rig.net, live_rig.jobs, live_rig.slurm  # the fixtures, by name

pytestmark = pytest.mark.rig


def start_srun_to_files(slurm, net, tmp_path: Path, scenario: str, odd: int) -> live_rig.Job:
    """hang_job.py under srun, each task's stdout and stderr to `OUT/stdout<task>`."""
    job = live_rig.Job(scenario, "srun", tmp_path / f"{scenario}-files-{uuid.uuid4().hex[:6]}", odd)
    job.out.mkdir()
    env = {**live_rig.GLOO_ENV, "MASTER_ADDR": net.host("node1").addr, "MASTER_PORT": str(next(live_rig._PORTS))}
    to_file = ["sh", "-c", f'exec "$@" > {job.out}/stdout$SLURM_PROCID 2>&1', "sh", *live_rig.program(job)]
    spec = srun_launch(to_file, nodes=len(NODES), ntasks=len(NODES), ntasks_per_node=1,
                       job_name=f"hcdg-{scenario}-files", immediate_s=30, env=env)
    live_rig._start(job, "srun", spec, {**live_rig.clean_env(), **slurm.env}, cwd=str(slurm.jobs_dir))
    return job


def test_job_reads_each_ranks_own_output_file_on_real_slurm(slurm, net, jobs, tmp_path):
    job = start_srun_to_files(slurm, net, tmp_path, "sleep", 2)
    jobs.append(job)
    live_rig.wait_hung(job)
    files = [job.out / f"stdout{r}" for r in range(len(NODES))]
    assert all(f.exists() and f.stat().st_size > 0 for f in files), [f.name for f in files if not f.exists()]
    v, elapsed, rc = job_rig.diagnose("job", job_rig._job_id(job), "--config",
                                      str(job_rig.site_config(net, tmp_path)), env=slurm.env)
    job_rig.check(v, elapsed, rc, ("stuck-rank",), 2, "job sleep/srun, output to files")
    # every node's collection, and every rank's own file read through its node
    assert v["inputs"] == 2 * len(NODES), (v["inputs"], v.get("unreadable"))
    assert not [u for u in v.get("unreadable", []) if "rank output" in u["why"]], v["unreadable"]
