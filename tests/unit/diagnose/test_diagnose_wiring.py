"""Live diagnosis wired as `hc diagnose logs` reads saved output (issue 19): each rank's
launch (MASTER_ADDR/MASTER_PORT/WORLD_SIZE) read from its environment, srun's own lines
on a task's death, and each rank's own output file read under Slurm too (`hc diagnose job`
on a live job: test_diagnose_sampling.py, on its group job).

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
from support import FIXTURES, run_hc, torch_installed

from healthcheck.diagnose.collect import NodeCollection, RankProcess
from healthcheck.diagnose.live import NO_SUCH_FILE, evidence_from_nodes
from healthcheck.diagnose.verdict import build

JOB = FIXTURES / "diagnose-wiring" / "init_job.py"
PY_SPY = Path(sys.executable).parent / "py-spy"


def _torch() -> bool:
    return torch_installed()  # found, not imported (support.torch_installed says why)


needs_jobs = pytest.mark.skipif(not PY_SPY.exists() or not _torch(), reason="needs torch and py-spy in this venv")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Ranks:
    """One init_job.py process per rank, each printing to its own file; `odd` ranks get
    their own environment overrides."""

    def __init__(self, tmp: Path, world: int, odd: dict[int, dict[str, str]], argv: tuple[str, ...] = (str(JOB),),
                 env: dict[str, str] | None = None) -> None:
        self.outputs = [tmp / f"rank{r}.out" for r in range(world)]
        port = str(_free_port())
        base = {k: v for k, v in os.environ.items()
                if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_JOB_ID", "SLURM_JOBID")}
        self.procs: list[subprocess.Popen] = []
        for rank, out in enumerate(self.outputs):
            with open(out, "wb") as f:
                self.procs.append(subprocess.Popen(
                    [sys.executable, *argv],
                    env={**base, **(env or {}), "RANK": str(rank), "WORLD_SIZE": str(world),
                         "LOCAL_RANK": str(rank), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port,
                         "PYTHONUNBUFFERED": "1", **odd.get(rank, {})},
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

    def start(world: int, odd: dict[int, dict[str, str]], **kw) -> Ranks:
        made.append(Ranks(tmp_path, world, odd, **kw))
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


# ------------------------------------------------ srun's own word on a task, live


def _sleeping(pid: int, rank: int, host: str, world: int = 4) -> RankProcess:
    return RankProcess(pid=pid, host=host, state="S", state_name="sleeping", rank=rank, local_rank=0,
                       world_size=world)


def _node(host: str, *ranks: RankProcess) -> NodeCollection:
    return NodeCollection(host=host, collected_at="2026-11-27T14:08:20Z", job_id="2", ranks=ranks)


def _fetch_from(files: dict[str, bytes]):
    def fetch(host: str, paths: list[str]) -> dict[str, bytes | str]:
        return {p: files.get(f"{host}:{p}", NO_SUCH_FILE) for p in paths}

    return fetch


def test_sruns_task_killed_line_in_the_job_output_names_the_death_live():
    """kill-srun (the rig's Slurm, srun --label): rank 1 SIGKILLed itself and printed
    nothing; srun printed `srun: error: node2: task 1: Killed` while ranks 0, 2, 3 still
    waited. Live, that output (as it stood then: its first 47 lines) is read on the batch
    host: rank 1 is named as killed by SIGKILL on node2, as `hc diagnose logs` names it."""
    text = (FIXTURES / "diagnose" / "kill-srun" / "job.out").read_bytes()
    upto = b"".join(text.splitlines(keepends=True)[:47])
    assert upto.rstrip().endswith(b"srun: error: node2: task 1: Killed")
    nodes = [_node("node1", _sleeping(101, 0, "node1")), _node("node2"),
             _node("node3", _sleeping(301, 2, "node3")), _node("node4", _sleeping(401, 3, "node4"))]
    live = evidence_from_nodes(nodes, job="slurm job 2", outputs=[("node1", "/j/slurm-2.out")],
                               output_fetch=_fetch_from({"node1:/j/slurm-2.out": upto}))
    r1 = live.collected.evidence.ranks[1]
    assert (r1.host, r1.signal, r1.exit_code) == ("node2", "SIGKILL", -9)
    v = build(live.collected)
    assert v.cls == "dead-rank" and [(o.rank, o.host) for o in v.odd_ranks] == [(1, "node2")], v.summary
    assert "SIGKILL" in v.summary, v.summary


def test_sruns_word_on_an_earlier_step_is_no_live_ranks_death():
    """A task srun said was killed whose rank runs now (a later step of the job) is alive:
    srun's line is about a process that is gone, not this one."""
    out = b"srun: error: node2: task 1: Killed\n"  # the line of kill-srun/job.out above
    nodes = [_node("node1", _sleeping(101, 0, "node1", 2)), _node("node2", _sleeping(201, 1, "node2", 2))]
    live = evidence_from_nodes(nodes, job="slurm job 2", outputs=[("node1", "/j/slurm-2.out")],
                               output_fetch=_fetch_from({"node1:/j/slurm-2.out": out}))
    r1 = live.collected.evidence.ranks[1]
    assert r1.alive and not r1.signal and r1.exit_code is None


# ------------------------------------------------ each rank's own output, under Slurm


# test_diagnose_job_reads_each_ranks_own_output_file (`hc diagnose job` on a live job's ranks,
# each with its own output file) is in test_diagnose_sampling.py, on the `group` job its tests
# share: that job is four torch starts, paid once


def test_rank_outputs_are_fetched_on_every_node_at_once_and_bounded(tmp_path):
    """Each node's files are an srun step or an SSH command: fetched one node after another,
    a job of many nodes would take their sum. Four nodes' fetches meet at a barrier (a
    fetch made alone would wait there in vain and fail); a fetcher that raises is its
    node's failure; rank output files past MAX_RANK_OUTPUTS are counted, not dropped silently."""
    import threading

    from healthcheck.diagnose.live import MAX_RANK_OUTPUTS

    hosts = [f"node{i}" for i in range(1, 5)]
    met = threading.Barrier(len(hosts), timeout=10)

    def fetch(host: str, paths: list[str]) -> dict[str, bytes | str]:
        met.wait()
        return {p: b"step 1\n" for p in paths}

    nodes = [_node(h, RankProcess(pid=100 + i, host=h, state="S", state_name="sleeping", rank=i, world_size=4,
                                  outputs=(f"/j/rank{i}.out",)))
             for i, h in enumerate(hosts)]
    ev = evidence_from_nodes(nodes, job="x", rank_output_fetch=fetch).collected.evidence
    assert ev.unreadable == [] and ev.inputs == len(hosts) * 2, ev.unreadable  # 4 collections + 4 outputs

    def broken(host: str, paths: list[str]) -> dict[str, bytes | str]:
        raise OSError("ssh: connection refused")

    ev = evidence_from_nodes(nodes[:2], job="x", rank_output_fetch=broken).collected.evidence
    assert sorted(u.source for u in ev.unreadable) == ["node1:/j/rank0.out", "node2:/j/rank1.out"]
    assert all("connection refused" in u.why for u in ev.unreadable)

    many = [_node("node1", *(RankProcess(pid=1000 + i, host="node1", state="S", state_name="sleeping", rank=i,
                                         world_size=MAX_RANK_OUTPUTS + 6, outputs=(f"/j/rank{i}.out",))
                             for i in range(MAX_RANK_OUTPUTS + 6)))]
    asked: list[str] = []

    def count(host: str, paths: list[str]) -> dict[str, bytes | str]:
        asked.extend(paths)
        return {}

    ev = evidence_from_nodes(many, job="x", rank_output_fetch=count).collected.evidence
    assert len(asked) == MAX_RANK_OUTPUTS
    assert any(u.source == "rank outputs" and u.why.startswith("6 more") for u in ev.unreadable), ev.unreadable
