"""`hc run` under the rig's real Slurm: `srun -N4 hc run -- python ...`, one task per
network-namespace host. The straggler test meets across the hosts (node1 from the step's
nodelist, a port derived from the job id) over gloo, names the host a test hook slows,
and every task then execs the job, whose exit code srun reports per task. The log directory
is the default, $SLURM_SUBMIT_DIR/hc-job-<jobid>, with one manifest and one output file
per task (the task's own lines, its Slurm rank in the header, its exit where the kernel
lets the tee see it: a pidfd, Linux >= 6.15; slurmstepd reaps at once).
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import sys
from pathlib import Path

import pytest
from test_bw_launchers_rig import hc_program

from healthcheck.parsers.run_output import parse_run_output
from healthcheck.runners.launch import launch, srun_launch

pytestmark = pytest.mark.rig

NODES = ["node1", "node2", "node3", "node4"]
JOB = ("import json, os, sys; print(json.dumps({'task': int(os.environ['SLURM_PROCID']), 'pid': os.getpid(), "
       "'argv': sys.argv[1:], 'nccl_file': os.environ.get('NCCL_DEBUG_FILE')}), flush=True); sys.exit(3)")


def clean_env() -> dict[str, str]:
    prefixes = ("SLURM_", "SBATCH_", "SALLOC_", "SRUN_", "OMPI_", "PMIX_", "PMI_", "NCCL_", "TORCH_")
    names = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "HC_FORMAT", "HC_RUN_LOG_DIR")
    return {k: v for k, v in os.environ.items() if not k.startswith(prefixes) and k not in names}


def test_srun_hc_run_names_the_slow_host_and_runs_the_job_on_every_task(fresh_slurm_rig, tmp_path):
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed in this environment (hc[bandwidth])")
    slurm = fresh_slurm_rig
    program = [hc_program(tmp_path), "run", "--straggler-timeout", "60", "--", sys.executable, "-c", JOB, "a b"]
    spec = srun_launch(program, nodes=len(NODES), ntasks=len(NODES), ntasks_per_node=1, job_name="hc-run-rig",
                       immediate_s=30, env={"GLOO_SOCKET_IFNAME": "eth0", "HC_RUN_TEST_DELAY_RANK": "2"})
    r = launch(spec, timeout_s=240, env={**clean_env(), **slurm.env}, cwd=str(slurm.jobs_dir))
    detail = f"{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    assert r.exit_codes == {0: 3, 1: 3, 2: 3, 3: 3}, detail  # the job's own exit code, on every task
    jobs = {}
    for task, lines in r.ranks.items():
        doc = next(json.loads(ln) for ln in lines if ln.startswith("{"))
        assert doc["task"] == task and doc["argv"] == ["a b"], detail
        jobs[task] = doc
    rank0 = "\n".join(r.rank_stderr.get(0, []) + r.ranks[0])  # hc says everything on stderr
    warning = next(ln for ln in rank0.splitlines() if "straggler test: 4 ranks (gloo)" in ln)
    assert "rank 2 (node3)" in warning and "node1" not in warning.split("factor:")[1], warning
    (hint,) = [ln for ln in rank0.splitlines() if "if this job fails or hangs" in ln]
    log_dir = Path(hint.split("hc diagnose logs ")[1].split(";")[0])
    assert log_dir.parent == Path(slurm.jobs_dir) and log_dir.name.startswith("hc-job-")
    assert "hc diagnose job " in hint
    manifests = [json.loads(p.read_text()) for p in log_dir.glob("hc-run.rank*.json")]
    assert sorted(m["host"] for m in manifests) == NODES, detail
    assert {m["rank"]: m["pid"] for m in manifests} == {t: j["pid"] for t, j in jobs.items()}
    assert all(j["nccl_file"] == f"{log_dir}/nccl.%h.%p.log" for j in jobs.values())
    assert all((m["world_size"], m["local_rank"], m["launcher"]) == (4, 0, "srun") for m in manifests)
    kept = {}
    for p in log_dir.glob("hc-run.rank*.log"):
        parsed = parse_run_output(p.read_bytes().decode(errors="replace"))
        assert parsed is not None, p
        kept[parsed.rank] = parsed
    assert sorted(kept) == [0, 1, 2, 3], detail
    pidfd_exit = tuple(int(x) for x in platform.release().split(".")[:2]) >= (6, 15)
    for task, parsed in kept.items():
        assert json.dumps(jobs[task]) in parsed.text and parsed.host == NODES[task]
        assert parsed.exit_code == 3 if pidfd_exit else parsed.exit_code in (3, None)
