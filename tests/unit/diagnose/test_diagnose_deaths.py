"""Issue 19, items 1, 5 and 6: `hc diagnose logs` on real gloo jobs (tests/fixtures/diagnose,
made by make_deaths.py with torch 2.13 on CPU) names the rank that caused the failure,
never a peer that failed because of it.

* deaths: an exception in one rank's own code (per-rank files, torchrun's console with its
  `[rankN]:` tracebacks, `--tee`), the first in time where several ranks raised, a rank
  that left early (exit 0) while its peers failed;
* post-mortems: every peer timed out in one collective and one rank did not, or one rank
  timed out in another collective (gloo here; NCCL's watchdog wording from the note's
  released strings);
* mismatches pinned: a broadcast's receivers that all got the same wrong size point at the
  source; a 2:1 byte ratio is said to be a dtype; a rank launched with another
  MASTER_PORT or WORLD_SIZE is the init failure.
"""

from __future__ import annotations

import json
import shutil

import pytest
from support import FIXTURES, assert_culprits, diagnose_saved

from healthcheck.diagnose.evidence import RankEvidence
from healthcheck.diagnose.verdict import build

SCEN = FIXTURES / "diagnose"

CASES = {
    # scenario: (class, the culprit ranks, the ranks that failed because of them)
    "exc": ("dead-rank", [2], [0, 1, 3]),
    "exc-torchrun": ("dead-rank", [1], [0, 2, 3]),
    "exc-srun": ("dead-rank", [2], [0, 1, 3]),
    "kill-srun": ("dead-rank", [1], [0, 2, 3]),
    "exc-tee": ("dead-rank", [2], [0, 1]),
    "exc-order": ("dead-rank", [2], [0, 1]),
    "exc-rootcause": ("dead-rank", [2], [0, 1]),
    "early-exit": ("dead-rank", [3], [0, 1, 2]),
    "early-exit-plain": ("dead-rank", [1], [0, 2]),
    "exit-nonzero": ("dead-rank", [1], [0, 2]),
    "postmortem": ("stuck-rank", [1], [0, 2, 3]),
    "postmortem-w2": ("stuck-rank", [0], [1]),
    "op-mismatch": ("collective-mismatch", [2], [0, 1]),
    "bcast-size": ("shape-mismatch", [1], [0, 2, 3]),
    "env-port": ("init-failure", [2], [0, 1]),
    "env-world": ("init-failure", [2], [0, 1]),
}


def verdict(scenario: str):
    return diagnose_saved(SCEN / scenario)


@pytest.mark.parametrize("scenario", sorted(CASES))
def test_the_culprit_is_named_and_no_victim(scenario):
    cls, culprits, victims = CASES[scenario]
    v = verdict(scenario)
    assert_culprits(v, cls, culprits, victims)
    main = v.findings[0]
    assert main.lines and all(e.source for e in main.lines)
    assert any(e.rank in culprits for e in main.lines), main.lines


@pytest.mark.parametrize("scenario", ["exc", "exc-torchrun", "exc-srun", "exc-tee", "exc-order"])
def test_an_exception_in_own_code_is_named_with_its_type_and_frame(scenario):
    v = verdict(scenario)
    main = v.findings[0]
    expected = "ValueError" if scenario == "exc-tee" else "KeyError"
    frame = "load_batch" if scenario == "exc-tee" else "parse_record"
    assert expected in v.summary and frame in v.summary, v.summary
    assert "deaths_train.py" in main.where and frame in main.where
    assert "order:" in v.summary  # how the order was decided is said


def test_the_first_in_time_wins_over_file_order():
    """Every rank raised an exception that names no collective (the script wraps the peers'
    errors `from None`); rank 0's file comes first, rank 2 raised first in time."""
    v = verdict("exc-order")
    assert [o.rank for o in v.odd_ranks] == [2]
    assert "first in time" in v.summary and "after it" in v.summary, v.summary


def test_torchruns_root_cause_is_not_trusted_blindly():
    """exc-rootcause: rank 2 logs its KeyError, then saves a checkpoint; its peers time out
    and exit first, torchrun's Root Cause names rank 0 (SIGABRT) and SIGTERMs rank 2. The
    ranks' own tracebacks decide: rank 2, and the Root Cause's rank is a victim."""
    v = verdict("exc-rootcause")
    root = [f for f in v.findings if f.cls == "dead-rank"]
    assert [o.rank for o in v.odd_ranks] == [2] and root, v.summary
    assert "KeyError" in v.summary and "rank 0" not in v.summary.split(";")[0]


