"""Round 25 of issue 19's rules (branch i19-r25), on the mechanisms field-17 missed: torchrun
boxes where every worker died of one signal in one second (a cause common to the host, no
rank stands out), and gloo's full-mesh connect failing while a process group is set up (an
init failure naming no rank). Texts are built here in the shapes the tools' sources print
(torch/distributed/elastic/multiprocessing/errors' box, ProcessGroupGloo's glog line)."""

from __future__ import annotations

from support import diagnose_paste, named_ranks

# ---------------------------------------------------------------- a common death in torchrun's box

_BAR = "=" * 54 + "\n"
_RULE = "-" * 54 + "\n"


def _entry(index: int, rank: int, time: str, exitcode: int, pid: int, host: str = "gpu07") -> str:
    signal = {-7: "SIGBUS", -11: "SIGSEGV", -9: "SIGKILL", -15: "SIGTERM"}.get(exitcode)
    trace = (f"Signal {-exitcode} ({signal}) received by PID {pid}" if signal
             else "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html")
    return (f"[{index}]:\n  time      : {time}\n  host      : {host}\n  rank      : {rank} (local_rank: {rank})\n"
            f"  exitcode  : {exitcode} (pid: {pid})\n  error_file: <N/A>\n  traceback : {trace}\n")


def _box(root: str, others: list[str]) -> str:
    """torchrun's ChildFailedError box: the Root Cause and the other failures, as printed."""
    return ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n" + _BAR
            + "train.py FAILED\n" + _RULE + "Failures:\n" + "".join(others) + _RULE
            + "Root Cause (first observed failure):\n" + root + _BAR)


def test_every_worker_dead_of_one_signal_in_one_second_names_none(tmp_path):
    t = "2025-03-02_11:20:07"
    v = diagnose_paste(tmp_path, _box(_entry(0, 0, t, -7, 5100), [_entry(1, 1, t, -7, 5101), _entry(2, 2, t, -7, 5102),
                                                            _entry(3, 3, t, -7, 5103)]))
    assert v.cls == "unknown" and named_ranks(v) == [], v.summary
    assert "SIGBUS" in v.summary and "gpu07" in v.summary and "same second" in v.summary, v.summary


def test_world_of_two_both_segfaulted_in_one_second_names_none(tmp_path):
    t = "2025-03-02_11:20:07"
    v = diagnose_paste(tmp_path, _box(_entry(0, 1, t, -11, 5101), [_entry(1, 0, t, -11, 5100)]))
    assert v.cls == "unknown" and named_ranks(v) == [], v.summary
    assert "SIGSEGV" in v.summary, v.summary


def test_one_hosts_workers_dead_together_beside_anothers_stopped_names_none(tmp_path):
    t = "2025-03-02_11:20:07"
    a = _box(_entry(0, 0, t, -7, 5100), [_entry(1, 1, t, -7, 5101)])
    b = _box(_entry(0, 2, "2025-03-02_11:20:12", -15, 6100, "gpu08"),
             [_entry(1, 3, "2025-03-02_11:20:12", -15, 6101, "gpu08")])
    v = diagnose_paste(tmp_path, a + b)
    assert v.cls == "unknown" and named_ranks(v) == [], v.summary
    assert "gpu07" in v.summary and "SIGBUS" in v.summary, v.summary


def test_one_signal_and_one_exit_code_names_the_signalled(tmp_path):
    t = "2025-03-02_11:20:07"
    v = diagnose_paste(tmp_path, _box(_entry(0, 0, t, -7, 5100), [_entry(1, 1, t, 1, 5101)]))
    assert v.cls == "dead-rank" and named_ranks(v) == [0], v.summary


def test_two_signals_in_one_second_are_no_common_death(tmp_path):
    t = "2025-03-02_11:20:07"
    v = diagnose_paste(tmp_path, _box(_entry(0, 0, t, -7, 5100), [_entry(1, 1, t, -11, 5101)]))
    assert v.cls == "dead-rank" and 0 in named_ranks(v), v.summary


def test_one_signal_a_second_apart_names_the_first_seen(tmp_path):
    # the agent finds rank 1 dead at its first look; rank 0 ended a second later, after it
    v = diagnose_paste(tmp_path, _box(_entry(0, 1, "2025-03-02_11:20:07", -7, 5101),
                              [_entry(1, 0, "2025-03-02_11:20:08", -7, 5100)]))
    assert v.cls == "dead-rank" and named_ranks(v) == [1], v.summary


def test_several_first_seen_of_four_are_named_not_the_later(tmp_path):
    t, later = "2025-03-02_11:20:07", "2025-03-02_11:20:09"
    v = diagnose_paste(tmp_path, _box(_entry(0, 2, t, -11, 5102), [_entry(1, 0, later, -11, 5100),
                                                             _entry(2, 1, later, -6, 5101), _entry(3, 3, t, -9, 5103)]))
    assert v.cls == "dead-rank" and named_ranks(v) == [2, 3], v.summary


