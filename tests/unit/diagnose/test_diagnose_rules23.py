"""Round 23 of issue 19's rules (branch i19-r23), on the mechanisms field-14 missed (read in
this round, tests/fixtures/diagnose-field/issues-14) and the misses that recur across the open
field sets: srun's tasks that aborted on their own before srun ended the step, and MPICH's
mpd naming the rank that caused the job's abort. Texts are built here in the shapes the
tools' sources print (srun's `task N: <strsignal>` report, slurmstepd's `*** STEP J.S ON H
CANCELLED AT T ***`, mpd's mpiexec `job_aborted_early` message)."""

from __future__ import annotations

import time

from support import diagnose_paste, named_ranks

from healthcheck.diagnose.verdict import OddRank, Verdict, render
from healthcheck.parsers.torch_log import parse_torch_log

# ---------------------------------------------------------------- srun: aborted before the step ended

_CANCELLED = "slurmstepd: error: *** STEP 4242.0 ON n001 CANCELLED AT 2024-05-01T10:00:00 ***\n"


def _srun(*before: str, after: str = "", cmd: str = "srun -n 48 ./solver\n") -> str:
    """srun's reports: the lines before the step's end, the cancellation, the lines after."""
    return (cmd + "step 10 residual 1.0e-3\n" + "".join(f"srun: error: {b}\n" for b in before)
            + "srun: Terminating job step 4242.0\n" + _CANCELLED + after)


_VICTIMS = ("srun: error: n001: tasks 0-7,9,11-15: Terminated\n"
            "srun: error: n002: tasks 16-31: Terminated\nsrun: error: n003: tasks 32-47: Terminated\n"
            "srun: Force Terminated job step 4242.0\n")


def test_srun_tasks_aborted_before_the_step_ended_are_the_dead_ranks(tmp_path):
    v = diagnose_paste(tmp_path, _srun("n001: tasks 8,10: Aborted", after=_VICTIMS))
    assert v.cls == "dead-rank" and named_ranks(v) == [8, 10], v.summary
    assert v.confidence == "medium", v.summary  # srun's word alone


def test_srun_abort_ranges_and_lists_are_expanded(tmp_path):
    victims = "srun: error: n002: tasks 16-47: Terminated\n"
    v = diagnose_paste(tmp_path, _srun("n001: tasks 0-3,5,7-8: Aborted", after=victims))
    assert named_ranks(v) == [0, 1, 2, 3, 5, 7, 8], v.summary


def test_srun_abort_reported_after_srun_said_it_terminates_the_step_still_counts(tmp_path):
    """srun's `Terminating job step` is its request; slurmstepd signals (SIGTERM) the tasks
    after it: a task reported Aborted before the first Terminated one was not srun's."""
    text = ("step 10 residual 1.0e-3\nsrun: error: n001: task 8: Aborted\nsrun: Terminating job step 4242.0\n"
            "srun: error: n001: task 10: Aborted\n" + _CANCELLED + _VICTIMS)
    v = diagnose_paste(tmp_path, text)
    assert named_ranks(v) == [8, 10], v.summary


def test_srun_abort_after_the_first_victim_is_not_named(tmp_path):
    text = _srun("n001: task 8: Aborted", after=_VICTIMS + "srun: error: n001: task 10: Aborted\n")
    v = diagnose_paste(tmp_path, text)
    assert named_ranks(v) == [8], v.summary


def test_srun_aborts_of_most_tasks_are_a_watchdog_s_not_named(tmp_path):
    """NCCL's watchdog aborts every rank that waited; the hung one is left to srun."""
    v = diagnose_paste(tmp_path, _srun("n001: tasks 0-6: Aborted", after="srun: error: n001: task 7: Terminated\n",
                               cmd="srun -n 8 python train.py\n"))
    assert named_ranks(v) == [], v.summary


def test_srun_aborts_beside_a_timeout_are_not_named(tmp_path):
    timeout = ("[rank8]:[E501 10:00:00.000000000 ProcessGroupNCCL.cpp:616] [Rank 8] Watchdog caught collective "
               "operation timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
               "ran for 600020 milliseconds before timing out.\n")
    v = diagnose_paste(tmp_path, timeout + _srun("n001: tasks 8,10: Aborted", after=_VICTIMS))
    assert 8 not in named_ranks(v) and 10 not in named_ranks(v), v.summary


def test_srun_aborts_without_srun_ending_the_step_are_not_named_by_this_rule(tmp_path):
    v = diagnose_paste(tmp_path, "srun -n 16 ./solver\nsrun: error: n001: tasks 8,10: Aborted\n")
    assert named_ranks(v) == [], v.summary