def test_an_early_exit_is_the_culprit_not_its_peers():
    """exit 0 (torchrun leaves it out of its failure block), no error in a plain rank's own
    file, the script's own `sys.exit(3)` after a log line: the rank that left is named, and
    what is known of how it left is said (no exit 0 claimed where it is not known)."""
    for scenario, rank, how in (("early-exit", 3, "exited 0"), ("early-exit-plain", 1, "without an error of its own"),
                                ("exit-nonzero", 1, "exited 3 without printing an error")):
        v = verdict(scenario)
        assert "left the job early" in v.summary and how in v.summary, v.summary
        assert [o.rank for o in v.odd_ranks] == [rank]


def test_the_unknown_text_says_what_the_logs_hold(tmp_path):
    """The post-mortem's ranks with the culprit's file left out: three ranks that all timed
    out in one collective. No rank is named, and the text does not claim there was no
    timeout."""
    for r in (0, 2, 3):
        shutil.copy(SCEN / "postmortem" / f"rank{r}.log", tmp_path)
    v = diagnose_saved(tmp_path)
    assert v.cls == "unknown" and not v.odd_ranks
    assert "timeout" in v.why_unknown and "no error, timeout" not in v.why_unknown, v.why_unknown


def _nccl_timeout(rank: int, seq: int, op: str, numel: int) -> str:
    """ProcessGroupNCCL's watchdog line, built from the note's released strings (section 2:
    the [wheel] anchor `Watchdog caught collective operation timeout: WorkNCCL(SeqNum=...,
    OpType=..., NumelIn=..., NumelOut=..., Timeout(ms)=...) ran for ... milliseconds before
    timing out.` and the `[rankN]:[E... ProcessGroupNCCL.cpp:N]` prefix)."""
    return (f"[rank{rank}]:[E1127 10:00:0{rank}.000000000 ProcessGroupNCCL.cpp:629] [Rank {rank}] Watchdog caught "
            f"collective operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={numel}, NumelOut={numel}, "
            f"Timeout(ms)=600000) ran for 600081 milliseconds before timing out.\n")


def _manifests(directory, world: int) -> None:
    for r in range(world):
        (directory / f"rank{r}.json").write_text(json.dumps(
            {"schema": "hc.run/1", "rank": r, "world_size": world, "host": f"gpu{r // 2:03d}", "pid": 1000 + r}))


@pytest.mark.parametrize(("odd", "cls"), [((52, "BROADCAST", 4096), "collective-mismatch"),
                                          ((53, "ALLREDUCE", 4096), "collective-mismatch"),
                                          ((52, "ALLREDUCE", 2048), "shape-mismatch")])
def test_nccl_post_mortems_name_the_rank_that_waited_elsewhere(tmp_path, odd, cls):
    _manifests(tmp_path, 4)
    text = "".join(_nccl_timeout(r, 52, "ALLREDUCE", 4096) for r in (0, 1, 2)) + _nccl_timeout(3, *odd)
    (tmp_path / "job.out").write_text(text)
    v = diagnose_saved(tmp_path)
    assert (v.cls, [o.rank for o in v.odd_ranks]) == (cls, [3]), v.summary


def test_nccl_post_mortem_names_the_rank_that_did_not_time_out(tmp_path):
    _manifests(tmp_path, 4)
    (tmp_path / "job.out").write_text("".join(_nccl_timeout(r, 52, "ALLREDUCE", 4096) for r in (0, 1, 3)))
    v = diagnose_saved(tmp_path)
    assert (v.cls, [o.rank for o in v.odd_ranks]) == ("stuck-rank", [2]), v.summary
    assert any("did not time out" in f.message and "SeqNum 52" in f.message and f.ranks == (2,) for f in v.findings)


def test_a_broadcast_source_and_a_dtype_ratio_are_said():
    v = verdict("bcast-size")
    assert "broadcast" in v.summary and "rank 1" in v.summary, v.summary
    v = verdict("dtype")
    assert v.cls == "shape-mismatch"
    assert "2:1" in v.summary and "float64" in v.summary, v.summary


def test_a_rank_launched_with_another_master_port_or_world_size_is_named_live():
    """Live, hc reads each rank's MASTER_ADDR/MASTER_PORT/WORLD_SIZE: the one that differs."""
    from healthcheck.diagnose.evidence import JobEvidence
    from healthcheck.diagnose.sources import Collected

    for field, odd_value in (("master_port", 29501), ("master_addr", "10.0.0.9"), ("world_size", 5)):
        ev = JobEvidence(job="pids")
        for r in range(4):
            rec = RankEvidence(rank=r, host="n1", pid=100 + r, world_size=4, master_addr="10.0.0.1",
                               master_port=29500, alive=True, state="sleeping", sources=[f"n1: pid {100 + r}"])
            if r == 1:
                setattr(rec, field, odd_value)
            ev.ranks[r] = rec
        v = build(Collected(evidence=ev))
        assert (v.cls, [o.rank for o in v.odd_ranks]) == ("init-failure", [1]), (field, v.summary)
        assert str(odd_value) in v.summary


