"""What parsers did on their own and the line layer (parsers/lines.py) now does for all of
them (issue 20): a handler's prefix guard, the shared empty `Unrecognized`, a whole
paste's indent, reading a line with every matching handler, Python logging's prefix,
Ray's dedup suffix; and `hc parse --explain` for xid and perftest. Each on real fixtures
(the fixtures' SOURCES.md name them)."""

from __future__ import annotations

import msgspec
from support import FIXTURES

from healthcheck.parsers import lines, parser_for
from healthcheck.parsers.explain import explain

CORPUS = FIXTURES / "corpus"
INDENTED_GREP = FIXTURES / "field" / "repos" / "nccl-log" / "grep-selected-provider-efa-32-nics-no-prefix.txt"
RAY = CORPUS / "torch-watchdog" / "ray-dedup-repeated-across-cluster-allreduce-seq1-pg0-default-pg.txt"
BASIC_LOG = CORPUS / "torchrun" / "old-logger-format-sigterm-siblings-failed-exitcode-9-local-rank-3.txt"
BRACKET_LOG = CORPUS / "torchrun" / "torch-1.9-elastic-launch-configs-then-error-handler-json-rendezvous-connection.txt"
XID79 = FIXTURES / "kernel-log" / "dmesg-xid79-serial-crash-dump.txt"
PERFTEST = FIXTURES / "ib_write_bw" / "client-bidir-4qp-all-sizes-ainic-800g.txt"


def _line(text: str, number: int = 1) -> lines.Line:
    return lines.Line(number=number, raw=text, text=text)


def test_starts_is_the_layers_prefix_guard_for_every_parser():
    from healthcheck.parsers import nccl_log, nccl_ras

    guard = lines.starts("NET/OFI ", "P2P plugin ")
    assert guard("NET/OFI Selected Provider is efa") and not guard(" NET/OFI x")
    assert not hasattr(nccl_log, "_starts") and not hasattr(nccl_ras, "_starts")


def test_the_empty_unrecognized_is_shared_and_omitted_under_omit_defaults():
    class Facts(msgspec.Struct, frozen=True, omit_defaults=True):
        unrecognized: lines.Unrecognized = lines.NOTHING_UNREAD

    empty = lines.UnrecognizedLines()
    assert empty.frozen_or_nothing() is lines.NOTHING_UNREAD
    assert msgspec.to_builtins(Facts(unrecognized=empty.frozen_or_nothing())) == {}
    empty.note(_line("some line"))
    assert msgspec.to_builtins(Facts(unrecognized=empty.frozen_or_nothing()))["unrecognized"]["count"] == 1


def test_an_indented_prompt_of_a_paste_indented_as_a_whole_is_noise():
    # the real paste: `    $ cat nccl-all_reduce_perf_2.out | grep "Selected Provider is"`, then NCCL lines
    read = list(lines.read_lines(INDENTED_GREP.read_text()))
    assert read[0].noise == "prompt" and not any(line.noise for line in read[1:])
    assert lines.unindented(read[1].text).startswith("NCCL INFO")
    assert lines.unindented(" " * 40 + "$ x") == " " * 40 + "$ x"  # deeper than a paste's indent: the text's own


def test_read_every_and_chained_let_every_matching_handler_read_a_line():
    seen: list[str] = []

    def reader(name: str):
        return lambda state, line: seen.append(name) is None

    table = lines.chained([lines.Handler("a", lambda t: "x" in t, reader("a")),
                           lines.Handler("b", lambda t: "y" in t, reader("b")),
                           lines.Handler("c", lambda t: "x" in t, reader("c"))])
    assert lines.dispatch(table, None, _line("x y")) == "a" and seen == ["a", "b", "c"]
    seen.clear()
    assert lines.read_every(table[1:], None, _line("x")) and seen == ["c"]


def test_python_loggings_prefixes_are_taken_off_with_their_logger_and_time():
    basic = next(t for t in BASIC_LOG.read_text().splitlines() if t.startswith("WARNING:torch"))
    line = lines.python_logging(_line(basic))
    assert (line.logger, line.level, line.source.startswith("torch.distributed")) == ("pylog", "W", True)
    assert not line.text.startswith("WARNING")
    bracket = next(t for t in BRACKET_LOG.read_text().splitlines() if t.startswith("[INFO] 20"))
    line = lines.python_logging(_line(bracket))
    assert (line.stamp_kind, line.stamp, line.source) == ("pylog", "2021-09-13 22:17:26,651", "run")
    assert line.text.startswith("Running torch.distributed.run")


def test_rays_repeated_suffix_comes_off_with_its_runner_prefix():
    read = [line for line in lines.read_lines(RAY.read_text()) if "across cluster" in line.raw]
    assert read and all(line.runner and "[repeated" not in line.text and "repeated" in line.repairs for line in read)


def test_xid_and_perftest_explain_each_line():
    for tool, path, named in (("xid", XID79, {"xid", "gpu-lost", "crash-dump", "continuation"}),
                              ("ib_write_bw", PERFTEST, {"title", "table-header", "row", "banner-fields"})):
        facts, explanation = explain(tool, parser_for(tool), path.read_text())
        assert facts is not None and explanation.how == "handlers", tool
        assert named <= set(explanation.counts), (tool, explanation.counts)
