"""torch-log parser: every real PyTorch / torchrun output in tests/fixtures/corpus/torch-*,
torchrun and the H100 capture, value by value per family; real torch 2.13 (CPU, gloo)
output captured for these tests; the wordings of the notes (diagnose.md sections 2
and 4) where no capture holds them; garbage, hostile sizes and the JSON round trip."""

from __future__ import annotations

import gc
import itertools
import re
import time
from collections.abc import Callable

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import CORPUS, FIXTURES, run_hc_inproc

from healthcheck.core.errors import ParseError
from healthcheck.parsers import TOOLS
from healthcheck.parsers.torch_log import (
    FACT_KINDS,
    MAX_LISTED,
    ChildFailedBlock,
    TorchLog,
    parse_torch_log,
)

FOLDERS = ("torch-watchdog", "torch-nccl-error", "torchrun")
H100 = FIXTURES / "h100-captures" / "torchrun-2.11-duplicate-gpu-nccl-invalid-usage.txt"


def read(name: str) -> str:
    return (CORPUS / name).read_text()


def parse(name: str) -> TorchLog:
    return parse_torch_log(read(name))


# ------------------------------------------------------------ every fixture

# file -> (facts of each kind, ranks the facts name)
EXPECTED: dict[str, tuple[dict[str, int], tuple[int, ...]]] = {
    "torch-nccl-error/detail-mismatch-allreduce-shape-mismatch-seq3104.txt":
        ({"mismatches": 1, "exceptions": 1}, (0, 1)),
    "torch-nccl-error/detail-mismatch-allreduce-vs-gather-seq32-vs-0-deepspeed.txt":
        ({"mismatches": 1, "exceptions": 1}, (2, 3)),
    "torch-nccl-error/detail-mismatch-old-format-inconsistent-collective-broadcast.txt":
        ({"mismatches": 1, "exceptions": 1}, (0,)),
    "torch-nccl-error/distbackenderror-barrier-traceback-nccl-2.21.5-ray-worker.txt":
        ({"backend_errors": 1, "exceptions": 1}, ()),
    "torch-nccl-error/distbackenderror-internal-error-nccl-2.14.3-net-connection-closed.txt":
        ({"backend_errors": 1, "exceptions": 1}, ()),
    "torch-nccl-error/distbackenderror-nccl-2.26.2-unhandled-cuda-error-999-unknown.txt":
        ({"backend_errors": 1, "exceptions": 1}, ()),
    "torch-nccl-error/distbackenderror-rank-prefixed-nccl-2.20.5-cuda-failure-1-invalid-argument.txt":
        ({"backend_errors": 1, "exceptions": 1}, (7,)),
    "torch-nccl-error/distbackenderror-remote-process-exited-nccl-2.18.5-two-lines.txt":
        ({"backend_errors": 1, "exceptions": 1}, ()),
    "torch-nccl-error/gloo-barrier-connection-closed-by-peer-ci-timestamped.txt":  # the harness's `Process 2
        ({"gloo": 1, "exceptions": 1, "member_ends": 1}, ()),  # terminated with exit code 10`: memberends.py
    "torch-nccl-error/gloo-ddp-sync-params-broadcast-recv-timed-out-1800000ms-torch-1.4.txt":
        ({"gloo": 1, "exceptions": 1}, ()),
    "torch-nccl-error/gloo-recv-connection-closed-by-peer-pair-cc-598.txt":
        ({"gloo": 1, "exceptions": 1}, ()),
    "torch-nccl-error/gloo-send-recv-timed-out-interleaved-then-nccl-watchdog-and-elastic-sigterm.txt":
        ({"timeouts": 1, "progress": 1, "gloo": 3, "closing_signals": 3, "exceptions": 2}, (0,)),
    # NCCL's own INFO/WARN lines are the NCCL log's; the DDP traceback is cut before its exception
    "torch-nccl-error/nccl-warn-nvls-cuda-failure-3-initialization-error-then-ddp-traceback.txt": ({}, ()),
    "torch-watchdog/desync-debug-allreduce-timeout.txt":
        ({"timeouts": 1, "desync": 2, "flight_recorder": 1}, (0, 1)),
    "torch-watchdog/heartbeat-monitor-non-default-pg5-two-ranks-fragment.txt":
        ({"stuck": 2, "flight_recorder": 2}, (0, 4)),
    "torch-watchdog/heartbeat-monitor-timed-out-watchdog-stuck-600s-multi-rank.txt":
        ({"stuck": 4, "flight_recorder": 1}, (0, 1, 2)),
    "torch-watchdog/pg3-allgather-base-seq9141-timeout-at-nccl-work-report.txt":
        ({"timeouts": 2, "progress": 2, "aborts": 1}, (1, 4)),
    "torch-watchdog/ray-dedup-broadcast-seq1-numel-46797824-timeout-1800000.txt":
        ({"timeouts": 1, "aborts": 1}, (3,)),
    "torch-watchdog/ray-dedup-repeated-across-cluster-allreduce-seq1-pg0-default-pg.txt":
        ({"timeouts": 1, "aborts": 1}, (0, 2)),
    "torch-watchdog/ray-workerdict-allreduce-seq1-pg-guid-fr-disabled.txt":
        ({"timeouts": 1, "progress": 1, "flight_recorder": 1}, (4,)),
    "torch-watchdog/srun-label-prefixed-allreduce-seq52-watchdog-terminated-frames.txt":
        ({"timeouts": 1, "aborts": 1}, (11,)),
    "torch-watchdog/terminal-hard-wrapped-broadcast-seq4-8ranks.txt": ({"timeouts": 4}, (2, 3, 5, 6)),
    "torch-watchdog/terminate-distbackenderror-what-pg3-allgather-base-frames.txt":
        ({"timeouts": 1, "exceptions": 1}, ()),
    "torch-watchdog/torch-1.12-era-no-numel-8xv100-allreduce-seq469508.txt": ({"timeouts": 5}, (1, 2, 3, 6, 7)),
    "torch-watchdog/torch-2.3-era-pg0-allgather-base-watchdog-terminated-frames.txt":
        ({"timeouts": 1, "aborts": 1}, (1,)),
    "torch-watchdog/torch-2.5.1-allgather-seq14217-8x2080ti-last-enqueued-completed.txt":
        ({"timeouts": 2, "progress": 2}, (4, 5, 7)),
    "torchrun/childfailederror-accelerate-deepspeed-exitcode-9-sigkill.txt":
        ({"child_failed": 1, "exceptions": 1}, (0,)),
    "torchrun/childfailederror-failures-entry-with-error-file-and-embedded-traceback-barrier.txt":
        ({"child_failed": 1}, (1,)),
    "torchrun/determined-prefixed-received-15-death-signal-sigterm-workers.txt":
        ({"agent_signals": 1, "closing_signals": 4}, ()),
    "torchrun/eaddrinuse-29500-socket-cpp-warnings-then-torchrun-traceback.txt":
        ({"address_in_use": 2, "rendezvous": 1}, ()),
    "torchrun/eaddrinuse-init-process-group-tcpstore-runtimeerror.txt":
        ({"address_in_use": 2, "rendezvous": 1, "exceptions": 1}, ()),
    "torchrun/eaddrinuse-port-22-torch-distributed-launch-old.txt": ({"address_in_use": 2, "rendezvous": 1}, ()),
    "torchrun/elastic-worker-group-failed-restart-attempts-left-rendezvousing.txt":
        ({"worker_failures": 1, "worker_group": 3}, ()),
    "torchrun/glog-format-failed-exitcode-9-local-rank-5-header-fragment.txt":
        ({"child_failed": 1, "worker_failures": 1, "exceptions": 1}, ()),
    "torchrun/glog-format-received-15-death-signal-closing-via-sigterm-multi-agent.txt":
        ({"agent_signals": 2, "closing_signals": 7}, ()),
    "torchrun/launch-received-1-death-signal-sighup-old-logger.txt": ({"agent_signals": 1, "closing_signals": 2}, ()),
    "torchrun/old-logger-format-sigterm-siblings-failed-exitcode-9-local-rank-3.txt":
        ({"worker_failures": 1, "closing_signals": 3}, ()),
    "torchrun/received-15-death-signal-sigterm-traceback-node-b.txt": ({"agent_signals": 1, "closing_signals": 1}, ()),
    "torchrun/rendezvous-closed-error-tail-node-a.txt": ({"rendezvous": 1, "exceptions": 1}, ()),
    "torchrun/rendezvous-connection-error-client-socket-timed-out-60s.txt": ({"rendezvous": 2, "exceptions": 1}, ()),
    "torchrun/torch-1.9-elastic-launch-configs-then-error-handler-json-rendezvous-connection.txt":
        ({"rendezvous": 1}, ()),
}


def test_every_fixture_is_expected_and_listed_in_sources():
    files = sorted(f"{folder}/{p.name}" for folder in FOLDERS for p in (CORPUS / folder).glob("*.txt"))
    assert files == sorted(EXPECTED)
    sources = (CORPUS / "SOURCES.md").read_text()
    assert all(f"`{name}`" in sources for name in files)


