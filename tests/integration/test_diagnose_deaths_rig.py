"""Issue 19 item 1 on the rig's real Slurm: deaths_train.py (tests/fixtures/diagnose) on 4
nodes under `srun --label` (each line `N: ` as srun prints it), rank 2 raising a KeyError
in its own code; `hc diagnose logs` on the job's output names rank 2, never a peer.

With HC_SAVE_DEATHS_FIXTURE=DIR the srun output is kept as DIR/job.out (how
tests/fixtures/diagnose/exc-srun was made).
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_diagnose_live_rig as live_rig

from healthcheck.diagnose.sources import collect
from healthcheck.diagnose.verdict import build
from healthcheck.runners.launch import launch, srun_launch

net, slurm = live_rig.net, live_rig.slurm  # the fixtures, by name
pytestmark = pytest.mark.rig

TRAIN = Path(__file__).resolve().parents[1] / "fixtures" / "diagnose" / "deaths_train.py"


def test_srun_labelled_exception_names_the_rank(slurm, net, tmp_path):
    port = next(live_rig._PORTS)
    env = {**live_rig.GLOO_ENV, "MASTER_ADDR": net.host("node1").addr, "MASTER_PORT": str(port),
           "SCENARIO": "exc", "ODD_RANK": "2", "TIMEOUT_S": "8", "PYTHONUNBUFFERED": "1", "PYTHONWARNINGS": "ignore"}
    script = (f"RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS LOCAL_RANK=0 exec {shlex.quote(live_rig.PYTHON)} "
              f"{shlex.quote(str(TRAIN))}")
    spec = srun_launch(["/bin/sh", "-c", script], nodes=len(live_rig.NODES), ntasks=len(live_rig.NODES),
                       ntasks_per_node=1, job_name="hcdg-exc", immediate_s=30, env=env)
    result = launch(spec, timeout_s=120, env={**live_rig.clean_env(), **slurm.env}, cwd=str(slurm.jobs_dir),
                    grace_s=2.0)
    out = tmp_path / "job.out"
    out.write_text(result.stdout + result.stderr)
    keep = os.environ.get("HC_SAVE_DEATHS_FIXTURE")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        (Path(keep) / "job.out").write_text(result.stdout + result.stderr)
    assert "2: " in result.stdout + result.stderr and "KeyError" in result.stdout + result.stderr, \
        (result.stdout[-3000:], result.stderr[-3000:])
    v = build(collect([out]))
    assert (v.cls, [o.rank for o in v.odd_ranks]) == ("dead-rank", [2]), v.summary
    assert "KeyError" in v.summary and "parse_record" in v.summary
