"""py-spy parser: every real dump (the public corpus and py-spy 0.4.3 captures of a gloo job
stuck in all_reduce), text and --json, --locals, --native, --subprocesses, the errors py-spy
prints instead of a dump, the user frame and the collective a thread is in, garbage and
hostile sizes."""

from __future__ import annotations

import msgspec
import pytest
from support import CORPUS, FIXTURES, assert_linear

from healthcheck.core.errors import ParseError
from healthcheck.parsers import TOOLS, parser_for
from healthcheck.parsers.py_spy import (
    MAX_NAME,
    PySpyDump,
    PySpyFrame,
    collective,
    is_library_file,
    parse_py_spy,
    user_frame,
)

DIRS = {"corpus": CORPUS / "py-spy", "local": FIXTURES / "py-spy"}


def read(name: str) -> str:
    where, _, file = name.partition("/")
    return (DIRS[where] / file).read_text()


def parse(name: str) -> PySpyDump:
    return parse_py_spy(read(name))


# ------------------------------------------------------------ every fixture

# file -> (format, processes, threads, error kind, the first thread's collective, its user frame)
EXPECTED = {
    "corpus/deepspeed-megatron-stuck-broadcast.txt": ("text", 1, 1, None, "broadcast", "_aggregate_total_loss"),
    "corpus/error-failed-to-find-python-version-pid-is-bash-2018.txt": ("text", 0, 0, "no-python", None, None),
    "corpus/error-failed-to-find-python-version-rust-log-info-0.3.14.txt": ("text", 0, 0, "no-python", None, None),
    "corpus/error-failed-to-open-process-reason-printed-twice.txt": ("text", 0, 0, "permission", None, None),
    "corpus/error-operation-not-permitted-os-error-1-rust-log-aarch64.txt": ("text", 0, 0, "permission", None, None),
    "corpus/error-permission-denied-elevated-permissions-kubernetes.txt": ("text", 0, 0, "permission", None, None),
    "corpus/mainthread-active-stuck-copy-to-device-cuda-sync.txt": ("text", 1, 1, None, None, "copy_to_device"),
    "corpus/megatron-deepspeed-dataloader-deadlock-queue-get-during-eval.txt": ("text", 1, 1, None, None, "_next_batch"),
    "corpus/megatron-deepspeed-eval-rank-idle-in-dataloader-while-peers-in-broadcast.txt": (
        "text", 1, 1, None, None, "_next_batch"),
    "corpus/megatron-rank-past-train-step-waiting-peers-short-stack.txt": ("text", 1, 1, None, None, "train"),
    "corpus/multithread-idle-wait.txt": ("text", 1, 2, None, None, "main"),
    "corpus/rank0-idle-dataloader-queue-get-fairseq-others-in-allreduce.txt": ("text", 1, 1, None, None, "__next__"),
    "local/0.4.3-error-bash-wrapper-not-python-backtrace.txt": ("text", 0, 0, "no-python", None, None),
    "local/0.4.3-error-no-such-pid-caused-by-backtrace.txt": ("text", 0, 0, "no-process", None, None),
    "local/0.4.3-gloo-rank0-waiting-in-all_reduce-native.txt": ("text", 1, 2, None, "all_reduce", "train_step"),
    "local/0.4.3-gloo-rank0-waiting-in-all_reduce.json": ("json", 1, 2, None, None, "feeder"),
    "local/0.4.3-gloo-rank0-waiting-in-all_reduce.txt": ("text", 1, 2, None, "all_reduce", "train_step"),
    "local/0.4.3-gloo-rank1-sleeping-before-all_reduce-locals.json": ("json", 1, 2, None, None, "feeder"),
    "local/0.4.3-gloo-rank1-sleeping-before-all_reduce-locals.txt": ("text", 1, 2, None, None, "train_step"),
    "local/0.4.3-gloo-rank1-sleeping-before-all_reduce.json": ("json", 1, 2, None, None, "feeder"),
    # a c10d Work in the user frame's locals is a wait, as the native frame says in the dump beside it
    "local/0.4.3-h100-nccl-rank-blocked-in-work-wait-locals.txt": ("text", 1, 1, None, "wait", "train_step"),
    "local/0.4.3-h100-nccl-rank-blocked-in-work-wait-native.json": ("json", 1, 1, None, "wait", "train_step"),
    "local/0.4.3-h100-nccl-rank-blocked-in-work-wait-native.txt": ("text", 1, 1, None, "wait", "train_step"),
    "local/0.4.3-h100-nccl-rank-blocked-in-work-wait.json": ("json", 1, 1, None, None, "train_step"),
    "local/0.4.3-h100-nccl-rank-blocked-in-work-wait.txt": ("text", 1, 1, None, None, "train_step"),
    "local/0.4.3-torchrun-agent-subprocesses.json": ("json", 1, 2, None, None, None),
    "local/0.4.3-torchrun-agent-subprocesses.txt": ("text", 3, 6, None, None, "<module>"),
}