def test_a_caught_and_logged_exception_on_a_healthy_job_names_no_rank():
    """A rank logs an exception it caught (a bad record, skipped) and the job finishes:
    no rank is named (a guard: the dead-rank rule reads every traceback now)."""
    v = verdict("healthy-retry")
    assert v.cls == "unknown" and not v.odd_ranks, v.summary


def test_torchruns_local_rank_label_is_no_global_rank_under_a_node_label():
    """torchrun --tee labels a line with its local rank (`[default1]:`, as exc-tee shows):
    the rank on one node; under srun's node label (`0: `) no label says the global rank,
    and only torch's own `[rankN]:` does."""
    from healthcheck.parsers.torch_log import parse_torch_log

    text = ("[default1]:[rank1]: KeyError: 'labels'\n"
            "[default2]:RuntimeError: [../gloo/transport/tcp/pair.cc:553] Connection closed by peer [10.0.0.2]:1234\n"
            "0: [default1]:[rank5]: KeyError: 'labels'\n"
            "1: [default0]:RuntimeError: [../gloo/transport/tcp/pair.cc:553] Connection closed by peer [10.0.0.2]:1\n"
            "3: RuntimeError: [../gloo/transport/tcp/pair.cc:553] Connection closed by peer [10.0.0.2]:1\n")
    log = parse_torch_log(text)
    assert [e.rank for e in log.exceptions] == [1, 2, 5, None, 3]


def test_nccl_watchdog_status_lines_alone_name_the_rank_that_never_failed(tmp_path):
    """torch >= 2.6 prints `failure detected by watchdog at work sequence id: N PG status:
    last enqueued work: E, last completed work: C` (the note's [wheel] string) on every rank
    whose watchdog fired: the rank that printed none never enqueued N."""
    _manifests(tmp_path, 4)
    (tmp_path / "job.out").write_text("".join(
        f"[rank{r}]:[E1127 10:00:0{r}.000000000 ProcessGroupNCCL.cpp:2168] [PG ID 0 PG GUID 0(default_pg) Rank {r}] "
        "failure detected by watchdog at work sequence id: 79 PG status: last enqueued work: 79, last completed "
        "work: 78\n" for r in (0, 1, 3)))
    v = diagnose_saved(tmp_path)
    assert (v.cls, [o.rank for o in v.odd_ranks]) == ("stuck-rank", [2]), v.summary


def test_a_rank_whose_watchdog_aborted_is_no_culprit_of_the_post_mortem():
    """Real fragments (tests/fixtures/corpus): rank 0 printed only the watchdog's abort
    ('Some NCCL operations have failed or timed out'), rank 2 its WorkNCCL timeout: neither
    is the rank that did not wait. The desync report's rank 1 'didn't join collective #3'
    while rank 0 timed out: rank 1 is named."""
    from support import CORPUS

    v = diagnose_saved(CORPUS / "torch-watchdog" / "ray-dedup-repeated-across-cluster-allreduce-seq1-pg0-default-pg.txt")
    assert 0 not in [o.rank for o in v.odd_ranks], v.summary
    v = diagnose_saved(CORPUS / "torch-watchdog" / "desync-debug-allreduce-timeout.txt")
    assert (v.cls, [o.rank for o in v.odd_ranks]) == ("stuck-rank", [1]), v.summary


def test_sruns_own_word_on_a_task_is_read():
    """kill-srun: rank 1 is SIGKILLed and prints nothing; srun says `srun: error: node2: task
    1: Killed`: rank 1 died by SIGKILL on node2. A kill srun makes after it aborted the step
    is its own, never a cause."""
    from healthcheck.parsers.torch_log import parse_torch_log

    v = verdict("kill-srun")
    assert "SIGKILL" in v.summary and v.odd_ranks[0].host == "node2", v.summary
    log = parse_torch_log("srun: error: node2: tasks 0-1,3: Exited with exit code 1\n"
                          "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.\n"
                          "srun: error: node1: task 2: Killed\n")
    first, last = log.task_exits
    assert first.tasks == (0, 1, 3) and first.exitcode == 1 and not first.after_abort
    assert last.tasks == (2,) and last.signal == "SIGKILL" and last.after_abort
