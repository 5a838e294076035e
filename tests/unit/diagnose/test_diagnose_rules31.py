"""Round 31 of issue 19's rules (branch x/r31): families of field-24's and field-23's misses.

* MPICH's fatal error handler in every fork's wording: Cray MPT 7's `Rank R [DATE] [HOST] Fatal
  error in MPI_X: ...` is rank R's own abort, as `Abort(C) (rank R in comm 0): ...` is;
* a transport's or an MPI library's report that a message had another size than its receiver
  posted (NCCL's socket `message truncated`, MPICH's `message sizes do not match`, MPI_ERR_TRUNCATE,
  UCX's) is a shape mismatch naming no rank;
* MPI_Init failing in the processes' exchange through the launcher (PMI KVS get, fence,
  address exchange) says nothing of whose set-up failed: init, no rank;
* a runtime's crash report with no rank (abseil, glog/folly, Julia) beside a stuck finding of
  one rank, every other rank shown alive to report: that rank died.

The field pastes are read as they are (tests/fixtures/diagnose-field/issues-23, issues-24); the
other texts were WRITTEN here in the shapes those tools print.
"""

from __future__ import annotations

import pytest
from support import FIXTURES, diagnose_paste, named_ranks

from healthcheck.parsers.torch_log import parse_torch_log

_F24 = FIXTURES / "diagnose-field" / "issues-24" / "saved"
_F23 = FIXTURES / "diagnose-field" / "issues-23" / "saved"


def _paste(folder, case: str) -> str:
    return (folder / case / "paste.log").read_text()


# ---------------------------------------------------------------- MPICH's fatal error, every fork


def test_cray_mpt_fatal_error_is_its_ranks_own_end(tmp_path):
    v = diagnose_paste(tmp_path, _paste(_F24, "cray-mpt-srun-rank-0-comm-spawn-not-implemented-signal-6"))
    assert v.cls == "dead-rank" and named_ranks(v) == [0], v.summary


def test_cray_mpt_fatal_error_of_another_rank(tmp_path):
    text = ("Rank 5 [Tue Mar  3 10:11:12 2020] [c1-0c2s3n1] Fatal error in PMPI_Bcast: Invalid root, error stack:\n"
            "PMPI_Bcast(1600): MPI_Bcast(buf=0x7ff, count=1, MPI_INT, root=9, MPI_COMM_WORLD) failed\n"
            "PMPI_Bcast(1560): Invalid root (value given was 9)\n")
    v = diagnose_paste(tmp_path, text)
    assert v.cls == "dead-rank" and named_ranks(v) == [5], v.summary


# ---------------------------------------------------------------- size reports of every transport


@pytest.mark.parametrize(("folder", "case"), [
    (_F24, "torchtitan-pp-nccl-socket-message-truncated-8-bytes-instead-of-4"),
    (_F24, "cray-mpich-rank-1-bcast-tree-sizes-differ-after-gtl-ipc-debug"),
    (_F23, "cray-mpich-tree-reduce-message-sizes-do-not-match-received-4-expected-8"),
])
def test_a_transports_size_report_is_a_shape_naming_none(tmp_path, folder, case):
    v = diagnose_paste(tmp_path, _paste(folder, case))
    assert v.cls == "shape-mismatch" and named_ranks(v) == [], v.summary


@pytest.mark.parametrize("text", [
    "[1] Fatal error in PMPI_Recv: Message truncated, error stack:\n"
    "[1] MPIDI_CH3U_Receive_data_found(131): Message truncated; 4096 bytes received but buffer size is 2048\n",
    "[host:01234] *** An error occurred in MPI_Recv\n"
    "[host:01234] *** reported by process [3735027713,2]\n"
    "[host:01234] *** MPI_ERR_TRUNCATE: message truncated\n",
    "[1700000000.123456] [node3:4242 :0]  tag_match.c:61  UCX  ERROR  Message truncated: recv_length 64 offset 0 "
    "buffer_size 32\n",
])
def test_other_libraries_size_reports_are_shapes(tmp_path, text):
    v = diagnose_paste(tmp_path, text)
    assert v.cls == "shape-mismatch" and named_ranks(v) == [], v.summary


