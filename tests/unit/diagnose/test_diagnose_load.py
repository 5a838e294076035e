"""Diagnosis on a loaded node (issue 19: no rank named on a healthy job, ever).

Beside other work, py-spy's dumps come late and fewer, and a busy rank runs slower: a
look's samples are further apart than the sampler asked for, and a rank's stack can show
the same line in two far-apart samples though it worked between them. These tests build
the samples a loaded look gives (their timing shape) from real py-spy dumps of a hung gloo
job (tests/fixtures/diagnose-live/sleep-srun: rank 2 in `load_batch_slowly`, ranks 0, 1, 3
in `all_reduce`, collected on the rig) and assert what hc names. The live test runs a
CPU-bound healthy job beside CPU hogs and compares hc's answer with its own answer on the
same job unloaded. tests/diagnose_jobs/load.py measures the live scenarios under load.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

import msgspec
from diagnose_jobs.load import Load
from diagnose_jobs.load import hogs as busy_loops
from support import FIXTURES
from test_diagnose_sampling import JOB as SAMPLING_JOB
from test_diagnose_sampling import Job, _odd, needs_jobs

from healthcheck.diagnose.live import evidence_from_nodes
from healthcheck.diagnose.motion import StackSample, job_motion, sample_of
from healthcheck.diagnose.nodeschema import decode_collection
from healthcheck.diagnose.stacks import main_thread
from healthcheck.diagnose.verdict import Verdict, build

LIVE = FIXTURES / "diagnose-live" / "sleep-srun"
ODD = 2  # in load_batch_slowly; the others in all_reduce

# per rank, a sample: (at, thread_io, cpu); the stack is the rank's real one
Shape = Callable[[int], Sequence[tuple[float, int | None, float | None]]]


def _looked(tmp: Path, shape: Shape) -> Verdict:
    """The job's real node collections with each rank's samples as `shape` gives them (its
    real stack in every sample, the process's I/O unchanged), diagnosed as `hc diagnose`
    does a live job."""
    nodes = []
    for f in sorted(LIVE.glob("collect-node*.json")):
        c = decode_collection(f.read_bytes())
        ranks = []
        for r in c.ranks:
            assert r.stack is not None and r.rank is not None
            thread = main_thread(r.stack.processes[0])
            samples = tuple(sample_of(thread, at, 1000, thread_io=tio, **({"cpu": cpu} if cpu is not None else {}))
                            for at, tio, cpu in shape(r.rank))
            ranks.append(msgspec.structs.replace(r, samples=samples))
        nodes.append(msgspec.structs.replace(c, ranks=tuple(ranks)))
    return build(evidence_from_nodes(nodes, job="sleep-srun").collected)


def _named(v: Verdict) -> list[int]:
    return [o.rank for o in v.odd_ranks]


def _same(times: Sequence[float]) -> Shape:
    """Every rank seen at `times`, unchanged (no I/O, no CPU count)."""
    return lambda rank: [(t, None, None) for t in times]


# ------------------------------------------------------------------ too few samples to tell


def test_two_far_apart_samples_cannot_tell_still_from_slow_and_name_no_rank(tmp_path):
    """A loaded look: two samples 1.3 s apart (the sampler asked for 4 over 1.5 s). The
    same stacks twice are 'still for 1.3 s' by time, but two looks are what one look is
    with a pause between: a slow loader's next batch and a healthy rank's next wait show
    the same line. hc named rank 2 stuck; it must say it could not tell, and name nobody."""
    v = _looked(tmp_path, _same((0.0, 1.3)))
    assert _named(v) == [], v.summary
    assert v.cls == "unknown" and "could not tell" in v.summary, v.summary
    assert "2 samples over 1.3 s" in v.summary, v.summary


def test_a_still_rank_seen_so_three_times_over_a_second_is_still_named(tmp_path):
    """The control: the same stacks, seen unchanged in enough samples, are a hang (loaded
    or not: here the samples are 0.8 s apart)."""
    for times in ((0.0, 0.5, 1.0, 1.5), (0.0, 0.8, 1.6, 2.4)):
        d = tmp_path / str(len(times)) / str(times[1])
        d.mkdir(parents=True)
        v = _looked(d, _same(times))
        assert (v.cls, _named(v)) == ("stuck-rank", [ODD]), v.summary


def test_a_look_shorter_than_a_second_for_every_rank_names_no_rank(tmp_path):
    """tests/diagnose_jobs/load.py, a straggler job beside 2 hogs with `--samples 2 --window
    1`: the first round's dumps took 0.1 s, so the samples spanned 0.9 s, too short for any
    motion; the stacks were then read as one look and the straggler named stuck."""
    v = _looked(tmp_path, _same((0.0, 0.9)))
    assert _named(v) == [], v.summary
    assert "could not tell" in v.summary and "2 samples over 0.9 s" in v.summary, v.summary


def test_a_rank_whose_samples_span_less_than_a_second_is_not_judged_still(tmp_path):
    """The odd rank's dumps stopped early (its py-spy timed out on the loaded node): two
    samples 0.4 s apart. It has no motion; the one look must not name it."""
    def shape(rank: int):
        return [(t, None, None) for t in ((0.0, 0.4) if rank == ODD else (0.0, 0.5, 1.0, 1.5))]

    v = _looked(tmp_path, shape)
    assert _named(v) == [], v.summary
    assert "could not tell" in v.summary and f"rank {ODD}" in v.summary, v.summary


def test_a_rank_whose_later_dumps_failed_is_not_judged_on_its_one_sample(tmp_path):
    """Its py-spy timed out after the first round (a loaded node) while its peers were
    sampled four times: its one sample is a look cut short, not one look asked for."""
    def shape(rank: int):
        return [(t, None, None) for t in ((0.0,) if rank == ODD else (0.0, 0.5, 1.0, 1.5))]

    v = _looked(tmp_path, shape)
    assert _named(v) == [], v.summary
    assert "could not tell" in v.summary and "1 sample over 0.0 s" in v.summary, v.summary


def test_one_look_asked_for_still_names_the_rank(tmp_path):
    """--samples 1 (or a saved dump): one look is judged as one look, as before."""
    v = _looked(tmp_path, _same((0.0,)))
    assert (v.cls, _named(v)) == ("stuck-rank", [ODD]), v.summary


# ------------------------------------------------------------------ CPU time: a thread that runs


def _logging_rank(cpu_per_s: float) -> Shape:
    """The odd rank outside any collective, one line in every sample (one long call; or a
    loop whose line the far-apart samples keep catching), writing a log line (80 bytes) a
    second, its thread using `cpu_per_s` of a CPU; the others wait, still, in all_reduce.
    Samples every 0.8 s over 4 s: a loaded look."""
    times = [round(0.8 * i, 1) for i in range(6)]

    def shape(rank: int):
        if rank != ODD:
            return [(t, 5000, 1.0) for t in times]
        return [(t, 5000 + 80 * int(t), 10.0 + cpu_per_s * t) for t in times]
    return shape


def test_a_rank_that_logs_progress_and_uses_cpu_is_working_whatever_its_stack_shows(tmp_path):
    """Held-out-7's index build, loaded: rank 0 logged every second and burned CPU, but the
    samples caught one line. hc named it stuck ('did not move'); its thread ran, and it
    logs its progress: progressing, nobody named."""
    for share in (0.9, 0.2):  # idle node; a rank with a fifth of a core beside hogs
        d = tmp_path / str(share)
        d.mkdir()
        v = _looked(d, _logging_rank(share))
        assert _named(v) == [], (share, v.summary)
        assert v.cls == "progressing" and f"rank {ODD}" in v.summary, (share, v.summary)


def test_a_rank_that_logs_while_blocked_is_still_stuck(tmp_path):
    """The control: the same log lines from a thread that uses no CPU (a retry loop that
    sleeps between tries and warns each time) is no work: still named."""
    v = _looked(tmp_path, _logging_rank(0.0))
    assert (v.cls, _named(v)) == ("stuck-rank", [ODD]), v.summary


def test_cpu_time_is_read_per_thread_from_proc(tmp_path):
    from healthcheck.diagnose.sampling import CLOCK_TICKS, read_thread_cpu

    task = tmp_path / "7" / "task" / "8"
    task.mkdir(parents=True)
    # a command name with spaces and parentheses; utime 150, stime 50 (fields 14 and 15)
    (task / "stat").write_text("8 (py (x) y) S 1 8 8 0 -1 4194560 100 0 0 0 150 50 0 0 20 0 3 0 1 1 1\n")
    assert read_thread_cpu(7, [8], proc=str(tmp_path)) == round(200 / CLOCK_TICKS, 2)
    assert read_thread_cpu(7, [9], proc=str(tmp_path)) is None
    (task / "stat").write_text("8 (truncated")
    assert read_thread_cpu(7, [8], proc=str(tmp_path)) is None
    import threading

    own = read_thread_cpu(os.getpid(), [threading.get_native_id()])
    assert own is not None and own >= 0


# ------------------------------------------------------------------ the sampler: more samples when too few


def test_sampling_goes_on_past_the_horizon_while_a_still_rank_has_too_few_samples(tmp_path):
    """Each round's dump takes 1.2 s (a loaded node): by the horizon the still rank was seen
    unchanged twice. Sampling goes on (up to SETTLE_S) until it was seen so three times."""
    import concurrent.futures

    from test_diagnose_sampling import _Clock, _dump, _Result

    from healthcheck.diagnose.motion import MIN_STILL_SAMPLES, still_run
    from healthcheck.diagnose.sampling import SamplingSpec, sample_ranks

    clock = _Clock()

    def dump(pid: int, state: str, timeout_s: float) -> _Result:
        line = 1 if clock.now < 1.0 else 2  # moved once, early; then still for ever
        clock.now += 1.2
        return _Result(_dump("forever", line))

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        got = sample_ranks([(1, "S")], dump, SamplingSpec(samples=3, window_s=1.0, horizon_s=4.0), pool=pool,
                           deadline=100.0, per_dump_s=5.0, proc=str(tmp_path), clock=clock, sleep=clock.sleep)
    assert len(still_run(got.samples[1])) >= MIN_STILL_SAMPLES, got.samples[1]


def test_sampling_goes_on_until_every_ranks_samples_span_a_second(tmp_path):
    """The window is counted from before the first round; a first round whose dumps took
    0.6 s (a loaded node) left 4 samples over 1.5 s spanning 0.9 s: no motion at all.
    Sampling goes on until every rank's samples span STILL_S."""
    import concurrent.futures

    from test_diagnose_sampling import _Clock, _dump, _Result

    from healthcheck.diagnose.motion import STILL_S
    from healthcheck.diagnose.sampling import SamplingSpec, sample_ranks

    clock = _Clock()
    rounds: list[float] = []

    def dump(pid: int, state: str, timeout_s: float) -> _Result:
        if not rounds:
            clock.now += 0.6
        rounds.append(clock.now)
        return _Result(_dump("step", len(rounds)))  # moves every time: sampling stops at the window

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        got = sample_ranks([(1, "S")], dump, SamplingSpec(samples=4, window_s=1.5, horizon_s=6.0), pool=pool,
                           deadline=100.0, per_dump_s=5.0, proc=str(tmp_path), clock=clock, sleep=clock.sleep)
    samples = got.samples[1]
    assert samples[-1].at - samples[0].at >= STILL_S, samples
    assert job_motion({0: samples}) is not None


def test_motion_counts_the_samples_of_the_still_run():
    m = job_motion({0: [StackSample(at=t, key="a" if t < 1 else "b") for t in (0.0, 0.5, 1.0, 1.5, 2.0, 2.5)]})
    assert m is not None and m.ranks[0].still_samples == 4 and not m.ranks[0].moved


# ------------------------------------------------------------------ live: a CPU-bound healthy job beside hogs


@needs_jobs
def test_a_cpu_bound_healthy_job_beside_cpu_hogs_names_no_rank(tmp_path):
    """The index build of rules9's job (rank 0 CPU-bound for 25 s, logging every second,
    rank 1 waiting in broadcast_object_list): looked at unloaded, then beside CPU hogs
    (more hogs than cores), with the default sampling and with sampling slowed to 2
    samples over 1 s (whose look spanned under a second: rank 0 was named stuck from what
    was one look). No look names a rank; the loaded looks say what the unloaded one says
    (progressing) or that they could not tell."""
    from test_diagnose_rules9 import JOB as RULES9_JOB

    assert SAMPLING_JOB.exists()
    j = Job(tmp_path, "vocab", 2, "0", script=RULES9_JOB)
    try:
        j.wait_for_text("fault")
        quiet, _ = j.diagnose()
        assert _odd(quiet) == [], quiet["summary"]
        with busy_loops(Load("hogs", hogs=2 * (os.cpu_count() or 2))):  # killed by pid on the way out
            for args in ((), ("--samples", "2", "--window", "1")):
                loaded, _ = j.diagnose(*args)
                assert _odd(loaded) == [], loaded["summary"]
                assert loaded["class"] in (quiet["class"], "unknown"), (quiet["summary"], loaded["summary"])
    finally:
        j.close()