def test_every_fixture_is_expected_and_the_corpus_is_listed_in_sources():
    found = sorted([f"corpus/{p.name}" for p in DIRS["corpus"].glob("*.txt")]
                   + [f"local/{p.name}" for p in DIRS["local"].iterdir() if p.suffix in (".txt", ".json")])
    assert found == sorted(EXPECTED)
    sources = (CORPUS / "SOURCES.md").read_text()
    assert all(f"`py-spy/{p.name}`" in sources for p in DIRS["corpus"].glob("*.txt"))
    readme = (DIRS["local"] / "README.md").read_text()
    assert all(f"`{p.name}`" in readme for p in DIRS["local"].iterdir() if p.suffix in (".txt", ".json"))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_fixture_parses(name):
    fmt, processes, threads, error, coll, user = EXPECTED[name]
    dump = parse(name)
    first = dump.threads[0] if dump.threads else None
    assert (dump.format, len(dump.processes), len(dump.threads), dump.error and dump.error.kind) == (
        fmt, processes, threads, error)
    assert (first.collective if first else None) == coll
    assert (first.user_frame.name if first and first.user_frame else None) == user
    # the facts survive a JSON round trip (hc parse prints them)
    assert msgspec.json.decode(msgspec.json.encode(dump), type=PySpyDump) == dump


# ------------------------------------------------------------ the captures, value by value


def test_text_dump_of_a_rank_waiting_in_all_reduce():
    dump = parse("local/0.4.3-gloo-rank0-waiting-in-all_reduce.txt")
    (p,) = dump.processes
    assert (p.pid, p.command, p.python_version, p.executable) == (
        22274, "/work/main/.venv/bin/python hang.py", "3.11.7", "/root/.pyenv/versions/3.11.7/bin/python3.11")
    main, feeder = p.threads
    assert p.main_thread is main
    assert (main.id, main.os_thread_id, main.thread_id, main.status, main.name) == (
        "22274", 22274, None, "idle", "MainThread")
    assert (main.active, main.owns_gil) == (False, False)  # a blocked collective is idle
    assert [(f.name, f.file, f.line) for f in main.frames] == [
        ("all_reduce", "torch/distributed/distributed_c10d.py", 3252),
        ("_exception_logger.<locals>.wrapper", "torch/distributed/c10d_logger.py", 83),
        ("train_step", "hang.py", 22),
        ("main", "hang.py", 31),
        ("<module>", "hang.py", 36),
    ]
    assert main.collective == "all_reduce" and main.in_collective
    assert main.user_frame == PySpyFrame(name="train_step", file="hang.py", line=22)
    assert (feeder.name, feeder.collective, feeder.user_frame.name, feeder.user_frame.line) == (
        "feeder", None, "feeder", 16)
    assert [f.library for f in feeder.frames] == [True, True, False, True, True, True]


def test_json_dump_holds_the_same_threads_as_the_text():
    text = parse("local/0.4.3-gloo-rank0-waiting-in-all_reduce.txt")
    json = parse("local/0.4.3-gloo-rank0-waiting-in-all_reduce.json")
    assert json.format == "json" and json.processes[0].pid == 22274
    assert json.processes[0].python_version is None  # --json has no header
    # py-spy prints text threads in reverse of its JSON order
    assert [t.id for t in json.threads] == [t.id for t in reversed(text.threads)]
    for t_json, t_text in zip(json.threads, reversed(text.threads), strict=True):
        assert (t_json.name, t_json.status) == (t_text.name, t_text.status)
        assert [(f.name, f.file, f.line) for f in t_json.frames] == [(f.name, f.file, f.line) for f in t_text.frames]
        assert t_json.collective == t_text.collective
        assert t_json.user_frame.name == t_text.user_frame.name
    main = json.threads[1]
    assert (main.thread_id, main.os_thread_id) == (139675516402560, 22274)
    assert main.frames[0].filename == (
        "/work/main/.venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py")
    assert main.frames[2].filename == "/tmp/pyspy/hang.py"


