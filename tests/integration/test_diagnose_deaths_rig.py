"""Issue 19 item 1 on the rig's real Slurm: deaths_train.py (tests/fixtures/diagnose) on 4
nodes under `srun --label` (each line `N: ` as srun prints it), one rank raising a KeyError
in its own code, or SIGKILLed; `hc diagnose logs` on the job's output names it, never a peer.

With HC_SAVE_DEATHS_FIXTURE=DIR the srun output is kept as DIR/<scenario>-srun/job.out
(how tests/fixtures/diagnose/exc-srun and kill-srun were made).
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


def run_srun(slurm, net, tmp_path: Path, scenario: str, odd: int) -> Path:
    """deaths_train.py on the rig's nodes under srun --label; its output (stdout, then stderr)."""
    port = next(live_rig._PORTS)
    env = {**live_rig.GLOO_ENV, "MASTER_ADDR": net.host("node1").addr, "MASTER_PORT": str(port),
           "SCENARIO": scenario, "ODD_RANK": str(odd), "TIMEOUT_S": "8", "PYTHONUNBUFFERED": "1",
           "PYTHONWARNINGS": "ignore"}
    script = (f"RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS LOCAL_RANK=0 exec {shlex.quote(live_rig.PYTHON)} "
              f"{shlex.quote(str(TRAIN))}")
    spec = srun_launch(["/bin/sh", "-c", script], nodes=len(live_rig.NODES), ntasks=len(live_rig.NODES),
                       ntasks_per_node=1, job_name=f"hcdg-{scenario}", immediate_s=30, env=env)
    result = launch(spec, timeout_s=120, env={**live_rig.clean_env(), **slurm.env}, cwd=str(slurm.jobs_dir),
                    grace_s=2.0)
    text = result.stdout + result.stderr
    out = tmp_path / scenario / "job.out"
    out.parent.mkdir()
    out.write_text(text)
    keep = os.environ.get("HC_SAVE_DEATHS_FIXTURE")
    if keep:
        (Path(keep) / f"{scenario}-srun").mkdir(parents=True, exist_ok=True)
        (Path(keep) / f"{scenario}-srun" / "job.out").write_text(text)
    assert f"{odd}: " in text, (result.stdout[-3000:], result.stderr[-3000:])
    return out


def test_srun_labelled_exception_names_the_rank(slurm, net, tmp_path):
    out = run_srun(slurm, net, tmp_path, "exc", 2)
    assert "KeyError" in out.read_text()
    v = build(collect([out]))
    assert (v.cls, [o.rank for o in v.odd_ranks]) == ("dead-rank", [2]), v.summary
    assert "KeyError" in v.summary and "parse_record" in v.summary


def test_srun_task_killed_without_a_word_is_named(slurm, net, tmp_path):
    """Rank 1 is SIGKILLed (as the OOM killer does): it prints nothing; srun says `task 1:
    Killed`, its peers say a connection closed."""
    out = run_srun(slurm, net, tmp_path, "kill", 1)
    v = build(collect([out]))
    assert (v.cls, [o.rank for o in v.odd_ranks]) == ("dead-rank", [1]), v.summary