def round_trip(log: TorchLog) -> None:
    """The facts survive a JSON round trip (hc parse prints them)."""
    assert msgspec.json.decode(msgspec.json.encode(log), type=TorchLog) == log


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_fixture_parses(name):
    counts, ranks = EXPECTED[name]
    text = read(name)
    log = parse_torch_log(text)
    assert (log.counts(), log.ranks) == (counts, ranks)
    assert log.dropped == 0 and log.lines == len(text.split("\n"))
    lines = text.split("\n")
    for kind in FACT_KINDS:
        for fact in getattr(log, kind):
            assert 1 <= fact.line <= len(lines) and lines[fact.line - 1].strip()  # evidence: file:line
    round_trip(log)


# ------------------------------------------------------------ the watchdog


def test_watchdog_timeouts_per_rank_with_group_status():
    """torch 2.4: two ranks' timeouts, then rank 4's group status in two wordings."""
    log = parse("torch-watchdog/pg3-allgather-base-seq9141-timeout-at-nccl-work-report.txt")
    assert [(t.rank, t.seq, t.op_type, t.numel_in, t.numel_out, t.timeout_ms, t.ran_for_ms, t.line)
            for t in log.timeouts] == [
        (1, 9141, "_ALLGATHER_BASE", 19008, 152064, 600000, 600071, 1),
        (4, 9141, "_ALLGATHER_BASE", 19008, 152064, 600000, 600071, 2),
    ]
    assert log.timeouts[0].time == "1016 03:31:38.928019586" and log.timeouts[0].pg_rank == 1
    assert [(p.kind, p.rank, p.pg_id, p.pg_rank, p.seq, p.last_enqueued, p.last_completed) for p in log.progress] == [
        ("exception-at", 4, "3", 4, 9141, 9141, 9140),
        ("timeout-at", 4, "3", 4, 9141, 9141, 9140),
    ]
    assert [(a.rank, a.line) for a in log.aborts] == [(4, 6)]


def test_watchdog_2_5_last_enqueued_beyond_the_failed_work():
    log = parse("torch-watchdog/torch-2.5.1-allgather-seq14217-8x2080ti-last-enqueued-completed.txt")
    assert {(t.rank, t.seq, t.op_type, t.numel_in, t.numel_out) for t in log.timeouts} == {
        (5, 14217, "ALLGATHER", 65536, 524288), (4, 14217, "ALLGATHER", 65536, 524288)}
    p = log.progress[0]
    assert (p.rank, p.kind, p.pg_id, p.pg_name, p.pg_desc, p.seq, p.last_enqueued, p.last_completed) == (
        7, "exception-at", "0", "0", "default_pg", 14217, 14221, 14216)


def test_watchdog_2_6_under_ray_failure_at_and_flight_recorder_off():
    log = parse("torch-watchdog/ray-workerdict-allreduce-seq1-pg-guid-fr-disabled.txt")
    t = log.timeouts[0]
    assert (t.rank, t.pg_rank, t.seq, t.op_type, t.numel_in, t.timeout_ms, t.ran_for_ms, t.time) == (
        4, 4, 1, "ALLREDUCE", 1, 600000, 600015, "0519 04:35:55.111951168")
    p = log.progress[0]
    assert (p.kind, p.seq, p.last_enqueued, p.last_completed, p.pg_desc) == ("failure-at", 1, 1, -1, "default_pg")
    assert [(n.kind, n.rank, n.line) for n in log.flight_recorder] == [("disabled", 4, 5)]
    assert log.nccl_versions == ("2.21.5",)


def test_watchdog_thread_terminated_is_the_same_timeout_again():
    """srun --label: the label is the task (and the rank, with `[rank11]:` saying so)."""
    log = parse("torch-watchdog/srun-label-prefixed-allreduce-seq52-watchdog-terminated-frames.txt")
    t = log.timeouts[0]
    assert (t.rank, t.task, t.terminated, t.seq, t.op_type, t.timeout_ms, t.pg_id, t.pg_name, t.pg_desc) == (
        11, 11, True, 52, "ALLREDUCE", 240000, "0", "0", "default_pg")
    assert log.prefixed_ranks == (11,)


def test_watchdog_2_4_pg_prefix_and_ray_repeat_suffix():
    log = parse("torch-watchdog/ray-dedup-repeated-across-cluster-allreduce-seq1-pg0-default-pg.txt")
    t = log.timeouts[0]
    assert (t.rank, t.pg_id, t.pg_desc, t.ran_for_ms, t.terminated) == (2, "0", "default_pg", 600034, True)


def test_watchdog_torch_1_12_has_no_numel_and_no_rank_prefix():
    log = parse("torch-watchdog/torch-1.12-era-no-numel-8xv100-allreduce-seq469508.txt")
    assert [(t.rank, t.pg_rank, t.numel_in, t.timeout_ms, t.ran_for_ms) for t in log.timeouts][:2] == [
        (None, 1, None, 1800000, 1802212), (None, 3, None, 1800000, 1802211)]
    # the group rank stands for the global one where no group is printed
    assert log.ranks == (1, 2, 3, 6, 7) and log.prefixed_ranks == ()


def test_watchdog_hard_wrapped_lines_are_joined():
    log = parse("torch-watchdog/terminal-hard-wrapped-broadcast-seq4-8ranks.txt")
    assert [(t.rank, t.line, t.op_type, t.seq, t.numel_in, t.timeout_ms, t.wrapped) for t in log.timeouts] == [
        (2, 1, "BROADCAST", 4, 112, 1800000, True), (3, 3, "BROADCAST", 4, 112, 1800000, True),
        (6, 5, "BROADCAST", 4, 112, 1800000, True), (5, 7, "BROADCAST", 4, 112, 1800000, True)]
    assert log.timeouts[1].ran_for_ms == 1800011


def test_watchdog_terminate_what_is_an_exception_and_a_timeout():
    log = parse("torch-watchdog/terminate-distbackenderror-what-pg3-allgather-base-frames.txt")
    e = log.exceptions[0]
    assert (e.type, e.native, e.line) == ("c10::DistBackendError", True, 6)
    assert e.message.startswith("[PG 3 Rank 5] Process group watchdog thread terminated with exception:")
    t = log.timeouts[0]
    assert (t.line, t.rank, t.pg_id, t.pg_rank, t.seq, t.terminated) == (7, None, "3", 5, 9141, True)


def test_heartbeat_monitor_and_watchdog_stuck():
    log = parse("torch-watchdog/heartbeat-monitor-timed-out-watchdog-stuck-600s-multi-rank.txt")
    assert [(s.rank, s.kind, s.seconds, s.pending_works) for s in log.stuck] == [
        (1, "heartbeat-timeout", None, 103), (1, "stuck", 600, 103), (0, "heartbeat-timeout", None, 84),
        (2, "heartbeat-timeout", None, 103)]
    assert [(n.kind, n.rank) for n in log.flight_recorder] == [("dump-preparing", 1)]


def test_heartbeat_on_a_non_default_group_keeps_global_and_group_ranks_apart():
    log = parse("torch-watchdog/heartbeat-monitor-non-default-pg5-two-ranks-fragment.txt")
    assert [(s.rank, s.pg_id, s.pg_rank, s.pending_works) for s in log.stuck] == [(0, "5", 0, 3), (4, "5", 0, 2)]


def test_desync_report_and_flight_recorder_stack():
    log = parse("torch-watchdog/desync-debug-allreduce-timeout.txt")
    assert [(d.kind, d.rank, d.ranks, d.seq, d.op) for d in log.desync] == [
        ("timeout-at", 0, (0,), 3, "ALLREDUCE"), ("not-joined", 0, (1,), 3, "")]
    stack = log.flight_recorder[0]
    assert stack.kind == "stack" and stack.frames == (
        "#2 buggy from collective_mismatch.py:8", "#3 main from collective_mismatch.py:15",
        "#4 <module> from collective_mismatch.py:18")


DESYNC_TRACEUTILS = """\
[rank0]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=41208, OpType=ALLREDUCE, NumelIn=8, NumelOut=8, Timeout(ms)=600000) ran for 600081 milliseconds before timing out.
\t - [0] Timeout at collective: ALLREDUCE, #41208
\t - To our best knowledge, the lagging/dead/mismatched ranks that caused the desync are:
\t   - [3] joined but didn't finish collective #41207 (count from 1)
\t     [0, 1, 2] finished collective #41207, but didn't join collective #41208 (count from 1)
\t - Snapshot of ranks' latest states:
\t   #41207 started ranks:
\t     [3] started ALLREDUCE
\t   #41208 started ranks:
\t     [0, 1, 2] started ALLREDUCE
[rank4]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank 4] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=BARRIER, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600081 milliseconds before timing out.
\t - [4] Timeout at collective: BARRIER, #7
\t - To our best knowledge, ranks [5, 7] are the lagging ranks that caused this timeout. They never joined any collectives
"""