def test_native_frames_are_flagged_and_skipped_for_the_user_frame():
    main = parse("local/0.4.3-gloo-rank0-waiting-in-all_reduce-native.txt").threads[0]
    natives = [(f.name[:40], f.file) for f in main.frames if f.native]
    assert natives[:4] == [("0x7f08bd0a3f16", "libc.so.6"), ("pthread_cond_wait", "libc.so.6"),
                           ("std::condition_variable::wait", "libstdc++.so.6.0.30"),
                           ("c10d::Work::wait", "libtorch_cpu.so")]
    pybind = main.frames[4]
    assert pybind.native and pybind.file == "libtorch_python.so"  # parentheses inside the name
    assert len(pybind.name) <= MAX_NAME + 40 and pybind.name.startswith("pybind11::cpp_function::initialize<")
    assert main.user_frame.name == "train_step" and main.collective == "all_reduce"
    # without the Python frames, the native c10d frame still tells
    assert collective(tuple(f for f in main.frames if f.native)) == "wait"


def test_an_nccl_wait_shows_only_with_native_frames():
    """work.wait() is C++: the Python frames end at the user's line; --native shows c10d's wait."""
    plain = parse("local/0.4.3-h100-nccl-rank-blocked-in-work-wait.txt").threads[0]
    assert [(f.name, f.line) for f in plain.frames] == [("train_step", 34), ("<module>", 48)]
    assert (plain.status, plain.collective) == ("active", None)  # this sample caught it awake
    assert parse("local/0.4.3-h100-nccl-rank-blocked-in-work-wait.txt").processes[0].python_version == "3.12.3"
    for name in ("local/0.4.3-h100-nccl-rank-blocked-in-work-wait-native.txt",
                 "local/0.4.3-h100-nccl-rank-blocked-in-work-wait-native.json"):
        main = parse(name).threads[0]
        assert [f.native for f in main.frames] == [True, True, True, True, True, False, False, True]
        assert main.frames[2].name == "c10d::ProcessGroupNCCL::WorkNCCL::wait"
        assert main.frames[2].file == "libtorch_cuda.so" and main.collective == "wait"
        assert (main.status, main.user_frame.name, main.user_frame.line) == ("idle", "train_step", 34)
    w1 = parse("local/0.4.3-h100-nccl-rank-blocked-in-work-wait-locals.txt").threads[0].frames[0].locals[2]
    assert (w1.name, w1.arg, w1.repr) == ("w1", False, "<torch._C._distributed_c10d.Work at 0x7f4a2915d4f0>")


def test_locals_in_text_and_json():
    text = parse("local/0.4.3-gloo-rank1-sleeping-before-all_reduce-locals.txt")
    main = text.threads[0]
    assert main.collective is None and main.user_frame.name == "train_step"  # asleep before its all_reduce
    step = main.frames[0]
    assert [(v.name, v.repr, v.arg) for v in step.locals] == [
        ("step", "2", True), ("t", "<Tensor at 0x7f4a847b3bb0>", True)]
    assert [(v.name, v.arg) for v in main.frames[1].locals] == [("q", False), ("t", False), ("step", False)]
    wait = text.threads[1].frames[0]
    assert [(v.name, v.repr, v.arg) for v in wait.locals] == [
        ("self", "<Condition at 0x7f4a84c8da50>", True), ("timeout", "None", True),
        ("waiter", "<_thread.lock at 0x7f4a849e7a40>", False), ("saved_state", "None", False),
        ("gotit", "False", False)]
    json = parse("local/0.4.3-gloo-rank1-sleeping-before-all_reduce-locals.json")
    assert [(v.name, v.repr, v.arg) for v in json.threads[0].frames[0].locals] == [
        (v.name, v.repr, v.arg) for v in wait.locals]