def test_a_task_absent_from_srun_s_victims_is_never_named(tmp_path):
    """Judged unsound (srunends.py's docstring): srun reports every task that ended badly, so
    the absent task's own report is outside the text, or it exited 0, or its node's lines were
    left out. Named by nobody, with or without the world the command states."""
    victims = "srun: error: n001: tasks 0-57,59-63: Terminated\n"
    for cmd in ("srun -n 64 ./solver\n", "./run.sh\n"):
        text = cmd + "slurmstepd: error: *** STEP 4242.0 ON n001 CANCELLED AT 2024-05-01T10:00:00 ***\n" + victims
        v = diagnose_paste(tmp_path / cmd[:4].strip("./ "), text)
        assert named_ranks(v) == [], (cmd, v.summary)


def test_srun_task_lists_of_thousands_stay_linear_and_capped():
    """A list of ranges of millions of tasks keeps the first 4096; a line past srun's 4096
    characters of list is no report; both read in linear time."""
    wide = ",".join(f"{i * 1_000_000}-{i * 1_000_000 + 999_990}" for i in range(200))  # ~3.5k chars
    huge = ",".join(f"{i}-{i + 1}" for i in range(0, 400_000, 3))  # ~1.9 MB on one line
    text = "python train.py\n" + "".join(f"srun: error: n00{k}: tasks {wide}: Aborted\n" for k in range(3))
    start = time.perf_counter()
    log = parse_torch_log(text + f"srun: error: n009: tasks {huge}: Aborted\n" * 2)
    assert time.perf_counter() - start < 5.0
    assert [len(t.tasks) for t in log.task_exits] == [4096, 4096, 4096]
    assert log.task_exits[0].tasks[:2] == (0, 1) and log.task_exits[0].tasks[-1] == 4095


# ---------------------------------------------------------------- MPICH's mpd

def _mpd(status: str, rank: int = 0, between: str = "\n\n") -> str:
    return (f"$ mpiexec -n 4 ./cpi\n\nrank {rank} in job 1  node1_65327   caused collective abort of all ranks\n"
            f"{between}  exit status of rank {rank}: {status} \n")


def test_mpd_names_the_rank_that_caused_the_abort_killed_by_a_signal(tmp_path):
    v = diagnose_paste(tmp_path, _mpd("killed by signal 9", rank=2))
    assert v.cls == "dead-rank" and named_ranks(v) == [2], v.summary
    assert v.confidence == "high", v.summary


def test_mpd_capitalised_and_with_a_blanked_job_name(tmp_path):
    text = ("$mpiexec -n 1 ~/cpi.exe\n\nRank 0 in job 1 <system name>_65327  caused collective abort of all ranks\n"
            "\n            Exit status of rank 0: killed by signal 11\n")
    v = diagnose_paste(tmp_path, text)
    assert v.cls == "dead-rank" and named_ranks(v) == [0], v.summary


def test_mpd_return_code_is_named_at_medium(tmp_path):
    v = diagnose_paste(tmp_path, _mpd("return code 1", rank=3))
    assert v.cls == "dead-rank" and named_ranks(v) == [3] and v.confidence == "medium", v.summary


def test_mpd_status_of_another_rank_than_the_abort_s_names_none(tmp_path):
    text = ("rank 1 in job 1  node1_65327   caused collective abort of all ranks\n"
            "  exit status of rank 2: killed by signal 9 \n")
    v = diagnose_paste(tmp_path, text)
    assert named_ranks(v) == [], v.summary


def test_mpd_sigterm_is_a_relay_not_named(tmp_path):
    v = diagnose_paste(tmp_path, _mpd("killed by signal 15", rank=1))
    assert named_ranks(v) == [], v.summary


# ---------------------------------------------------------------- the odd line folds a host's ranks

def test_odd_line_folds_ranks_known_by_their_host_alone_and_counts_the_rest():
    odd = [OddRank(rank=r, host="nid00160") for r in range(1408, 1424)] + [OddRank(rank=7, host="n2", pid=41)]
    odd += [OddRank(rank=100 + i, host=f"h{i}", pid=500 + i) for i in range(20)]
    line = render(Verdict(schema="hc.diagnosis/2", cls="dead-rank", summary="s", confidence="medium", odd_ranks=odd, next_step="n"))
    shown = next(x for x in line.splitlines() if x.startswith("odd: "))
    assert shown.startswith("odd: ranks 1408-1423 on nid00160; rank 7 on n2 pid 41; rank 100 on h0 pid 500"), shown
    assert shown.endswith("; and 6 more"), shown


def test_srun_aborts_in_a_paste_of_srun_s_lines_alone_are_not_named(tmp_path):
    """Cut at srun's lines, the text cannot show that no rank printed a watchdog's timeout
    before it aborted: nothing named. The same lines after the job's own output name them."""
    lines = ("srun: error: n001: tasks 8,10: Aborted\nsrun: Terminating job step 4242.0\n" + _CANCELLED + _VICTIMS)
    assert named_ranks(diagnose_paste(tmp_path / "bare", "$ srun -n 48 ./solver\n" + lines)) == []
    assert named_ranks(diagnose_paste(tmp_path / "out", "$ srun -n 48 ./solver\nstep 10 residual 1.0e-3\n" + lines)) == [8, 10]