def test_desync_report_every_shape_of_traceutils():
    """The shapes TraceUtils.h (torch 2.13 headers) builds, one report per timing-out rank."""
    log = parse_torch_log(DESYNC_TRACEUTILS)
    assert [(d.kind, d.rank, d.ranks, d.seq, d.op) for d in log.desync] == [
        ("timeout-at", 0, (0,), 41208, "ALLREDUCE"),
        ("not-finished", 0, (3,), 41207, ""),
        ("not-joined", 0, (0, 1, 2), 41208, ""),
        ("started", 0, (3,), 41207, "ALLREDUCE"),
        ("started", 0, (0, 1, 2), 41208, "ALLREDUCE"),
        ("timeout-at", 4, (4,), 7, "BARRIER"),
        ("never-joined", 4, (5, 7), None, ""),
    ]
    assert [t.rank for t in log.timeouts] == [0, 4]


# A torch >= 2.6 rank that receives the dump signal (real log, pytorch issue text in the
# index) and the Flight Recorder lines of DebugInfoWriter (2.2-2.7 and 2.8+ wordings).
DUMP_SIGNAL = """\
[rank0]:[E709 17:05:38.162814866 ProcessGroupNCCL.cpp:2271] [PG ID 0 PG GUID 0(default_pg) Rank 0]  failure detected by watchdog at work sequence id: 20585 PG status: last enqueued work: 20589, last completed work: 20584
[rank0]:[E709 17:05:38.162895613 ProcessGroupNCCL.cpp:2106] [PG ID 0 PG GUID 0(default_pg) Rank 0] First PG on this rank to signal dumping.
[rank0]:[E709 17:05:38.482119928 ProcessGroupNCCL.cpp:1746] [PG ID 0 PG GUID 0(default_pg) Rank 0] Received a dump signal due to a collective timeout from this local rank and we will try our best to dump the debug info. Last enqueued NCCL work: 20589, last completed NCCL work: 20584.This is most likely caused by incorrect usages of collectives, e.g., wrong sizes used across ranks, the order of collectives is not same for all ranks or the scheduled collective, for some reason, didn't run. Additionally, this can be caused by GIL deadlock or other reasons such as network errors or bugs in the communications library (e.g. NCCL), etc.
[rank6]:[E703 21:51:54.112142364 ProcessGroupNCCL.cpp:1987] [PG ID 0 PG GUID 0(default_pg) Rank 6] Received a dump signal due to a collective timeout from  rank 7 and we will try our best to dump the debug info. Last enqueued NCCL work: 56116, last completed NCCL work: 56116.This is most likely caused by incorrect usages of collectives.
[rank6]:[E703 21:51:54.100000000 ProcessGroupNCCL.cpp:1700] [PG ID 0 PG GUID 0(default_pg) Rank 6] Observed flight recorder dump signal from another rank via TCPStore.
[rank6]:[I703 21:51:55.000000000 ProcessGroupNCCL.cpp:300] Finished writing NCCLPG debug info to /tmp/nccl_trace_rank_6
[rank3]:[I703 21:51:55.000000000 FlightRecorder.cpp:120] Finished writing Flight Recorder debug info to /home/u/.cache/torch/nccl_trace_rank_3
[rank5]:[E703 21:51:55.000000000 FlightRecorder.cpp:110] Error opening file for writing NCCLPG debug info: /ro/nccl_trace_rank_5
[rank3]:[E710 18:00:32.427312432 ProcessGroupNCCL.cpp:801] Stack trace of the failed collective:\x20
#0 all_reduce from /usr/local/lib/python3.12/dist-packages/torch/distributed/distributed_c10d.py:3174
#1 wrapper from /usr/local/lib/python3.12/dist-packages/torch/distributed/c10d_logger.py:83

[rank3]:[E710 18:00:32.603241927 ProcessGroupNCCL.cpp:1987] [PG ID 0 PG GUID 0(default_pg) Rank 3] ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in monitoring enqueued collectives.
"""


def test_dump_signal_progress_and_flight_recorder_notes():
    log = parse_torch_log(DUMP_SIGNAL)
    assert [(p.rank, p.kind, p.seq, p.last_enqueued, p.last_completed, p.from_rank) for p in log.progress] == [
        (0, "failure-at", 20585, 20589, 20584, None), (0, "dump-signal", None, 20589, 20584, None),
        (6, "dump-signal", None, 56116, 56116, 7)]
    assert [(n.rank, n.kind, n.path, len(n.frames)) for n in log.flight_recorder] == [
        (0, "dump-signal-sent", "", 0), (6, "dump-signal-observed", "", 0),
        (6, "dump-written", "/tmp/nccl_trace_rank_6", 0),
        (3, "dump-written", "/home/u/.cache/torch/nccl_trace_rank_3", 0),
        (5, "dump-failed", "/ro/nccl_trace_rank_5", 0), (3, "stack", "", 2)]
    assert log.flight_recorder[-1].frames[0].startswith("#0 all_reduce from ")
    assert [(s.rank, s.kind, s.seconds) for s in log.stuck] == [(3, "stuck", 480)]


# ------------------------------------------------------------ DETAIL: mismatches, monitoredBarrier


def test_mismatch_both_sides_same_op_different_shape():
    log = parse("torch-nccl-error/detail-mismatch-allreduce-shape-mismatch-seq3104.txt")
    m = log.mismatches[0]
    assert m.rank == 1 and not m.old_wording
    assert (m.local.rank, m.local.seq, m.local.op_type, m.local.shape, m.local.dtypes, m.local.device) == (
        1, 3104, "ALLREDUCE", "195812480", "BFloat16", "cuda")
    assert m.remote is not None
    assert (m.remote.rank, m.remote.seq, m.remote.op_type, m.remote.shape, m.remote.dtypes) == (
        0, 3104, "ALLREDUCE", "51123456", "BFloat16")
    assert m.differences == "Tensor Tensor shapes: 195812480vs 51123456"
    assert (log.exceptions[0].type, log.exceptions[0].framed) == ("RuntimeError", False)


def test_mismatch_against_a_side_with_no_tensors():
    """`CollectiveFingerPrint(SequenceNumber=0OpType=GATHER)`: torch prints no comma there."""
    m = parse("torch-nccl-error/detail-mismatch-allreduce-vs-gather-seq32-vs-0-deepspeed.txt").mismatches[0]
    assert (m.local.rank, m.local.seq, m.local.op_type, m.local.shape, m.local.dtypes) == (2, 32, "ALLREDUCE", "", "Float")
    assert m.remote is not None and (m.remote.rank, m.remote.seq, m.remote.op_type, m.remote.dtypes) == (
        3, 0, "GATHER", "")
    assert m.differences.startswith("Sequence number: 32vs 0 Op type: ALLREDUCEvs GATHER")


def test_mismatch_old_inconsistent_collective_wording():
    m = parse("torch-nccl-error/detail-mismatch-old-format-inconsistent-collective-broadcast.txt").mismatches[0]
    assert m.old_wording and m.remote is None
    assert (m.local.rank, m.local.seq, m.local.op_type, m.local.shape, m.local.dtypes) == (0, None, "BROADCAST", "34112", "Float")


# Captured for these tests: torch 2.13.0+cpu, gloo, torchrun --standalone --nproc-per-node 2,
# TORCH_DISTRIBUTED_DEBUG=DETAIL; rank 1 broadcasts [4, 5] while rank 0 all_reduces [3, 4]
# (paths shortened, the UserWarning and caret lines left out).
MISMATCH_2_13 = """\
[rank0]: Traceback (most recent call last):
[rank0]:   File "/tmp/tlx/w.py", line 16, in main
[rank0]:     else: dist.all_reduce(torch.ones(3, 4))
[rank0]:   File "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 3245, in all_reduce
[rank0]:     work = group.allreduce([tensor], opts)
[rank0]: RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running collective: CollectiveFingerPrint(SequenceNumber=0, OpType=ALLREDUCE, TensorShape=[3, 4], TensorDtypes=Float, TensorDeviceTypes=TensorOptions(dtype=float (default), device=cpu, layout=Strided (default), requires_grad=false (default), pinned_memory=false (default), memory_format=(nullopt))), but Rank 1 is running collective: CollectiveFingerPrint(SequenceNumber=0, OpType=BROADCAST, TensorShape=[4, 5], TensorDtypes=Float, TensorDeviceTypes=TensorOptions(dtype=float (default), device=cpu, layout=Strided (default), requires_grad=false (default), pinned_memory=false (default), memory_format=(nullopt))).Collectives differ in the following aspects: \t Op type: ALLREDUCEvs BROADCAST\t Tensor Tensor shapes: 3 4vs 4 5
"""


def test_mismatch_2_13_gloo_framed_by_its_traceback():
    log = parse_torch_log(MISMATCH_2_13)
    m = log.mismatches[0]
    assert (m.rank, m.local.op_type, m.local.shape, m.local.device) == (0, "ALLREDUCE", "3, 4", "cpu")
    assert m.remote is not None and (m.remote.rank, m.remote.op_type, m.remote.shape) == (1, "BROADCAST", "4, 5")
    assert m.differences == "Op type: ALLREDUCEvs BROADCAST Tensor Tensor shapes: 3 4vs 4 5"
    e = log.exceptions[0]
    assert (e.rank, e.type, e.framed) == (0, "RuntimeError", True)
    assert e.message.startswith("Detected mismatch between collectives on ranks. Rank 0 is running")


