"""`hc run` across ranks, for real: 3 plain processes on 127.0.0.1 (RANK/WORLD_SIZE/MASTER_*),
the straggler test on gloo naming the rank a test hook slows while the job still runs and
rendezvous on the same port after hc's store is gone; a FAIL on one rank stopping every rank
with its line; and torchrun starting `-m healthcheck run` per rank (its agent's store).

Every process is started here, bounded by a timeout, and killed by its own pid if it overruns.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from support import free_port, torch_installed

if not torch_installed():
    pytest.skip("torch is not installed", allow_module_level=True)

PY = sys.executable
TORCHRUN = Path(PY).parent / "torchrun"
# the job: a real gloo rendezvous on the same MASTER_PORT after the preflight, one all_reduce
JOB = """
import json, os, sys, warnings
warnings.filterwarnings("ignore")
import torch, torch.distributed as dist
from datetime import timedelta
dist.init_process_group("gloo", timeout=timedelta(seconds=30))
t = torch.ones(2) * (dist.get_rank() + 1)
dist.all_reduce(t)
doc = {"rank": dist.get_rank(), "sum": t.tolist(), "pid": os.getpid(), "argv": sys.argv[1:]}
os.write(1, (json.dumps(doc) + chr(10)).encode())  # one write: torchrun's ranks share a pipe
dist.destroy_process_group()
sys.exit(int(sys.argv[1]))
"""


def clean_env(**extra: str) -> dict[str, str]:
    drop = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK",
            "TORCHELASTIC_RUN_ID", "CUDA_VISIBLE_DEVICES", "HC_FORMAT")
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith(("SLURM", "OMPI_", "NCCL_"))}
    env.update(GLOO_SOCKET_IFNAME="lo", PYTHONFAULTHANDLER="1", **extra)
    return env


def run_ranks(tmp_path: Path, n: int, args: list[str], per_rank: dict[int, dict[str, str]] | None = None,
              common: dict[str, str] | None = None, timeout: float = 120) -> list[subprocess.CompletedProcess]:
    port = str(free_port())
    procs = []
    for r in range(n):
        env = clean_env(**{"RANK": str(r), "WORLD_SIZE": str(n), "LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": str(n),
                           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, **(common or {}),
                           **(per_rank or {}).get(r, {})})
        procs.append(subprocess.Popen([PY, "-m", "healthcheck", "run", "--log-dir", str(tmp_path / "logs"), *args],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    done = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:  # only what this test started, by pid
                if q.poll() is None:
                    q.kill()
            out, err = p.communicate()
        done.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    return done


def test_three_ranks_name_the_delayed_rank_as_a_straggler_and_the_job_still_runs(tmp_path):
    results = run_ranks(tmp_path, 3, ["--no-node-check", "--", PY, "-c", JOB, "5", "x y"],
                        common={"HC_RUN_TEST_DELAY_RANK": "1", "HC_RUN_TEST_DELAY_S": "0.5"})
    outs = []
    for r, res in enumerate(results):
        assert res.returncode == 5, f"rank {r}: {res.stderr.decode()[-3000:]}"
        outs.append(json.loads(res.stdout))
    assert [o["rank"] for o in outs] == [0, 1, 2] and all(o["sum"] == [6.0, 6.0] for o in outs)
    assert all(o["argv"] == ["5", "x y"] for o in outs)
    rank0 = results[0].stderr.decode()
    warning = next(ln for ln in rank0.splitlines() if "straggler test" in ln)
    assert "warning" in warning and f"rank 1 ({socket.gethostname()})" in warning
    assert "rank 0 (" not in warning and "rank 2 (" not in warning
    assert f"hc diagnose logs {tmp_path / 'logs'}" in rank0
    assert "straggler" not in results[2].stderr.decode()  # only rank 0 and the straggler say it
    manifests = {json.loads(p.read_text())["rank"]: json.loads(p.read_text()) for p in (tmp_path / "logs").glob("*.json")}
    assert {r: m["pid"] for r, m in manifests.items()} == {o["rank"]: o["pid"] for o in outs}
    # no rank warns about a variable hc set (torch >= 2.8 warned on every rank: "Environment
    # variable TORCH_NCCL_TRACE_BUFFER_SIZE is deprecated"); this job is the plain ranks' own,
    # so it asks that too, rather than a second job of its own (its torch starts cost CI's cores)
    hc_set = set(manifests[0]["env_set"])
    assert "TORCH_FR_BUFFER_SIZE" in hc_set  # the Flight Recorder is still asked for
    for res in results:
        theirs = [ln for ln in (res.stdout + res.stderr).decode().splitlines() if not ln.startswith("hc run:")]
        assert not [ln for ln in theirs if any(name in ln for name in hc_set)], theirs


def test_a_fail_on_one_rank_stops_every_rank_with_its_line(tmp_path):
    (tmp_path / "fabrics").mkdir()
    (tmp_path / "fabrics" / "t.yaml").write_text("net:\n  interfaces:\n    lo: {mtu: 1500}\n")
    (tmp_path / "hc.yaml").write_text("default_fabric: t\n")
    # rank 1 is the only "local rank 0" (the one that runs the node's quick tier), with a config it fails
    per_rank = {0: {"LOCAL_RANK": "1"}, 1: {"LOCAL_RANK": "0", "HC_CONFIG": str(tmp_path / "hc.yaml")},
                2: {"LOCAL_RANK": "2"}}
    marker = tmp_path / "ran"
    results = run_ranks(tmp_path, 3, ["--", "touch", str(marker)], per_rank=per_rank)
    for r, res in enumerate(results):
        errors = [ln for ln in res.stderr.decode().splitlines() if ln.startswith("hc: error:")]
        assert res.returncode == 2, f"rank {r}: {res.stderr.decode()[-2000:]}"
        assert len(errors) == 1 and "rank 1 (" in errors[0] and "quick tier FAILED: net.E001" in errors[0]
    assert not marker.exists()


def test_under_torchrun_per_rank(tmp_path):
    env = clean_env(HC_RUN_LOG_DIR=str(tmp_path / "logs"))
    r = subprocess.run([str(TORCHRUN), "--standalone", "--nproc-per-node", "2", "-m", "healthcheck", "run",
                        "--no-node-check", "--", PY, "-c", JOB, "0"],
                       env=env, capture_output=True, timeout=180, cwd=tmp_path)
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    lines = [json.loads(ln) for ln in r.stdout.decode().splitlines() if ln.startswith("{")]
    assert sorted(o["rank"] for o in lines) == [0, 1] and all(o["sum"] == [3.0, 3.0] for o in lines)
    err = r.stderr.decode()
    assert "straggler test: 2 ranks (gloo)" in err and "no straggler" in err
    manifests = [json.loads(p.read_text()) for p in (tmp_path / "logs").glob("hc-run.*.json")]
    assert sorted(m["launcher"] for m in manifests) == ["torchrun", "torchrun"]
    assert {m["pid"] for m in manifests} == {o["pid"] for o in lines}
