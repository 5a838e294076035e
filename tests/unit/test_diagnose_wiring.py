"""Live diagnosis wired as `hc diagnose logs` reads saved output (issue 19): each rank's
launch (MASTER_ADDR/MASTER_PORT/WORLD_SIZE) read from its environment, srun's own lines
on a task's death, and each rank's own output file read under Slurm too.

Real gloo processes (tests/fixtures/diagnose-wiring/init_job.py, torch CPU) where a test
needs a live job; evidence_from_nodes with a NodeCollection where the wiring alone is
under test."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import FIXTURES, run_hc

JOB = FIXTURES / "diagnose-wiring" / "init_job.py"
PY_SPY = Path(sys.executable).parent / "py-spy"


def _torch() -> bool:
    try:
        import torch.distributed  # noqa: F401
    except ImportError:
        return False
    return True


needs_jobs = pytest.mark.skipif(not PY_SPY.exists() or not _torch(), reason="needs torch and py-spy in this venv")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Ranks:
    """One init_job.py process per rank, each printing to its own file; `odd` ranks get
    their own environment overrides."""

    def __init__(self, tmp: Path, world: int, odd: dict[int, dict[str, str]]) -> None:
        self.outputs = [tmp / f"rank{r}.out" for r in range(world)]
        port = str(_free_port())
        env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID")}
        self.procs: list[subprocess.Popen] = []
        for rank, out in enumerate(self.outputs):
            with open(out, "wb") as f:
                self.procs.append(subprocess.Popen(
                    [sys.executable, str(JOB)],
                    env={**env, "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
                         "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "PYTHONUNBUFFERED": "1",
                         **odd.get(rank, {})},
                    stdout=f, stderr=subprocess.STDOUT, start_new_session=True))

    def wait_for(self, line: str, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(f"{line}\n" in out.read_text(errors="replace") for out in self.outputs):
                return
            assert all(p.poll() is None for p in self.procs), [o.read_text() for o in self.outputs]
            time.sleep(0.3)
        raise AssertionError(f"the job did not reach {line!r}")

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
        for p in self.procs:
            p.wait(10)


@pytest.fixture
def ranks(tmp_path):
    made: list[Ranks] = []

    def start(world: int, odd: dict[int, dict[str, str]]) -> Ranks:
        made.append(Ranks(tmp_path, world, odd))
        return made[-1]

    yield start
    for r in made:
        r.close()


# ------------------------------------------------ each rank's launch, from its environment


@needs_jobs
@pytest.mark.slow
def test_a_live_rank_launched_with_another_master_port_is_the_init_failure(ranks):
    """Rank 2 of 3 was given another MASTER_PORT: it retries a store nobody listens on
    while ranks 0 and 1 wait for it in init_process_group. hc read every rank's
    environment; the rank whose port differs is named, class init-failure."""
    job = ranks(3, {2: {"MASTER_PORT": str(_free_port())}})
    job.wait_for("init")
    time.sleep(2.0)  # into init_process_group
    r = run_hc("diagnose", "pids", *(str(p.pid) for p in job.procs), "--format", "json", timeout=90)
    assert r.returncode == 0, (r.stdout, r.stderr)
    v = json.loads(r.stdout)
    assert v["class"] == "init-failure", v["summary"]
    assert [o["rank"] for o in v.get("odd_ranks", [])] == [2], v["summary"]
    assert "MASTER_PORT" in v["summary"], v["summary"]