# torch 2.13, gloo, DETAIL: rank 1 skips an all_reduce (captured, trimmed).
MONITORED_BARRIER_2_13 = """\
[rank0]:[E1123 07:35:43.695487077 ProcessGroupGloo.cpp:2901] [Rank 0]: Rank 1 failed to pass monitoredBarrier in 5000 ms
[rank0]:[E1123 07:35:43.695516275 ProcessGroupGloo.cpp:67] [Rank 0]: Ranks 1, 3 failed to pass monitoredBarrier in 5000 ms
[rank0]: Traceback (most recent call last):
[rank0]:   File "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 3245, in all_reduce
[rank0]:     work = group.allreduce([tensor], opts)
[rank0]: RuntimeError: [Rank 0]: Ranks 1 failed to pass monitoredBarrier in 5000 ms
"""


def test_monitored_barrier():
    log = parse_torch_log(MONITORED_BARRIER_2_13)
    assert [(b.rank, b.reporter, b.ranks, b.timeout_ms, b.line) for b in log.barrier_failures] == [
        (0, 0, (1,), 5000, 1), (0, 0, (1, 3), 5000, 2), (0, 0, (1,), 5000, 6)]
    assert (log.exceptions[0].type, log.exceptions[0].framed) == ("RuntimeError", True)


# ------------------------------------------------------------ NCCL errors


def test_h100_capture_duplicate_gpu_two_interleaved_tracebacks():
    """torch 2.11 on an H100, both ranks on cuda:0: two tracebacks interleaved line by line
    (no rank prefix), each ending in DistBackendError with NCCL's last error; then torchrun."""
    log = parse_torch_log(H100.read_text())
    assert log.counts() == {"backend_errors": 2, "child_failed": 1, "worker_failures": 1, "closing_signals": 1,
                            "exceptions": 3}
    first, second = log.backend_errors
    assert (first.line, first.kind, first.exception, first.where, first.reason, first.nccl_version, first.nccl_error,
            first.detail, first.last_error, first.watchdog) == (
        32, "nccl", "torch.distributed.DistBackendError", "NCCLUtils.cpp:93", "invalid usage", "2.28.9",
        "ncclInvalidUsage", "This usually reflects invalid usage of NCCL library.",
        "Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 60", False)
    assert (second.line, second.last_error) == (37, "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 60")
    assert [(e.line, e.type, e.framed) for e in log.exceptions] == [
        (32, "torch.distributed.DistBackendError", True), (37, "torch.distributed.DistBackendError", True),
        (61, "torch.distributed.elastic.multiprocessing.errors.ChildFailedError", True)]
    assert log.exceptions[0].message == (
        "NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:93, invalid usage "
        "(run with NCCL_DEBUG=WARN for details), NCCL version 2.28.9")
    assert log.nccl_versions == ("2.28.9",)
    assert [(c.pid, c.signal, c.time) for c in log.closing_signals] == [(1431, "SIGTERM", "1123 07:20:56.221000")]
    w = log.worker_failures[0]
    assert (w.exitcode, w.local_rank, w.pid, w.binary, w.signal, w.line) == (
        1, 0, 1430, "/opt/torch/.venv/bin/python", "", 44)
    block = log.child_failed[0]
    assert (block.program, block.no_other_failures, block.complete, block.line) == ("hang.py", False, True, 63)
    assert [(f.index, f.root_cause, f.time, f.host, f.rank, f.local_rank, f.exitcode, f.pid, f.signal, f.error_file)
            for f in block.failures] == [
        (1, False, "2026-11-23_07:20:56", "localhost", 1, 1, 1, 1431, "", ""),
        (0, True, "2026-11-23_07:20:56", "localhost", 0, 0, 1, 1430, "", "")]
    assert block.root_cause is block.failures[1]
    assert block.failures[0].traceback == "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
    assert log.ranks == (0, 1)


def test_rank_prefixed_dist_backend_error():
    e = parse("torch-nccl-error/distbackenderror-rank-prefixed-nccl-2.20.5-cuda-failure-1-invalid-argument.txt")
    b = e.backend_errors[0]
    assert (b.rank, b.reason, b.where, b.nccl_version, b.nccl_error, b.detail, b.last_error) == (
        7, "unhandled cuda error", "NCCLUtils.hpp:275", "2.20.5", "ncclUnhandledCudaError",
        "Call to CUDA function failed.", "Cuda failure 1 'invalid argument'")
    assert [(x.rank, x.type) for x in e.exceptions] == [(7, "torch.distributed.DistBackendError")]


def test_remote_error_and_internal_error():
    b = parse("torch-nccl-error/distbackenderror-remote-process-exited-nccl-2.18.5-two-lines.txt").backend_errors[0]
    assert (b.reason, b.nccl_error, b.last_error, b.where) == (
        "remote process exited or there was a network error", "ncclRemoteError", "", "ProcessGroupNCCL.cpp:1347")
    b = parse("torch-nccl-error/distbackenderror-internal-error-nccl-2.14.3-net-connection-closed.txt").backend_errors[0]
    assert (b.reason, b.nccl_error, b.detail, b.last_error) == (
        "internal error", "ncclInternalError", "Internal check failed.", "Net : Connection closed by remote peer user<50260>")


WATCHDOG_NCCL_AND_CUDA_ERRORS = """\
[rank3]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:1895] [PG ID 0 PG GUID 0(default_pg) Rank 3] Process group watchdog thread terminated with exception: NCCL error: remote process exited or there was a network error, NCCL version 2.21.5
[rank3]: ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.
[rank3]: Last error:
[rank3]: NET/IB : Got completion from peer 10.0.0.2<42861> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid ::ffff:10.0.0.1
[rank0]:[E ProcessGroupNCCL.cpp:1414] [PG 2 Rank 0] Process group watchdog thread terminated with exception: CUDA error: an illegal memory access was encountered
RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:825, unhandled system error, NCCL version 2.7.8
"""


def test_nccl_and_cuda_errors_inside_the_watchdog_and_torch_1_x_runtime_error():
    log = parse_torch_log(WATCHDOG_NCCL_AND_CUDA_ERRORS)
    assert [(b.rank, b.kind, b.watchdog, b.exception, b.reason, b.nccl_version, b.nccl_error, b.pg_id)
            for b in log.backend_errors] == [
        (3, "nccl", True, "", "remote process exited or there was a network error", "2.21.5", "ncclRemoteError", "0"),
        (0, "cuda", True, "", "an illegal memory access was encountered", "", "", "2"),
        (None, "nccl", False, "RuntimeError", "unhandled system error", "2.7.8", "", ""),
    ]
    assert log.backend_errors[0].last_error.startswith("NET/IB : Got completion from peer 10.0.0.2<42861> with status=12")
    assert log.nccl_versions == ("2.21.5", "2.7.8")


# ------------------------------------------------------------ gloo


def test_gloo_peer_closed_with_address_and_source():
    log = parse("torch-nccl-error/gloo-recv-connection-closed-by-peer-pair-cc-598.txt")
    g = log.gloo[0]
    assert (g.kind, g.peer, g.port, g.source, g.line) == ("peer-closed", "18.25.6.30", 30872, "pair.cc:598", 5)
    assert (log.exceptions[0].type, log.exceptions[0].framed) == ("RuntimeError", True)
    g = parse("torch-nccl-error/gloo-barrier-connection-closed-by-peer-ci-timestamped.txt").gloo[0]
    assert (g.peer, g.port, g.source) == ("172.17.0.2", 16786, "pair.cc:598")


def test_gloo_timeouts_two_ranks_writing_into_one_line():
    log = parse("torch-nccl-error/gloo-send-recv-timed-out-interleaved-then-nccl-watchdog-and-elastic-sigterm.txt")
    assert [(g.line, g.kind, g.operation, g.timeout_ms, g.source) for g in log.gloo] == [
        (1, "timeout", "send", 1800000, "unbound_buffer.cc:133"), (2, "timeout", "recv", 1800000, "unbound_buffer.cc:81"),
        (4, "timeout", "recv", 1800000, "unbound_buffer.cc:81")]
    assert [(t.rank, t.seq, t.op_type) for t in log.timeouts] == [(0, 40402014, "_ALLGATHER_BASE")]
    assert [c.pid for c in log.closing_signals] == [2366797, 2366798, 2366800]
    g = parse("torch-nccl-error/gloo-ddp-sync-params-broadcast-recv-timed-out-1800000ms-torch-1.4.txt").gloo[0]
    assert (g.operation, g.timeout_ms, g.source) == ("recv", 1800000, "unbound_buffer.cc:84")


# torch 2.13, gloo (captured, trimmed): a size mismatch aborts the receiving rank; a
# SIGKILLed peer; a peer that raised.
GLOO_2_13 = """\
terminate called after throwing an instance of 'gloo::EnforceNotMet'
  what():  [enforce fail at /__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:456] op.preamble.length <= op.nbytes. 8 vs 4. Received data size doesn't match expected size. Is there a distributed collective mismatch in your code?
Fatal Python error: Aborted
[rank0]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:27793: Connection reset by peer. This is typically caused by a remote worker hanging or bugs in the application. Check the logs of the remote worker before reporting an error. GLHF! \U0001f3d6\ufe0f
[rank0]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:21917. This is typically caused by a remote worker crashing. Check the logs of the remote worker before reporting an error. GLHF! \U0001f3d6\ufe0f
"""


