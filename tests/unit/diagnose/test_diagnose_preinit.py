"""Issue 19, round 3: a rank that raises in its own code before init_process_group, while its
peers wait in the rendezvous/store (healthcheck/diagnose/preinit.py), and mpirun's box that
names the first process to exit non-zero (parsers/torch_log/agent.py). Real gloo jobs (torch 2.13
CPU, Open MPI 4.1.4) saved by the measured detector's harness
(tests/fixtures/diagnose-jobs/held-out*/saved/, seen sets now)."""

from __future__ import annotations

from support import FIXTURES

from healthcheck.diagnose.sources import collect
from healthcheck.diagnose.verdict import build
from healthcheck.parsers.torch_log import parse_torch_log

JOBS = FIXTURES / "diagnose-jobs"


def verdict(path):
    return build(collect([path]))


def named(v) -> list[int]:
    return [o.rank for o in v.odd_ranks]


def test_a_rank_that_died_before_init_is_dead_not_an_init_failure():
    """plain w4: rank 2's config parse raises ValueError before init_process_group; the
    store's host times out "3/4 clients joined", ranks 1 and 3 time out waiting for its key.
    Before: init-failure naming no rank."""
    v = verdict(JOBS / "held-out-2" / "saved" / "h2-preinit-config-plain-w4-r2")
    assert v.cls == "dead-rank" and named(v) == [2], v.summary
    assert "ValueError" in v.summary and "parse_learning_rate" in v.summary, v.summary
    assert any("died before it joined" in n for n in v.notes), v.notes


def test_mpiruns_non_zero_exit_box_names_the_first_process():
    text = (JOBS / "held-out-2" / "saved" / "h2-preinit-config-mpirun-w3-r0" / "mpirun.log").read_text()
    (box,) = parse_torch_log(text).task_exits
    assert (box.launcher, box.tasks, box.exitcode) == ("mpirun", (0,), 1)


def test_a_rank_that_died_before_init_under_mpirun_is_named():
    """mpirun w3: rank 0 (the store's host) raises before init; mpirun ends the job at once
    (the peers print nothing); its box names process 0 with exit code 1. Before: unknown."""
    v = verdict(JOBS / "held-out-2" / "saved" / "h2-preinit-config-mpirun-w3-r0")
    assert v.cls == "dead-rank" and named(v) == [0], v.summary


def test_a_port_in_use_and_a_wrong_port_stay_init_failures():
    """The rendezvous errors there are the start's own failure, not a dead rank's consequence."""
    v = verdict(JOBS / "held-out" / "saved" / "h-port-in-use-torchrun-w2")
    assert v.cls == "init-failure", v.summary
    v = verdict(JOBS / "held-out" / "saved" / "h-master-port-plain-w4-r3")
    assert v.cls == "init-failure" and named(v) == [3], v.summary
