"""torch's messages that name a rank surface it, with no `[rankN]:` label too: bare,
indented, inside a C++ `what():`, after a C++ frame list.

Lines are real (tests/fixtures/corpus/torch-nccl-error/, tests/fixtures/diagnose/rules4/: a
real torch run's output, the label taken off where a case says so) or torch's format
strings filled the way torch fills them (the source named beside each: ProcessGroupGloo.cpp,
ProcessGroupWrapper.cpp and gloo's allgather.cc as their pieces stand in libtorch_cpu.so's
strings, ProcessGroupNCCL.cpp from shared/notes/diagnose.md, distributed_c10d.py and
algorithms/join.py from the installed torch). The shapes (indent, `what():`, frames) are
transformations of those lines made here.
"""

from __future__ import annotations

import pytest
from support import CORPUS, FIXTURES

from healthcheck.parsers.torch_log import parse_torch_log

MBARRIER = FIXTURES / "diagnose" / "rules4" / "mbarrier-w4-r3"


def _real_line(path, words: str) -> str:
    return next(line for line in path.read_text().splitlines() if words in line)


def _unlabelled(line: str) -> str:
    """A real line without torch's `[rankN]:` label (a log printed without it)."""
    return line.split("]:", 1)[1] if line.startswith("[rank") else line


# (case, the line, the fact kind, the rank the message says printed it)
SELF_NAMED = [
    # real: rank1.log of a monitored_barrier run (ProcessGroupGloo.cpp:67), label taken off
    ("barrier reached", _unlabelled(_real_line(MBARRIER / "rank1.log", "successfully reached monitoredBarrier")),
     "barrier_failures", 1),
    # real: rank0.log of the same run, `[Rank 0]: Rank 3 failed to pass ...`, label taken off
    ("barrier failed", _unlabelled(_real_line(MBARRIER / "rank0.log", "failed to pass monitoredBarrier")),
     "barrier_failures", 0),
    # real: corpus, the old one-sided wording (no label in the capture)
    ("collective mismatch", _real_line(CORPUS / "torch-nccl-error"
                                       / "detail-mismatch-old-format-inconsistent-collective-broadcast.txt",
                                       "Detected mismatch"), "mismatches", 0),
    # ProcessGroupNCCL.cpp broadcastUniqueNCCLID: "[" rank_ "] is setting up NCCL communicator and retrieving
    # ncclUniqueId from [0] via c10d key-value store by key '" key "', but store->get('" key "') got error: "
    ("unique id", "[3] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via c10d key-value "
                  "store by key '0', but store->get('0') got error: Socket Timeout", "rendezvous", 3),
    # distributed_c10d.py _store_based_barrier: DistStoreError("Timed out initializing process group in store
    # based barrier on rank {rank}, for key: {store_key} (world_size=..., num_workers_joined=..., timeout=...
    # error=...)")
    ("store barrier", "torch.distributed.DistStoreError: Timed out initializing process group in store based "
                      "barrier on rank 3, for key: store_based_barrier_key:1 (world_size=8, num_workers_joined=7, "
                      "timeout=0:30:00 error=Socket Timeout)", "rendezvous", 3),
    # gloo allgather.cc GLOO_ENFORCE: "missing connection between rank " N " (this process) and rank " M
    ("gloo missing connection", "RuntimeError: [enforce fail at /pytorch/third_party/gloo/gloo/allgather.cc:37] "
                                "context->getPair(i). missing connection between rank 3 (this process) and rank 1",
     "gloo", 3),
]


def _shapes(line: str) -> dict[str, str]:
    return {
        "bare": line,
        "indented": "    " + line,
        "what": "terminate called after throwing an instance of 'c10::DistBackendError'\n  what():  " + line,
        "after frames": ("Exception raised from run at /pytorch/torch/csrc/distributed/c10d/x.cpp:1 (most recent "
                         "call first):\nframe #0: c10::Error::Error() + 0x1 (0x7f in /lib/libc10.so)\n" + line),
    }


@pytest.mark.parametrize(("case", "line", "kind", "rank"), SELF_NAMED, ids=[c[0] for c in SELF_NAMED])
@pytest.mark.parametrize("shape", ["bare", "indented", "what", "after frames"])
def test_a_message_naming_its_own_rank_gives_that_rank(case, line, kind, rank, shape):
    log = parse_torch_log(_shapes(line)[shape] + "\n")
    facts = getattr(log, kind)
    assert facts, (case, shape)
    assert facts[0].rank == rank, (case, shape)
    assert rank in log.ranks
    # an exception the message is read as (the `what():` of a C++ one, a Python one's line) is that rank's too
    assert all(e.rank == rank for e in log.exceptions), (case, shape, log.exceptions)


def test_a_label_names_the_rank_before_the_message_does():
    """`[rank5]:` is the global rank; the message's `[3]` is its rank in the group it sets up."""
    log = parse_torch_log("[rank5]:[3] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via "
                          "c10d key-value store by key '0', but store->get('0') got error: Socket Timeout\n")
    assert [r.rank for r in log.rendezvous] == [5]


def test_a_rank_that_reached_the_barrier_names_the_rank_it_waited_on_and_no_absentee():
    """real (rules4/mbarrier-w4-r3/rank1.log): was unread; rank 0's own line names the absent rank."""
    line = _real_line(MBARRIER / "rank1.log", "successfully reached monitoredBarrier")
    [b] = parse_torch_log(line + "\n").barrier_failures
    assert (b.rank, b.reporter, b.waited_on, b.ranks) == (1, 1, 0, ())


def test_the_ranks_monitored_barrier_names_absent_are_ranks_the_log_names():
    line = _real_line(MBARRIER / "rank0.log", "failed to pass monitoredBarrier")
    assert parse_torch_log(line + "\n").ranks == (0, 3)


# ProcessGroupNCCL's logPrefix() before its Flight Recorder and exception messages (diagnose.md 2.2)
PG = "[PG ID 0 PG GUID 0(default_pg) Rank 3] "


def test_a_flight_recorder_note_keeps_its_group_prefix():
    [note] = parse_torch_log(PG + "Observed flight recorder dump signal from another rank via TCPStore.\n"
                             ).flight_recorder
    assert (note.kind, note.pg_rank, note.pg_desc) == ("dump-signal-observed", 3, "default_pg")


def test_an_exception_whose_what_names_its_group_rank_keeps_it():
    text = ("terminate called after throwing an instance of 'c10::DistBackendError'\n  what():  " + PG
            + "Process group watchdog thread terminated with exception: [Rank 3] Watchdog caught collective "
              "operation timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=131072000, NumelOut=131072000, "
              "Timeout(ms)=600000) ran for 600081 milliseconds before timing out.\n")
    [e] = parse_torch_log(text).exceptions
    assert (e.rank, e.pg_rank, e.pg_id) == (None, 3, "0")


def test_self_named_rank_is_bounded_and_names_none_elsewhere():
    from healthcheck.parsers.torch_log.state import self_named_rank

    assert self_named_rank("x" * 1_000_000 + "[3] is setting up NCCL communicator") is None
    assert self_named_rank("Rank 3 is running collective") is None  # not torch's mismatch sentence
    assert self_named_rank("[Rank 3] Watchdog caught collective operation timeout") is None  # a group prefix
