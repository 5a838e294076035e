"""What the parsers used to do on their own, now small functions of parsers/lines.py (issue
20): a paste's quotes, the explain recorder in `dispatch`, torchx's and MPICH's labels,
a kernel message's continuation lines and quotes, a word wrap where a grammar expects
more, sinfo's hard-wrapped host list, an elision.

Every sample is a real fixture (named) or a transformation of one, said so where it is.
"""

from __future__ import annotations

import importlib.util
import re

import pytest
from support import CORPUS, FIXTURES, assert_linear

from healthcheck.core.launcher_labels import MPICH_RANK, TORCHX_LABEL
from healthcheck.parsers import lines, nccl_tests, parser_for
from healthcheck.parsers.explain import explain
from healthcheck.parsers.lines import (
    Handler,
    Line,
    continues_indented,
    is_elision,
    join_continuation,
    mpich_rank,
    pasted_lines,
    prepended_rank,
    read_line,
    read_lines,
    relabelled,
    rewrapped,
    unpasted,
    unquoted,
    word_wrapped,
    wrapped_word,
)
from healthcheck.parsers.sinfo import parse_sinfo

FIELD = FIXTURES / "field"
NCCL_TESTS = FIXTURES / "nccl-tests" / "all_gather-h100-1gpu-2.19.6-nccl-debug-info-2.28.9.txt"
WATCHDOG = FIELD / "issues" / "torch-log" / "watchdog-reduce-scatter-base-pg1.txt"
SIXTEEN_RANKS = FIXTURES / "nccl-tests" / "all_reduce-h100-a3mega-2node-16rank.txt"
MULTILINE_NVRM = FIELD / "issues" / "xid" / "fallen-off-bus-no-xid-multiline-570.txt"
GPUD_QUOTED = FIELD / "repos" / "xid" / "xid119-gsp-rpc-timeout-quoted-in-gpud-scan-output.txt"
XID145 = FIELD / "repos" / "xid" / "xid145-rlw-rxpipe-nonfatal-link-13-bare-line.txt"
SINFO_WRAPPED = FIELD / "repos" / "sinfo" / "trn1-16node-fail-alloc-nodelist-hard-wrapped.txt"
SCATTER_ELIDED = FIELD / "repos" / "nccl-tests" / "scatter-p4de-srun-label-root-0-elided-no-footer.txt"
NVLINK_ELIDED = CORPUS / "nvidia-smi-nvlink" / "h800-nvlink-status-8links-elided.txt"


# ------------------------------------------------ 1. a paste's quotes: lines.py, no pasted.py


def test_the_second_paste_layer_is_gone_and_lines_reads_its_shapes():
    assert importlib.util.find_spec("healthcheck.parsers.pasted") is None
    text = NVLINK_ELIDED.read_text()
    # a transformation: every line quoted in a reply and continued as in a shell snippet
    pasted = "".join(f"> {line} \\\n" for line in text.splitlines())
    assert pasted_lines(pasted) == [line.rstrip() for line in text.splitlines()]
    assert unpasted(">GPU 0: NVIDIA H800") == "GPU 0: NVIDIA H800"  # a glued quote too: no GPU line starts with >


# ------------------------------------------------ 2. the explain recorder is dispatch's own


READ_BY = lines.dispatch  # bound at import under another name, as `from ... import dispatch as read_by` does


def _parse_with_renamed_dispatch(text: str) -> list[str]:
    """A parser outside healthcheck.parsers that binds dispatch under another name: the old
    module-attribute swap never saw it. Its handler checks that nothing was swapped."""
    swapped: list[bool] = []

    def banner(state: list[str], line: Line) -> bool:
        swapped.append(nccl_tests.dispatch is not READ_BY or lines.dispatch is not READ_BY)
        state.append(line.text)
        return True

    table = (Handler("banner", lambda t: t.startswith("# nccl-tests"), banner),)
    state: list[str] = []
    for line in read_lines(text):
        READ_BY(table, state, line)
    assert not any(swapped), "a parser module's dispatch was swapped during the parse"
    return state


