"""Issue 19, round 3: victims are never named, and deaths the launchers report are read.
On real gloo jobs (torch 2.13 CPU) saved by the measured detector's harness
(tests/diagnose_jobs/harness.py --keep): the first two held-out sets, now seen
(tests/fixtures/diagnose-jobs/held-out*/saved/).

* a rank whose own output holds a collective's failure (gloo's size abort, its C++
  `terminate` line cut apart by mpirun's prefixes) did not leave the job without a word:
  it is not named dead (it was, the held-out false culprit);
* a rank whose wait in the collective its peers timed out in was cut short by a peer's
  exit (Connection closed) waited too: it is not "a rank that did not time out";
* an exception is a rank's own-code death only where its traceback's innermost frames are
  the job's own code, not a torch.distributed function.
"""

from __future__ import annotations

import pytest
from support import FIXTURES

from healthcheck.diagnose.sources import collect
from healthcheck.diagnose.verdict import build
from healthcheck.diagnose.victims import raised_by_collective, spoke_of_failure

JOBS = FIXTURES / "diagnose-jobs"


def verdict(*parts: str):
    return build(collect([JOBS.joinpath(*parts)]))


def named(v) -> list[int]:
    return [o.rank for o in v.odd_ranks]


def test_a_rank_that_printed_gloos_size_abort_is_not_named_dead():
    """mpirun w3: rank 0's gloo size check aborted it (SIGABRT); its `terminate called`
    line is split by mpirun's `[1,0]<stderr>:` prefixes. Before: dead-rank [0], 'ended
    without an error of its own'."""
    v = verdict("held-out", "saved", "h-size-mismatch-mpirun-w3-r1")
    assert v.cls == "shape-mismatch" and 0 not in named(v), v.summary
    assert not any(f.cls == "dead-rank" for f in v.findings), [f.summary for f in v.findings]


def test_a_rank_whose_wait_a_peer_cut_short_is_not_the_stuck_one():
    """hc run, plain w5: rank 3 blocks on a lock; ranks 1, 2, 4 time out in all_reduce/broadcast,
    rank 0's wait in the same all_reduce ends with Connection closed when a peer that timed out
    exits. Before: stuck-rank [0, 3]."""
    v = verdict("held-out-2", "saved", "h2-lock-hc-run-plain-w5-r3-logs")
    assert v.cls == "stuck-rank" and named(v) == [3], v.summary


@pytest.mark.parametrize(("words", "collective", "victim"), [
    (False, "", False),             # ValueError in the job's own code
    (False, "all_reduce", True),    # raised inside dist.all_reduce, whatever its words
    (True, "", True),               # a collective's words (Connection closed, Timed out)
    (False, "init_process_group", False),  # RANK not set: the rank's own launch
    (True, "init_process_group", True),     # a store timeout inside init: its peers'
    (False, "barrier", True),
])
def test_only_exceptions_innermost_in_own_code_are_own_code_deaths(words, collective, victim):
    assert raised_by_collective(words, collective) is victim


def test_a_rank_whose_store_connection_was_lost_spoke_of_a_failure_and_is_not_named():
    """Issue 20, held-out-11: rank 1's `recvValueWithTimeout failed on SocketImpl(...): Failed
    to recv, got 0 bytes` (its store's host, rank 0, exited) is a peer's failure it printed,
    not a rank that left without a word; rank 0, whose WORLD_SIZE differs, is the one named."""
    col = collect([JOBS / "tuning" / "wrong-world-size-plain-w4-r0"])
    assert 1 in spoke_of_failure(col)
    v = build(col)
    assert 1 not in named(v) and named(v) == [0], v.summary
