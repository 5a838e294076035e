"""Issue 19, round 3: deaths by signal that the launchers report (healthcheck/diagnose/signals.py),
on real gloo jobs (torch 2.13 CPU, Open MPI 4.1.4) the measured detector's harness saved
(tests/fixtures/diagnose-jobs/held-out*/saved/, seen sets now).

* Open MPI's box `process rank R ... exited on signal 11 (Segmentation fault)` names the
  rank; mpirun stops the others itself, so they are never named (only the first rank to die
  is in the text: the verdict says so); gloo's SIGABRT of a rank that printed its size check
  is the mismatch's, not a death;
* SIGTERM under torchrun and hc run: the rank torchrun never sent a closing signal to was
  killed from outside; the ranks torchrun stopped are not named; a job whose agent was
  itself signalled (cancelled) names none.
"""

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


def test_mpiruns_signal_box_is_read_as_the_ranks_exit():
    log = parse_torch_log((JOBS / "held-out-2" / "saved" / "h2-segv-mpirun-w6-r3-r4" / "mpirun.log").read_text())
    (box,) = log.task_exits
    assert (box.launcher, box.tasks, box.signal, box.host) == ("mpirun", (4,), "SIGSEGV", "vm")


def test_a_segfault_under_mpirun_names_the_rank_its_box_names_and_no_other():
    """w6, ranks 3 and 4 segfault at once; mpirun's box names rank 4, then it stops the rest
    (no rank prints a traceback). Before: unknown."""
    v = verdict(JOBS / "held-out-2" / "saved" / "h2-segv-mpirun-w6-r3-r4")
    assert v.cls == "dead-rank" and named(v) == [4], v.summary
    assert "SIGSEGV" in v.summary and "only the first rank" in v.summary, v.summary


def test_gloos_abort_in_mpiruns_box_is_not_a_death():
    """mpirun's box says rank 0 `exited on signal 6 (Aborted)`: gloo's size check (printed
    by rank 0) aborted it; the mismatch rule speaks of it, the dead-rank rule does not."""
    v = verdict(JOBS / "held-out" / "saved" / "h-size-mismatch-mpirun-w3-r1")
    assert v.cls == "shape-mismatch" and not any(f.cls == "dead-rank" for f in v.findings), v.summary


def test_sigterm_from_outside_under_hc_run_and_torchrun_names_that_rank_only():
    """w5: rank 0 is sent SIGTERM by another process; torchrun then sends its closing SIGTERM
    to ranks 1-4; every entry of its box says `Signal 15 (SIGTERM)`. Before: unknown."""
    v = verdict(JOBS / "held-out-2" / "saved" / "h2-sigterm-hc-run-torchrun-w5-r0")
    assert v.cls == "dead-rank" and named(v) == [0], v.summary
    assert "SIGTERM" in v.summary and "outside" in v.summary, v.summary


def test_sigterm_under_mpirun_names_the_rank_from_the_box():
    v = verdict(JOBS / "held-out-2" / "saved" / "h2-sigterm-mpirun-w2-r1")
    assert v.cls == "dead-rank" and named(v) == [1] and "SIGTERM" in v.summary, v.summary


def test_torchrun_whose_agent_was_signalled_names_no_sigterm_rank():
    """The agent got SIGTERM (the job cancelled) and relayed it to every worker: no culprit."""
    for path in sorted((FIXTURES / "corpus" / "torchrun").glob("*death-signal*")):
        v = verdict(path)
        assert not any(f.cls == "dead-rank" and f.ranks for f in v.findings), (path.name, v.summary)


def test_ranks_torchrun_stopped_with_sigterm_are_never_named():
    """A rank SIGKILLed under hc run around torchrun: the others' SIGTERM is torchrun's own."""
    v = verdict(JOBS / "held-out" / "saved" / "h-kill-hc-run-torchrun-w4-r3")
    assert v.cls == "dead-rank" and named(v) == [3], v.summary


def test_ranks_mpirun_stopped_with_sigterm_are_never_named():
    """hc run around mpirun w4: ranks 1 and 2 raise; mpirun stops rank 3 (the tee: `end
    exit=-15`) and lists nobody it stopped: that SIGTERM is the launcher's, not a death."""
    v = verdict(JOBS / "held-out-2" / "saved" / "h2-transform-assert-hc-run-mpirun-w4-r1-r2")
    assert v.cls == "dead-rank" and named(v) == [1, 2], v.summary


def test_a_rank_mpirun_stopped_before_it_printed_is_not_an_early_exit():
    """mpirun w4 (tuning): gloo's size check aborts rank 1, mpirun's box says so (signal 6)
    and stops the rest; rank 3 printed nothing before it was stopped. Before: dead-rank [3],
    'left the job early'. An exit-0 rank under mpirun is still named (held-out's exit0)."""
    v = verdict(JOBS / "tuning" / "size-mismatch-mpirun-w4-r2")
    assert v.cls == "shape-mismatch" and named(v) == [], v.summary
    v = verdict(JOBS / "held-out" / "saved" / "h-exit0-mpirun-w4-r0")
    assert v.cls == "dead-rank" and named(v) == [0], v.summary