def test_any_parser_that_dispatches_is_explained_without_a_swap():
    text = NCCL_TESTS.read_text()
    _, explanation = explain("x", _parse_with_renamed_dispatch, text)
    assert explanation.how == "handlers"
    assert explanation.lines[0].by == "banner"
    assert explanation.counts["unrecognized"] == len(text.splitlines()) - explanation.counts["banner"]
    # and the real parser, explained, still reads through the very same dispatch
    facts, explanation = explain("nccl-tests", parser_for("nccl-tests"), text)
    assert facts is not None and explanation.how == "handlers" and "row" in explanation.counts


def test_a_caller_can_pass_its_own_recorder_to_dispatch():
    seen: list[tuple[int, str | None]] = []
    table = (Handler("banner", lambda t: t.startswith("# nccl-tests"), lambda s, line: True),)
    for line in list(read_lines(NCCL_TESTS.read_text()))[:3]:
        lines.dispatch(table, None, line, record=lambda line, name: seen.append((line.number, name)))
    assert seen[0] == (1, "banner") and [n for n, _ in seen] == [1, 2, 3]


# ------------------------------------------------ 3. labels, continuations, wraps, elisions


def test_torchx_label_is_the_layers():
    # a line of field/issues/torch-log/watchdog-reduce-scatter-base-pg1.txt with its `[rankN]:`
    # made torchx's `trainer/0 [N]:` (a transformation: the label torchx prints)
    first = next(t for t in WATCHDOG.read_text().splitlines() if t.startswith("[rank"))
    labelled = re.sub(r"^\[rank(\d+)\]:", r"trainer/0 [\1]:", first)
    read = relabelled(read_line(1, labelled)[0], torchx=True)
    plain = read_line(1, first)[0]
    assert (read.role, read.local_rank, read.text) == ("trainer/0", plain.rank, plain.text)
    assert read.labels.startswith("trainer/0 [") and read.logger == plain.logger == "c10"
    # on another replica the local rank names no global rank; without torchx=True nothing is taken
    assert relabelled(read_line(1, labelled.replace("trainer/0", "trainer/1"))[0], torchx=True).local_rank is None
    assert relabelled(read_line(1, labelled)[0]).text == labelled
    assert TORCHX_LABEL.match(labelled)


def test_mpich_prepend_rank_is_taken_only_before_what_the_parser_names():
    # lines of tests/fixtures/nccl-tests/all_reduce-h100-a3mega-2node-16rank.txt with MPICH's
    # `[N] ` before them (a transformation; the tag's shape is corpus/nccl-debug's real one)
    text = SIXTEEN_RANKS.read_text().splitlines()
    banner = next(t for t in text if t.startswith("# nThread"))
    own = re.compile(r"\s{0,32}(?:#|\d|nThread |Rank )")
    read = prepended_rank(read_line(1, "[7] " + banner)[0], own)
    assert (read.text, read.task, read.labels) == (banner, 7, "[7] ")
    other = read_line(1, "[7] NCCL INFO cudaDev")[0]  # a bare [N] before anything else stays
    assert prepended_rank(other, own) == other
    # indented as a whole paste is (a markdown list's code block): the same
    assert relabelled(read_line(1, "    [7] " + banner)[0], rank_before=own).task == 7
    assert mpich_rank("[155]") == 155 and mpich_rank("[1,0]<stdout>:") is None and MPICH_RANK.match("[3] ")


def test_a_kernel_messages_continuation_lines_are_joined_by_the_layer():
    first, second, third = MULTILINE_NVRM.read_text().splitlines()[:3]
    head = first[first.index("NVRM:"):]
    indent = len(first) - len(first.lstrip())
    assert continues_indented(indent, second, "NVRM:") and continues_indented(indent, third, "NVRM:")
    assert not continues_indented(indent, first, "NVRM:")  # a message of its own: not deeper
    joined = join_continuation(join_continuation(head, second, "NVRM:"), third, "NVRM:")
    assert joined == ("NVRM: The NVIDIA GPU 0000:b3:00.0 (PCI ID: 10de:26b5) installed in this system has "
                      "fallen off the bus and is not responding to commands.")


def test_a_message_another_tool_quoted_is_unquoted_by_the_layer():
    line = GPUD_QUOTED.read_text().splitlines()[1]
    body = unquoted(line, ("NVRM:", "SXid"))
    assert body.startswith('[XID found] (54 minutes ago) NVRM: Xid (PCI:0000:9b:00): 119,')
    assert body.endswith("(0x20801702 0x4).") and '"' not in body
    assert unquoted("NVRM: Xid (PCI:0000:9b:00): 119, x", ("NVRM:",)) == "NVRM: Xid (PCI:0000:9b:00): 119, x"