def test_gloo_2_13_size_mismatch_read_error_and_peer_closed():
    log = parse_torch_log(GLOO_2_13)
    assert [(g.line, g.rank, g.kind, g.source, g.peer, g.port, g.received_bytes, g.expected_bytes) for g in log.gloo] == [
        (2, None, "size-mismatch", "pair.cc:456", "", None, 8, 4),
        (4, 0, "read-error", "pair.cc:537", "127.0.0.1", 27793, None, None),
        (5, 0, "peer-closed", "pair.cc:553", "127.0.0.1", 21917, None, None)]
    assert log.gloo[1].message == "Connection reset by peer"
    native = log.exceptions[0]
    assert (native.type, native.native, native.line) == ("gloo::EnforceNotMet", True, 1)
    assert native.message.startswith("[enforce fail at ") and "8 vs 4" in native.message


# ------------------------------------------------------------ torchrun


def test_child_failed_block_root_cause_signal_from_the_traceback():
    log = parse("torchrun/childfailederror-accelerate-deepspeed-exitcode-9-sigkill.txt")
    block = log.child_failed[0]
    assert (block.program, block.no_other_failures, block.complete) == ("src/open_r1/grpo_gsm.py", True, True)
    root = block.root_cause
    assert root is not None and len(block.failures) == 1
    assert (root.index, root.time, root.rank, root.local_rank, root.exitcode, root.pid, root.signal, root.error_file,
            root.traceback, root.line) == (
        0, "2025-05-21_15:43:03", 0, 0, -9, 14750, "SIGKILL", "", "Signal 9 (SIGKILL) received by PID 14750", 18)
    assert root.host == "mlxlab115rp2n7682d40d9-20250521025625-6dyyd3-8nir8b-worker"
    assert log.exceptions[0].type == "torch.distributed.elastic.multiprocessing.errors.ChildFailedError"


def test_child_failed_entry_with_error_file_and_embedded_traceback():
    block = parse("torchrun/childfailederror-failures-entry-with-error-file-and-embedded-traceback-barrier.txt").child_failed[0]
    assert (block.program, block.complete, block.root_cause) == ("bug.py", False, None)
    f = block.failures[0]
    assert (f.index, f.rank, f.local_rank, f.exitcode, f.pid, f.signal, f.host) == (1, 1, 1, 1, 340055, "", "lenovo")
    assert f.error_file == "/tmp/torchelastic_ih8xk_wi/5240416c-e326-45c8-a708-c3ec0cc3d51b_sfj1zute/attempt_0/1/error.json"
    lines = f.traceback.split("\n")
    assert lines[0] == "Traceback (most recent call last):" and lines[-2] == "    work = group.barrier(opts=opts)"
    assert len(lines) == 12 and f.exception == ""  # cut before the exception line


# torch 2.13 (captured, trimmed): rank 1 SIGKILLed itself after rank 0 entered a collective.
CHILD_FAILED_2_13 = """\
E1123 07:35:39.391000 28922 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: -9) local_rank: 1 (pid: 28949) of binary: /venv/bin/python
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\x20
============================================================
w.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-23_07:35:39
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 28948)  (SIGTERM)
  error_file: /tmp/torchelastic_hu_qbxks/a04e/attempt_0/0/error.json
  traceback : Traceback (most recent call last):
    File "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 3252, in all_reduce
      work.wait()
  RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:27793: Connection reset by peer.
\x20\x20
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-23_07:35:39
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 28949)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 28949
============================================================
"""


def test_child_failed_2_13_signal_suffix_and_the_traceback_exception():
    log = parse_torch_log(CHILD_FAILED_2_13)
    # the block's own traceback is the worker's, kept in the entry, not a top-level exception or gloo error
    assert log.counts() == {"child_failed": 1, "worker_failures": 1, "exceptions": 1}
    other, root = log.child_failed[0].failures
    assert (other.rank, other.exitcode, other.pid, other.signal, other.root_cause) == (0, -15, 28948, "SIGTERM", False)
    assert other.exception.startswith("RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/")
    assert other.traceback.split("\n")[-1] == other.exception
    assert (root.rank, root.exitcode, root.pid, root.signal, root.root_cause) == (1, -9, 28949, "SIGKILL", True)
    w = log.worker_failures[0]
    assert (w.exitcode, w.local_rank, w.pid, w.signal, w.time) == (-9, 1, 28949, "SIGKILL", "1123 07:35:39.391000")


def test_worker_failed_old_logger_and_glog_formats():
    w = parse("torchrun/old-logger-format-sigterm-siblings-failed-exitcode-9-local-rank-3.txt").worker_failures[0]
    assert (w.exitcode, w.local_rank, w.pid, w.signal, w.binary) == (
        -9, 3, 812917, "SIGKILL", "/data/chenhao/anaconda3/envs/ColossalAI-Chat/bin/python")
    log = parse("torchrun/glog-format-failed-exitcode-9-local-rank-5-header-fragment.txt")
    w = log.worker_failures[0]
    assert (w.exitcode, w.local_rank, w.pid, w.time) == (-9, 5, 2630, "0325 20:57:27.620000")
    block = log.child_failed[0]
    assert (block.program, block.no_other_failures, block.failures, block.complete) == ("test.py", True, (), False)


def test_death_signals_and_closing_signals():
    log = parse("torchrun/determined-prefixed-received-15-death-signal-sigterm-workers.txt")
    assert [(a.kind, a.signal, a.number) for a in log.agent_signals] == [("death-signal", "SIGTERM", 15)]
    assert [(c.pid, c.signal) for c in log.closing_signals] == [(165, "SIGTERM"), (166, "SIGTERM"), (168, "SIGTERM"),
                                                                (169, "SIGTERM")]
    log = parse("torchrun/launch-received-1-death-signal-sighup-old-logger.txt")
    assert [(a.signal, a.number) for a in log.agent_signals] == [("SIGHUP", 1)]
    assert {c.signal for c in log.closing_signals} == {"SIGHUP"}
    log = parse("torchrun/glog-format-received-15-death-signal-closing-via-sigterm-multi-agent.txt")
    assert [c.pid for c in log.closing_signals][:2] == [293866, 293844]
    assert log.agent_signals[0].time == "0227 17:39:41.936000"


SIGNAL_EXCEPTIONS = """\
W1123 07:37:46.756000 15731 torch/distributed/elastic/agent/server/api.py:753] Received 15 death signal, shutting down workers
Traceback (most recent call last):
torch.distributed.elastic.multiprocessing.api.SignalException: Process 15731 got signal: 15
torch.distributed.elastic.multiprocessing.api.SignalException: Process 4242 got signal: Signals.SIGINT
"""


def test_signal_exception_2_13_and_older():
    log = parse_torch_log(SIGNAL_EXCEPTIONS)
    assert [(a.kind, a.signal, a.number, a.pid) for a in log.agent_signals] == [
        ("death-signal", "SIGTERM", 15, None), ("signal-exception", "SIGTERM", 15, 15731),
        ("signal-exception", "SIGINT", 2, 4242)]
    assert [(e.type.rsplit(".", 1)[-1], e.framed) for e in log.exceptions] == [
        ("SignalException", True), ("SignalException", False)]


def test_worker_group_restart():
    log = parse("torchrun/elastic-worker-group-failed-restart-attempts-left-rendezvousing.txt")
    assert [(g.kind, g.role, g.state, g.attempts_left, g.max_restarts) for g in log.worker_group] == [
        ("restart", "default", "FAILED", 3, 3), ("stopping", "default", "", None, None),
        ("rendezvous", "default", "", None, None)]
    assert (log.worker_failures[0].exitcode, log.worker_failures[0].pid) == (1, 876053)


@pytest.mark.parametrize(("name", "port", "lines"), [
    ("torchrun/eaddrinuse-29500-socket-cpp-warnings-then-torchrun-traceback.txt", 29500, [1, 2]),
    ("torchrun/eaddrinuse-port-22-torch-distributed-launch-old.txt", 22, [2, 3]),
    ("torchrun/eaddrinuse-init-process-group-tcpstore-runtimeerror.txt", 44796, [14, 14]),
])
def test_address_in_use_port(name, port, lines):
    log = parse(name)
    assert [(a.port, a.address, a.errno, a.line) for a in log.address_in_use] == [
        (port, "[::]", 98, lines[0]), (port, "0.0.0.0", 98, lines[1])]
    assert [r.kind for r in log.rendezvous] == ["listen-failed"]
    assert log.rendezvous[0].message == "The server socket has failed to listen on any local network address." or (
        name.endswith("runtimeerror.txt"))


def test_address_in_use_2_13_dist_network_error():
    text = ("Traceback (most recent call last):\n"
            "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
            "port: 29631, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use\n")
    log = parse_torch_log(text)
    assert [(a.port, a.errno) for a in log.address_in_use] == [(29631, 98)]
    assert [(r.kind, r.address) for r in log.rendezvous] == [("listen-failed", ":29631")]
    assert log.exceptions[0].type == "torch.distributed.DistNetworkError"