def test_two_boxes_seconds_apart_are_not_ordered_here(tmp_path):
    # each node's agent on its own clock: across boxes the earliest is firstchild.py's, never this rule's
    a = _box(_entry(0, 0, "2025-03-02_11:20:07", -7, 5100), [_entry(1, 1, "2025-03-02_11:20:07", -7, 5101)])
    b = _box(_entry(0, 2, "2025-03-02_11:20:09", -11, 6100, "gpu08"),
             [_entry(1, 3, "2025-03-02_11:20:09", -7, 6101, "gpu08")])
    v = diagnose_paste(tmp_path, a + b)
    assert v.cls == "dead-rank" and {0, 1} <= set(named_ranks(v)), v.summary


def test_signal_beside_the_agents_sigterms_is_no_common_death(tmp_path):
    t = "2025-03-02_11:20:07"
    v = diagnose_paste(tmp_path, _box(_entry(0, 2, t, -7, 5102), [_entry(1, 0, t, -15, 5100), _entry(2, 1, t, -15, 5101),
                                                            _entry(3, 3, t, -7, 5103)]))
    assert v.cls == "dead-rank" and named_ranks(v) == [2, 3], v.summary


def test_a_rank_that_raised_first_is_still_named(tmp_path):
    t = "2025-03-02_11:20:07"
    own = ("[rank1]: Traceback (most recent call last):\n"
           '[rank1]:   File "/job/train.py", line 40, in <module>\n'
           "[rank1]:     step(batch)\n"
           '[rank1]:   File "/job/train.py", line 22, in step\n'
           "[rank1]:     raise ValueError('bad batch')\n"
           "[rank1]: ValueError: bad batch\n")
    v = diagnose_paste(tmp_path, own + _box(_entry(0, 0, t, -7, 5100), [_entry(1, 1, t, -7, 5101)]))
    assert v.cls == "dead-rank" and 1 in named_ranks(v), v.summary


# ---------------------------------------------------------------- gloo's full mesh never connected

_GLOO_PATH = "/usr/local/lib/python3.10/dist-packages/torch/distributed/distributed_c10d.py"


def _setup_traceback(label: str, error: str) -> str:
    """init_process_group's traceback down to ProcessGroupGloo's constructor, as Python prints it."""
    lines = ["Traceback (most recent call last):",
             '  File "/srv/app/worker.py", line 31, in main',
             '    dist.init_process_group("gloo", rank=rank, world_size=world)',
             f'  File "{_GLOO_PATH}", line 1527, in init_process_group',
             "    default_pg, _ = _new_process_group_helper(",
             f'  File "{_GLOO_PATH}", line 1744, in _new_process_group_helper',
             "    backend_class = ProcessGroupGloo(",
             error]
    return "".join(f"{label}{line}\n" for line in lines)


def test_glog_connectfullmesh_line_in_backticks_is_init_failure_naming_none(tmp_path):
    text = ("The workers stop at start-up with:\n"
            "`(Worker pid=4411, ip=10.2.0.7) [rank3]:[E1104 10:02:11.100200300 ProcessGroupGloo.cpp:145] Gloo "
            "connectFullMesh failed with [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:144] no error`\n")
    v = diagnose_paste(tmp_path, text)
    assert v.cls == "init-failure" and named_ranks(v) == [], v.summary


def test_spawned_process_connect_timeout_is_init_failure_naming_none(tmp_path):
    text = ("Process SpawnProcess-2:\n"
            + _setup_traceback("", "RuntimeError: Gloo connectFullMesh failed with "
                                   "[../third_party/gloo/gloo/transport/tcp/pair.h:301] Connect timeout [none]"))
    v = diagnose_paste(tmp_path, text)
    assert v.cls == "init-failure" and named_ranks(v) == [], v.summary


def test_labelled_pair_connection_refused_in_setup_names_no_rank(tmp_path):
    error = "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:799] connect [127.0.1.1]:30230: " \
            "Connection refused"
    v = diagnose_paste(tmp_path, _setup_traceback("[rank2]: ", error))
    assert v.cls == "init-failure" and named_ranks(v) == [], v.summary
    assert "127.0.1.1" in " ".join(e.text for f in v.findings for e in f.lines)


def test_a_rank_dead_in_its_own_code_beside_unconnected_meshes_is_named(tmp_path):
    own = ("[rank1]: Traceback (most recent call last):\n"
           '[rank1]:   File "/srv/app/worker.py", line 18, in main\n'
           "[rank1]:     cfg = load_config(path)\n"
           '[rank1]:   File "/srv/app/config.py", line 9, in load_config\n'
           "[rank1]:     raise FileNotFoundError(path)\n"
           "[rank1]: FileNotFoundError: /data/cfg.yaml\n")
    mesh = _setup_traceback("[rank0]: ", "RuntimeError: Gloo connectFullMesh failed with "
                                         "[../third_party/gloo/gloo/transport/tcp/pair.h:301] Connect timeout [none]")
    v = diagnose_paste(tmp_path, own + mesh)
    assert v.cls == "dead-rank" and named_ranks(v) == [1], v.summary
