"""horovodrun's own launcher (gloo): its `[rank]<stream>:` tag labels each line with the rank
(lines.py via launcher_labels.MPIRUN_TAG), and its `Process N exit with status code C.` is the
rank's end (parsers/torch_log/rankends.py), named only where it reports one process
(diagnose/signals.horovod_exits). The shapes are horovodrun's as two public threads show them
(horovod/horovod PR 3060's output, issue 2097's four `status code 250` lines); field-17 held
the first and was read as no log at all before."""

from __future__ import annotations

from support import diagnose_paste, named_ranks

from healthcheck.parsers.torch_log import parse_torch_log

HELLO = "".join(f"[{r}]<stdout>:hi! {r}\n" for r in (0, 3, 1, 2))
RANK2_RAISES = ('[2]<stderr>:Traceback (most recent call last):\n'
                '[2]<stderr>:  File "/home/u/test.py", line 11, in <module>\n'
                '[2]<stderr>:    raise RuntimeError("worker refuses to be rank 2")\n'
                '[2]<stderr>:RuntimeError: worker refuses to be rank 2\n')



def test_horovodruns_exit_report_is_read_as_the_ranks_end():
    log = parse_torch_log("Process 2 exit with status code 1.\nProcess 3 exit with status code -9.\n")
    exits = [(t.tasks, t.launcher, t.exitcode, t.signal) for t in log.task_exits]
    assert exits == [((2,), "horovodrun", 1, ""), ((3,), "horovodrun", None, "SIGKILL")]


def test_one_process_reported_with_its_own_traceback_is_the_dead_rank(tmp_path):
    v = diagnose_paste(tmp_path, HELLO + RANK2_RAISES + "Process 2 exit with status code 1.\n")
    assert v.cls == "dead-rank" and named_ranks(v) == [2], v.summary


def test_every_process_reported_names_none(tmp_path):
    """horovod 2097: each of four processes `exit with status code 250.`: no one stands out."""
    text = "".join(f"Process {r} exit with status code 250.\n" for r in (3, 2, 1, 0))
    v = diagnose_paste(tmp_path, "local_0 dict_keys(['0', '1', '3', '2'])\n" + text)
    assert named_ranks(v) == [], v.summary


def test_a_process_horovodrun_terminated_is_no_death_of_its_own(tmp_path):
    v = diagnose_paste(tmp_path, HELLO + "Process 1 exit with status code -15.\n")
    assert named_ranks(v) == [], v.summary
