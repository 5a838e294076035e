"""`hc parse TOOL FILE --explain` (issue 20): which handler read each line, and the lines
none read, so an operator can send a sample hc reads wrongly. Run through the CLI on real
fixtures: in process (tests/support.py run_hc_inproc), and the refusal's one line and exit 4
as an operator runs it (a subprocess)."""

from __future__ import annotations

import json

from support import FIXTURES, run_hc, run_hc_inproc

from healthcheck.parsers import lines, nccl_tests, parser_for
from healthcheck.parsers.explain import EXPLAIN_LINES, explain

# nccl-tests with NCCL_DEBUG=INFO lines among its banner and rows (tests/fixtures/nccl-tests/SOURCES.md)
NCCL_TESTS = FIXTURES / "nccl-tests" / "all_gather-h100-1gpu-2.19.6-nccl-debug-info-2.28.9.txt"
SINFO_AFTER_PROMPTS = FIXTURES / "field" / "repos" / "sinfo" / "p5-o-format-after-slurmd-C-prompts.txt"
IBSTAT = FIXTURES / "field" / "repos" / "ibstat" / "h100-roce-2-ports-down-disabled.txt"


def explained(*args: str, input: bytes | None = None) -> tuple[int, dict]:
    r = run_hc_inproc("parse", *args, "--explain", "--format", "json", input=input)
    return r.returncode, json.loads(r.stdout)


def test_each_line_is_named_by_the_handler_that_read_it():
    rc, out = explained("nccl-tests", str(NCCL_TESTS))
    assert rc == 0
    ex = out["explain"]
    assert ex["how"] == "handlers"
    by = {x["line"]: x["by"] for x in ex["lines"]}
    text = NCCL_TESTS.read_text().splitlines()
    number = {t: i for i, t in reversed(list(enumerate(text, 1)))}  # first line holding each text
    assert by[1] == "banner"  # '# nccl-tests version ...'
    assert by[number["# Collective test starting: all_gather_perf"]] == "starting"
    assert by[next(i for i, t in enumerate(text, 1) if "NCCL INFO NCCL version" in t)] == "nccl-version"
    assert by[next(i for i, t in enumerate(text, 1) if "NCCL INFO Bootstrap" in t)] == "unrecognized"
    assert "row" in by.values()
    # every line counted once; the unrecognized ones are the parser's own count
    assert sum(ex["counts"].values()) == ex["lines_total"] == len(text)
    assert ex["counts"]["unrecognized"] == out["facts"]["unrecognized"]["count"]
    # the facts are what a plain `hc parse` prints
    plain = json.loads(run_hc_inproc("parse", "nccl-tests", str(NCCL_TESTS)).stdout)
    assert out["facts"] == plain["facts"]


def test_the_table_shows_line_handler_and_text():
    r = run_hc_inproc("parse", "nccl-tests", str(NCCL_TESTS), "--explain")
    out = r.stdout.decode()
    assert r.returncode == 0
    assert "READ BY" in out.splitlines()[1]
    first = out.splitlines()[2].split(None, 2)
    assert first[:2] == ["1", "banner"] and first[2].startswith("# nccl-tests version")
    assert out.splitlines()[-1].startswith("lines: ")


def test_a_parser_that_counts_what_it_did_not_read_says_read_or_not_read():
    rc, out = explained("sinfo", str(SINFO_AFTER_PROMPTS))
    ex = out["explain"]
    assert rc == 0 and ex["how"] == "unrecognized"
    assert [x["by"] for x in ex["lines"]] == ["prompt", "not read", "blank", "prompt", "read", "read"]


def test_a_parser_that_cannot_explain_says_so_and_lists_nothing():
    # a hostfile is the operator's own list, no tool's output: its parser counts no line unread
    rc, out = explained("hostfile", "-", input=b"gpu001 slots=8\ngpu002 slots=8\n")
    assert rc == 0 and out["facts"] == ["gpu001", "gpu002"]
    assert out["explain"]["how"] == "none" and "does not explain" in out["explain"]["note"]
    assert out["explain"]["lines"] == []


def test_a_table_parser_that_counts_its_unread_lines_explains_by_them():
    # ibstat reads no handler table, but counts what none of it read (issue 20's ninth round)
    rc, out = explained("ibstat", str(IBSTAT))
    assert rc == 0 and out["facts"]["ports"]
    assert out["explain"]["how"] == "unrecognized"
    assert {x["by"] for x in out["explain"]["lines"]} <= {"read", "blank", "prompt", "command"}


def test_a_refused_sample_is_explained_then_exits_4_in_one_line():
    garbage = NCCL_TESTS.read_text().splitlines()[7:12]  # NCCL INFO lines only: no banner, no row
    r = run_hc("parse", "nccl-tests", "-", "--explain", input="\n".join(garbage).encode() + b"\n")
    err = r.stderr.decode()
    assert r.returncode == 4 and err.startswith("hc: error: ") and err.count("\n") == 1
    assert "refused: " in r.stdout.decode()
    assert r.stdout.decode().count("unrecognized") >= len(garbage)


def test_the_explanation_is_bounded():
    text = NCCL_TESTS.read_text() * 4
    rc, out = explained("nccl-tests", "-", input=text.encode())
    ex = out["explain"]
    assert rc == 0 and len(ex["lines"]) == EXPLAIN_LINES
    assert ex["lines_left_out"] == ex["lines_total"] - EXPLAIN_LINES > 0
    assert sum(ex["counts"].values()) == ex["lines_total"]
    assert all(len(x["text"]) <= 100 for x in ex["lines"])


def test_table_format_without_explain_is_a_usage_error():
    r = run_hc_inproc("parse", "sinfo", str(SINFO_AFTER_PROMPTS), "--format", "table")
    assert r.returncode == 4 and r.stderr.decode().count("\n") == 1


def test_the_recording_is_undone_after_the_parse():
    explain("nccl-tests", parser_for("nccl-tests"), NCCL_TESTS.read_text())
    assert nccl_tests.dispatch is lines.dispatch


def test_a_refusal_by_a_parser_without_handlers_says_so_plainly():
    text = SINFO_AFTER_PROMPTS.read_text().splitlines()[:2]  # the prompt and slurmd -C's line: no table
    r = run_hc_inproc("parse", "sinfo", "-", "--explain", input=("\n".join(text) + "\n").encode())
    assert r.returncode == 4 and "refused the text" in r.stdout.decode() and "refused: sinfo" in r.stdout.decode()
