"""Diagnosis rules round 16 (issue 19): the heartbeat monitor names a rank only with
contrast, the store-based barrier's missing workers, mp.spawn's dead process in prose, and
no rank named on a healthy DETAIL job's ProcessGroupWrapper log cut mid-run."""

from __future__ import annotations

from support import CORPUS, FIXTURES

from healthcheck.diagnose.heartbeat import odd_work_counts
from healthcheck.diagnose.sources import collect
from healthcheck.diagnose.verdict import build

HEARTBEAT = CORPUS / "torch-watchdog" / "heartbeat-monitor-timed-out-watchdog-stuck-600s-multi-rank.txt"
TIMEOUT_PG3 = CORPUS / "torch-watchdog" / "pg3-allgather-base-seq9141-timeout-at-nccl-work-report.txt"


def _lines_of(path, *labels: str) -> str:
    """The lines of a real capture that carry one of the rank labels (a cut an operator pastes)."""
    return "".join(ln for ln in path.read_text().splitlines(keepends=True) if ln.startswith(labels))


def _verdict(tmp_path, text: str):
    (tmp_path / "paste.log").write_text(text)
    return build(collect([tmp_path / "paste.log"]))


def test_heartbeat_alike_on_every_rank_shown_names_none(tmp_path):
    # ranks 1 and 2 of a real capture: both stalled 600 s with workMetaList_.size()=103
    v = _verdict(tmp_path, _lines_of(HEARTBEAT, "[rank1]:", "[rank2]:"))
    assert v.cls == "unknown" and not [o.rank for o in v.odd_ranks]
    assert "heartbeat-monitor stall" in v.why_unknown
    assert any("heartbeat monitor" in n and "names no rank" in n for n in v.notes)


def test_heartbeat_on_the_one_rank_shown_names_none(tmp_path):
    v = _verdict(tmp_path, _lines_of(HEARTBEAT, "[rank1]:"))
    assert v.cls == "unknown" and not [o.rank for o in v.odd_ranks]


def test_heartbeat_names_the_minority_with_another_work_count(tmp_path):
    # the whole capture: ranks 1 and 2 report 103 outstanding works, rank 0 84
    v = build(collect([HEARTBEAT]))
    assert v.cls == "host-wedged" and [o.rank for o in v.odd_ranks] == [0]


def test_heartbeat_names_the_stalled_rank_where_another_timed_out_and_aborted(tmp_path):
    # composed from two real captures: rank 1's heartbeat stall, rank 4's ordinary timeout
    v = _verdict(tmp_path, _lines_of(HEARTBEAT, "[rank1]:") + _lines_of(TIMEOUT_PG3, "[rank4]:"))
    wedged = [f for f in v.findings if f.cls == "host-wedged"]
    assert wedged and wedged[0].ranks == (1,)


def test_odd_work_counts_needs_an_agreeing_majority():
    assert odd_work_counts({0: {84}, 1: {103}, 2: {103}}) == {0}
    assert odd_work_counts({0: {3}, 1: {2}}) == set()
    assert odd_work_counts({0: {1}, 1: {2}, 2: {3}}) == set()
    assert odd_work_counts({0: {1, 2}, 1: {2}, 2: {2}}) == set()


# distributed_c10d.py's format strings (torch 1.x `worker_count=`, 2.x `num_workers_joined=`),
# filled in: the lines each member logs while it waits in the store-based barrier
def _waiting(rank: int, world: int, joined: int) -> str:
    return (f"INFO:root:Waiting in store based barrier to initialize process group for rank: {rank}, key: "
            f"store_based_barrier_key:1 (world_size={world}, worker_count={joined}, timeout=0:30:00)\n")


def _waiting_2x(rank: int, world: int, joined: int) -> str:
    return (f"[rank{rank}]:[W1128 10:00:0{rank}.000000000 distributed_c10d.py:1069] Waiting in store based barrier "
            f"to initialize process group for 30.02 secondsrank: {rank}, key: store_based_barrier_key:1 "
            f"(world_size={world}, num_workers_joined={joined}, timeout=0:30:00 error=Wait timeout)\n")


def test_store_barrier_names_the_ranks_never_counted(tmp_path):
    v = _verdict(tmp_path, "".join(_waiting(r, 6, 4) for r in (0, 5, 1, 3, 0)))
    assert v.cls == "init-failure" and [o.rank for o in v.odd_ranks] == [2, 4]


def test_store_barrier_torch2_wording(tmp_path):
    v = _verdict(tmp_path, "".join(_waiting_2x(r, 4, 3) for r in (0, 1, 3)))
    assert v.cls == "init-failure" and [o.rank for o in v.odd_ranks] == [2]


def test_store_barrier_names_none_where_the_count_does_not_match_the_ranks_seen(tmp_path):
    # a cut: two members shown, three counted: the unseen two cannot be told apart
    v = _verdict(tmp_path, "".join(_waiting(r, 4, 3) for r in (0, 1)))
    assert not [o.rank for o in v.odd_ranks]


def test_store_barrier_names_none_once_a_member_got_through(tmp_path):
    text = "".join(_waiting(r, 4, 3) for r in (0, 1, 3))
    text += ("INFO:torch.distributed.distributed_c10d:Rank 0: Completed store-based barrier for key:"
             "store_based_barrier_key:1 with 4 nodes.\n")
    v = _verdict(tmp_path, text)
    assert not [o.rank for o in v.odd_ranks]


# torch/multiprocessing/spawn.py's ProcessExitedException, as an operator quotes it in a sentence
def test_spawn_exception_quoted_in_prose_names_the_process_dead(tmp_path):
    v = _verdict(tmp_path, "While training I get torch.multiprocessing.spawn.ProcessExitedException: process 3 "
                           "terminated with signal SIGABRT every time, any idea?\n")
    assert v.cls == "dead-rank" and [o.rank for o in v.odd_ranks] == [3]
    assert any("mp.spawn's process index" in e.text for f in v.findings for e in f.lines)


def test_spawn_exit_code_names_the_process_dead(tmp_path):
    v = _verdict(tmp_path, "torch.multiprocessing.spawn.ProcessExitedException: process 2 terminated with "
                           "exit code 7\n")
    assert v.cls == "dead-rank" and [o.rank for o in v.odd_ranks] == [2]


# ---------------------------------------------------------------- DETAIL's wrapper, a healthy job cut mid-run

HEALTHY_DETAIL = FIXTURES / "diagnose" / "rules16" / "healthy-detail-w4"


def test_a_healthy_detail_job_cut_mid_run_names_nobody():
    # real: cut-11 caught rank 3 a sequence behind the others between two all_reduces
    for name in ("cut-05.log", "cut-11.log", "end.log"):
        v = build(collect([HEALTHY_DETAIL / name]))
        assert not [o.rank for o in v.odd_ranks], (name, v.cls, v.summary)
        assert v.cls == "unknown", name


def test_a_run_of_entries_one_behind_with_a_failure_after_is_still_named(tmp_path):
    # the same real cut, then a peer's gloo timeout (the line as tests/fixtures/diagnose/op-mismatch's
    # rank 0 printed it, labelled rank 0 here): the job stopped there (composed for the test)
    text = (HEALTHY_DETAIL / "cut-11.log").read_text()
    text += ("[rank0]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78]"
             " Timed out waiting 4000ms for recv operation to complete\n")
    v = _verdict(tmp_path, text)
    assert 3 in [o.rank for o in v.odd_ranks]
