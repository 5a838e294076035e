"""Round 29 of issue 19's rules (branch x/r29): field-22's remaining misses, at their mechanisms.

* glog >= 0.6's year-first prefix (`F20221031 10:52:42.193126 106986 file.cc:75] `) is glog's,
  and a failed check of a set-up call's own result (`Check failed: ncclCommInitRank(...) :
  unhandled system error`) failed in that set-up step: init-failure (OneFlow's case);
* a member's end worded as a progressive after `is` (HPE MPT's `Rank 1(g:1) is aborting with
  error code 1.`) is its end; an exit with code 0 is no culprit's;
* MPICH's `application called MPI_Abort(COMM, C) - process N` gives N in COMM: the caller's world
  rank is the line's prefix's (MPID_Abort's `on node W`, Cray MPICH's `MPICH ERROR [Rank W]`),
  and an unnamed COMM prints as `comm=0xHANDLE` (Cray MPICH's AMReX case);
* torchrun's agent sends its closing signal to the children still running: where those pids run
  consecutively and a pid between them and the failed child's got none, that child had ended
  unreported, and the one reported is not singled out (ms-swift's case, a false culprit before).

The field pastes are read as they are (tests/fixtures/diagnose-field/issues-22); the other texts
were WRITTEN here in the shapes those tools print.
"""

from __future__ import annotations

import pytest
from support import FIXTURES, diagnose_paste, named_ranks

from healthcheck.parsers.lines import read_lines
from healthcheck.parsers.torch_log import parse_torch_log
from healthcheck.parsers.torch_log.mpireports import abort_world_rank
from healthcheck.parsers.torch_log.setupframes import checked_step

_FIELD = FIXTURES / "diagnose-field" / "issues-22" / "saved"


def _paste(case: str) -> str:
    return (_FIELD / case / "paste.log").read_text()


# ---------------------------------------------------------------- glog's year-first prefix


def test_glogs_year_first_prefix_is_glogs():
    line = next(iter(read_lines("F20221031 10:52:42.193126 106986 eager_nccl_comm_manager.cpp:75] Check failed: "
                                "x == y\n")))
    assert (line.level, line.logger, line.source) == ("F", "glog", "eager_nccl_comm_manager.cpp:75")
    assert line.stamp == "1031 10:52:42.193126" and line.text == "Check failed: x == y"


@pytest.mark.parametrize(("expression", "step"), [
    ("ncclCommInitRank(comm, device_vec.size(), nccl_unique_id, rank) : unhandled system error (2).",
     "ncclCommInitRank"),
    ("ncclCommInitRank(&comm, n, id, r) == ncclSuccess (2 vs. 0)", "ncclCommInitRank"),
    ("MPI_Init(&argc, &argv) == MPI_SUCCESS", "MPI_Init"),
    ("x == y (3 vs. 4) ncclCommInitRank(", ""),  # a set-up call named later is not what was checked
    ("cudaMalloc(&p, n) : out of memory", ""),
])
def test_a_failed_check_of_a_set_up_calls_result_names_the_step(expression, step):
    assert checked_step(expression) == step


def test_oneflows_failed_nccl_init_check_is_an_init_failure(tmp_path):
    v = diagnose_paste(tmp_path, _paste("oneflow-node1-glog-check-failed-nccl-comminitrank-unhandled-system-error"))
    assert v.cls == "init-failure" and named_ranks(v) == [], v.summary


def test_a_failed_check_of_another_call_is_no_init_failure(tmp_path):
    text = ("F20221031 10:52:42.193126 106986 kernel.cpp:75] Check failed: cudaMalloc(&p, n) : out of memory\n"
            "*** Check failure stack trace: ***\n")
    assert diagnose_paste(tmp_path, text).cls != "init-failure"


# ---------------------------------------------------------------- a member's end as a progressive


@pytest.mark.parametrize(("line", "members", "verb", "code"), [
    ("MPT ERROR: Rank 1(g:1) is aborting with error code 1.", (1,), "aborted", 1),
    ("MPT ERROR: Rank 12(g:44) is aborting with error code 3.", (12,), "aborted", 3),
    ("launcher: rank 2 is exiting with exit code 7", (2,), "exited", 7),
])
def test_the_reader_takes_a_progressive_after_is(line, members, verb, code):
    ends = parse_torch_log(line + "\n").member_ends
    assert [(e.members, e.verb, e.exitcode) for e in ends] == [(members, verb, code)]


def test_a_progressive_without_is_is_not_read():
    log = parse_torch_log("step 3 loss 1.0\nTraceback (most recent call last):\nrank 2 aborting the step\n")
    assert not log.member_ends


