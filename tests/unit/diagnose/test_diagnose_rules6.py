"""Issue 19, round 6 of the rules (branch i19-rules6): `hc diagnose logs` on real gloo jobs
of this round (tests/fixtures/diagnose/rules6, made by make_rules6.py with torch 2.13 on
CPU): the rank named is the one whose own action broke the job.

* a KeyboardInterrupt on one rank (a SIGINT meant for another process) is that rank's death,
  whatever frame it was raised in; the same interrupt on every rank is an operator's
  Ctrl-C a launcher passed to all its workers, and no rank is named;
* a rank whose SIGTERM handler logs why it leaves and exits 0 is named with that reason;
* a gradient one element longer on one rank (13 against 12): gloo's ring cuts each tensor
  into 2 segments per rank, so the odd rank's segments differ from both neighbours' and
  two ranks' size checks can fail; the rank in every report is named, one report alone
  names none, no dtype is claimed where the ratios differ, and the ranks a scheduler
  killed after gloo's abort are not "ranks that left early";
* broadcast_object_list with a shorter list on one rank: its first collective is a
  broadcast of the sizes, read as a broadcast (never as a ring all_reduce); the lone
  receiver that failed the check is named where two or more ranks went past it;
* a job that finished: its labelled launcher stream holds no torch words, and hc says the
  job shows no failure and the last step each rank logged (not "no log hc reads").
"""

from __future__ import annotations

import pytest
from support import FIXTURES, diagnose_saved, named_ranks

SCEN = FIXTURES / "diagnose" / "rules6"


def verdict(scenario: str):
    return diagnose_saved(SCEN / scenario)


@pytest.mark.parametrize(("scenario", "culprit"), [("sigint-w3-r1", 1), ("sigint-mpirun-w4-r2", 2),
                                                   ("sigint-torchrun-w5-r0", 0)])
def test_a_keyboard_interrupt_on_one_rank_is_that_ranks_death(scenario, culprit):
    v = verdict(scenario)
    assert v.cls == "dead-rank", v.summary
    assert named_ranks(v) == [culprit], v.summary


@pytest.mark.parametrize("scenario", ["sigintall-w3", "ctrlc-torchrun-w3"])
def test_an_interrupt_on_every_rank_names_none_and_says_so(scenario):
    # ctrlc-torchrun-w3: SIGINT to torchrun alone; its agent passed it to every worker
    v = verdict(scenario)
    assert named_ranks(v) == [], v.summary
    assert "KeyboardInterrupt" in v.summary and "every rank" in v.summary, v.summary


@pytest.mark.parametrize(("scenario", "culprit"), [("preempt-torchrun-w3-r2", 2), ("preempt-w4-r1", 1)])
def test_a_rank_that_left_by_its_sigterm_handler_is_named_with_its_reason(scenario, culprit):
    v = verdict(scenario)
    assert v.cls == "dead-rank", v.summary
    assert named_ranks(v) == [culprit], v.summary
    assert "SIGTERM received" in v.summary and "does not say" not in v.summary, v.summary


def test_the_parser_keeps_each_ranks_last_logged_warning():
    from healthcheck.parsers.torch_log import parse_torch_log

    lines = ["[rank0]:2026-11-27 22:00:00,000 WARNING [train] first", "[rank1]:INFO [train] step 3",
             "[rank0]:2026-11-27 22:00:01,000 ERROR [train] disk full, leaving",
             '[rank1]:  File "train.py", line 3, in step', "[rank1]:RuntimeError: boom"]
    log = parse_torch_log("\n".join(lines))
    said = {w.rank: w.text for w in log.last_warnings}
    assert list(said) == [0] and "disk full" in said[0]


@pytest.mark.parametrize(("scenario", "culprit"), [("extraparam-mpirun-w3-r0", 0)])
def test_the_rank_in_every_size_report_is_the_odd_one(scenario, culprit):
    v = verdict(scenario)
    assert v.cls == "shape-mismatch", v.summary
    assert named_ranks(v) == [culprit], v.summary
    assert "float64" not in v.summary, v.summary  # 12:8 beside 8:4 is element counts, not a dtype


@pytest.mark.parametrize("scenario", ["extraparam-w4-r1", "extraparam-w5-r3", "extraparam-w6-r4"])
def test_one_ring_size_report_names_no_rank_and_no_silent_rank(scenario):
    # w6 r4: ranks 0-1 hung in the all_reduce and were killed silently after gloo's abort:
    # they did not leave the job, and which of the reported pair is odd one report cannot say
    v = verdict(scenario)
    assert v.cls == "shape-mismatch", v.summary
    assert named_ranks(v) == [], v.summary
    assert "or another element count" in v.summary, v.summary


@pytest.mark.parametrize(("scenario", "culprit"), [("objlist-mpirun-w5-r4", 4)])
def test_a_lone_receiver_of_a_broadcast_that_failed_the_size_check_is_named(scenario, culprit):
    v = verdict(scenario)
    assert v.cls == "shape-mismatch", v.summary
    assert named_ranks(v) == [culprit], v.summary
    assert "broadcast" in v.summary and "ring" not in v.summary, v.summary


@pytest.mark.parametrize("scenario", ["objlist-w3-r1", "objlist-torchrun-w4-r2"])
def test_a_broadcast_size_report_with_too_few_ranks_past_it_names_none(scenario):
    # w3 r1: rank 2 went past the broadcast, rank 0 (the source) waits in the objects'
    # broadcast: the one rank past may be the source, so neither side is settled
    v = verdict(scenario)
    assert named_ranks(v) == [], v.summary
    assert "broadcast" in v.summary and "ring" not in v.summary, v.summary


@pytest.mark.parametrize(("scenario", "world"), [("finish-torchrun-w3", 3), ("finish-mpirun-w4", 4)])
def test_a_finished_jobs_launcher_stream_says_the_job_shows_no_failure(scenario, world):
    v = verdict(scenario)
    assert named_ranks(v) == [], v.summary
    assert "no failure" in v.summary and "step 4" in v.summary, v.summary
    assert "is a log hc reads" not in v.summary, v.summary


@pytest.mark.parametrize("scenario", ["worldbarrier-live-w4-r1", "worldbarrier-live-w6-r5", "worldbarrier-live-w6-r4",
                                      "worldbarrier-live-w8-r2"])
def test_a_world_barrier_where_a_node_group_waits_names_no_victim(scenario):
    # the culprit's world barrier completed and it waits in the world all_reduce beside the
    # other node group's ranks; py-spy --locals show a ProcessGroup as an address, no member
    # ranks: the ranks waiting in their group's barrier are said, and none is named
    v = verdict(scenario)
    assert named_ranks(v) == [], v.summary
    assert "process group of its own" in v.summary, v.summary
