"""Round 9 of issue 19's rules (branch i19-rules9): waits whose collective has no c10d
frame on the stack (DDP's gradient all_reduce inside `backward()`, `Work.wait()` of an
isend/irecv), and a busy rank that logs its progress while the others wait. Real gloo
captures made here by tests/fixtures/diagnose/rules9/make_rules9.py (rules9_job.py: each
rank's output and `py-spy dump --json --locals` of every rank while it hung), and live
jobs of the same script diagnosed by `hc diagnose pids`.
"""

from __future__ import annotations

import json
import shutil

import pytest
from support import FIXTURES, diagnose_saved, named_ranks
from test_diagnose_sampling import LIVE_BOUND_S, Job, _odd, needs_jobs

from healthcheck.diagnose.jsonlines import as_text_line, is_json_lines
from healthcheck.diagnose.logprogress import logs_progress
from healthcheck.parsers.py_spy import PySpyFrame, PySpyLocal, collective

SCEN = FIXTURES / "diagnose" / "rules9"
JOB = SCEN / "rules9_job.py"


def test_ddp_ranks_waiting_in_backward_are_waiters_and_the_barrier_rank_is_named():
    # rank 0 (the checkpoint writer) waits in barrier; ranks 1-2 in step 4's backward, where
    # DDP's reducer waits for its bucket all_reduce: no c10d frame. hc named 1-2 stuck.
    v = diagnose_saved(SCEN / "ddpsave-w3-r0")
    assert named_ranks(v) == [0], v.summary
    assert v.cls == "collective-mismatch", v.summary


def test_without_locals_a_backward_stack_is_in_doubt_and_names_no_waiter(tmp_path):
    # the same stacks with py-spy's locals gone: a rank in backward may wait for DDP or be
    # stuck in its own backward; the waiters must not be named
    case = tmp_path / "ddpsave"
    shutil.copytree(SCEN / "ddpsave-w3-r0", case)
    for f in case.glob("py-spy-rank*.json"):
        threads = json.loads(f.read_text())
        for t in threads:
            for fr in t["frames"]:
                fr["locals"] = None
        f.write_text(json.dumps(threads))
    v = diagnose_saved(case)
    assert not set(named_ranks(v)) & {1, 2}, v.summary


def test_ranks_in_an_isend_or_irecv_wait_are_waiters_and_the_relay_stage_is_stuck():
    # stage 1 sleeps in reload_weights; stage 0 waits in its isend's Work.wait(), stage 2 in
    # its irecv's: only the program's own frame shows (wait is native). hc named nobody.
    v = diagnose_saved(SCEN / "relay-w3-r1")
    assert named_ranks(v) == [1], v.summary
    assert v.cls == "stuck-rank", v.summary


def test_a_wait_chained_on_an_irecv_is_read_from_the_source_line(tmp_path):
    # `dist.irecv(x, src=1).wait()`: no local holds the Work; the frame's own line says it.
    # py-spy's paths are the capture's: pointed at this checkout's script, locals dropped
    case = tmp_path / "relaychain"
    shutil.copytree(SCEN / "relaychain-w4-r2", case)
    for f in case.glob("py-spy-rank*.json"):
        threads = json.loads(f.read_text())
        for t in threads:
            for fr in t["frames"]:
                fr["locals"] = None
                if fr["filename"].endswith("rules9_job.py"):
                    fr["filename"] = str(JOB)
        f.write_text(json.dumps(threads))
    v = diagnose_saved(case)
    assert named_ranks(v) == [2], v.summary
    assert v.cls == "stuck-rank", v.summary


def test_a_work_held_by_the_innermost_frame_is_a_wait_and_a_plain_sleep_is_not():
    work = PySpyLocal(name="req", repr="<torch._C._distributed_c10d.Work at 0x7f5418635c30>")
    waiting = (PySpyFrame(name="receive_input", file="job.py", line=9, locals=(work,)),
               PySpyFrame(name="main", file="job.py", line=20))
    sleeping = (PySpyFrame(name="load", file="job.py", line=3), PySpyFrame(name="main", file="job.py", line=20))
    assert collective(waiting) == "wait"
    assert collective(sleeping) is None


