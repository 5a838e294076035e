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
import subprocess
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
                       immediate_s=30, env={"GLOO_SOCKET_IFNAME": "eth0", "HC_RUN_TEST_DELAY_RANK": "2",
                            # a delay far past the factor's reach however slow the shared
                            # cores make every step: at the default 0.3 s, a loaded CI's
                            # 148 ms median step put the delayed rank at the 3x line
                            "HC_RUN_TEST_DELAY_S": "1.0"})
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


# a gloo job as torchrun starts it (env://), whose rank JOB_BAD is SIGKILLed after the first all_reduce
TORCH_JOB = """
import json, os, signal, time
from datetime import timedelta
import torch, torch.distributed as dist
dist.init_process_group("gloo", timeout=timedelta(seconds=20))
rank = dist.get_rank()
# one write: two ranks share the task's stdout, and print() under PYTHONUNBUFFERED writes the newline apart
os.write(1, (json.dumps({"rank": rank, "pid": os.getpid(), "host": os.uname().nodename}) + "\\n").encode())
t = torch.ones(2)
dist.all_reduce(t)
if rank == int(os.environ.get("JOB_BAD", "-1")):
    time.sleep(1.0)
    os.kill(os.getpid(), signal.SIGKILL)
dist.all_reduce(t)
dist.destroy_process_group()
"""


@pytest.mark.parametrize("form", ["around", "inside"])
def test_torchrun_on_two_nodes_records_every_rank_and_the_log_directory_names_the_dead_one(
        fresh_slurm_rig, tmp_path, form):
    """srun, one torchrun per node (2 x 2 ranks, c10d rendezvous on node1), hc run around
    torchrun or inside it: every rank recorded as the agents numbered it, on its own host,
    and `hc diagnose logs` of the directory hc run printed names the SIGKILLed rank."""
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed in this environment (hc[bandwidth])")
    slurm = fresh_slurm_rig
    script = Path(slurm.jobs_dir) / f"torch-job-{os.getpid()}.py"
    script.write_text(TORCH_JOB)
    torchrun = [str(Path(sys.executable).parent / "torchrun"), "--nnodes", "2", "--nproc-per-node", "2",
                "--rdzv-backend", "c10d", "--rdzv-endpoint", f"node1:{29400 + os.getpid() % 1000}",
                "--rdzv-id", f"hc-{os.getpid()}", "--monitor-interval", "0.1"]
    hc = [hc_program(tmp_path), "run", "--no-node-check"]
    if form == "around":
        program = [*hc, "--", *torchrun, str(script)]
    else:
        program = [*torchrun, "-m", "healthcheck", "run", "--no-node-check", "--", sys.executable, str(script)]
    spec = srun_launch(program, nodes=2, ntasks=2, ntasks_per_node=1, job_name="hc-run-torchrun", immediate_s=30,
                       env={"GLOO_SOCKET_IFNAME": "eth0", "JOB_BAD": "3"})
    r = launch(spec, timeout_s=240, env={**clean_env(), **slurm.env}, cwd=str(slurm.jobs_dir))
    console = f"{r.stdout}\n{r.stderr}"
    ran = {d["rank"]: d for d in (json.loads(ln) for lines in r.ranks.values() for ln in lines
                                   if ln.startswith('{"rank"'))}
    assert sorted(ran) == [0, 1, 2, 3], console[-4000:]
    hints = {ln.split("hc diagnose logs ", 1)[1].split(";")[0] for ln in console.splitlines()
             if "if this job fails or hangs: hc diagnose logs " in ln}
    (log_dir,) = [Path(h) for h in hints]
    manifests = {m["rank"]: m for m in (json.loads(p.read_text()) for p in log_dir.glob("hc-run.rank*.json"))}
    assert sorted(manifests) == [0, 1, 2, 3], console[-3000:]
    for rank, m in manifests.items():
        assert (m["host"], m["pid"], m["world_size"]) == (ran[rank]["host"], ran[rank]["pid"], 4)
    by_host: dict[str, list[int]] = {}
    for m in manifests.values():
        by_host.setdefault(m["host"], []).append(m["local_rank"])
    assert {h: sorted(v) for h, v in by_host.items()} == {"node1": [0, 1], "node2": [0, 1]}
    kept = {p.name for p in log_dir.glob("hc-run.rank*.log")}
    assert len(kept) == 4, kept
    captured = tmp_path / "console.txt"  # srun --label's output, as the user saw it
    captured.write_text(console)
    verdicts = []
    for path in (captured, log_dir):
        d = subprocess.run([sys.executable, "-m", "healthcheck", "diagnose", "logs", "--format", "json", str(path)],
                           capture_output=True, timeout=120)
        doc = json.loads(d.stdout)
        verdicts.append((doc["class"], [o["rank"] for o in doc.get("odd_ranks", [])], doc["summary"]))
    assert verdicts[1][:2] == ("dead-rank", [3]), verdicts[1]
    assert verdicts[1][:2] == verdicts[0][:2], verdicts  # what the console says
