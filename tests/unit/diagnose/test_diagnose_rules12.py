"""Round 12 of issue 19's rules (branch i19-r12), logs mode: held-out-10's misses and false
culprits, tested on that set's saved outputs (opened to this round: they are real gloo jobs,
unedited) and on small texts of the same shapes. The rules must not need the job's source
file: the captures name another worktree's script paths.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support import FIXTURES, assert_culprits, diagnose_saved, named_ranks

H10 = FIXTURES / "diagnose-jobs" / "held-out-10" / "saved"


# ---------------------------------------------------------------- a job torchrun restarted


def test_a_restart_that_recovered_names_no_rank_and_says_the_transient_failure():
    # attempt 0: rank 2's DataLoader raised ValueError, its peers' Connection closed; the
    # agent restarted the workers and attempt 1 ran to every rank's eval line (torchrun exit
    # 0): hc named rank 2 dead from the first attempt
    v = diagnose_saved(H10 / "h10-ddp-elastic-restart-recovers-torchrun-w3-logs")
    assert named_ranks(v) == []
    assert v.cls == "unknown", v.summary
    assert "earlier attempt failed" in v.summary
    assert any("local rank 2 exited 1" in n for n in v.notes)


@pytest.mark.parametrize(("name", "culprit", "victims"), [
    ("h10-ddp-elastic-restart-fails-torchrun-w3-r1", 1, [0, 2]),
    ("h10-ddp-elastic-restart-fails-hc-run-torchrun-w4-r3", 3, [0, 1, 2])])
def test_a_restart_that_failed_again_is_judged_by_its_last_attempt(name, culprit, victims):
    v = diagnose_saved(H10 / name)
    assert_culprits(v, "dead-rank", [culprit], victims)
    assert any("torchrun restarted the workers" in n for n in v.notes)


def test_hc_runs_outputs_of_an_earlier_attempt_are_left_out():
    # under `hc run`, each rank's output is a file per pid: attempt 0's (pids 18902-18905,
    # the agent's closing signals and failure line) are not the job's end; the culprit is
    # the last attempt's process
    v = diagnose_saved(H10 / "h10-ddp-elastic-restart-fails-hc-run-torchrun-w4-r3")
    assert_culprits(v, "dead-rank", [3], [0, 1, 2])
    assert [o.pid for o in v.odd_ranks] == [19007]
    earlier = [u.source for u in v.unreadable if "earlier attempt" in u.why]
    assert len(earlier) == 8 and all(any(f".{p}." in s for p in range(18902, 18906)) for s in earlier)


def test_a_dying_workers_late_lines_after_the_agent_spoke_are_no_restart():
    from healthcheck.diagnose.attempts import last_attempt
    from healthcheck.parsers.torch_log import parse_torch_log

    # one attempt: the agent's failure line, then the dying ranks' tracebacks flushed late
    text = "\n".join([
        "[default0]:step 1", "[default1]:step 1",
        "E1128 08:44:37.103000 17242 torch/distributed/elastic/multiprocessing/api.py:1002] "
        "failed (exitcode: 1) local_rank: 1 (pid: 17249) of binary: /usr/bin/python",
        "[default0]:[rank0]: Traceback (most recent call last):",
        "[default0]:[rank0]: RuntimeError: Connection closed by peer",
        "[default1]:Traceback (most recent call last):",
        "[default1]:ValueError: bad record",
    ])
    assert last_attempt(text, parse_torch_log(text)) is None
    # the workers starting over after it is a restart: the last attempt starts after the line
    again = text + "\n[default0]:step 1\n[default1]:step 1\n"
    found = last_attempt(again, parse_torch_log(again))
    assert found is not None and found.start == 4


# ---------------------------------------------------------------- a point-to-point wait left alone


def test_ranks_left_waiting_on_a_ring_hop_are_victims_not_culprits():
    # rank 4 left the ring one hop early for the world all_reduce; ranks 0 and 3 (its ring
    # neighbours) timed out in their isend/irecv's wait: hc named 0 and 3
    v = diagnose_saved(H10 / "h10-ring-skipped-hop-mpirun-w5-r4")
    assert v.cls == "collective-mismatch", v.summary
    assert named_ranks(v) == []
    assert "point-to-point" in v.summary


def test_left_waiting_needs_every_odd_rank_on_a_point_to_point_op():
    from healthcheck.diagnose.logfacts import Wait
    from healthcheck.diagnose.p2pvictims import left_waiting

    waits = {r: Wait(rank=r, source="x", line=r, op="all_reduce") for r in range(5)}
    waits[0] = Wait(rank=0, source="x", line=0, op="wait")
    assert left_waiting(waits, (0,), "all_reduce", "wait", ()) is not None
    waits[0] = Wait(rank=0, source="x", line=0, op="broadcast")  # another collective: the minority rule's
    assert left_waiting(waits, (0,), "all_reduce", "broadcast", ()) is None


# ---------------------------------------------------------------- a launcher's `worker-R | ` label


def test_worker_labels_name_ranks_only_where_torch_agrees():
    from healthcheck.parsers.lines import read_lines, worker_labelled

    text = ("launch: started worker 0/2 pid 1\n"
            "worker-1 | step 0\n"
            "worker-0 | step 0\n"
            "worker-1 | [rank1]: Traceback (most recent call last):\n"
            "worker-1 | [rank1]: ValueError: boom\n")
    assert worker_labelled(text.splitlines())
    lines = list(read_lines(text))
    assert [line.global_rank for line in lines] == [None, 1, 0, 1, 1]
    assert lines[4].text == "ValueError: boom"
    # a host's number (a pdsh collation) or a replica's that torch's prefix contradicts is no rank
    assert not worker_labelled(["node-042 | Healthy", "node-066 | ERROR: nhc: check failed"])
    assert not worker_labelled(["trainer-1 | [rank0]: Traceback", "trainer-2 | [rank1]: ValueError: x"])


@pytest.mark.parametrize(("name", "culprits"), [("h10-moe-empty-expert-spawn-w3-r2", [2]),
                                                ("h10-ring-mask-index-error-hc-run-spawn-w6-r2-r5", [2, 5])])
def test_a_ranks_own_traceback_under_a_worker_labelling_launcher_is_its_death(name, culprits):
    v = diagnose_saved(H10 / name)
    assert_culprits(v, "dead-rank", culprits, [r for r in range(6) if r not in culprits])


def test_the_wrong_group_warning_under_a_worker_labelling_launcher_names_the_skipper():
    # rank 5 passed the other row's EP group: torch warned "... global rank 5 which does not
    # belong to the given group" (its `worker-5 | ` line); its EP partner 1 waited alone
    v = diagnose_saved(H10 / "h10-moe-wrong-ep-group-spawn-w8-grid-4x2-r5-logs")
    assert_culprits(v, "collective-mismatch", [5], [1])


def test_a_rank_that_printed_nothing_while_its_peers_timed_out_under_such_a_launcher_is_stuck():
    v = diagnose_saved(H10 / "h10-ddp-loader-worker-hang-spawn-w4-r0-logs")
    assert_culprits(v, "stuck-rank", [0], [1, 2, 3])


def test_the_same_job_without_its_worker_labels_is_not_read_as_ranks(tmp_path: Path):
    # the label is what says whose line it is: with `worker-R` renamed to a host-like label
    # torch's `[rankR]:` contradicts, no rank is taken from it (the tracebacks keep theirs)
    src = H10 / "h10-ddp-loader-worker-hang-spawn-w4-r0-logs"
    folder = tmp_path / "job"
    shutil.copytree(src, folder)
    log = folder / "spawn.log"
    text = log.read_text()
    for r in range(4):
        text = text.replace(f"worker-{r} | ", f"node-{r + 10} | ")
    log.write_text(text)
    v = diagnose_saved(folder)
    assert 0 not in named_ranks(v)


def test_a_restart_whose_last_attempt_names_no_one_is_judged_over_every_attempt():
    # held-out-7: rank 2's FileNotFoundError ended attempt 0; attempt 1 failed on every rank
    # alike in gloo's connectFullMesh (the dead attempt's addresses): no culprit of its own
    H7 = FIXTURES / "diagnose-jobs" / "held-out-7" / "saved"
    v = diagnose_saved(H7 / "h7-elastic-shard-missing-restart-torchrun-w3-r2")
    assert_culprits(v, "dead-rank", [2], [0, 1])
    assert any("judged over every attempt" in n for n in v.notes)


def test_blocking_receives_deadlocked_among_the_minority_are_still_named():
    # held-out-2: ranks 0 and 1 each receive first (a recv/recv deadlock) while the others
    # wait in all_reduce: blocking point-to-point waiters are the culprits, not victims
    H2 = FIXTURES / "diagnose-jobs" / "held-out-2" / "saved"
    v = diagnose_saved(H2 / "h2-p2p-order-mpirun-w6-r0-r1-logs")
    assert_culprits(v, "collective-mismatch", [0, 1], [2, 3, 4, 5])


# ---------------------------------------------------------------- fewer batches: eval meets a bucket


def test_a_rank_whose_eval_all_reduce_met_the_peers_gradient_bucket_is_a_desync():
    # rank 2's sampler had fewer batches: "Training completed (2 steps)", then its 2-float eval
    # all_reduce met its peers' DDP gradient bucket and gloo aborted it ("452 vs 4"); the
    # peers' tracebacks end in backward() (no c10d frame): hc said shape-mismatch
    v = diagnose_saved(H10 / "h10-ddp-fewer-batches-plain-w3-r2")
    assert_culprits(v, "collective-mismatch", [2], [0, 1])


def test_a_timeout_inside_backward_is_ddps_all_reduce_not_a_point_to_point_wait():
    # held-out-11's accumulation job (read for this fix, after its measure): rank 1 ran one
    # micro-batch fewer, so its DDP bucket all_reduce (gloo's timeout raised inside
    # `loss.backward()`, autograd's frames between) met the others' final barrier. Round 12's
    # rule for ranks left in an async op's wait() took the backward for such a wait and named
    # no rank; the wait is a collective's, and rank 1 is the one in another collective
    verdict = diagnose_saved(FIXTURES / "diagnose-jobs" / "held-out-11" / "saved"
                             / "h11-ckpt-accumulation-count-plain-w3-r1")
    assert_culprits(verdict, "collective-mismatch", [1], [0, 2])
    assert "all_reduce" in verdict.summary


def test_one_nodes_agent_failing_under_srun_while_the_other_node_prints_on_is_no_restart():
    # captured from test_run_wrapper_rig's two torchruns under srun (rank 3 SIGKILLed on node2):
    # node2's agent reports local rank 1 failed and prints its final box; node1's workers
    # print on after it. That is no restart: the agent gave up, and rank 2's SIGTERM is the
    # agent's own closing signal, not one from outside the job
    verdict = diagnose_saved(FIXTURES / "diagnose" / "attempts-two-agents")
    assert_culprits(verdict, "dead-rank", [3], [0, 1, 2])
