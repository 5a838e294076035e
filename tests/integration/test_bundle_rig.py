"""`hc report bundle` on the rig: the history and hook reports written by real `hc health`
runs inside node2 (Slurm's healthcheck.sh, a fake HCA the real ibstat reads, its
port_rcv_errors raised between the runs), bundled from this machine (no live items: not on
this host), on node2 itself (live: the real ibstat, uname, versions), and for a real Slurm
job that runs there."""

from __future__ import annotations

import json
import sys
import tarfile
from pathlib import Path

from support import run_hc


def members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path, "r:gz") as tar:
        return {i.name.split("/", 1)[1]: tar.extractfile(i).read() for i in tar.getmembers()}  # type: ignore[union-attr]


def missing(got: dict[str, bytes]) -> dict[str, str]:
    return {m["name"]: m["reason"] for m in json.loads(got["MANIFEST.json"])["missing"]}


def test_bundles_of_a_rig_node_from_its_own_health_runs(hc, tmp_path):
    net, slurm = hc.net, hc.slurm
    ib = net.fake_ib("node2", ["mlx5_0"])
    counter = ib / "mlx5_0" / "ports" / "1" / "counters" / "port_rcv_errors"
    for value in (1, 3):
        counter.write_text(f"{value}\n")
        r = hc.health("node2")
        assert r.rc in (0, 1), r.stdout + r.stderr  # never drained: the job below runs there

    env = {"HC_CONFIG": str(hc.config), "MY_SESSION_TOKEN": "rig-secret-0451"}
    out = tmp_path / "login.tar.gz"
    r = run_hc("report", "bundle", "node2", "-o", str(out), env=env)
    assert r.returncode == 0, r.stderr.decode()
    got = members(out)
    assert {"history/runs.json", "history/counters.json", "hook-reports/health-latest.json"} <= set(got)
    runs = json.loads(got["history/runs.json"])
    assert [x["command"] for x in runs] == ["health", "health"]
    counters = json.loads(got["history/counters.json"])
    assert {"component": "mlx5_0/1", "name": "port_rcv_errors", "before": 1.0, "after": 3.0, "change": 2.0} in \
        counters["changes"]
    assert missing(got)["live/ibstat.txt"].startswith("not on this host")
    assert all(b"rig-secret-0451" not in data for data in got.values())

    # on node2 itself: live too, through the real ibstat on the fake HCA
    here = tmp_path / "node2.tar.gz"
    r = net.exec("node2", [sys.executable, "-m", "healthcheck", "report", "bundle", "--local", "-o", str(here),
                           "--timeout", "10"], env={"HC_CONFIG": str(hc.config)}, timeout=60)
    assert r.rc == 0, r.stdout + r.stderr
    got = members(here)
    assert b"mlx5_0" in got["live/ibstat.txt"] and b"node2" in got["live/uname.txt"]
    assert json.loads(got["MANIFEST.json"])["live"] is True
    assert missing(got)["live/nvidia-smi-q.txt"].startswith("tool absent")

    # a Slurm job on node2: Slurm's record of it, and how to get its diagnosis
    job = slurm.sbatch("-w", "node2", wrap="sleep 120")
    try:
        slurm.wait_for(lambda: slurm.job(job).get("JobState") == "RUNNING")
        env.update(slurm.env)
        out = tmp_path / "job.tar.gz"
        r = run_hc("report", "bundle", "node2", "--job", str(job), "-o", str(out), env=env)
        assert r.returncode == 0, r.stderr.decode()
        got = members(out)
        assert f"JobId={job} ".encode() in got["job/scontrol-show-job.txt"]
        assert "--diagnose runs" in missing(got)["job/diagnosis.json"]
        r = run_hc("report", "bundle", "node1", "--job", str(job), "-o", str(tmp_path / "n1.tar.gz"), env=env)
        assert r.returncode == 4 and f"job {job} did not run on node1" in r.stderr.decode()
        assert not (tmp_path / "n1.tar.gz").exists()
    finally:
        slurm.scancel(job)
