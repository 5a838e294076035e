"""Issue 19, round 4 of the rules (branch i19-rules4): `hc diagnose logs` on real gloo jobs
of this round (tests/fixtures/diagnose/rules4, made by make_rules4.py with torch 2.13 on
CPU) names the rank whose own doing failed the job, in the class of what it did.

* a rank started with GLOO_SOCKET_IFNAME naming no interface raises in
  init_process_group (gloo's device setup): it could not start (init-failure of that
  rank), not a rank that died in its own code; its peers' store errors follow it;
* a rank that never reaches a monitored_barrier (it waits on a lock): rank 0's
  monitoredBarrier report names it; it is stuck, and the ranks that reached the barrier
  and then timed out waiting for rank 0 are never named;
* torchrun w4 (--tee 3): a rank fails a C assert in native code (SIGABRT, no Python
  traceback), torchrun SIGTERMs the others before they print a word: that rank is dead
  (its SIGABRT is its own, not gloo's abort of a size check), never the stopped ones.
"""

from __future__ import annotations

import pytest
from support import FIXTURES, assert_culprits, diagnose_saved

from healthcheck.diagnose.sources import collect

SCEN = FIXTURES / "diagnose" / "rules4"

CASES = {
    # scenario: (class, the culprit ranks, the ranks that failed because of them)
    "ifname-w3-r1": ("init-failure", [1], [0, 2]),
    "ifname-w4-r0": ("init-failure", [0], [1, 2, 3]),
    "mbarrier-w4-r3": ("stuck-rank", [3], [0, 1, 2]),
    "nassert-torchrun-w4-r2": ("dead-rank", [2], [0, 1, 3]),
}


def verdict(scenario: str):
    return diagnose_saved(SCEN / scenario)


@pytest.mark.parametrize("scenario", sorted(CASES))
def test_the_culprit_is_named_in_its_class_and_no_victim(scenario):
    cls, culprits, victims = CASES[scenario]
    v = verdict(scenario)
    assert_culprits(v, cls, culprits, victims)


def test_peers_waiting_in_init_are_not_setup_failures():
    # the peers also raise in init_process_group, of the store's recv that the failed rank
    # closed: waits for a peer, not their own setup failing
    from healthcheck.diagnose.setupdeath import setup_failures

    col = collect([SCEN / "ifname-w3-r1"])
    failed = setup_failures(col)
    assert set(failed) == {1}  # the peers' store errors are waits, not their own setup failing


def test_monitored_barrier_names_only_the_absent_rank_it_reports():
    # ranks 1 and 2 both never came; without wait_all_ranks rank 0 reports the first only:
    # rank 1 is named, rank 2 is not guessed, the ranks that arrived (0, 3) never
    v = verdict("mbarrier-w4-r1r2")
    assert v.cls == "stuck-rank", v.summary
    assert [o.rank for o in v.odd_ranks] == [1], v.summary