def test_size_report_sizes_are_read():
    log = parse_torch_log("MPIR_CRAY_Bcast_Tree(183)...: message sizes do not match across processes in the "
                          "collective routine: Received -32766 but expected 20992\n")
    assert [(s.library, s.received_bytes, s.expected_bytes) for s in log.size_mismatches] == [("mpich", -32766, 20992)]


# ---------------------------------------------------------------- MPI_Init's exchange through the launcher


def test_mpi_init_in_the_launchers_exchange_names_none(tmp_path):
    v = diagnose_paste(tmp_path, _paste(_F24, "mpich-two-hosts-rank-0-pmpi-init-pmi-kvs-get-failed"))
    assert v.cls == "init-failure" and named_ranks(v) == [], v.summary


def test_mpi_init_failing_in_its_own_provider_still_names_it(tmp_path):
    text = ("Abort(1615247) on node 0 (rank 0 in comm 0): Fatal error in PMPI_Init: Other MPI error, error stack:\n"
            "MPIR_Init_thread(176)........: \n"
            "MPID_Init(1546)..............: \n"
            "MPIDI_OFI_mpi_init_hook(1558): OFI addrinfo() failed (ofi_init.c:1558:MPIDI_OFI_mpi_init_hook:No data "
            "available)\n")
    v = diagnose_paste(tmp_path, text)
    assert v.cls == "init-failure" and named_ranks(v) == [0], v.summary


# ---------------------------------------------------------------- a crash with no rank, by elimination


@pytest.mark.parametrize(("line", "signal"), [
    ("*** SIGSEGV received at time=1775734074 on cpu 19 ***", "SIGSEGV"),
    ("*** SIGABRT (@0x3e8000012a4) received by PID 4772 (TID 0x7f0c) from PID 4772; stack trace: ***", "SIGABRT"),
    ("signal (6): Aborted", "SIGABRT"),
    ("signal (11): Segmentation fault", "SIGSEGV"),
])
def test_a_runtimes_crash_report_is_a_death(line, signal):
    log = parse_torch_log(line + "\n")
    assert [(e.type, e.native, e.rank) for e in log.exceptions] == [(signal, True, None)]


def test_a_crash_beside_the_rank_that_never_came(tmp_path):
    v = diagnose_paste(tmp_path, _paste(_F24, "ddp-dual-spark-sigsegv-then-rank0-timeout-desync-report-names-rank1"))
    assert v.cls == "dead-rank" and named_ranks(v) == [1], v.summary


_TIMEOUT = ("[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=88, OpType=ALLREDUCE, "
            "NumelIn=1024, NumelOut=1024, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.\n")


def test_a_glog_crash_beside_a_never_came_rank(tmp_path):
    text = ("*** Aborted at 1700000000 (unix time) try \"date -d @1700000000\" if you are using GNU date ***\n"
            "*** SIGSEGV (@0x0) received by PID 5120 (TID 0x7f00) from PID 0; stack trace: ***\n"
            + _TIMEOUT.format(r=0) + _TIMEOUT.format(r=2)
            + "[3] finished collective #87, but didn't join collective #88\n")
    v = diagnose_paste(tmp_path, text)
    assert v.cls == "dead-rank" and named_ranks(v) == [3], v.summary


def test_two_unplaced_crashes_place_none(tmp_path):
    text = ("*** SIGSEGV received at time=1775734074 on cpu 19 ***\n"
            "*** SIGSEGV received at time=1775734075 on cpu 3 ***\n"
            + _TIMEOUT.format(r=0) + "[1] finished collective #87, but didn't join collective #88\n")
    v = diagnose_paste(tmp_path, text)
    assert v.cls != "dead-rank", v.summary