def test_a_word_wrap_is_joined_only_where_the_grammar_expects_more():
    # field/repos/xid/xid145-rlw-rxpipe-nonfatal-link-13-bare-line.txt, wrapped before its
    # status words (a transformation: the shape field/repos/xid/xid144-149-... shows)
    line = XID145.read_text().strip()
    head, tail = line[:line.index(" (0x")], line[line.index("(0x"):]
    ends, starts = re.compile(r"Link -?\d{1,3}$"), re.compile(r"\(0x[0-9A-Fa-f]{1,16}\b")
    assert word_wrapped(head, tail, head_ends=ends, tail_starts=starts)
    assert not word_wrapped(line, tail, head_ends=ends, tail_starts=starts)  # the head was whole
    assert not word_wrapped(head, "- Warning", head_ends=ends, tail_starts=starts)


def test_sinfo_hard_wrap_is_the_layers_wrapped_word():
    row, tail = list(read_lines(SINFO_WRAPPED.read_text()))[2:4]
    width = len(row.raw)
    assert wrapped_word(tail, width) and not wrapped_word(tail, 20)  # after a narrow row: no wrap
    assert not wrapped_word(row, width)  # several words: a row of its own
    assert rewrapped(tail, width) == 0  # shorter than the row: the host list ended
    rows = parse_sinfo(SINFO_WRAPPED.read_text()).rows
    assert rows[1].nodes.endswith(",ip-10-1-127-124") and rows[1].node_count == 15


def test_an_elision_is_the_layers_and_no_tools_line():
    text = NVLINK_ELIDED.read_text().splitlines()
    assert [i for i, t in enumerate(text, 1) if is_elision(t)] == [19]
    assert not is_elision("") and is_elision(" … ")


def test_an_elision_is_never_counted_as_a_line_left_unread():
    # field/repos/nccl-tests/scatter-p4de-srun-label-root-0-elided-no-footer.txt: `...` where
    # the reporter cut rows, under srun's label
    text = SCATTER_ELIDED.read_text()
    run = parser_for("nccl-tests")(text)
    assert run.unrecognized.count == 0 and len(run.samples) >= 4
    facts, explanation = explain("nccl-tests", parser_for("nccl-tests"), text)
    assert [x.by for x in explanation.lines if x.text == "..."] == ["elision"]
    assert "unrecognized" not in explanation.counts


@pytest.mark.parametrize("filler", [" " * 200_000, "(0x" * 70_000, "[1] " * 50_000, "trainer/0 [" * 20_000,
                                    '"NVRM:' * 40_000, "." * 200_000])
def test_the_layers_new_parts_cost_their_length(filler):
    ends, starts = re.compile(r"Link -?\d{1,3}$"), re.compile(r"\(0x[0-9A-Fa-f]{1,16}\b")
    own = re.compile(r"\s{0,32}(?:#|\d)")

    def every_part(text: str) -> None:
        line = read_line(1, text)[0]
        relabelled(line, torchx=True, rank_before=own)
        word_wrapped(text, text, head_ends=ends, tail_starts=starts)
        unquoted(text, ("NVRM:", "SXid"))
        continues_indented(0, text, "NVRM:")
        wrapped_word(line, 80)
        is_elision(text)
        unpasted(text)

    assert_linear(every_part, filler[: len(filler) // 10], filler)


def test_lines_read_under_numbered_as_keep_their_numbers_in_the_whole_text():
    """A text made of some of a bigger one's lines (diagnose/condense.py) reads each line with
    its number in the whole; the numbers are the block's alone, and a marked reading's
    choice of lines is still of the text given."""
    part = "gpu1:12:13 [0] NCCL WARN Call to connect failed\nsome other line\nlast line\n"
    with lines.numbered_as([7, 4000, 4001, 4002]):
        read = [(line.number, line.text) for line in read_lines(part)]
        marked = [line.number for line in read_lines(part, marks=re.compile("WARN"))]
    assert [n for n, _ in read] == [7, 4000, 4001] and marked == [7, 4000, 4001]
    assert [line.number for line in read_lines(part)] == [1, 2, 3]