def test_subprocesses_of_the_torchrun_agent():
    dump = parse("local/0.4.3-torchrun-agent-subprocesses.txt")
    agent, w0, w1 = dump.processes
    assert (agent.pid, agent.parent_pid) == (24933, None)
    assert agent.command.endswith("torchrun --standalone --nproc-per-node 2 hang.py")
    assert [(w.pid, w.parent_pid, w.command) for w in (w0, w1)] == [
        (25025, 24933, "/work/main/.venv/bin/python -u hang.py"),
        (25026, 24933, "/work/main/.venv/bin/python -u hang.py")]
    assert w0.main_thread.collective == "all_reduce" and w1.main_thread.collective is None
    assert w1.main_thread.user_frame.line == 21  # the stuck rank, in time.sleep (C code: no frame)
    keepalive = agent.threads[1]
    assert keepalive.name == "RendezvousKeepAliveTimer_0" and keepalive.user_frame is None  # torch all the way


def test_errors_are_facts():
    bash = parse("local/0.4.3-error-bash-wrapper-not-python-backtrace.txt").error
    assert (bash.kind, bash.message, bash.reasons) == (
        "no-python", "Failed to find python version from target process", ())
    gone = parse("local/0.4.3-error-no-such-pid-caused-by-backtrace.txt").error
    assert gone.kind == "no-process" and gone.reasons == ("No such file or directory (os error 2)",)
    twice = parse("corpus/error-failed-to-open-process-reason-printed-twice.txt").error
    assert twice.message == "Failed to open process - check if it is running."
    assert twice.reasons == ("Operation not permitted (os error 1)",)  # printed twice, kept once
    aarch64 = parse("corpus/error-operation-not-permitted-os-error-1-rust-log-aarch64.txt")
    assert aarch64.error.message == "Operation not permitted (os error 1)" and aarch64.error.reasons == ()
    sudo = parse("corpus/error-permission-denied-elevated-permissions-kubernetes.txt").error
    assert sudo.kind == "permission" and sudo.message.startswith("Permission Denied: Try running again")


def test_docker_permission_denied_and_an_error_after_a_dump():
    docker = parse_py_spy("Permission Denied\n\nIt looks like you are running in a docker container. Please make "
                          "sure you started your container with the SYS_PTRACE capability.\n")
    assert docker.error.kind == "permission" and "docker container" in docker.error.reasons[0]
    # --subprocesses: a child that fails ends the run after the parent's dump
    text = read("local/0.4.3-gloo-rank0-waiting-in-all_reduce.txt") + "\n" + "-" * 80 + "\n" + \
        "Error: Failed to find python version from target process\n"
    dump = parse_py_spy(text)
    assert len(dump.threads) == 2 and dump.error.kind == "no-python"


def test_hex_thread_ids_names_and_statuses():
    dump = parse_py_spy('Thread 0x7F6D3C29D740 (active+gil): "MainThread"\n    f (a.py:1)\n'
                        "Thread 0x1 (gil)\n    g (b.py)\nThread 12\n")
    a, b, c = dump.threads
    assert (a.thread_id, a.os_thread_id, a.status, a.active, a.owns_gil) == (
        0x7F6D3C29D740, None, "active+gil", True, True)
    assert (b.name, b.status, b.active, b.owns_gil, b.frames[0].line, b.frames[0].native) == (
        None, "gil", None, True, None, False)
    assert (c.os_thread_id, c.status, c.active, c.frames) == (12, "unknown", None, ())
    symbolicated = parse_py_spy('Thread 1 (idle): "MainThread"\n    _PyEval_EvalFrameDefault (ceval.c:4181)\n'
                                "    <module> (torchrun:8)\n").threads[0]
    assert [(f.native, f.line) for f in symbolicated.frames] == [(True, 4181), (False, 8)]
    assert symbolicated.user_frame.name == "<module>"
    assert dump.processes[0].pid is None  # a fragment without its Process line


def test_colours_are_stripped():
    coloured = ("Process \x1b[1;33m9325\x1b[0m: python hold.py\nPython v\x1b[1m3.11.7\x1b[0m (/usr/bin/python3)\n\n"
                'Thread \x1b[1;33m9325\x1b[0m (idle): "MainThread"\n    \x1b[32mall_reduce\x1b[0m '
                "(\x1b[36mtorch/distributed/distributed_c10d.py\x1b[0m:\x1b[2m3252\x1b[0m)\n")
    dump = parse_py_spy(coloured)
    assert dump.processes[0].pid == 9325 and dump.threads[0].frames[0].line == 3252
    assert dump.threads[0].collective == "all_reduce"


