"""The one line layer every text parser reads through (parsers/lines.py).

Every sample here is a REAL line from tests/fixtures (each folder's SOURCES.md says where
it came from), or a real line put through a transformation that says what it adds (a
launcher's label, CRLF, colour codes, a ` \\` suffix): the shapes a paste takes on the way
to an operator, built from real output, never a tool's output written by hand.
"""

from __future__ import annotations

import time

import msgspec
import pytest
from support import CORPUS, FIXTURES, best_time, run_hc_inproc

from healthcheck.core.launcher_labels import MPIRUN_TAG, SRUN_LABEL
from healthcheck.parsers.lines import (
    SAMPLE_MAX,
    Cursor,
    Handler,
    Line,
    UnrecognizedLines,
    dispatch,
    drop_continuation,
    gutter_numbered,
    is_prompt,
    quoted_paste,
    quoted_reply,
    read_lines,
    redrawn,
    strip_ansi,
    torn_pieces,
)

NCCL_TESTS = FIXTURES / "nccl-tests" / "all_reduce-h100-1gpu-2.19.6-nccl-2.28.9.txt"


def _real(path, start: str) -> str:
    """The first line of a real fixture that starts with `start`."""
    return next(line for line in path.read_text().split("\n") if line.startswith(start))


ROW = _real(NCCL_TESTS, "   536870912")  # a real nccl-tests row
WATCHDOG = _real(CORPUS / "torch-watchdog" / "srun-label-prefixed-allreduce-seq52-watchdog-terminated-frames.txt",
                 "11: [rank11]:[E617")
RAY = _real(CORPUS / "torch-watchdog" / "ray-dedup-repeated-across-cluster-allreduce-seq1-pg0-default-pg.txt",
            "(WorkerDict pid=3943529) [rank0]:[E816")
MPI_NCCL = _real(CORPUS / "nccl-debug" / "nccl-2.27-preview-mpirun-tag-output-10-roce-nics-init-start.txt",
                 "[1,2]<stdout>:")
DMESG = _real(CORPUS / "xid-dmesg" / "xid79-with-nvswitch-sxid-20034.txt", "[6781741.548779] NVRM: Xid")


def one(text: str, **kw) -> Line:
    lines = list(read_lines(text, **kw))
    assert len(lines) == 1
    return lines[0]


# ---------------------------------------------------------------- prefixes, from real lines


def test_real_srun_label_and_torch_rank_and_c10_glog_are_taken_off():
    line = one(WATCHDOG)
    assert line.task == 11 and line.rank == 11
    assert line.level == "E" and line.source == "ProcessGroupNCCL.cpp:681" and line.stamp_kind == "glog"
    assert line.text.startswith("[Rank 11] Some NCCL operations have failed")
    assert line.labels == WATCHDOG[: len(WATCHDOG) - len(line.text)] and line.raw == WATCHDOG


def test_c10_glog_stamp_of_a_one_digit_month_keeps_its_month_and_day():
    """c10's logger prints the date as `month * 100 + day`, unpadded: `E108` is January 8
    (field/issues-10's torch 2.4 socket.cpp line), read as glog's `0108`; a two-digit
    month (`E1016`, the corpus) is as printed."""
    january = (FIXTURES / "field/issues-10/torch-log/c10d-socket-cpp-957-client-timeout-900s-then-torchrun-traceback.txt"
               ).read_text().splitlines()[0]
    assert january.startswith("[E108 20:04:34.467642512 socket.cpp:957] ")
    line = one(january)
    assert (line.stamp, line.stamp_kind, line.source) == ("0108 20:04:34.467642512", "glog", "socket.cpp:957")
    assert line.text.startswith("[c10d] The client socket has timed out")
    assert one(WATCHDOG).stamp.startswith("0617 ")  # `[E617`: June 17
    october = _real(CORPUS / "torch-watchdog" / "pg3-allgather-base-seq9141-timeout-at-nccl-work-report.txt",
                    "[rank1]:[E1016")
    assert one(october).stamp == "1016 03:31:38.928019586"  # two-digit months as printed


def test_real_ray_worker_prefix_is_the_runner():
    line = one(RAY)
    assert line.runner == "(WorkerDict pid=3943529)" and line.rank == 0
    assert line.text.startswith("[Rank 0] Some NCCL operations")


def test_real_mpirun_tag_names_the_rank_and_its_stream():
    line = one(MPI_NCCL)
    assert line.task == 2 and line.stream == "stdout"
    assert line.text.startswith("aiplatform-wlf2-ge78-70:102986:")


@pytest.mark.parametrize("head", ["", "Fri Sep 25 16:52:57 2020"])
def test_horovodruns_tag_without_a_job_id_names_the_rank(head):
    """horovodrun's own launcher tags each line `[rank]<stream>:` (Open MPI's tag without
    the job id; `time.asctime()` before it with --prefix-timestamp): field-17's paste of a
    rank-2 traceback was read as no log at all before."""
    lines = list(read_lines(f"{head}[2]<stderr>:RuntimeError: worker absolutely refuses to be rank 2\n"))
    tagged = [line for line in lines if line.task is not None]  # the asctime head is a piece of its own
    assert len(tagged) == 1 and tagged[0].task == 2 and tagged[0].stream == "stderr"
    assert tagged[0].text == "RuntimeError: worker absolutely refuses to be rank 2"
    assert one("[0] NCCL INFO Bootstrap : Using eth0").task is None  # NCCL's [cudaDev] is no tag


def test_real_dmesg_uptime_is_a_stamp():
    line = one(DMESG)
    assert line.stamp == "6781741.548779" and line.stamp_kind == "dmesg"
    assert line.text.startswith("NVRM: Xid (PCI:0000:91:00): 79")


MESSAGE = DMESG.split("] ", 1)[1]  # the real Xid message, without its stamp


@pytest.mark.parametrize(("prefix", "fields"), [
    # journalctl -k (short): "Mon DD hh:mm:ss host kernel: "
    ("Nov 22 13:00:01 gpu017 kernel: ", {"stamp": "Nov 22 13:00:01", "stamp_kind": "journal", "host": "gpu017"}),
    # dmesg -T
    ("[Sun Feb 23 16:24:18 2025] ", {"stamp": "Sun Feb 23 16:24:18 2025", "stamp_kind": "dmesg-T"}),
    # dmesg --time-format iso; journalctl -o short-iso
    ("2024-11-15T12:02:03,470068+00:00 ", {"stamp": "2024-11-15T12:02:03,470068+00:00", "stamp_kind": "iso"}),
    ("2024-01-22T11:22:33+0000 gpu017 kernel: ", {"stamp": "2024-01-22T11:22:33+0000", "host": "gpu017"}),
])
def test_each_kernel_timestamp_is_taken_off_a_real_message(prefix, fields):
    line = one(prefix + MESSAGE)
    assert line.text == MESSAGE
    for name, value in fields.items():
        assert getattr(line, name) == value


