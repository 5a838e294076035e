"""Hang or slow progress: every rank's stack sampled over a window (diagnose/sampling.py,
motion.py, stuck.py, stackrules.py), on real gloo jobs run here
(tests/fixtures/diagnose-sampling/job.py: torch CPU, one process per rank, its output to a
file) and diagnosed live by `hc diagnose pids` with real py-spy. Issue 19, items 2, 3, 4, 8.

Times are asserted only against the live answer's bound (15 s, sampling included)."""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest
from support import FIXTURES, run_hc, run_hc_inproc, torch_installed

from healthcheck.diagnose.motion import StackSample, job_motion, moved
from healthcheck.diagnose.sampling import SamplingSpec, sample_ranks
from healthcheck.parsers.py_spy import PySpyDump, PySpyFrame, PySpyProcess, PySpyThread
from healthcheck.parsers.torch_log import parse_torch_log

JOB = FIXTURES / "diagnose-sampling" / "job.py"
PY_SPY = Path(sys.executable).parent / "py-spy"
LIVE_BOUND_S = 15.0  # the live answer, sampling included (issue 19)


def _torch() -> bool:
    return torch_installed()  # found, not imported (support.torch_installed says why)


def needs_jobs(fn):
    """A test that runs real gloo jobs and py-spy: slow, and skipped where either is missing."""
    skip = pytest.mark.skipif(not PY_SPY.exists() or not _torch(), reason="needs torch and py-spy in this venv")
    return skip(pytest.mark.slow(fn))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Job:
    """One rank process per rank of job.py SCENARIO, each printing to its own file."""

    def __init__(self, tmp: Path, scenario: str, world: int, odd: str = "1", script: Path = JOB,
                 extra_env: dict[str, str] | None = None) -> None:
        self.outputs = [tmp / f"{scenario}-rank{r}.out" for r in range(world)]
        port = _free_port()
        env = {k: v for k, v in os.environ.items()
               if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_JOB_ID", "SLURM_JOBID")}
        env.update(extra_env or {})
        self.procs = []
        for rank, out in enumerate(self.outputs):
            with open(out, "wb") as f:
                self.procs.append(subprocess.Popen(
                    [sys.executable, str(script), scenario, "--odd", odd],
                    env={**env, "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
                         "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "PYTHONUNBUFFERED": "1"},
                    stdout=f, stderr=subprocess.STDOUT, start_new_session=True))

    @property
    def pids(self) -> list[str]:
        return [str(p.pid) for p in self.procs]

    def wait_for(self, line: str, timeout_s: float = 120.0) -> None:
        """Until every rank has printed `line` (torch imported, the group up, steps run)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(f"{line}\n" in out.read_text(errors="replace") for out in self.outputs):
                return
            assert all(p.poll() is None for p in self.procs), [o.read_text() for o in self.outputs]
            time.sleep(0.3)
        raise AssertionError(f"the job did not reach {line!r}: " + " | ".join(o.read_text()[-300:]
                                                                            for o in self.outputs))

    def wait_for_text(self, text: str, timeout_s: float = 120.0, settle_s: float = 2.0) -> None:
        """Until some rank's output holds `text` (its fault began), then `settle_s` more."""
        deadline = time.monotonic() + timeout_s
        while not any(text in out.read_text(errors="replace") for out in self.outputs):
            assert time.monotonic() < deadline, [o.read_text()[-300:] for o in self.outputs]
            time.sleep(0.3)
        time.sleep(settle_s)

    def diagnose(self, *args: str) -> tuple[dict, float]:
        start = time.monotonic()
        r = run_hc("diagnose", "pids", *self.pids, "--format", "json", *args, timeout=60)
        elapsed = time.monotonic() - start
        assert r.returncode in (0, 3), r.stderr
        return json.loads(r.stdout), elapsed

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
        for p in self.procs:
            p.wait(10)


@pytest.fixture
def job(tmp_path):
    made: list[Job] = []

    def start(scenario: str, world: int, odd: str = "1") -> Job:
        j = Job(tmp_path, scenario, world, odd)
        made.append(j)
        return j

    yield start
    for j in made:
        j.close()


@pytest.fixture(scope="module")
def hang_of_two(tmp_path_factory):
    """One job for the tests that look at a plain hang: two ranks, rank 1 in
    load_batch_forever from step 3 while rank 0 waits in all_reduce (a hang does not end,
    so each test looks at it as it would at its own; each job is two torch starts)."""
    j = Job(tmp_path_factory.mktemp("hang"), "hang", 2, "1")
    try:
        j.wait_for("step 2")
        yield j
    finally:
        j.close()


# the group job's Slurm job id: `hc diagnose job` (test_diagnose_job_reads_each_ranks_own_output_file)
# finds its ranks by it, as on a node
GROUP_JOB_ID = str(4_000_000 + os.getpid() % 1_000_000)


@pytest.fixture(scope="module")
def group_job(tmp_path_factory):
    """The `group` job (world 4) for the tests that look at it: rank 1 passes pair {2,3} to
    its pair all_reduce at step 3, torch warns in rank 1's output, rank 0 waits alone, ranks
    1-3 in the world's all_reduce, for ever. Its ranks carry SLURM_JOB_ID, as a Slurm job's
    do. Four torch starts, once for the module."""
    j = Job(tmp_path_factory.mktemp("group"), "group", 4, extra_env={"SLURM_JOB_ID": GROUP_JOB_ID})
    try:
        j.wait_for("step 2")
        time.sleep(1.0)  # step 3: rank 1's warning, everyone in place
        yield j
    finally:
        j.close()


def _odd(v: dict) -> list[int]:
    return [o["rank"] for o in v.get("odd_ranks", [])]


# ------------------------------------------------------------------ item 2: hang or slow


@needs_jobs
def test_a_healthy_job_with_jittery_steps_names_no_rank_in_any_try(job):
    """One look named a 'stuck' rank in a third of the tries; sampled, every try says
    progressing, names nobody, and says how many samples over how long."""
    j = job("jitter", 3)
    j.wait_for("step 2")
    for _ in range(4):
        v, elapsed = j.diagnose()
        assert v["class"] == "progressing" and _odd(v) == [], v["summary"]
        assert "samples of every rank over" in v["summary"] and "steps/s" in v["summary"], v["summary"]
        assert any(n.startswith("stacks: ") and "samples" in n for n in v["notes"])
        assert (v["findings"][0]["id"], v["findings"][0]["status"]) == ("diag.E011", "PASS")  # nothing hangs
        assert elapsed < LIVE_BOUND_S


@needs_jobs
def test_a_straggler_two_seconds_slower_is_not_called_stuck(job):
    j = job("straggler", 3, odd="1")
    j.wait_for("step 1")
    v, elapsed = j.diagnose()
    assert v["class"] == "progressing" and _odd(v) == [], v["summary"]
    assert "rank 1" in v["summary"] and "straggler" in v["summary"], v["summary"]
    assert elapsed < LIVE_BOUND_S


@needs_jobs
def test_a_real_hang_is_still_named_within_the_bound(hang_of_two):
    j = hang_of_two
    v, elapsed = j.diagnose()
    assert (v["class"], _odd(v)) == ("stuck-rank", [1]), v["summary"]
    assert "did not move" in v["summary"] and "load_batch_forever" in v["summary"], v["summary"]
    assert v["confidence"] == "high"
    assert elapsed < LIVE_BOUND_S
    # one look (--samples 1) still names it, and says nothing of samples
    v, _ = j.diagnose("--samples", "1")
    assert (v["class"], _odd(v)) == ("stuck-rank", [1]) and "samples" not in v["summary"]


# ------------------------------------------------------------------ a rank's own I/O is progress


def _wait_after(j: Job, line: str, settle_s: float = 1.5) -> None:
    j.wait_for(line)
    time.sleep(settle_s)  # the others have reached the final barrier


@needs_jobs
def test_a_rank_writing_its_final_checkpoint_slowly_is_progressing_not_stuck(job):
    """Held-out-6's final checkpoint: rank 0 writes a 64 KiB shard every 1.25 s with a
    sleep between while the others wait in the final barrier. Its stack shows the sleep's
    line in every sample; its own written bytes grow. hc named it stuck in every look."""
    j = job("slowwrite", 2, odd="0")
    _wait_after(j, "training ended")
    for _ in range(2):
        v, elapsed = j.diagnose()
        assert _odd(v) == [] and v["class"] == "progressing", v["summary"]
        assert "rank 0" in v["summary"] and "barrier" in v["summary"], v["summary"]
        assert elapsed < LIVE_BOUND_S


@needs_jobs
def test_a_rank_reading_a_slow_stream_is_progressing_not_stuck(job):
    j = job("slowread", 2, odd="1")
    _wait_after(j, "training ended")
    v, _ = j.diagnose()
    assert _odd(v) == [] and v["class"] == "progressing", v["summary"]
    assert "rank 1" in v["summary"], v["summary"]


@needs_jobs
def test_a_rank_sleeping_with_no_io_while_the_others_wait_is_still_stuck(job):
    """The control: the same shape as the slow writer, with no I/O."""
    j = job("stall", 2, odd="1")
    _wait_after(j, "training ended")
    v, elapsed = j.diagnose()
    assert (v["class"], _odd(v)) == ("stuck-rank", [1]), v["summary"]
    assert "stall_forever" in v["summary"] and elapsed < LIVE_BOUND_S


@needs_jobs
def test_a_rank_blocked_writing_to_a_full_pipe_is_still_stuck(job):
    """py-spy's dump stops the process: the blocked write returns once with the bytes it
    had written, and is restarted and counted as one more call at every dump. Counting
    calls called held-out-6's full-pipe rank progressing."""
    j = job("pipefull", 2, odd="0")
    _wait_after(j, "training ended")
    v, _ = j.diagnose()
    assert (v["class"], _odd(v)) == ("stuck-rank", [0]), v["summary"]
    assert "write_to_full_pipe" in v["summary"], v["summary"]


@needs_jobs
def test_a_live_rank_whose_producer_process_died_is_stuck_not_dead(job):
    """Held-out-6's mp queue: the producer *process* raised and multiprocessing printed its
    traceback into the rank's output; the rank is alive in Queue.get. hc named it dead."""
    j = job("mpchild", 2, odd="1")
    j.wait_for("step 2")
    deadline = time.monotonic() + 60
    while "OSError: shard 1" not in j.outputs[1].read_text(errors="replace") and time.monotonic() < deadline:
        time.sleep(0.3)
    time.sleep(1.0)
    v, _ = j.diagnose()
    assert (v["class"], _odd(v)) == ("stuck-rank", [1]), v["summary"]
    assert "child process" in v["summary"] and "died" in v["summary"], v["summary"]


def test_a_child_process_traceback_is_marked_as_a_child_s():
    """multiprocessing's `Process NAME:` traceback (outermost frame _bootstrap) is marked as
    a child's; the rank's own traceback after it is not."""
    text = ("Process batch-producer:\nTraceback (most recent call last):\n"
            '  File "/usr/lib/python3.11/multiprocessing/process.py", line 314, in _bootstrap\n'
            "    self.run()\n"
            '  File "/job/train.py", line 40, in produce\n'
            "    raise OSError('bad shard')\nOSError: bad shard\n"
            "Traceback (most recent call last):\n"
            '  File "/job/train.py", line 9, in main\n'
            "    run()\nValueError: its own\n")
    log = parse_torch_log(text)
    assert [(e.type, e.child_process) for e in log.exceptions] == [("OSError", True), ("ValueError", False)]


# ------------------------------------------------------------------ item 3: no strict minority


@needs_jobs
def test_a_hang_at_world_size_two_is_named(hang_of_two):
    v, _ = hang_of_two.diagnose()
    assert (v["class"], _odd(v)) == ("stuck-rank", [1]), (v["summary"], v["stack_groups"])


@needs_jobs
def test_a_whole_nodes_ranks_hanging_together_are_all_named_with_their_host(job):
    """4 ranks, 2 per 'node' (this machine's collection split in two hosts, as two nodes'
    collectors would give it): node2's ranks 2-3 hang, node1's wait for them. Two per node
    is the smallest world where a node's ranks hang together and are half of it (no strict
    minority); each rank is a torch start CI's cores pay for."""
    from healthcheck.diagnose.collect import collect_node
    from healthcheck.diagnose.live import evidence_from_nodes
    from healthcheck.diagnose.verdict import build

    j = job("hang", 4, odd="2,3")
    j.wait_for("step 2", timeout_s=180)
    pids = [int(p) for p in j.pids]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        nodes = list(pool.map(lambda hp: collect_node(pids=hp[1], host=hp[0], timeout_s=15, kernel=False),
                              [("node1", pids[:2]), ("node2", pids[2:])]))
    v = build(evidence_from_nodes(nodes, job="x").collected)
    assert (v.cls, [o.rank for o in v.odd_ranks]) == ("stuck-rank", [2, 3]), (v.summary, v.stack_groups)
    assert v.odd_hosts == "node2" and "on node2" in v.summary, v.summary


# ------------------------------------------------------------------ item 4: the lone stack is the victim


@needs_jobs
def test_the_rank_that_passed_a_foreign_group_is_named_not_its_partner(group_job):
    """Rank 1 passes pair {2,3} to its pair all_reduce: torch warns and skips it, rank 0
    waits alone in the pair's all_reduce (the lone stack), ranks 1-3 in the world's. The
    warning in rank 1's output names it; the stacks alone name nobody, never rank 0."""
    from healthcheck.diagnose.collect import collect_node
    from healthcheck.diagnose.live import evidence_from_nodes
    from healthcheck.diagnose.verdict import build

    j = group_job
    v, _ = j.diagnose()
    assert (v["class"], _odd(v)) == ("collective-mismatch", [1]), v["summary"]
    assert "does not belong" in v["summary"] and "rank 0 waits for it" in v["summary"], v["summary"]
    # the stacks alone (no output read): the group is taken into account, the victim is not named
    node = collect_node(pids=[int(p) for p in j.pids], host="h", timeout_s=15, kernel=False)
    alone = build(evidence_from_nodes([node], job="x").collected)
    assert alone.cls == "collective-mismatch" and [o.rank for o in alone.odd_ranks] == [], alone.summary
    assert "process group of its own" in alone.summary


def slurm_here(tmp: Path, job_id: str) -> Path:
    """A config whose scontrol says job_id runs on node1 and whose srun runs its command on
    this machine (srun's options dropped): `hc diagnose job` then collects the real
    processes whose SLURM_JOB_ID is job_id, and fetches their files, as on a node."""
    scontrol = tmp / "scontrol"
    scontrol.write_text(f"#!/bin/sh\necho 'JobId={job_id} JobName=t JobState=RUNNING Reason=None NodeList=node1 "
                        "NumTasks=4'\n")
    srun = tmp / "srun"
    srun.write_text('#!/bin/sh\nwhile [ $# -gt 0 ]; do case "$1" in --*) shift;; *) break;; esac; done\n'
                    'exec "$@"\n')
    for f in (scontrol, srun):
        f.chmod(0o755)
    cfg = tmp / "hc.yaml"
    cfg.write_text(f"slurm:\n  scontrol: {scontrol}\n  srun: {srun}\n  remote_hc: {sys.executable} -m healthcheck\n"
                   "  retries: 1\n")
    return cfg


@needs_jobs
def test_diagnose_job_reads_each_ranks_own_output_file(group_job, tmp_path):
    """The group job as a Slurm job's ranks, each printing to its own file. `hc diagnose
    job` reads each rank's own file through the node (as `hc diagnose pids` does): the
    warning names rank 1; without it, nobody. (Issue 19's wiring, from
    test_diagnose_wiring.py: here it looks at this module's group job instead of starting
    its own.)"""
    assert "does not belong to the given group" in group_job.outputs[1].read_text()
    r = run_hc("diagnose", "job", GROUP_JOB_ID, "--config", str(slurm_here(tmp_path, GROUP_JOB_ID)), "--format",
               "json", timeout=120)
    assert r.returncode in (0, 3), (r.stdout, r.stderr)
    v = json.loads(r.stdout)
    assert sorted(row["rank"] for row in v["ranks"]) == [0, 1, 2, 3], v["summary"]
    assert (v["class"], _odd(v)) == ("collective-mismatch", [1]), v["summary"]
    assert "does not belong" in v["summary"], v["summary"]


def test_the_not_in_group_warning_is_read():
    log = parse_torch_log((FIXTURES / "diagnose-sampling" / "group-rank1.out").read_text())
    (w,) = log.not_in_group
    assert (w.operation, w.global_rank, w.rank) == ("all_reduce", 1, 1)


# ------------------------------------------------------------------ item 8: the thread that blocks, the table


@needs_jobs
def test_the_thread_the_main_thread_waits_on_is_shown(job):
    j = job("thread", 2, odd="1")
    j.wait_for("step 2")
    v, _ = j.diagnose()
    assert (v["class"], _odd(v)) == ("stuck-rank", [1]), v["summary"]
    group = next(g for g in v["stack_groups"] if g["ranks"] == [1])
    assert "waits on thread 'loader'" in group["label"] and "read_shard" in group["label"], group
    assert group["function"] == "read_shard" and "read_shard" in v["summary"]
    r = run_hc("diagnose", "pids", *j.pids, "--samples", "1")
    text = r.stdout.decode()
    header = next(line for line in text.splitlines() if line.split()[:2] == ["rank", "host"])
    # a gloo job fills no NCCL, watchdog seq or Flight Recorder column: they are not shown
    assert header.split() == ["rank", "host", "pid", "state", "stack"], header
    assert "not read" not in text  # its output file holds nothing hc reads: not a file left unread


# ------------------------------------------------------------------ sampling's rounds, without a job


def _dump(name: str, line: int) -> PySpyDump:
    frame = PySpyFrame(name=name, file="train.py", line=line)
    return PySpyDump(format="json", processes=(PySpyProcess(pid=1, threads=(
        PySpyThread(id="1", name="MainThread", frames=(frame,)),)),))


class _Result(msgspec.Struct):
    stack: PySpyDump | None = None
    error: str | None = None


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def test_sampling_stops_at_the_window_when_every_rank_moved_and_goes_on_while_one_did_not(tmp_path):
    clock = _Clock()
    calls: list[int] = []

    def dump(pid: int, state: str, timeout_s: float) -> _Result:
        calls.append(pid)
        if pid == 1:  # moves every time
            return _Result(_dump("step", len(calls)))
        if pid == 2:  # still until 3 s, then moves
            return _Result(_dump("wait", 1 if clock.now < 3.0 else 2))
        return _Result(_dump("forever", 1))  # pid 3: never moves

    spec = SamplingSpec(samples=4, window_s=1.5, horizon_s=6.0)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        both = sample_ranks([(1, "S"), (2, "S")], dump, spec, pool=pool, deadline=100.0, per_dump_s=1.0,
                            proc=str(tmp_path), clock=clock, sleep=clock.sleep)
        assert all(moved(s) for s in both.samples.values()) and clock.now == pytest.approx(3.0)
        clock.now, t0 = 10.0, 10.0
        still = sample_ranks([(3, "S"), (4, "T")], dump, spec, pool=pool, deadline=100.0, per_dump_s=1.0,
                             proc=str(tmp_path), clock=clock, sleep=clock.sleep)
    assert clock.now - t0 == pytest.approx(6.0)  # the horizon: pid 3 never moved
    assert not moved(still.samples[3]) and len(still.samples[3]) == 13
    motion = job_motion({0: still.samples[3], 1: both.samples[1]})
    assert motion is not None and motion.still == {0} and not motion.all_moved
    assert motion.describe() == "13 samples of every rank over 6.0 s"


def test_a_rank_that_reached_its_wait_after_the_first_round_is_sampled_until_it_is_seen_still(tmp_path):
    """CI, a whole node's ranks hanging: the other node's ranks were in their step at the
    first round and in all_reduce from the second on; at the window's end they had been
    unchanged for 0.999 s (< STILL_S), so sampling stopped, every rank there 'moved', and
    the diagnosis named no one. A rank nearly still gets the rounds that tell."""
    clock = _Clock()
    calls: list[int] = []

    def dump(pid: int, state: str, timeout_s: float) -> _Result:
        calls.append(pid)
        if len(calls) == 2:
            clock.now += 0.012  # the second round's dump came a little late, as on the CI run
        return _Result(_dump("step" if len(calls) == 1 else "all_reduce", 1))

    spec = SamplingSpec(samples=4, window_s=1.5, horizon_s=6.0)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        got = sample_ranks([(1, "S")], dump, spec, pool=pool, deadline=100.0, per_dump_s=1.0,
                           proc=str(tmp_path), clock=clock, sleep=clock.sleep)
    assert not moved(got.samples[1]), [(s.at, s.key) for s in got.samples[1]]
    assert clock.now == pytest.approx(6.0)  # then the horizon, as for any still rank


def test_a_rank_that_moves_in_every_round_stops_sampling_at_the_window(tmp_path):
    """Nearly still is not a stretch of one sample: a rank that changed at the last round moves."""
    clock = _Clock()

    def dump(pid: int, state: str, timeout_s: float) -> _Result:
        return _Result(_dump("step", int(clock.now * 2)))

    spec = SamplingSpec(samples=4, window_s=1.5, horizon_s=6.0)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        got = sample_ranks([(1, "S")], dump, spec, pool=pool, deadline=100.0, per_dump_s=1.0,
                           proc=str(tmp_path), clock=clock, sleep=clock.sleep)
    assert moved(got.samples[1]) and clock.now == pytest.approx(1.5)


def test_one_sample_or_none_is_no_motion():
    one = [StackSample(at=0.0, key="a")]
    assert job_motion({0: one}) is None
    assert moved([StackSample(at=0.0, key="a", collective="all_reduce", io=5),
                  StackSample(at=1.0, key="a", collective="all_reduce", io=9)])
    assert not moved([StackSample(at=0.0, key="a", collective="all_reduce", io=5),
                      StackSample(at=1.0, key="a", collective="all_reduce", io=5)])


def test_io_outside_a_collective_is_a_background_threads_not_the_rank_moving():
    """On an H100, one NCCL rank blocked in torch.cuda.synchronize behind a hung all_reduce
    (tests/fixtures/h100-captures/nccl-watchdog-timeout-1rank) was called progressing: its
    stack never changed, only the process's I/O count (NCCL's and torch's own threads)."""
    synchronize = [StackSample(at=t, key="synchronize@nccl_hang.py:21", io=1000 + int(t * 10)) for t in (0, 0.5, 1, 1.5)]
    assert not moved(synchronize)
    # a step counter still tells progress wherever the rank is
    stepping = [StackSample(at=t, key="s", io=7, counters={"main:step": int(t * 2)}) for t in (0, 0.5, 1, 1.5)]
    assert moved(stepping)


def _writer(period: float, stop_at: float | None = None, until: float = 6.0, size: int = 65536) -> list[StackSample]:
    """Samples every 0.5 s of a rank at one line whose own thread I/O rises every `period` s
    (until stop_at)."""
    out = []
    for i in range(int(until / 0.5) + 1):
        t = i * 0.5
        last = min(t, stop_at) if stop_at is not None else t
        out.append(StackSample(at=t, key="sleep@save_final_checkpoint", thread_io=int(last // period) * size))
    return out


@pytest.mark.parametrize("period", [1.25, 1.5, 2.0])
def test_a_rank_whose_own_io_goes_on_moved_whatever_line_its_stack_shows(period):
    """Its still stretches are as long as its own pace (over STILL_S at the last sample
    half the time): its own I/O going on is motion."""
    for end in (5.0, 5.5, 6.0):
        m = job_motion({0: _writer(period, until=end)})
        assert m is not None and m.ranks[0].moved and m.ranks[0].io_active, (period, end, m.ranks[0])


def test_a_rank_that_wrote_and_then_stopped_or_never_wrote_did_not_move():
    # a warning line a try (120 bytes) is no work: held-out-5's retry back-off was called progressing
    for samples in (_writer(1.25, stop_at=3.0), _writer(1.25, stop_at=0.6), _writer(1000.0), _writer(1.0, size=120)):
        m = job_motion({0: samples})
        assert m is not None and not m.ranks[0].moved and not m.ranks[0].io_active, m.ranks[0]


@pytest.mark.parametrize("args", [["--samples", "0"], ["--samples", "21"], ["--samples", "nan"],
                                  ["--window", "nan"], ["--window", "-1"], ["--window", "6"]])
def test_sampling_options_are_bounded(args):
    r = run_hc_inproc("diagnose", "pids", "1", *args)  # a usage error: no process boundary in it
    assert r.returncode == 4 and b"Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.decode().strip().splitlines()) <= 3  # click's usage line, the hint, the error


def test_the_survivors_of_a_dead_rank_are_not_a_second_culprit():
    """At any count, 'outside any collective while others wait' would call the survivors
    lingering in their error handling stuck beside the rank that died (one look, saved)."""
    from healthcheck.diagnose.sources import collect
    from healthcheck.diagnose.verdict import build

    v = build(collect([FIXTURES / "diagnose-live" / "kill-torchrun"]))
    assert (v.cls, [o.rank for o in v.odd_ranks]) == ("dead-rank", [2]), v.summary
    assert [f.cls for f in v.findings] == ["dead-rank"] and v.confidence == "high", v.notes
