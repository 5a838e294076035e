"""Every text parser counts the lines none of its parts read and keeps the first few as
evidence (`unrecognized`, lines.Unrecognized), never a reason to refuse the facts around
them; `hc parse --explain` marks those lines `not read` (issue 20).

Each case takes a real fixture and inserts one line of no tool's (a transformation built
here from the real file, at a place the tool's own grammar does not absorb a stray line:
said per case); the parse reports that one line, numbered, and the same facts as the
untouched file, which reports what is truly unknown in it (mostly nothing).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import msgspec
import pytest
from support import CORPUS, FIXTURES

from healthcheck.parsers import parser_for
from healthcheck.parsers.explain import NOT_READ, UNRECOGNIZED, explain

GARBAGE = "this line is no tool's output (inserted by the test)"


class Case(NamedTuple):
    tool: str
    fixture: Path
    at: int  # the 0-based line the garbage goes before (where the tool's grammar reads no stray line)
    why: str  # why a stray line there is read by nothing
    clean_unread: tuple[int, ...] = ()  # lines of the untouched file truly unknown
    grows: tuple[str, ...] = ()  # facts that count the text's lines, one more with the stray line


CASES = [
    Case("ibstatus", CORPUS / "ibstatus" / "a100-hdr200-all-active.txt", 9,
         "between two port blocks, at column 0 (a field is indented)"),
    Case("ibstat", CORPUS / "ibstat" / "h100-ib-some-down-disabled.txt", 3,
         "inside a CA block at column 0 (ibstat indents every field)"),
    Case("perfquery", CORPUS / "perfquery" / "rcv-error-details.txt", 2,
         "among the counters (no `Name:....value`)"),
    Case("ip-link", FIXTURES / "ip-link" / "netns-veth-detail.txt", 2,
         "between two interfaces at column 0 (a block's lines are indented)"),
    Case("scontrol-show-node",
         FIXTURES / "scontrol-show-node" / "slurm-22.05-4nodes-mixed-drain-draining-not-responding.txt", 0,
         "before the first NodeName= (it refused the whole file before)"),
    Case("ibv_devinfo", FIXTURES / "ibv_devinfo" / "cx6-vv-2hca-port2-down-disabled.txt", 0,
         "before the first hca_id (inside a block every line is kept: field, capability or note)"),
    Case("nvidia-smi-topo", CORPUS / "nvidia-smi-topo" / "h800-8gpu-nv8-4nic-truncated-copy.txt", 3,
         "among the device rows (a row starts with its device)"),
    Case("nvidia-smi-query-gpu", CORPUS / "nvidia-smi-query-gpu" / "h100-590-all-fields-load.txt", 1,
         "among the rows, with no comma (a row has every column)"),
    Case("nvidia-smi-q", CORPUS / "nvidia-smi-q" / "h100-8gpu-driver-535.161.08.txt", 10,
         "inside the first GPU block at the left margin, after its Product Name (it ended the block before)"),
    Case("dcgmi-diag", CORPUS / "dcgmi-diag" / "fragment-r2-gpu-memory-fail-thermal.txt", 0,
         "before the table (a table line starts with `|` or `+`)"),
    Case("flight-recorder-analysis", CORPUS / "flight-recorder" / "torchfrtrace-verbose-missing-rank-allreduce-2ranks.txt",
         2, "after torchfrtrace's progress lines, before its first report (its -v tables' rows are its own)"),
    Case("xid", FIXTURES / "kernel-log" / "dmesg-T-single-digit-day.txt", 1,
         "between an Xid and another driver's line (a kernel log's other lines are read by nothing too)",
         clean_unread=(2,), grows=("lines",)),
    Case("py-spy", FIXTURES / "py-spy" / "0.4.3-h100-nccl-rank-blocked-in-work-wait.txt", 4,
         "at column 0 among a thread's frames (no thread, process or py-spy error line)"),
]


def _with_garbage(text: str, at: int) -> str:
    lines = text.split("\n")
    return "\n".join([*lines[:at], GARBAGE, *lines[at:]])


def _facts(facts: Any, grows: tuple[str, ...] = (), by: int = 0) -> Any:
    data = msgspec.to_builtins(facts)
    data.pop("unrecognized", None)
    for name in grows:
        data[name] -= by
    return data


@pytest.mark.parametrize("case", CASES, ids=[c.tool for c in CASES])
def test_an_untouched_real_output_leaves_only_its_truly_unknown_lines_unread(case: Case) -> None:
    facts = parser_for(case.tool)(case.fixture.read_text())
    assert tuple(s.line for s in facts.unrecognized.sample) == case.clean_unread
    assert facts.unrecognized.count == len(case.clean_unread)
    # none unread: the key is left out of the JSON, as every parser that counts leaves it
    assert ("unrecognized" in msgspec.to_builtins(facts)) == bool(case.clean_unread)


@pytest.mark.parametrize("case", CASES, ids=[c.tool for c in CASES])
def test_a_stray_line_in_a_real_output_is_counted_and_kept_not_refused(case: Case) -> None:
    text = case.fixture.read_text()
    parse = parser_for(case.tool)
    clean = parse(text)
    facts = parse(_with_garbage(text, case.at))
    (sample,) = [s for s in facts.unrecognized.sample if s.text == GARBAGE]
    assert sample.line == case.at + 1
    assert facts.unrecognized.count == clean.unrecognized.count + 1
    assert _facts(facts, case.grows, 1) == _facts(clean)
    # in `hc parse`'s JSON under the key every counting parser uses
    assert {"line": case.at + 1, "text": GARBAGE} in msgspec.to_builtins(facts)["unrecognized"]["sample"]


@pytest.mark.parametrize("case", CASES, ids=[c.tool for c in CASES])
def test_explain_marks_the_stray_line_not_read(case: Case) -> None:
    text = _with_garbage(case.fixture.read_text(), case.at)
    facts, explanation = explain(case.tool, parser_for(case.tool), text)
    assert facts is not None
    by_line = {x.line: x.by for x in explanation.lines}
    if explanation.how == "handlers":  # the parser names what read each line: nothing read this one
        assert by_line[case.at + 1] == UNRECOGNIZED
        assert explanation.counts[UNRECOGNIZED] == facts.unrecognized.count
    else:
        assert explanation.how == "unrecognized" and by_line[case.at + 1] == NOT_READ
        assert explanation.counts[NOT_READ] == facts.unrecognized.count


def test_a_stray_line_before_the_query_gpu_header_no_longer_refuses_the_rows():
    # the real CSV after a line of no tool's (a transformation): before, "no CSV header line"
    real = CORPUS / "nvidia-smi-query-gpu" / "h100-590-all-fields-load.txt"
    parse = parser_for("nvidia-smi-query-gpu")
    facts = parse(_with_garbage(real.read_text(), 0))
    assert _facts(facts) == _facts(parse(real.read_text()))
    assert [(s.line, s.text) for s in facts.unrecognized.sample] == [(1, GARBAGE)]


@pytest.mark.parametrize("name", [
    "error-failed-to-find-python-version-pid-is-bash-2018.txt",  # ` INFO 2018-...Z: py_spy::python_spy: ...`
    "error-operation-not-permitted-os-error-1-rust-log-aarch64.txt",  # `[2023-...Z INFO  py_spy::config] ...`
])
def test_py_spys_own_rust_log_lines_are_its_not_unrecognized(name: str) -> None:
    text = (CORPUS / "py-spy" / name).read_text()
    assert "py_spy::" in text
    dump = parser_for("py-spy")(text)
    assert dump.errors and dump.unrecognized.count == 0