@pytest.mark.parametrize(("prefix", "fields"), [
    ("3: ", {"task": 3}),  # srun --label
    ("  3: ", {"task": 3}),  # srun --label in a job of 100 tasks: padded
    ("[1,3]<stderr>:", {"task": 3, "stream": "stderr"}),  # mpirun --tag-output
    ("[default3]:", {"role": "default", "local_rank": 3}),  # torchrun --tee
    ("[rank3]:", {"rank": 3}),  # torch >= 2.2
    ("(RayTrainWorker pid=1234, ip=10.0.0.5) ", {"runner": "(RayTrainWorker pid=1234, ip=10.0.0.5)"}),
    ("(pid=1234) ", {"runner": "(pid=1234)"}),
    ("(WorkerDict pid=3943529) 3: ", {"runner": "(WorkerDict pid=3943529)", "task": 3}),
    ("E0318 17:25:16.769000 2606 torch/distributed/elastic/agent/server/api.py:833] ",
     {"level": "E", "stamp": "0318 17:25:16.769000", "source": "torch/distributed/elastic/agent/server/api.py:833"}),
])
def test_each_launcher_and_runner_prefix_is_taken_off_a_real_row(prefix, fields):
    line = one(prefix + ROW)
    # torch's `[rankN]: ` and torchrun's `[default3]:` may take one blank of their own
    assert line.text.lstrip() == ROW.lstrip() and line.text.split() == ROW.split()
    assert line.labels.rstrip() == prefix.rstrip()
    for name, value in fields.items():
        assert getattr(line, name) == value


def test_a_row_or_a_clock_time_is_no_srun_label():
    assert one(ROW).labels == "" and one(ROW).task is None
    assert SRUN_LABEL.match("12:34:56 up 3 days") is None
    assert one("17:25:16 hello").task is None


def test_timestamps_can_be_left_for_a_parser_that_reads_its_own():
    line = one("3: [2026-04-28 14:14:48] " + MPI_NCCL.split(":", 1)[1], stamps=False)
    assert line.task == 3 and line.text.startswith("[2026-04-28 14:14:48] aiplatform")


# ---------------------------------------------------------------- shapes


def test_crlf_and_a_redrawn_line():
    assert one(ROW + "\r\n").text == ROW
    assert one(ROW + "\r\n").repairs == ("crlf",)
    assert redrawn("progress 10%\rprogress 20%\r" + ROW) == ROW
    assert redrawn("a\r") == "a"  # a CR at the very end is no redraw of nothing
    # a file whose lines end in CR only (a classic Mac editor) is still lines
    assert [x.text for x in read_lines(ROW + "\r" + ROW + "\r")] == [ROW, ROW]


def test_ansi_colour_codes_whole_half_cut_and_without_their_escape():
    red, reset = "\x1b[0;31m", "\x1b[0m"
    assert strip_ansi(red + ROW + reset) == ROW
    assert strip_ansi("[0;31m" + ROW + "[0m") == ROW  # the ESC lost in a paste
    assert strip_ansi(ROW + "\x1b[0;3") == ROW  # cut at the line's end
    assert strip_ansi(ROW + "\x1b") == ROW
    assert strip_ansi(MPI_NCCL) == MPI_NCCL  # `[0]mlx5_0` is no colour code
    assert one(red + "3: " + ROW + reset).task == 3


def test_a_quoted_paste_loses_its_continuations_and_nothing_else():
    text = "\n".join(line + " \\" for line in NCCL_TESTS.read_text().split("\n")[:12])
    assert quoted_paste(text.split("\n"))
    assert [x.text for x in read_lines(text)] == NCCL_TESTS.read_text().split("\n")[:12]
    # one line that ends in a backslash is kept as it is
    lone = NCCL_TESTS.read_text().split("\n")[:12]
    lone[3] += " \\"
    assert not quoted_paste(lone)
    assert drop_continuation("a \\") == "a" and drop_continuation("a") == "a"
    assert drop_continuation("a   \\ ") == "a  "  # the column's own blanks kept


def test_a_markdown_quoted_reply_loses_its_quotes_and_a_lone_prompt_keeps_its():
    clean = NCCL_TESTS.read_text().split("\n")[:12]
    quoted = "\n".join(("> > " if i % 2 else "> ") + line for i, line in enumerate(clean))
    assert [x.text for x in read_lines(quoted)] == clean
    assert all("quote" in x.repairs for x in read_lines(quoted))
    assert one(">>> import torch").noise == "prompt"  # one `>` line is no quoted reply


# real: an NCCL 2.4.8 log pasted out of a viewer that showed its line numbers bare (`451 host:...`)
GUTTERED = FIXTURES / "field" / "issues-17" / "nccl-log" / (
    "viewer-line-numbers-without-brackets-nccl-2.4.8-socket-two-nodes-v100.txt")


def _guttered(text: str, first: int = 451) -> str:
    """Each line behind a viewer's bare `N ` counting up from `first` (GUTTERED's shape; a
    transformation), a blank line its bare number."""
    return "\n".join(f"{first + i} {x}".rstrip(" ") for i, x in enumerate(text.split("\n")))


def test_a_viewers_bare_line_numbers_come_off_every_line():
    from healthcheck.parsers.nccl_log import parse_nccl_log
    from healthcheck.parsers.nvidia_smi_table import parse_nvidia_smi_table

    text = GUTTERED.read_text()
    assert gutter_numbered(text.split("\n"))
    lines = list(read_lines(text))
    assert all("line-number" in x.repairs and not x.text[:1].isdigit() for x in lines)
    assert lines[4].text == "NCCL version 2.4.8+cuda10.0"  # was: `455 NCCL version ...`, no version read
    log = parse_nccl_log(text)
    assert [v for v in log.versions if "2.4.8" in v] and {p.host for p in log.processes} == {"tj1-asr-train-v100-11"}
    # a line cut out of the paste (a number skipped) leaves it a gutter
    cut = text.split("\n")
    del cut[5]
    assert gutter_numbered(cut)
    # the GPU tools read through pasted_lines: a real nvidia-smi table behind the same gutter
    table = (CORPUS / "nvidia-smi" / "rtx-err-fan-525.125.06.txt").read_text()
    assert parse_nvidia_smi_table(_guttered(table, 1)) == parse_nvidia_smi_table(table)


