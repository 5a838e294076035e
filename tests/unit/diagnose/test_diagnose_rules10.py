"""Round 10 of issue 19's rules, logs mode (branch i19-r10logs): what launchers and jobs
say in their own words. Real gloo captures made here by
tests/fixtures/diagnose/rules10/make_rules10.py (rules10_job.py: mp.spawn's console or each
rank's output, and every rank's `run/job-rank<R>.log`).
"""

from __future__ import annotations

from support import FIXTURES, assert_culprits, diagnose_saved

from healthcheck.parsers.torch_log import parse_torch_log

SCEN = FIXTURES / "diagnose" / "rules10"


def test_mp_spawn_reports_the_failed_process_traceback_as_that_ranks():
    # mp.spawn prints `-- Process 1 terminated with the following error:` and rank 1's
    # KeyError unlabelled, after its own ProcessRaisedException; hc said unknown
    log = parse_torch_log((SCEN / "spawnraise-w3-r1" / "spawn.log").read_text())
    own = [e for e in log.exceptions if e.type == "KeyError"]
    assert [e.rank for e in own] == [1]
    assert not [e for e in log.exceptions if e.rank is not None and e.type != "KeyError"]
    v = diagnose_saved(SCEN / "spawnraise-w3-r1")
    assert_culprits(v, "dead-rank", [1], [0, 2])


def test_mp_spawn_reports_a_process_killed_by_a_signal_as_that_ranks_death():
    # `ProcessExitedException: process 2 terminated with signal SIGKILL`; hc said unknown
    log = parse_torch_log((SCEN / "spawnkill-w3-r2" / "spawn.log").read_text())
    assert [(t.tasks, t.signal, t.launcher) for t in log.task_exits] == [((2,), "SIGKILL", "spawn")]
    v = diagnose_saved(SCEN / "spawnkill-w3-r2")
    assert_culprits(v, "dead-rank", [2], [0, 1])


def test_a_size_report_names_the_party_whose_own_logged_size_is_off_its_peers():
    # rank 1's shard is one element longer (it logs 257 where the others log 256); gloo's
    # all_gather aborts rank 2, which received rank 1's chunk: one report, two ranks, and
    # hc named neither
    v = diagnose_saved(SCEN / "padlog-w3-r1")
    assert_culprits(v, "shape-mismatch", [1], [0, 2])


def test_a_logged_size_off_the_wrong_way_or_outside_the_pair_names_no_one():
    from healthcheck.diagnose.loggednumbers import logged_odd, read_logged

    logged: dict = {}
    for r, n in ((0, 256), (1, 257), (2, 256), (3, 256)):
        read_logged(f"[rank{r}]: sharded 1 layer: {n} of 1024 params here\n", None, logged)
    ranks = {0, 1, 2, 3}
    assert logged_odd(logged, ranks, receiver=2, sender=1) is not None
    assert logged_odd(logged, ranks, receiver=1, sender=0) is None  # the receiver's is larger: not its report
    assert logged_odd(logged, ranks, receiver=3, sender=2) is None  # rank 1 is no party


def test_a_one_element_collective_meeting_the_peers_tensor_is_a_desync_of_the_receivers():
    # the odd ranks accumulate 3 micro-steps where the others accumulate 2: their loss
    # all_reduce (one float) meets the others' bucket all_reduce and gloo aborts them on the
    # size (`468 vs 4`); hc said shape-mismatch and named no rank
    assert_culprits(diagnose_saved(SCEN / "accumskip-w3-r0"), "collective-mismatch", [0], [1, 2])
    assert_culprits(diagnose_saved(SCEN / "accumskip-w5-r1-r3"), "collective-mismatch", [1, 3], [0, 2, 4])


def test_a_works_own_wait_timeout_is_a_collectives_and_the_rank_waiting_elsewhere_is_named():
    # every rank waits on its async Work with wait(timeout=...): c10d raises "Operation timed
    # out!" (no c10d frame: Work.wait is native); the odd rank waits on an all_gather no peer
    # joined. hc named all three dead ("raised RuntimeError ... in its own code")
    v = diagnose_saved(SCEN / "extragather-w3-r1")
    assert_culprits(v, "collective-mismatch", [1], [0, 2])


def test_lightning_rank_labels_make_a_run_files_lines_that_ranks():
    # each rank writes `run/job-rank<R>.log`, every line `[rank: R] ...` (PyTorch Lightning's
    # rank_prefixed_message); hc listed them as "not read", and in one shared file the
    # lines had no rank
    from healthcheck.diagnose.sources import collect
    from healthcheck.parsers.lines import read_lines

    assert [line.rank for line in read_lines("[rank: 3] 05:24:50 job: step 1 done\n[rank:3] x\n")] == [3, None]
    col = collect([SCEN / "spawnraise-w3-r1"])
    unread = {u.source.rsplit("/", 1)[-1] for u in col.evidence.unreadable}
    assert not {f"job-rank{r}.log" for r in range(3)} & unread
    assert {r for f in col.evidence.torch_logs if f.log is not None for r in f.log.prefixed_ranks} >= {0, 1, 2}