def test_a_rank_that_writes_in_every_interval_logs_progress_and_one_burst_does_not():
    steady = [(i * 0.5, 1000 + 40 * (i // 2)) for i in range(14)]  # a line a second
    burst = [(i * 0.5, 1000 if i < 2 else 1080) for i in range(14)]  # two lines, then nothing
    silent = [(i * 0.5, 1000) for i in range(14)]
    assert logs_progress(steady)
    assert not logs_progress(burst)
    assert not logs_progress(silent)


@pytest.fixture
def job(tmp_path):
    made: list[Job] = []

    def start(scenario: str, world: int, odd: str) -> Job:
        j = Job(tmp_path, scenario, world, odd, script=JOB)
        made.append(j)
        return j

    yield start
    for j in made:
        j.close()


@needs_jobs
def test_a_cpu_bound_rank_that_logs_its_progress_is_not_named(job):
    # rank 0 builds an index for 25 s, a log line a second, while rank 1 waits in
    # broadcast_object_list: slow, not stuck. hc named rank 0 "busy, but in no collective".
    # One waiting peer shows it (each rank is a torch start; ddpsave below needs two waiters:
    # at world two its barrier and the backward's all_reduce are one rank each)
    j = job("vocab", 2, "0")
    j.wait_for_text("fault")
    for _ in range(2):
        v, elapsed = j.diagnose()
        assert _odd(v) == [], v["summary"]
        assert v["class"] == "progressing", v["summary"]
        assert elapsed < LIVE_BOUND_S


@needs_jobs
def test_live_ddp_waiters_in_backward_are_not_named(job):
    j = job("ddpsave", 3, "0")
    j.wait_for_text("fault")
    v, elapsed = j.diagnose()
    assert _odd(v) == [0], v["summary"]
    assert elapsed < LIVE_BOUND_S


@pytest.mark.parametrize(("scenario", "culprit"), [("metrics-w4-r3", 3), ("metrics-w3-r1", 1), ("objects-w3-r2", 2)])
def test_a_rank_whose_objects_cannot_be_pickled_in_all_gather_object_died_of_it(scenario, culprit):
    # TypeError "cannot pickle 'generator' object" raised in _object_to_tensor, inside
    # all_gather_object but before any exchange: the rank's own argument. hc read it as a
    # collective's error (a victim) and named nobody; with JSON-line logs (metrics-*) it
    # did not read the files at all
    v = diagnose_saved(SCEN / scenario)
    assert named_ranks(v) == [culprit], v.summary
    assert v.cls == "dead-rank", v.summary


def test_json_line_logs_are_read_as_each_ranks_lines():
    line = '{"time": 1.5, "rank": 3, "level": "INFO", "message": "step 2 gathered 4 records"}'
    assert as_text_line(line) == "[rank3]: step 2 gathered 4 records"
    assert as_text_line("[rank3]: Traceback (most recent call last):") == "[rank3]: Traceback (most recent call last):"
    assert is_json_lines((SCEN / "metrics-w4-r3" / "rank3.log").read_text())
    assert not is_json_lines('{"entries": [], "version": "2.4"}')


@pytest.mark.parametrize(("scenario", "culprit"), [("ddpshape-w4-r3", 3), ("ddpshape-w3-r1", 1),
                                                   ("ddpshape-w3-r0", 0)])
def test_ddps_parameter_shape_check_is_a_shape_mismatch_of_the_odd_model(scenario, culprit):
    # DDP's constructor raises "params[0] in this process with sizes [48, 16] appears not
    # to match ... process 0" on every rank whose model differs from rank 0's: hc called
    # it a death. Where rank 0's model is the odd one, every other rank raises: rank 0 is named
    v = diagnose_saved(SCEN / scenario)
    assert v.cls == "shape-mismatch", v.summary
    assert named_ranks(v) == [culprit], v.summary


def test_a_busy_loop_still_at_the_end_of_a_loaded_look_is_busy_but_a_back_off_sleep_is_not():
    # CI, loaded: the vocab rank's loop showed one line for the last second of a 6 s look and
    # was named stuck though it logged every second. busy_stack asks about the whole look.
    from healthcheck.diagnose.motion import StackSample, busy_stack

    def look(keys: str) -> list[StackSample]:
        return [StackSample(at=0.5 * i, key=k) for i, k in enumerate(keys)]

    assert busy_stack(look("abcabdacbbbb"))  # walks its loop, then one line for the last 1.5 s
    assert not busy_stack(look("sssssrsssssss"))  # asleep between retries: one change in and out
    assert not busy_stack(look("ab"))  # too short a look to call anything busy