def test_a_table_of_numbers_is_no_gutter():
    # real tables whose rows start with a number: nccl-tests' sizes, perftest's, as printed and
    # with their padding taken off (a transformation): they double, never count up one by one
    from healthcheck.parsers.nccl_tests import parse_nccl_tests

    perftest = FIXTURES / "ib_write_bw" / "client-bidir-4qp-all-sizes-ainic-800g.txt"
    for path in (NCCL_TESTS, perftest, CORPUS / "nccl-tests" / "all_reduce-h100-a3mega-2node-16rank.txt"):
        lines = path.read_text().split("\n")
        rows = [x for x in lines if x.strip()[:1].isdigit()]
        assert len(rows) >= 4, path
        for shown in (lines, [x.lstrip() for x in lines], [x.lstrip() for x in rows]):
            assert not gutter_numbered(shown), path
    flat = "\n".join(x.lstrip() for x in NCCL_TESTS.read_text().split("\n"))
    assert all("line-number" not in x.repairs for x in read_lines(flat))
    assert parse_nccl_tests(flat).samples == parse_nccl_tests(NCCL_TESTS.read_text()).samples
    # numbers that start the lines but do not count up, a column right-aligned, the bracketed rule's
    assert not gutter_numbered(["4521 a", "4523 b", "4530 c", "4531 d", "4540 e"])
    assert not gutter_numbered(["  451 a", "  452 b", "  453 c", "  454 d", "  455 e"])
    assert not gutter_numbered(["[451] a", "[452] b", "[453] c", "[454] d"])


def test_a_quoted_block_with_prose_around_it_is_a_quoted_reply_and_one_quoted_line_is_not():
    # real nccl-tests lines quoted (`> `, a transformation) with the writer's prose before and
    # after them: fewer than most of the text's lines, most of the block's: the quote is the reply's
    clean = NCCL_TESTS.read_text().split("\n")[:6]
    before, after = ["Here is what I get when I run it on the node:", "$ ./build/all_reduce_perf -g 1"], ["Any idea?"]
    block = [*before, *("> " + line for line in clean), *after]
    assert quoted_reply(block) and quoted_reply(block[:4] + after)  # 6 of 9 non-blank lines quoted; 2 of 5
    assert [x.text for x in read_lines("\n".join(block)) if not x.noise][1:-1] == clean
    # two quoted blocks with a line of prose between them are one quote
    assert quoted_reply([*before, *("> " + line for line in clean[:3]), "and then:", *("> " + x for x in clean[3:])])
    # one line of the text's own that starts with `> ` (a shell's continuation prompt), alone
    # among the real lines or with prose around it, keeps its `>`: no block
    lone = [*before, *clean[:3], "> done", *clean[3:], *after]
    assert not quoted_reply(lone) and not quoted_reply([*before, "> done", *after])
    assert "> done" in [x.raw for x in read_lines("\n".join(lone))]
    assert all("quote" not in x.repairs for x in read_lines("\n".join(lone)))
    # `>` lines scattered through the text (far apart, no block) stay the text's
    scattered = ["> " + clean[0], *clean[1:5], "> " + clean[5]]
    assert not quoted_reply(scattered)


def test_tabs_are_kept_inside_fields():
    tabbed = "\t".join(ROW.split())
    assert one(tabbed).text == tabbed and one(tabbed).text.split() == ROW.split()


def test_two_processes_torn_into_one_line_stay_two_fragments():
    first = MPI_NCCL[:60]
    torn = first + MPI_NCCL.replace("[1,2]", "[1,5]", 1)
    pieces = list(read_lines(torn))
    assert [p.task for p in pieces] == [2, 5]
    assert pieces[0].text == first[len("[1,2]<stdout>:"):]  # the cut fragment, never glued to the other
    assert pieces[1].text == MPI_NCCL[len("[1,2]<stdout>:"):]
    assert all(p.number == 1 and "torn" in p.repairs for p in pieces)
    # a torch log line glued to a progress bar of the same process keeps its srun label
    glued = "11: Epoch 3: 45%|####5     | 450/1000 " + WATCHDOG[len("11: "):]
    bar, log = read_lines(glued)
    assert bar.task == log.task == 11 and log.rank == 11 and log.text.startswith("[Rank 11]")
    assert torn_pieces(ROW) == [ROW]


def test_a_shell_prompt_before_the_output_is_noise():
    # the commands are the ones the fixtures' SOURCES.md name; the prompts are shapes
    for prompt in ("$ ./build/all_reduce_perf -b 8 -e 1G -f 4 -g 1",
                   "user@gpu01:~/nccl-tests$ ./build/all_reduce_perf -b 8",
                   "[user@gpu01 nccl-tests]$ mpirun -np 16 ./build/all_reduce_perf",
                   "(base) user@gpu01:~$ srun -l python train.py",
                   "+ srun --label python train.py", ">>> import torch"):
        assert is_prompt(prompt), prompt
        assert one(prompt).noise == "prompt"
    for output in (ROW, "# nThread 1 nGpus 1", WATCHDOG, MPI_NCCL, DMESG):
        assert one(output).noise == ""


def test_a_megabyte_line_is_cut_and_costs_its_length():
    small, large = "a" * 100_000, "a" * 1_000_000
    assert one(large).repairs == ("cut",) and len(one(large).raw) == 65_536
    bound = 50 * (best_time(lambda t: list(read_lines(t)), small) * 10) + 0.15
    assert best_time(lambda t: list(read_lines(t)), "\n".join([large] * 10), enough=bound) <= bound


@pytest.mark.parametrize("filler", ["[", "(", " ", "0", "[1,", "\x1b[", "[rank", "Nov 22 ", "E0318 ", "[rank1]:[E",
                                    "[1,0]<stdout>:x", "user@h:~$ ", "\\",
                                    # held-out-8: auto-links, runner labels, viewer line numbers, torn bars
                                    "[a](", "[a](http://a/)", "](", "x [stderr] ", "[1] ", "s/it][rank1]:",
                                    # a viewer's bare gutter (issue 20, held-out-17)
                                    "451 ", "1\n", "9"])
