"""Issue 19, round 3: a wrong RANK or WORLD_SIZE on one rank, named from what the store's
timeouts say (healthcheck/diagnose/launchrank.py). Real plain gloo jobs (torch 2.13 CPU)
saved by the measured detector's harness (tests/fixtures/diagnose-jobs/held-out-2/saved/,
a seen set now)."""

from __future__ import annotations

from support import FIXTURES

from healthcheck.diagnose.launchrank import awaited_rank
from healthcheck.diagnose.sources import collect
from healthcheck.diagnose.verdict import build

SAVED = FIXTURES / "diagnose-jobs" / "held-out-2" / "saved"


def verdict(slug: str):
    return build(collect([SAVED / slug]))


def named(v) -> list[int]:
    return [o.rank for o in v.odd_ranks]


def test_a_process_launched_as_rank_3_with_rank_1_is_named():
    """w4: the process of rank3.log runs with RANK=1; all four join the store and every one,
    rank 3's too, times out waiting for key `.../3`. Before: init-failure naming no rank."""
    v = verdict("h2-wrong-rank-plain-w4-r3")
    assert v.cls == "init-failure" and named(v) == [3], v.summary
    assert "RANK" in v.summary, v.summary


def test_a_store_host_with_a_larger_world_size_is_named():
    """w6: rank 0 (the store's host) has WORLD_SIZE=8; its store times out "6/8 clients
    joined", all six ranks in the logs. Before: init-failure naming no rank."""
    v = verdict("h2-wrong-world-size-plain-w6-r0")
    assert v.cls == "init-failure" and named(v) == [0], v.summary
    assert "WORLD_SIZE is 8" in v.summary and "left no log" in v.summary, v.summary


def test_a_store_that_misses_a_rank_that_died_names_no_setting():
    """3/4 clients joined with four ranks in the logs: a rank is missing (it died before
    init), no setting differs; the dead-rank rule names it instead."""
    v = verdict("h2-preinit-config-plain-w4-r2")
    assert v.cls == "dead-rank" and named(v) == [2], v.summary
    assert not any(f.cls == "init-failure" for f in v.findings)


def test_the_awaited_key_is_read_only_when_it_is_one_rank():
    assert awaited_rank("wait timeout after 6000ms, keys: /default_pg/0//cpu//0/3") == 3
    assert awaited_rank("wait timeout after 6000ms, keys: /a/1, /a/2") is None
    assert awaited_rank("wait timeout after 6000ms") is None


def test_a_rank_waiting_for_a_key_the_peer_past_init_did_not_need_is_named():
    """tuning, plain w4, rank 2 with WORLD_SIZE=5: it waits for key `.../4`, ranks 1 and 3
    printed nothing, rank 0 finished init and waits in its first all_reduce: rank 4 is in
    no world but rank 2's. Before round 8: no rank named."""
    v = build(collect([FIXTURES / "diagnose-jobs" / "tuning" / "world-size-plain-r2"]))
    assert v.cls == "init-failure" and named(v) == [2], v.summary
    assert "larger WORLD_SIZE" in v.summary, v.summary


def test_an_init_failure_that_names_no_rank_says_why(tmp_path):
    """The same job without rank 0's log (the one peer past init): the text does not show
    whose launch differs, and the verdict says so."""
    src = FIXTURES / "diagnose-jobs" / "tuning" / "world-size-plain-r2"
    for name in ("rank1.log", "rank2.log", "rank3.log"):
        (tmp_path / name).write_bytes((src / name).read_bytes())
    v = build(collect([tmp_path]))
    assert v.cls == "init-failure" and named(v) == [], v.summary
    assert "no rank is named" in v.summary and "do not say" in v.summary, v.summary


def test_a_rank_that_hosts_the_store_as_rank_0_is_named_not_the_real_rank_0():
    """w3, the process launched as rank 2 has RANK=0 and bound the store's port first: the
    real rank 0 fails with `address already in use`, rank 2's output holds the store host's
    "2/3 clients joined". Before: rank 0 named (a false culprit in 3 of 4 runs)."""
    v = build(collect([FIXTURES / "diagnose" / "round3" / "wrong-rank-plain-w3-r2-store-race"]))
    assert v.cls == "init-failure" and named(v) == [2], v.summary
    assert "RANK 0" in v.summary, v.summary
    v = build(collect([FIXTURES / "diagnose-jobs" / "tuning" / "wrong-rank-plain-w3-r2"]))  # rank 2 lost the race
    assert v.cls == "init-failure" and named(v) == [2], v.summary