def test_rendezvous_client_socket_timeout_and_connection_error():
    log = parse("torchrun/rendezvous-connection-error-client-socket-timed-out-60s.txt")
    timeout, connection = log.rendezvous
    assert (timeout.kind, timeout.seconds, timeout.address, timeout.line) == ("client-timeout", 60.0, "192.0.0.1:1234", 3)
    assert timeout.message == "The client socket has timed out after 60s while trying to connect to 192.0.0.1:1234"
    assert (connection.kind, connection.message) == (
        "connection", "The connection to the C10d store has failed. See inner exception for details.")
    assert log.exceptions[0].framed is False


def test_rendezvous_closed_not_counted_twice_for_its_raise_line():
    log = parse("torchrun/rendezvous-closed-error-tail-node-a.txt")
    assert [(r.kind, r.line) for r in log.rendezvous] == [("closed", 3)]
    assert log.exceptions[0].type == "torch.distributed.elastic.rendezvous.api.RendezvousClosedError"


def test_rendezvous_in_torch_1_9_error_handler_json():
    log = parse("torchrun/torch-1.9-elastic-launch-configs-then-error-handler-json-rendezvous-connection.txt")
    assert [(r.kind, r.line) for r in log.rendezvous] == [("connection", 22)]


STORE_ERRORS = """\
torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 clients joined.
[rank1]: torch.distributed.DistStoreError: wait timeout after 30000ms, keys: /default_pg/0//cuda//0
[W1123 07:00:00.000000000 socket.cpp:755] [c10d] The client socket has timed out after 600000ms while trying to connect to (10.1.2.3, 29500).
[E1123 07:00:00.000000000 socket.cpp:1019] [c10d] The client socket has failed to connect to any network address of (10.1.2.3, 29500).
RuntimeError: Socket Timeout
torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError
"""


def test_store_and_socket_timeouts():
    log = parse_torch_log(STORE_ERRORS)
    assert [(r.kind, r.rank, r.seconds, r.address, r.joined, r.expected) for r in log.rendezvous] == [
        ("clients-timeout", None, 901.0, "", 1, 2), ("wait-timeout", 1, 30.0, "", None, None),
        ("client-timeout", None, 600.0, "10.1.2.3:29500", None, None),
        ("connect-failed", None, None, "(10.1.2.3", None, None),
        ("socket-timeout", None, None, "", None, None), ("timeout", None, None, "", None, None)]


# ------------------------------------------------------------ prefixes, tracebacks


PREFIXED = """\
[1,3]<stderr>:[rank3]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=2, NumelOut=2, Timeout(ms)=1000) ran for 1005 milliseconds before timing out.
[1,2]<stderr>:[E ProcessGroupNCCL.cpp:474] [Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=2, NumelOut=2, Timeout(ms)=1000) ran for 1004 milliseconds before timing out.
 5: [E ProcessGroupNCCL.cpp:474] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=2, NumelOut=2, Timeout(ms)=1000) ran for 1004 milliseconds before timing out.
(RayWorker pid=77, ip=10.0.0.5) [rank6]:[E1218 20:27:21.4 ProcessGroupNCCL.cpp:629] [Rank 6] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=2, NumelOut=2, Timeout(ms)=1000) ran for 1004 milliseconds before timing out. [repeated 2x across cluster]
"""


def test_launcher_labels_and_rank_prefixes():
    log = parse_torch_log(PREFIXED)
    assert [(t.rank, t.task, t.pg_rank, t.ran_for_ms) for t in log.timeouts] == [
        (3, 3, 3, 1005), (2, 2, 2, 1004), (5, 5, 0, 1004), (6, None, 6, 1004)]
    assert log.prefixed_ranks == (2, 3, 5, 6)


INTERLEAVED_RANKS = """\
[rank1]: Traceback (most recent call last):
[rank0]: Traceback (most recent call last):
[rank1]:   File "/w.py", line 25, in main
[rank0]:   File "/w.py", line 26, in main
[rank1]: ValueError: bad batch on rank 1
[rank0]:     dist.all_reduce(t)
[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:21917. This is typically caused by a remote worker crashing.
Epoch: 3
RuntimeError
"""


def test_tracebacks_per_rank_and_what_is_no_exception():
    log = parse_torch_log(INTERLEAVED_RANKS)
    assert [(e.rank, e.type, e.message, e.framed) for e in log.exceptions] == [
        (1, "ValueError", "bad batch on rank 1", True),
        (0, "RuntimeError", log.exceptions[1].message, True)]
    assert log.exceptions[1].message.startswith("[../third_party/gloo/")
    assert log.final_exceptions()[1].type == "ValueError" and set(log.final_exceptions()) == {0, 1}


def test_lines_glued_to_a_progress_bar():
    """tqdm redraws with \\r and leaves no newline before the next log line."""
    text = ("Epoch 10/10: 240it [05:55,  1.47s/it, loss=5.46][rank0]:[E709 17:05:38.162555850 ProcessGroupNCCL.cpp:632] "
            "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=20585, OpType=ALLREDUCE, "
            "NumelIn=1259621, NumelOut=1259621, Timeout(ms)=600000) ran for 600000 milliseconds before timing out.\n"
            "step 1/9 30%\r[rank2]: RuntimeError: CUDA error: an illegal memory access was encountered\n")
    log = parse_torch_log(text)
    assert [(t.rank, t.time, t.seq) for t in log.timeouts] == [(0, "0709 17:05:38.162555850", 20585)]
    assert [(e.rank, e.type) for e in log.exceptions] == [(2, "RuntimeError")]
    assert [(b.rank, b.kind, b.exception, b.reason) for b in log.backend_errors] == [
        (2, "cuda", "RuntimeError", "an illegal memory access was encountered")]


def test_cut_traceback_gives_no_exception_but_names_its_rank():
    log = parse("torch-nccl-error/nccl-warn-nvls-cuda-failure-3-initialization-error-then-ddp-traceback.txt")
    assert log.exceptions == () and log.prefixed_ranks == (1,)


def test_python_traceback_alone_is_a_log():
    log = parse_torch_log('Traceback (most recent call last):\n  File "x.py", line 1, in <module>\nKeyError: \'a\'\n')
    assert [(e.type, e.message, e.framed) for e in log.exceptions] == [("KeyError", "'a'", True)]


# ------------------------------------------------------------ bounds, garbage, hostile input


def test_lists_are_bounded():
    line = ("[rank1]:[E1218 20:27:21.4 ProcessGroupNCCL.cpp:629] [Rank 1] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1) ran for 2 milliseconds before timing out.\n")
    log = parse_torch_log(line * (MAX_LISTED + 500))
    assert len(log.timeouts) == MAX_LISTED and log.dropped == 500


def test_child_failed_traceback_is_bounded():
    text = ("============================================================\nx.py FAILED\nFailures:\n[1]:\n"
            "  traceback : Traceback (most recent call last):\n" + "    File \"a.py\", line 1, in f\n" * 5000)
    f = parse_torch_log(text).child_failed[0].failures[0]
    assert len(f.traceback) <= 4003


@pytest.mark.parametrize("text", [
    "complete garbage\n" + "x" * 200_000,
    "\x00\x01\x02\xff\xfe" * 20_000,
    bytes(range(256)).decode("latin-1") * 400,
    ":" * 1000 + "\n",
    "[" * 100_000,
    "NCCL INFO NET/IB : No device found.\nhost:1:1 [0] NCCL INFO Bootstrap : Using eth0\n",
], ids=["words", "binary", "all-bytes", "colons", "brackets", "nccl-only"])
def test_garbage_is_a_short_parse_error(text):
    with pytest.raises(ParseError) as caught:
        parse_torch_log(text)
    assert len(str(caught.value)) < 400 and "\n" not in str(caught.value)


def _time(text: str, answers: list | None = None) -> float:
    """Seconds of CPU time to parse text (other processes on a shared machine, CI's workers on
    two cores, stretch the wall clock, not this); `answers` gets what the parse gave (the log,
    or its ParseError)."""
    start = time.process_time()
    try:
        log: object = parse_torch_log(text)
    except ParseError as exc:
        log = exc
    took = time.process_time() - start
    if answers is not None:
        answers.append(log)
    return took


# the timer's and a page fault's share: CPU time (_time) is not stretched by a busy machine as
# the wall clock was (its slack was 0.15 s), so a quadratic cost is caught at smaller sizes
SLACK_S = 0.03


def _assert_linear(make: Callable[[int], str], label: str, sizes: tuple[int, ...] = (100_000, 1_000_000),
                   answers: list | None = None) -> None:
    """Each size costs at most 50x the one before (10x the size: ~10x when linear,
    ~100x when quadratic) plus a little slack for the timer. `answers` gets the parse of
    the largest size (a test that asserts on it needs no parse of its own)."""
    gc.disable()
    try:
        texts = [make(size) for size in sizes]
        took = min(_time(texts[0]) for _ in range(3))
        for before, text in itertools.pairwise(texts):
            bound = 50 * took + SLACK_S
            now = _time(text, answers if text is texts[-1] else None)
            # the second run only where the first was over the bound: the min over both decides
            # then, and where the first is under it the min is too (the same verdict, the larger
            # input parsed once instead of twice); a longer chain's next bound keeps the min
            if now > bound or text is not texts[-1]:
                now = min(now, _time(text))
            assert now <= bound, f"{label}: {now:.3f} s on {len(text)} chars, {took:.3f} s on {len(before)}"
            took = now
    finally:
        gc.enable()