def test_library_files_and_collectives():
    assert all(is_library_file(p) for p in (
        "threading.py", "queue.py", "selectors.py", "concurrent/futures/_base.py", "torch/utils/data/dataloader.py",
        "/usr/lib/python3.11/threading.py", "/x/site-packages/torch/nn/modules/module.py", "multiprocessing/connection.py"))
    assert not any(is_library_file(p) for p in (
        "hang.py", "deepspeed/runtime/pipe/engine.py", "/home/u/queue_utils.py", "mytorch/x.py", ""))
    wait = PySpyFrame(name="wait", file="threading.py", line=306)
    assert collective((wait,)) is None  # threading's wait is no collective
    c10d = PySpyFrame(name="barrier", file="torch/distributed/distributed_c10d.py", line=1)
    assert collective((wait, c10d)) == "barrier" and user_frame((wait, c10d)) is None


def test_json_arrays_one_after_another_and_after_log_lines():
    one = read("local/0.4.3-gloo-rank0-waiting-in-all_reduce.json")
    two = read("local/0.4.3-gloo-rank1-sleeping-before-all_reduce.json")
    dump = parse_py_spy("[2023-09-12T10:23:47Z INFO  py_spy::config] Command line args\n" + one + two)
    assert [p.pid for p in dump.processes] == [22274, 22275]
    compact = parse_py_spy(msgspec.json.encode(msgspec.json.decode(one)).decode())
    assert compact.threads == parse_py_spy(one).threads
    assert parse_py_spy("[]\n").processes == ()


_ONE = '[\n  {\n    "pid": 1,\n    "thread_id": 2,\n    "frames": []\n  }\n]\n'


@pytest.mark.parametrize("text", [_ONE + _ONE[:-4], '[\n{"pid": "x"}\n]\n',
                                  '[\n  {"pid": 1, "thread_id": 2, "frames": [{"name": 3}]}\n]\n'],
                         ids=["cut", "wrong-type", "frame-wrong-type"])
def test_bad_json_is_a_parse_error(text):
    with pytest.raises(ParseError, match="py-spy --json"):
        parse_py_spy(text)


@pytest.mark.parametrize("text", ["complete garbage\n", "x" * 200_000, "Thread foo bar\n", "    f (a.py:1)\n",
                                  ":" * 1000, "Python v3.11\n", "\n\n\n"])
def test_garbage_is_a_short_parse_error(text):
    with pytest.raises(ParseError) as info:
        parse_py_spy(text)
    assert len(str(info.value)) < 400 and "\n" not in str(info.value)


# ------------------------------------------------------------ linear time


def test_frames_cost_linear_time():
    """10x the frames costs ~10x (never against an absolute time: the machine is shared)."""
    head = 'Thread 1 (idle): "MainThread"\n'
    frame = "    _exception_logger.<locals>.wrapper (torch/distributed/c10d_logger.py:83)\n"
    assert_linear(parse_py_spy, head + frame * 20_000, head + frame * 200_000)


@pytest.mark.parametrize("prefix", ["", "Thread ", 'Thread 1 (idle): "', "    ", "    f (", "Process 1: ",
                                    "Python v", "            a: ", "Error: ", "[\n"])
def test_one_long_line_costs_its_length(prefix):
    head = 'Thread 1 (idle): "MainThread"\n    f (a.py:1)\n'
    for filler in ("a ", " (", ":1", '"'):
        assert_linear(parse_py_spy, head + prefix + filler * 50_000 + "x\n",
                      head + prefix + filler * 500_000 + "x\n", what=(prefix, filler))


def test_json_costs_linear_time():
    one = read("local/0.4.3-gloo-rank0-waiting-in-all_reduce.json")
    assert_linear(parse_py_spy, one * 200, one * 2000)


def test_the_proposed_tools_entry(monkeypatch):
    """The TOOLS line proposed for `hc parse py-spy` resolves (empty input refused)."""
    monkeypatch.setitem(TOOLS, "py-spy", ("healthcheck.parsers.py_spy", "parse_py_spy",
                                          "py-spy dump (text, --json, --locals, --native, errors)"))
    assert parser_for("py-spy")(read("local/0.4.3-gloo-rank0-waiting-in-all_reduce.json")).format == "json"
    with pytest.raises(ParseError, match="empty input"):
        parser_for("py-spy")(" \n")