def test_hpe_mpts_aborting_rank_is_named(tmp_path):
    v = diagnose_paste(tmp_path, _paste("hpe-mpt-srun-rank-1-aborting-error-code-1-job-step-aborted"))
    assert v.cls == "dead-rank" and named_ranks(v) == [1], v.summary


def test_an_exit_with_code_0_names_none(tmp_path):
    text = "step 20 loss 2.31\nsupervisor: worker 3 exited with code 0\n"
    assert named_ranks(diagnose_paste(tmp_path, text)) == []


# ---------------------------------------------------------------- MPI_Abort's world rank


@pytest.mark.parametrize(("line", "world"), [
    ("MPICH ERROR [Rank 5] [job id 7.0] [Wed Jun 29 18:07:42 2022] [nid000012] - Abort(6) (rank 0 in comm 480): "
     "application called MPI_Abort(comm=0x84000001, 6) - process 0", 5),
    ("Abort(2) on node 3 (rank 1 in comm 496): application called MPI_Abort(comm=0x84000002, 2) - process 1", 3),
    ("Abort(2) on node 3 (rank 3 in comm 0): application called MPI_Abort(MPI_COMM_WORLD, 2) - process 3", 3),
    ("application called MPI_Abort(comm=0x84000002, 2) - process 1", None),
])
def test_an_abort_calls_world_rank_is_its_prefixs(line, world):
    calls = parse_torch_log(line + "\n").mpi_abort_calls
    assert len(calls) == 1 and abort_world_rank(calls[0]) == world


def test_cray_mpichs_abort_in_a_derived_communicator_names_its_world_rank(tmp_path):
    v = diagnose_paste(tmp_path, _paste("cray-mpich-srun-amrex-rank-0-cuda-illegal-access-abort-task-0-exit-6"))
    assert v.cls == "dead-rank" and named_ranks(v) == [0], v.summary


def test_an_abort_whose_world_rank_no_line_states_names_none(tmp_path):
    """Process 1 of a derived communicator is no world rank; with it unknown, the world
    caller is not the only one."""
    text = ("application called MPI_Abort(MPI_COMM_WORLD, 3) - process 2\n"
            "application called MPI_Abort(comm=0x84000002, 3) - process 1\n")
    assert named_ranks(diagnose_paste(tmp_path, text)) == []


# ---------------------------------------------------------------- torchrun's unreported children

_AGENT = "W0604 21:12:07.358000 7275 site-packages/torch/distributed/elastic/multiprocessing/api.py:897] "
_FAILED = ("E0604 21:12:50.464000 7275 site-packages/torch/distributed/elastic/multiprocessing/api.py:869] "
           "failed (exitcode: 1) local_rank: {local} (pid: {pid}) of binary: /usr/bin/python3\n")


def _teardown(closed: list[int], local: int, pid: int) -> str:
    lines = "".join(f"{_AGENT}Sending process {p} closing signal SIGTERM\n" for p in closed)
    return lines + _FAILED.format(local=local, pid=pid)


def test_swifts_failed_local_rank_0_is_not_singled_out(tmp_path):
    """pids 7332 and 7333 got no closing signal: they had ended before the teardown."""
    v = diagnose_paste(tmp_path, _paste("swift-torchrun-sigterm-five-two-forced-sigkill-then-local-rank-0-exit-1-"
                                        "pids-7332-7333-absent"))
    assert named_ranks(v) == [], v.summary


@pytest.mark.parametrize(("closed", "local", "pid"), [
    ([7334, 7335, 7336], 7, 7338),  # 7337 between the run and the failed one: ended unreported
    ([100, 101], 0, 97),
])
def test_a_child_ended_unreported_leaves_none_named(tmp_path, closed, local, pid):
    assert named_ranks(diagnose_paste(tmp_path, _teardown(closed, local, pid))) == []


@pytest.mark.parametrize(("closed", "local", "pid"), [
    ([7332, 7333, 7334], 0, 7331),  # every other child stopped
    ([7331, 7332, 7334], 2, 7333),  # the failed one between them
    ([121], 5, 119),  # one closed pid does not show how the pids were spawned
    ([59460, 59461, 59463, 59466], 3, 59469),  # spread pids (threads between the spawns) show nothing
])
def test_a_failed_child_with_no_unreported_sibling_is_named(tmp_path, closed, local, pid):
    v = diagnose_paste(tmp_path, _teardown(closed, local, pid))
    assert v.cls == "dead-rank" and named_ranks(v) == [local], v.summary