def test_hostile_runs_cost_their_length(filler):
    def read(n: int) -> float:
        """Seconds of CPU time (a busy machine stretches the wall clock, not this)."""
        text = filler * (n // len(filler))
        start = time.process_time()
        list(read_lines(text, max_line=10**7))
        return time.process_time() - start

    read(1000)
    bound = 50 * read(100_000) + 0.15
    # measured again where over the bound (a page fault, a frequency step): a quadratic cost is
    # over it every time
    assert any(read(1_000_000) <= bound for _ in range(2))


def test_garbage_reads_as_lines_and_never_raises():
    garbage = bytes(range(256)).decode("latin-1") * 50 + "\x00\x1b[\r\r\n\\\n" * 100
    lines = list(read_lines(garbage))
    assert lines and all(isinstance(x.text, str) for x in lines)


# ---------------------------------------------------------------- handlers, unrecognized, wraps


def test_dispatch_names_the_handler_and_unrecognized_keeps_a_sample():
    seen: list[str] = []
    handlers = (Handler("row", lambda t: t.lstrip()[:1].isdigit(), lambda s, line: s.append(line.text) or True),)
    unknown = UnrecognizedLines()
    for line in read_lines(NCCL_TESTS.read_text()):
        if dispatch(handlers, seen, line) is None:
            unknown.note(line)
    frozen = unknown.freeze()
    assert len(seen) == 14 and frozen.count > 10
    assert len(frozen.sample) <= SAMPLE_MAX and frozen.sample[0].line == 1
    assert frozen.sample[0].text.startswith("# nccl-tests version")


def test_a_hard_wrap_is_joined_only_when_a_handler_asks():
    path = CORPUS / "torch-watchdog" / "terminal-hard-wrapped-broadcast-seq4-8ranks.txt"
    lines = list(read_lines(path.read_text()))
    assert "ran for" not in lines[0].text  # the layer joins nothing by itself
    cursor = Cursor(lines)
    first = next(iter(cursor))
    joined = cursor.wrapped(first, lambda line: line.rank is not None)
    assert "OpType=BROADCAST" in joined and joined.endswith("before timing out.")
    assert next(iter(cursor)).rank == 3  # the continuation was consumed, the next record is next


def test_the_launcher_grammar_is_the_one_runners_read():
    assert MPIRUN_TAG.match("[1,2]<stddiag>:x").group(1) == "2"


# ---------------------------------------------------------------- parsers read through the layer
# Each shape is a transformation of a real fixture; the parser must surface the same facts
# from it as from the clean file, and no fact the clean file does not hold.

A3MEGA = FIXTURES / "nccl-tests" / "all_reduce-h100-a3mega-2node-16rank.txt"


def _each_line(text: str, change) -> str:
    return "\n".join(change(i, line) for i, line in enumerate(text.split("\n")))


def _code_block(text: str, before: str = "The output:") -> str:
    """`text` pasted into markdown's indented code block (4 blanks before every line, its blank
    lines left blank) after `before` and a blank line: the shape field/issues-12's ibstatus
    shows (`before` a sentence there, or a prompt inside the block)."""
    return before + "\n\n" + "\n".join("    " + x if x.strip() else "" for x in text.split("\n"))


def _prompt_code_block(text: str) -> str:
    """`_code_block` after a prompt instead of a sentence (no line of the tool's to count unread),
    another prompt and the output indented together in the block."""
    return _code_block("[root@gpu01 ~]# the-tool --its-options\n" + text, before="[root@login ~]# ssh gpu01")


SHAPES = {
    "srun label": lambda t: _each_line(t, lambda i, x: f"{i % 16:>2}: {x}"),
    "mpirun tag": lambda t: _each_line(t, lambda i, x: f"[1,{i % 16}]<stdout>:{x}"),
    "crlf": lambda t: t.replace("\n", "\r\n"),
    "ansi colours": lambda t: _each_line(t, lambda i, x: f"\x1b[0;3{i % 8}m{x}\x1b[0m"),
    "colours without their escape": lambda t: _each_line(t, lambda i, x: f"[1;32m{x}[0m"),
    "quoted paste": lambda t: _each_line(t, lambda i, x: x + " \\"),
    "ray worker": lambda t: _each_line(t, lambda i, x: f"(RayTrainWorker pid={1000 + i % 4}, ip=10.0.0.{i % 4}) {x}"),
    "journal stamps": lambda t: _each_line(t, lambda i, x: f"Nov 22 13:00:{i % 60:02} {x}"),
    "tabs": lambda t: _each_line(t, lambda i, x: "\t".join(x.split()) if x[:1] == " " else x),
    "prompt first": lambda t: "user@gpu01:~$ mpirun -np 16 ./build/all_reduce_perf -b 8 -e 8G -f 2\n" + t,
    "labels, colours and crlf": lambda t: _each_line(t, lambda i, x: f"\x1b[32m{i % 16}: {x}\x1b[0m\r"),
    "markdown reply": lambda t: _each_line(t, lambda i, x: f"> {x}"),
    "markdown reply quoted again, labelled": lambda t: _each_line(t, lambda i, x: f"> > [1,{i % 16}]<stdout>:{x}"),
    # a grep over two nodes' output files (the `FILE:` field/issues-3's grep-r file shows),
    # each line also srun-labelled; kubectl logs --prefix; tail -f's header before each file
    "grep over files, labelled": lambda t: _each_line(t, lambda i, x: f"out/slurm-{i % 2}.out:{i % 16}: {x}"),
    "kubectl prefix": lambda t: _each_line(t, lambda i, x: f"[pod/nccl-worker-{i % 2}/nccl] {x}"),
    # a container runtime's stamp (kubectl logs --timestamps: the shape field/issues-6's
    # Kubernetes NCCL log shows, its nanoseconds counted up)
    "kubectl timestamps": lambda t: _each_line(t, lambda i, x: f"2025-11-24T03:20:21.{1125857 + i:09d}Z {x}"),
    "tail headers": lambda t: "==> slurm-7.out <==\n" + t.replace("\n#  Rank  1", "\n\n==> b.log <==\n#  Rank  1", 1),
    # markdown's indented code block after a sentence (field/issues-12's ibstatus), in a list (8)
    "indented code block": _code_block,
    "code block in a list": lambda t: _code_block(_each_line(t, lambda i, x: f"    {x}" if x.strip() else ""),
                                                  before="1. ran it:"),
    # a viewer's gutter of bare line numbers (field/issues-17's NCCL 2.4.8 paste)
    "viewer's bare line numbers": lambda t: _guttered(t),
}


def _facts(run) -> dict:
    return {
        "samples": [(s.size_bytes, s.placement, s.busbw_gbytes_per_s, s.wrong) for s in run.samples],
        "ranks": [(r.rank, r.host, r.device, r.bus_id) for r in run.ranks],
        "rank_count": run.rank_count, "avg": run.avg_busbw_gbytes_per_s, "completed": run.completed,
        "oob": run.out_of_bounds, "threads": run.threads, "max_bytes": run.max_bytes, "bad_rows": run.bad_rows,
        "failures": run.failures, "collective": run.collective,
    }


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_nccl_tests_reads_the_same_facts_through_every_shape(shape):
    from healthcheck.parsers.nccl_tests import parse_nccl_tests

    clean = parse_nccl_tests(A3MEGA.read_text())
    assert len(clean.samples) > 50 and clean.avg_busbw_gbytes_per_s
    assert _facts(parse_nccl_tests(SHAPES[shape](A3MEGA.read_text()))) == _facts(clean)


def test_nccl_tests_counts_what_it_did_not_read_and_still_reads_the_rest():
    from healthcheck.parsers.nccl_tests import parse_nccl_tests

    noise = "\n".join(line for line in WATCHDOG.split("\n"))  # a torch line in the same job's stdout
    run = parse_nccl_tests(A3MEGA.read_text() + "\n" + noise + "\n")
    assert run.unrecognized.count == 1 and run.unrecognized.sample[0].text.startswith("[Rank 11] Some NCCL")
    assert _facts(run) == _facts(parse_nccl_tests(A3MEGA.read_text()))
    assert parse_nccl_tests(A3MEGA.read_text()).unrecognized.count == 0


def test_a_torn_nccl_tests_row_is_never_glued_into_a_row():
    """Two ranks' rows torn into one line: neither half becomes a row of made-up numbers."""
    from healthcheck.parsers.nccl_tests import parse_nccl_tests

    text = A3MEGA.read_text()
    rows = [line for line in text.split("\n") if line.strip()[:1].isdigit()]
    torn = "[1,0]<stdout>:" + rows[10][:40] + "[1,1]<stdout>:" + rows[10]
    run = parse_nccl_tests(text.replace(rows[10], torn, 1))
    sizes = [s.size_bytes for s in run.samples]
    assert sizes == [s.size_bytes for s in parse_nccl_tests(text).samples]  # the whole row read once
    assert run.bad_rows == 1  # the cut half counted, not read


TORCH = (CORPUS / "torch-watchdog" / "srun-label-prefixed-allreduce-seq52-watchdog-terminated-frames.txt",
         CORPUS / "torch-watchdog" / "terminal-hard-wrapped-broadcast-seq4-8ranks.txt",
         CORPUS / "torch-watchdog" / "heartbeat-monitor-timed-out-watchdog-stuck-600s-multi-rank.txt")

TORCH_SHAPES = {
    "crlf": lambda t: t.replace("\n", "\r\n"),
    "ansi colours": lambda t: _each_line(t, lambda i, x: f"\x1b[1;3{i % 8}m{x}\x1b[0m" if x else x),
    "colours cut at the end": lambda t: _each_line(t, lambda i, x: x + "\x1b[0" if x else x),
    "quoted paste": lambda t: _each_line(t, lambda i, x: x + " \\"),
    "ray worker": lambda t: _each_line(t, lambda i, x: f"(RayTrainWorker pid={1000 + i % 4}, ip=10.0.0.{i % 4}) {x}"),
    "prompt first": lambda t: "[user@gpu01 ~]$ srun -l torchrun --nproc_per_node 8 train.py\n" + t,
    "tabs": lambda t: t.replace("    ", "\t"),
    "markdown reply": lambda t: _each_line(t, lambda i, x: f"> {x}"),
    # a grep -r over per-rank files (the shape field/issues-3's grep-r file shows), kubectl --prefix
    "grep over rank files": lambda t: _each_line(t, lambda i, x: f"logs/rank_{i % 8}.log:{x}"),
    "kubectl prefix": lambda t: _each_line(t, lambda i, x: f"[pod/trainer-{i % 2}/pytorch] {x}"),
    # a container runtime's stamp (kubectl logs --timestamps: the shape field/issues-6's
    # Kubernetes NCCL log shows, its nanoseconds counted up)
    "kubectl timestamps": lambda t: _each_line(t, lambda i, x: f"2025-11-24T03:20:21.{1125857 + i:09d}Z {x}"),
    "tail headers": lambda t: "==> logs/rank0.log <==\n" + t + "\n==> logs/rank1.log <==\n",
    "indented code block": _code_block,
    "viewer's bare line numbers": lambda t: _guttered(t),
}


def _torch_facts(log) -> dict:
    return {
        "counts": log.counts(), "ranks": log.ranks, "prefixed": log.prefixed_ranks,
        "timeouts": [(t.rank, t.seq, t.op_type, t.timeout_ms, t.wrapped) for t in log.timeouts],
        "exceptions": [(e.rank, e.type) for e in log.exceptions],
    }


@pytest.mark.parametrize("path", TORCH, ids=lambda p: p.stem[:30])
@pytest.mark.parametrize("shape", sorted(TORCH_SHAPES))
def test_torch_log_reads_the_same_facts_through_every_shape(shape, path):
    from healthcheck.parsers.torch_log import parse_torch_log

    clean = parse_torch_log(path.read_text())
    assert clean.timeouts or clean.stuck
    assert _torch_facts(parse_torch_log(TORCH_SHAPES[shape](path.read_text()))) == _torch_facts(clean)


NCCL_LOGS = (CORPUS / "nccl-debug" / "nccl-2.2x-16rank-init-complete-init-timings.txt",
             CORPUS / "nccl-debug" / "azure-ib-completion-error12.txt")

NCCL_LOG_SHAPES = {
    "srun label": lambda t: _each_line(t, lambda i, x: f"{i % 16:>2}: {x}" if x else x),
    "crlf": lambda t: t.replace("\n", "\r\n"),
    "ansi colours": lambda t: _each_line(t, lambda i, x: f"\x1b[0;3{i % 8}m{x}\x1b[0m" if x else x),
    "quoted paste": lambda t: _each_line(t, lambda i, x: x + " \\"),
    "ray worker and srun label": lambda t: _each_line(t, lambda i, x: f"(RayTrainWorker pid=7) 3: {x}" if x else x),
    "prompt first": lambda t: "$ NCCL_DEBUG=INFO srun -l python train.py\n" + t,
    # grep -rn over per-rank files (match lines `FILE:N:`, context lines `FILE-N-`), and a
    # tail of two files, each after its `==> FILE <==` header
    "grep -n with context": lambda t: _each_line(
        t, lambda i, x: f"logs/nccl_{i % 4}.log{':' if i % 3 else '-'}{i + 1}{':' if i % 3 else '-'}{x}" if x else x),
    # a container runtime's stamp (kubectl logs --timestamps: the shape field/issues-6's
    # Kubernetes NCCL log shows, its nanoseconds counted up)
    "kubectl timestamps": lambda t: _each_line(t, lambda i, x: f"2025-11-24T03:20:21.{1125857 + i:09d}Z {x}"),
    "tail headers": lambda t: "==> logs/a.log <==\n" + t + "\n\n==> logs/b.log <==\n",
    "indented code block": _code_block,
    "viewer's bare line numbers": lambda t: _guttered(t),
}


def _nccl_facts(log) -> dict:
    return {
        "processes": [(p.host, p.pid, p.version, p.ib_devices, p.warns, p.ranks) for p in log.processes],
        "comms": [(c.comm, c.rank, c.nranks, c.comm_id, c.init_complete_line is not None) for c in log.comms],
        "warns": [(w.kind, w.host, w.peer, w.status, w.vendor_err, w.hca) for w in log.warns],
        "ranks": log.ranks, "versions": log.versions,
    }


@pytest.mark.parametrize("path", NCCL_LOGS, ids=lambda p: p.stem[:30])
@pytest.mark.parametrize("shape", sorted(NCCL_LOG_SHAPES))
def test_nccl_log_reads_the_same_facts_through_every_shape(shape, path):
    from healthcheck.parsers.nccl_log import parse_nccl_log

    clean = parse_nccl_log(path.read_text())
    assert clean.processes
    assert _nccl_facts(parse_nccl_log(NCCL_LOG_SHAPES[shape](path.read_text()))) == _nccl_facts(clean)


def test_nccl_log_names_the_launchers_rank_behind_a_runner_prefix():
    from healthcheck.parsers.nccl_log import parse_nccl_log, split_nccl_line

    shaped = NCCL_LOG_SHAPES["ray worker and srun label"](NCCL_LOGS[0].read_text())
    assert {p.launcher_rank for p in parse_nccl_log(shaped).processes} == {3}
    assert split_nccl_line(MPI_NCCL).label_rank == 2
    assert split_nccl_line(MPI_NCCL).label == "[1,2]<stdout>:"


KERNEL_LOGS = (CORPUS / "xid-dmesg" / "xid79-with-nvswitch-sxid-20034.txt",
               CORPUS / "xid-dmesg" / "xid48-63-94-dbe-rowremap-contained.txt")

KERNEL_SHAPES = {
    "srun label (srun -l dmesg)": lambda t: _each_line(t, lambda i, x: f"0: {x}" if x else x),
    "dmesg --color=always": lambda t: _each_line(
        t, lambda i, x: f"\x1b[32m{x.split('] ', 1)[0]}]\x1b[0m {x.split('] ', 1)[1]}" if "] " in x else x),
    "crlf": lambda t: t.replace("\n", "\r\n"),
    "quoted paste": lambda t: _each_line(t, lambda i, x: x + " \\"),
    "mpirun tag": lambda t: _each_line(t, lambda i, x: f"[1,0]<stdout>:{x}" if x else x),
    "markdown reply": lambda t: _each_line(t, lambda i, x: f"> {x}"),
    "indented code block": _code_block,
    "indented code block in a reply": lambda t: _each_line(_code_block(t), lambda i, x: f"> {x}"),
}


def _kernel_facts(log) -> dict:
    return {
        "xids": [(x.code, x.pci_bus_id, x.uptime_s, x.message.strip()) for x in log.xids],
        "sxids": [(x.code, x.pci_bus_id, x.severity, x.uptime_s) for x in log.sxids],
        "faults": [(f.kind, f.pci_bus_id) for f in log.faults], "uuids": log.gpu_uuids,
    }


@pytest.mark.parametrize("path", KERNEL_LOGS, ids=lambda p: p.stem[:30])
@pytest.mark.parametrize("shape", sorted(KERNEL_SHAPES))
def test_xid_reads_the_same_facts_through_every_shape(shape, path):
    from healthcheck.parsers.xid import parse_kernel_log

    clean = parse_kernel_log(path.read_text())
    assert clean.xids
    assert _kernel_facts(parse_kernel_log(KERNEL_SHAPES[shape](path.read_text()))) == _kernel_facts(clean)


def test_hc_parse_nccl_tests_keeps_every_key_and_adds_unrecognized():
    """`hc parse`'s JSON is the parsers' contract: the keys before the line layer stay."""
    import json

    before = {"avg_busbw_gbytes_per_s", "avg_ok", "bad_rows", "collective", "completed", "errors", "failures",
              "format", "gpus_per_thread", "headers", "iters", "last_size_bytes", "launcher_error", "max_bytes",
              "min_bytes", "nccl_headers", "nccl_library", "nccl_version", "out_of_bounds", "out_of_bounds_ok",
              "cut_row_bytes",  # null unless the text ends inside a row
              "program", "rank_count", "ranks", "samples", "tables", "threads", "validation", "version",
              "warmup_iters"}
    shaped = SHAPES["srun label"](A3MEGA.read_text()) + "\n" + WATCHDOG + "\n"
    done = run_hc_inproc("parse", "nccl-tests", "-", input=shaped)
    facts = json.loads(done.stdout)["facts"]
    # keys added: each footer's average; NCCL's WARNs among the output (the audit of unread lines);
    # `incomplete` (null unless a footer was pasted alone)
    assert set(facts) == before | {"unrecognized", "averages", "nccl_warns", "incomplete"}
    assert facts["unrecognized"]["count"] == 1 and facts["unrecognized"]["sample"][0]["line"] == shaped.count("\n")


def test_py_spy_dumps_of_two_ranks_interleaved_under_srun_are_read_per_rank():
    """`srun -l py-spy dump` on two nodes: each line labelled, the two dumps' lines taking
    turns (built from two real dumps); each rank's process is read whole."""
    from itertools import zip_longest

    from healthcheck.parsers.py_spy import parse_py_spy

    first = (FIXTURES / "py-spy" / "0.4.3-gloo-rank0-waiting-in-all_reduce.txt").read_text()
    second = (FIXTURES / "py-spy" / "0.4.3-gloo-rank1-sleeping-before-all_reduce-locals.txt").read_text()
    pairs = zip_longest(first.split("\n"), second.split("\n"))
    interleaved = "\n".join(f"{task}: {line}" for a, b in pairs for task, line in ((0, a), (1, b)) if line is not None)
    apart = parse_py_spy(first).processes + parse_py_spy(second).processes
    assert len(apart) == 2 and all(p.threads for p in apart)
    assert parse_py_spy(interleaved).processes == apart
    # anyhow's own numbered causes are no srun labels
    error = parse_py_spy((FIXTURES / "py-spy" / "0.4.3-error-no-such-pid-caused-by-backtrace.txt").read_text())
    assert error.errors[0].reasons == ("No such file or directory (os error 2)",)


SINFO = sorted((FIXTURES / "sinfo").glob("slurm-*.txt"))

SINFO_SHAPES = {
    "prompt first": lambda t: "[root@slurm-ctl ~]# sinfo\n" + t,
    "crlf": lambda t: t.replace("\n", "\r\n"),
    "markdown reply": lambda t: _each_line(t, lambda i, x: f"> {x}" if x else x),
    "quoted paste": lambda t: _each_line(t, lambda i, x: x + " \\" if x else x),
    "colours": lambda t: _each_line(t, lambda i, x: f"\x1b[1m{x}\x1b[0m" if x else x),
    "indented code block": _prompt_code_block,
}


@pytest.mark.parametrize("path", SINFO, ids=lambda p: p.stem[:40])
@pytest.mark.parametrize("shape", sorted(SINFO_SHAPES))
def test_sinfo_reads_the_same_rows_through_every_shape(shape, path):
    from healthcheck.core.errors import ParseError
    from healthcheck.parsers.sinfo import parse_sinfo

    try:
        clean = parse_sinfo(path.read_text())
    except ParseError:
        pytest.skip("a capture sinfo's parser refuses as it is")
    assert parse_sinfo(SINFO_SHAPES[shape](path.read_text())) == clean


# Table and tree parsers read mended_lines: the paste's shapes mended, prompts dropped,
# nothing taken off the front. Every real capture of each (derived-* files are not).
def _captures(tool: str, *folders: str) -> list[tuple[str, object]]:
    return [(tool, path) for folder in folders for path in sorted((FIXTURES / folder).glob("*.txt"))
            if not path.name.startswith("derived")]


TREES = (_captures("scontrol-show-node", "scontrol-show-node", "corpus/scontrol-show-node")
         + _captures("ibstat", "corpus/ibstat") + _captures("ibstatus", "corpus/ibstatus")
         + _captures("ibv_devinfo", "ibv_devinfo") + _captures("perfquery", "corpus/perfquery")
         + [c for c in _captures("dcgmi-diag", "corpus/dcgmi-diag") if "json" not in c[1].name]  # JSON: not lines
         + _captures("flight-recorder-analysis", "corpus/flight-recorder")
         + [c for c in _captures("ip-link", "ip-link") if "json" not in c[1].name])

TREE_SHAPES = {
    "prompt first": lambda t: "[root@gpu01 ~]# the-tool --its-options\n" + t,
    "crlf": lambda t: t.replace("\n", "\r\n"),
    "markdown reply": lambda t: _each_line(t, lambda i, x: f"> {x}" if x else x),
    "quoted paste": lambda t: _each_line(t, lambda i, x: x + " \\" if x else x),
    "colours": lambda t: _each_line(t, lambda i, x: f"\x1b[1m{x}\x1b[0m" if x else x),
    # markdown's indented code block, the prompt inside it (field/issues-12's ibstatus): the
    # tools' own indentation (ibstat's, ibv_devinfo's, ibstatus's tabs) is relative to it
    "indented code block": _prompt_code_block,
    "tab-indented code block": lambda t: _prompt_code_block(t).replace("\n    ", "\n\t"),
}


@pytest.mark.parametrize(("tool", "path"), TREES, ids=lambda v: getattr(v, "stem", v)[:40])
@pytest.mark.parametrize("shape", sorted(TREE_SHAPES))
def test_table_and_tree_parsers_read_the_same_facts_through_every_shape(shape, tool, path):
    from healthcheck.core.errors import ParseError
    from healthcheck.parsers import parser_for

    parse = parser_for(tool)
    try:
        clean = parse(path.read_text())
    except ParseError:
        pytest.skip("a capture its parser refuses as it is")
    assert parse(TREE_SHAPES[shape](path.read_text())) == clean


# NCCL RAS: the real replies (h100-captures, one healthy rank) and the derived files, whose
# layout and wording are NCCL's format strings filled with made-up values (nccl-ras/README.md)
RAS = sorted((FIXTURES / "h100-captures").glob("nccl-ras-*.txt")) + [
    p for p in sorted((FIXTURES / "nccl-ras").glob("derived-*.txt")) if "json" not in p.name]


@pytest.mark.parametrize("path", RAS, ids=lambda p: p.stem[:40])
@pytest.mark.parametrize("shape", sorted(TREE_SHAPES))
def test_nccl_ras_reads_the_same_reply_through_every_shape(shape, path):
    from healthcheck.core.errors import ParseError
    from healthcheck.parsers.nccl_ras import parse_nccl_ras

    try:
        clean = parse_nccl_ras(path.read_text())
    except ParseError:
        pytest.skip("a capture its parser refuses as it is")
    assert parse_nccl_ras(TREE_SHAPES[shape](path.read_text())) == clean


def test_diagnose_indexes_a_lines_time_by_the_rank_the_layers_labels_name():
    """diagnose/sources.py had a fifth copy of the label regex (no `<stddiag>`); it reads
    labels_of now. A real ISO-stamped line under each launcher's label."""
    from healthcheck.diagnose.sources import _stamps
    from healthcheck.parsers.lines import labels_of

    real = _real(FIXTURES / "diagnose-jobs" / "tuning" / "raise-torchrun-record-r1" / "torchrun.log", "[default1]:2026")
    bare = real[len("[default1]:"):]  # `2026-11-27 13:35:43,460 INFO [train rank 1] ...`
    text = "\n".join([f"[1,3]<stddiag>:{bare}", f" 5: {bare}", f"[default2]:{bare}", f"0: [default2]:{bare}",
                      f"[rank11]:{bare}"])
    index = _stamps(text, 2026)
    assert sorted(index.by_rank) == [2, 3, 5, 11] and len(index.stamps) == 5
    assert labels_of("0: [default2]:x").global_rank is None  # a node's label, then torchrun's local rank


QUERY_GPU = CORPUS / "nvidia-smi-query-gpu" / "h100-590-all-fields-idle.txt"
QUERY_SHAPES = {
    "prompt first": lambda t: "user@gpu01:~$ nvidia-smi --query-gpu=index,pci.bus_id --format=csv\n" + t,
    "markdown reply": lambda t: _each_line(t, lambda i, x: f"> {x}"),
    "ansi colours": lambda t: _each_line(t, lambda i, x: f"\x1b[0;32m{x}\x1b[0m" if x else x),
    "quoted paste": lambda t: _each_line(t, lambda i, x: x + " \\"),
    "srun label": lambda t: _each_line(t, lambda i, x: f"0: {x}" if x else x),
    "crlf": lambda t: t.replace("\n", "\r\n"),
    "indented code block": _prompt_code_block,
}


@pytest.mark.parametrize("shape", sorted(QUERY_SHAPES))
def test_nvidia_smi_query_gpu_reads_the_same_facts_through_every_shape(shape):
    # a real all-fields capture put through each shape (was: refused "no CSV header line")
    from healthcheck.parsers.nvidia_smi_query import parse_nvidia_smi_query

    clean = parse_nvidia_smi_query(QUERY_GPU.read_text())
    assert clean.gpus and clean.driver_version
    assert parse_nvidia_smi_query(QUERY_SHAPES[shape](QUERY_GPU.read_text())) == clean


PASTED = {  # tools read through `pasted_lines`, each with a real capture
    "nvidia-smi": CORPUS / "nvidia-smi" / "h100-8gpu-550.90.07.txt",
    "nvidia-smi-q": CORPUS / "nvidia-smi-q" / "h100-1gpu-driver-590.48.01-load.txt",
    "nvidia-smi-topo": CORPUS / "nvidia-smi-topo" / "a100-8gpu-nv12.txt",
    "nvidia-smi-nvlink": CORPUS / "nvidia-smi-nvlink" / "a100-8gpu-nvlink-status.txt",
    "ib_write_bw": CORPUS / "ib_write_bw" / "client-bidir-4qp-all-sizes-ainic-800g.txt",
}
PASTED_SHAPES = {
    "ansi colours": lambda t: _each_line(t, lambda i, x: f"\x1b[0;3{i % 8}m{x}\x1b[0m" if x else x),
    # a grep over two nodes' captures (the `FILE:` field/issues-3's grep-r file shows), and
    # grep -n's match and context lines (`FILE:N:`, `FILE-N-`)
    "grep over files": lambda t: _each_line(t, lambda i, x: f"captures/gpu0{i % 2}.txt:{x}"),
    "grep -n with context": lambda t: _each_line(
        t, lambda i, x: f"node1.log{':' if i % 3 else '-'}{i + 1}{':' if i % 3 else '-'}{x}"),
    # one task's output under srun -l (`srun -N1 -l nvidia-smi`), one pod's under kubectl --prefix
    "srun label, one task": lambda t: _each_line(t, lambda i, x: f" 3: {x}" if x.strip() else x),
    "kubectl prefix, one pod": lambda t: _each_line(t, lambda i, x: f"[pod/gpu-check-x7/main] {x}"),
    # kubectl logs --timestamps (the runtime's stamp field/issues-6's Kubernetes log shows)
    "kubectl timestamps": lambda t: _each_line(t, lambda i, x: f"2025-11-24T03:20:21.{1125857 + i:09d}Z {x}"),
    # markdown's indented code block, the prompt inside it (field/issues-12's ibstatus): the
    # table's, the tree's (`-q`) and topo's own indentation is relative to it
    "indented code block": _prompt_code_block,
}
MENDED = {  # tools read through `mended_lines`, each with a real capture
    "ibstat": CORPUS / "ibstat" / "h100-ib-some-down-disabled.txt",
    "perfquery": CORPUS / "perfquery" / "switch-port-xmitdiscards-linkdowned.txt",
}


@pytest.mark.parametrize("tool", sorted(PASTED))
@pytest.mark.parametrize("shape", sorted(PASTED_SHAPES))
def test_pasted_tools_read_the_same_facts_in_colour_and_behind_a_grep(shape, tool):
    # was: refused (the table, the tree, topo, nvlink) or the banner lost (perftest)
    from healthcheck.parsers import parser_for

    parse = parser_for(tool)
    text = PASTED[tool].read_text()
    clean = msgspec.to_builtins(parse(text))
    shaped = msgspec.to_builtins(parse(PASTED_SHAPES[shape](text)))
    for facts in (clean, shaped):
        facts.pop("unrecognized", None)
    assert shaped == clean


@pytest.mark.parametrize("tool", sorted(MENDED))
@pytest.mark.parametrize("shape", sorted(PASTED_SHAPES))
def test_mended_tools_read_the_same_facts_through_a_grep_one_task_or_one_pod(shape, tool):
    # was: refused (srun's label, kubectl's prefix) or a grep -n number left on the line
    from healthcheck.parsers import parser_for

    parse = parser_for(tool)
    text = MENDED[tool].read_text()
    assert msgspec.to_builtins(parse(PASTED_SHAPES[shape](text))) == msgspec.to_builtins(parse(text))


def test_a_label_is_taken_off_a_table_only_where_one_task_printed_it_all():
    from healthcheck.core.launcher_labels import SRUN_LABEL
    from healthcheck.parsers.lines import one_source_unlabelled

    rows = PASTED["nvidia-smi"].read_text().splitlines()
    one = [f"0: {x}" for x in rows]
    assert one_source_unlabelled(one, SRUN_LABEL) == rows
    two = [f"{i % 2}: {x}" for i, x in enumerate(rows)]  # two nodes' tables interleaved: no one's
    assert one_source_unlabelled(two, SRUN_LABEL) == two
    partly = ["0: " + rows[0], *rows[1:]]  # one labelled line: a label of the text's own
    assert one_source_unlabelled(partly, SRUN_LABEL) == partly