def test_a_huge_line_costs_its_length():
    _assert_linear(lambda n: "x" * n, "one line of x")
    _assert_linear(lambda n: "[rank0]:" + "WorkNCCL(SeqNum=1, " * (n // 19), "one line of WorkNCCL(")


def test_many_near_miss_lines_cost_their_length():
    """100k lines that almost say something (each pattern's start, cut short) cost their
    length, and give few facts or a ParseError."""
    near = [p[:max(1, len(p) * 2 // 3)] + "\n" for p in PREFIXES]

    def lines(n: int) -> str:
        return "".join(itertools.islice(itertools.cycle(near), n))

    # the 100k lines' parse is the timed one (answers), not a third parse of the same text
    answers: list = []
    _assert_linear(lambda n: lines(n // 20), "near-miss lines", sizes=(200_000, 2_000_000),  # 10k, 100k lines
                   answers=answers)
    log = answers[0]
    if isinstance(log, ParseError):
        return
    assert log.counts() == {}


def test_real_output_at_scale_costs_its_length():
    text = H100.read_text() + read("torch-watchdog/desync-debug-allreduce-timeout.txt")
    _assert_linear(lambda n: text * max(1, n // len(text)), "real output repeated")


# How a line of each kind starts, and runs that make lazy or nested quantifiers backtrack
# (the shapes of tests/unit/contracts/test_parsers_hostile.py, with this parser's own prefixes).
PREFIXES = [
    "", "WorkNCCL(", "WorkNCCL(SeqNum=1, OpType=A, Timeout(ms)=", "[rank0]:", "[rank0]:[E1218 20:27:21.42 ProcessGroupNCCL.cpp:629] ",
    "[PG ID 0 PG GUID 0(default_pg) Rank 3] ", "[PG ", "last enqueued work: 1, last completed work: ",
    "at work: 1, last enqueued NCCL work: ", "Detected mismatch between collectives on ranks. Rank 0 is running collective: ",
    "NCCL error in: a:1, ", "NCCL error: ", "Connection closed by peer [", "Timed out waiting ", "Read error [",
    "op.preamble.length <= op.nbytes. ", "Stack trace of the failed collective: ", "failed to bind to ",
    "The client socket has timed out after 1s while trying to connect to ", "The client socket has failed to connect to ",
    "Timed out after 1 seconds waiting for clients. ", "wait timeout after ", "RendezvousClosedError",
    "failed (exitcode: 1) local_rank: 1 (pid: 1) of binary: ", "Received 1 death signal", "Process 1 got signal: ",
    "Sending process 1 closing signal ", "[default] Worker group ", "[", "Traceback (most recent call last):", "  File \"",
    "terminate called after throwing an instance of '", " - [0] Timeout at collective: ", "ranks [", "#1 started ranks:",
    "(WorkerDict pid=1) ", "[2024-02-27T21:35:32.106313Z] a || ", "0: ", "[1,0]<stderr>:", "E0325 20:57:27.620000 2606 ",
    "WARNING:torch.", "========", "Ranks 1, ", "[Rank 0]: Ranks ", "port: 1, useIpv6: ", "workMetaList_.size()=",
    "CUDA error: ", "#0 a from ", "Failures:", "a.b.CError: ", "Jul 13 21:22:34 ", "Last error:", "ncclX: ",
    "Finished writing Flight Recorder debug info to ", "address already in use port ", "got stuck for ", "[E ",
    "recvValue failed on SocketImpl(", "recvVector failed on SocketImpl(fd=1, addr=a, remote=",
    "TCP client failed to connect/validate to host ", "TCP client failed to connect/validate to host a:1 - retrying (try=",
    'Failed to check the "should dump" flag on TCPStore, with error: ',
]
FILLERS = [" ", "\t", ".", ":", "a", "0", "a ", ": ", "a:", " :", "'", ",", "[", "-", "1.", "\x1b[", ". ", "1, ", "/gloo/",
           "Rank 1 is running collective: ", "WorkNCCL(", "] ", "#1 ", " from ", ":1", "NCCL error: a, NCCL version ",
           "[rank1]:", "=", "Connection closed by peer [1]:1 ", "failed to bind to a:1 (errno: 98 - a) ", "SeqNum=1, ", "(",
           "]:[", "[rank1]:[E", "\r"]


def test_every_hostile_line_shape_costs_its_length():
    for prefix in PREFIXES:
        for filler in FILLERS:
            _assert_linear(lambda n, p=prefix, f=filler: p + f * (n // len(f)) + "x\n", f"{prefix!r} + {filler!r}*n",
                           sizes=(1_000, 20_000))


def test_hostile_lines_after_each_prefix_cost_their_length():
    # 25 kB to 250 kB (~3,500 lines): a quadratic cost there is caught once it costs 0.06 s at
    # 250 kB (the bound is 50x + SLACK_S, the step costs it 100x), where at 500 kB with the wall
    # clock's slack it had to cost 0.3 s at 500 kB (0.075 s at 250 kB): as strict, half the parse
    for prefix in PREFIXES:
        block = "".join(prefix + filler * 40 + "x\n" for filler in FILLERS)
        _assert_linear(lambda n, b=block: b * max(1, n // len(b)), f"lines of {prefix!r}", sizes=(25_000, 250_000))


def test_open_state_of_many_ranks_is_bounded():
    """Ranks that each open a multi-line fact (an NCCL error, a traceback) and never close it."""
    text = "".join(f"[rank{i}]: torch.distributed.DistBackendError: NCCL error in: a.cpp:1, internal error, "
                   f"NCCL version 2.1.1\n[rank{i}]: Traceback (most recent call last):\n" for i in range(20_000))
    _assert_linear(lambda n: text[:n], "open facts of many ranks", sizes=(len(text) // 10, len(text)))


_FRAGMENTS = st.sampled_from([
    "[rank1]:", "[E1218 20:27:21.4 ProcessGroupNCCL.cpp:629] ", "[Rank 0] ", "WorkNCCL(SeqNum=1, OpType=A, ",
    "Timeout(ms)=5)", " ran for 9 milliseconds", "Traceback (most recent call last):\n", "  File \"a\", line 1\n",
    "RuntimeError: x\n", "NCCL error in: a:1, b, NCCL version 2.1.1\n", "ncclX: y\n", "Last error:\n", "====\n",
    "x FAILED\n", "[0]:\n", "  exitcode  : -9 (pid: 1)\n", "  traceback : a\n", "terminate called after throwing an instance of 'x'\n",
    "  what():  z\n", "#3 started ranks:\n", "[1, 2] started A\n", "Stack trace of the failed collective:\n", "#0 a from b:1\n",
    "\n", "\x00", "١٢", "Rank 1 is running collective: CollectiveFingerPrint(SequenceNumber=1",
])
_TEXT = st.one_of(st.text(max_size=400), st.lists(_FRAGMENTS | st.text(max_size=20), max_size=40).map("".join))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=_TEXT)
def test_never_crashes(text):
    try:
        log = parse_torch_log(text)
    except ParseError:
        return
    round_trip(log)


# ------------------------------------------------------------ hc parse torch-log


@pytest.mark.skipif("torch-log" not in TOOLS, reason="the TOOLS line for torch-log is not in yet")
def test_hc_parse_torch_log():
    assert TOOLS["torch-log"][:2] == ("healthcheck.parsers.torch_log", "parse_torch_log")
    r = run_hc_inproc("parse", "torch-log", str(H100))
    assert r.returncode == 0, r.stderr
    facts = msgspec.json.decode(r.stdout)["facts"]
    assert facts["backend_errors"][0]["last_error"] == "Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 60"
    assert msgspec.convert(facts["child_failed"][0], type=ChildFailedBlock).failures[1].root_cause


# ------------------------------------------------------------ issue 20: shapes from the field

FIELD_TORCH = FIXTURES / "field" / "issues" / "torch-log"


def test_gloo_connect_failure_names_the_peer_and_port():
    # field/issues/torch-log/gloo-new-group-pair-connection-refused-interleaved.txt: gloo's
    # pair.cc `connect [172.31.71.170]:13195: Connection refused` inside a RuntimeError
    log = parse_torch_log((FIELD_TORCH / "gloo-new-group-pair-connection-refused-interleaved.txt").read_text())
    (g,) = log.gloo
    assert (g.kind, g.peer, g.port, g.source, g.message) == ("connect", "172.31.71.170", 13195, "pair.cc:799",
                                                               "Connection refused")


def test_gloo_connect_timeout_names_the_peer_and_port():
    # field/issues/torch-log/gloo-pair-connect-timeout-mpirun-aborted.txt (a retired held-out
    # file): gloo's pair.cc `Connect timeout [172.17.27.13]:27023`, the peer after the words
    # (no `: error` after it), ending a traceback before mpirun's abort box
    log = parse_torch_log((FIELD_TORCH / "gloo-pair-connect-timeout-mpirun-aborted.txt").read_text())
    (g,) = log.gloo
    assert (g.kind, g.peer, g.port, g.source) == ("connect", "172.17.27.13", 27023, "pair.cc:611")
    assert "timeout" in g.message.lower()
    # gloo that does not know its peer (`pair.h:311] Connect timeout [none]`) names none; the
    # failure it caused, `Gloo connectFullMesh failed with`, is the fact (issue 20's round 11)
    text = (FIXTURES / "diagnose" / "env-world" / "rank0.log").read_text()
    connects = [g for g in parse_torch_log(text).gloo if g.kind == "connect"]
    assert connects and all(g.operation == "connectFullMesh" and not g.peer and g.port is None for g in connects)


def test_a_distbackenderror_without_a_label_takes_the_rank_its_message_names():
    # field/issues/torch-log/rank8-distbackenderror-store-get-connection-reset.txt with its
    # `[rank8]:` prefixes taken off (a transformation: the same output without torch's labels)
    text = (FIELD_TORCH / "rank8-distbackenderror-store-get-connection-reset.txt").read_text()
    bare = "\n".join(line.removeprefix("[rank8]: ") for line in text.splitlines())
    (e,) = parse_torch_log(bare).exceptions
    assert (e.type, e.rank) == ("torch.distributed.DistBackendError", 8)
    assert "Connection reset by peer" in e.message
    # a label wins over the message: the label is the process that printed it
    (e,) = parse_torch_log(text.replace("[rank8]:", "[rank2]:")).exceptions
    assert e.rank == 2


def test_a_watchdog_line_word_wrapped_after_its_rank_group_keeps_the_group():
    # field/issues/torch-log/watchdog-hard-wrapped-at-fixed-width-2.3.txt: `[Rank 0] Watchdog`
    # / `caught collective operation timeout: WorkNCCL(SeqNum=2,` / `OpType=...` at ~70 columns
    log = parse_torch_log((FIELD_TORCH / "watchdog-hard-wrapped-at-fixed-width-2.3.txt").read_text())
    (t,) = log.timeouts
    assert (t.pg_rank, t.seq, t.op_type, t.timeout_ms, t.line, t.wrapped) == (0, 2, "ALLREDUCE", 10000, 4, True)
    # a c10 line whose sentence is whole is never glued to the line after it
    whole = ("[E329 19:15:11.775879730 ProcessGroupNCCL.cpp:565] [Rank 0] Watchdog caught collective operation "
             "timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=10, NumelOut=10, Timeout(ms)=10000) ran for "
             "10028 milliseconds before timing out.\nTraceback (most recent call last):\n")
    (t,) = parse_torch_log(whole).timeouts
    assert (t.pg_rank, t.wrapped, t.ran_for_ms) == (0, False, 10028)


def test_a_failure_box_collapsed_onto_few_lines_still_names_the_failure():
    # field/issues/torch-log/childfailed-box-collapsed-ocr-like.txt: no `====` borders, the
    # fields run together (`rank2 (local rank: 2)exitcode: -9 (pid: 36071)error file: <N/A>`)
    log = parse_torch_log((FIELD_TORCH / "childfailed-box-collapsed-ocr-like.txt").read_text())
    (block,) = log.child_failed
    (f,) = block.failures
    assert (block.program, block.no_other_failures) == ("experiments/supervised HO3D V2.py", True)
    assert (f.root_cause, f.rank, f.local_rank, f.exitcode, f.pid, f.signal) == (True, 2, 2, -9, 36071, "SIGKILL")
    # a ` FAILED` line with neither a border nor a ChildFailedError line before it is no box
    assert not parse_torch_log("torch.distributed.DistBackendError: x\ntest_x FAILED\n").child_failed


def test_torchx_role_prefix_before_c10_lines_names_the_rank_on_replica_0():
    # field/issues/torch-log/watchdog-reduce-scatter-base-pg1.txt with each `[rankN]:` made
    # torchx's `trainer/0 [N]:` (a transformation: the label torchx prints before a replica's lines)
    text = (FIELD_TORCH / "watchdog-reduce-scatter-base-pg1.txt").read_text()
    on = {replica: parse_torch_log(re.sub(r"^\[rank(\d+)\]:", rf"trainer/{replica} [\1]:", text, flags=re.M))
          for replica in (0, 1)}
    assert [(t.rank, t.pg_rank) for t in on[0].timeouts] == [(0, 0), (4, 4), (3, 3)]
    assert all(t.time.startswith("1206 18:44:1") for t in on[0].timeouts)  # the c10 prefix read after it
    assert [t.rank for t in on[1].timeouts] == [None, None, None]  # another replica: the global rank is unknown


@pytest.mark.parametrize("first", [17, 19, 21])  # from `Root Cause`, from `time`, from `rank`
def test_a_failure_box_cut_to_its_tail_still_names_the_failure(first):
    # corpus/torchrun/childfailederror-accelerate-deepspeed-exitcode-9-sigkill.txt cut to its
    # last lines (a transformation: a paste that begins inside the box)
    lines = (CORPUS / "torchrun" / "childfailederror-accelerate-deepspeed-exitcode-9-sigkill.txt").read_text()
    tail = "".join(lines.splitlines(keepends=True)[first - 1:])
    (block,) = parse_torch_log(tail).child_failed
    (f,) = block.failures
    assert (f.exitcode, f.pid, f.signal, block.complete) == (-9, 14750, "SIGKILL", True)
    assert f.rank == (None if first > 21 else 0)
    assert f.root_cause is (first == 17)
    assert f.time == ("" if first > 19 else "2025-05-21_15:43:03")


def test_box_fields_alone_or_loosely_shaped_open_no_box():
    for text in ("  rank      : seven\n", "  host      : node1\n", "  time      : yesterday\n",
                 "rank: 2 of 8\nexitcode: 0\n"):
        with pytest.raises(ParseError):
            parse_torch_log(text)


def test_labels_behind_an_indented_paste_are_read():
    # field/issues/torch-log/watchdog-reduce-scatter-base-pg1.txt indented 4 blanks as a whole
    # (a transformation: a markdown list's code block), also with torchx's label
    text = (FIELD_TORCH / "watchdog-reduce-scatter-base-pg1.txt").read_text()
    clean = parse_torch_log(text)
    indented = parse_torch_log("".join("    " + line for line in text.splitlines(keepends=True)))
    assert indented.timeouts == clean.timeouts and indented.prefixed_ranks == clean.prefixed_ranks == (0, 3, 4)
    torchx = re.sub(r"^\[rank(\d+)\]:", r"  trainer/0 [\1]:", text, flags=re.M)
    assert [t.rank for t in parse_torch_log(torchx).timeouts] == [0, 4, 3]
    # a traceback's indented frames keep their indent: they are no labels
    frames = parse_torch_log('Traceback (most recent call last):\n  File "/x/train.py", line 3, in <module>\n'
                             "RuntimeError: boom\n")
    assert [(e.type, e.framed, e.frame) for e in frames.exceptions] == [("RuntimeError", True, "train.py:3 in <module>")]


# ------------------------------------------------------------ issue 20: the handler table


def test_lines_no_handler_reads_are_counted_and_sampled_beside_the_facts():
    # field/issues/torch-log/gloo-pair-connect-timeout-mpirun-aborted.txt: a caffe2 program's
    # own log line and mpirun's abort box are no torch handler's; the traceback and gloo's
    # error are read, and the unread lines are evidence, not a reason to refuse
    log = parse_torch_log((FIELD_TORCH / "gloo-pair-connect-timeout-mpirun-aborted.txt").read_text())
    assert [g.kind for g in log.gloo] == ["connect"] and [e.type for e in log.exceptions] == ["RuntimeError"]
    sampled = {s.line: s.text for s in log.unrecognized.sample}
    assert log.unrecognized.count == len(sampled)
    assert 2 in sampled and "Memonger" in sampled[2]
    assert 14 in sampled and "noticed that the job aborted" in sampled[14]
    assert not {3, 4, 5, 12} & set(sampled)  # the traceback's header, a frame, its source line, the error


def test_hc_parse_torch_log_explain_names_the_handler_of_each_line():
    from healthcheck.parsers import parser_for
    from healthcheck.parsers.explain import explain

    text = (FIELD_TORCH / "gloo-pair-connect-timeout-mpirun-aborted.txt").read_text()
    _, explanation = explain("torch-log", parser_for("torch-log"), text)
    by = {x.line: x.by for x in explanation.lines}
    assert explanation.how == "handlers"
    assert (by[3], by[4], by[12], by[14]) == ("traceback", "traceback-frame", "gloo", "unrecognized")


def test_a_line_holding_several_messages_is_read_by_each_and_named_by_the_first():
    # corpus torch-nccl-error/distbackenderror-remote-process-exited-nccl-2.18.5-two-lines.txt:
    # its first line is both an NCCL error and the exception a traceback ends with
    from healthcheck.parsers import parser_for
    from healthcheck.parsers.explain import explain

    text = read("torch-nccl-error/distbackenderror-remote-process-exited-nccl-2.18.5-two-lines.txt")
    log, explanation = explain("torch-log", parser_for("torch-log"), text)
    assert [(b.line, b.kind) for b in log.backend_errors] == [(1, "nccl")]
    assert [(e.line, e.type) for e in log.exceptions] == [(1, "torch.distributed.DistBackendError")]
    assert explanation.lines[0].by == "backend-error"
    assert log.unrecognized.count == 0
