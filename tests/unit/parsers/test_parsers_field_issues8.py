"""The mechanisms behind held-out-8's misses (issue 20's tenth round), each on the real
file and on a transformation of another real fixture (each says which): an editor's
markdown auto-links around file names and addresses; a job runner's `NAME [stderr] `
label; a log viewer's `[N] ` line numbers; a c10 message broken after its colon with the
WorkNCCL record on the next line; a watchdog line cut before its record; a `[rankN]:`
glued to a tqdm bar; an elided nvidia-smi table with an `ERR!` fan.
"""

from __future__ import annotations

import re

from support import CORPUS, FIXTURES, assert_linear

from healthcheck.parsers import lines as layer
from healthcheck.parsers.lines import pasted_lines, read_line, read_lines
from healthcheck.parsers.nccl_log import parse_nccl_log
from healthcheck.parsers.nvidia_smi_table import parse_nvidia_smi_table
from healthcheck.parsers.torch_log import parse_torch_log

FIELD8 = FIXTURES / "field" / "issues-8"
AUTOLINKED = FIELD8 / "nccl-log" / "md-blockquote-autolinked-files-and-ips-wq-error-status-9.txt"
RUNNER = FIELD8 / "torch-log" / "runner-stderr-prefix-watchdog-hard-wrapped-after-timeout.txt"
NUMBERED = FIELD8 / "torch-log" / "line-numbered-tqdm-then-watchdog-glued-to-progress-bar.txt"
ELIDED_TABLE = FIELD8 / "nvidia-smi" / "elided-table-rtx4000-ada-err-fan-gpu14.txt"
IB_COMPLETION = CORPUS / "nccl-debug" / "ib-completion-error4-vendor81-service-thread-connection-closed.txt"
WATCHDOG = CORPUS / "torch-watchdog" / "srun-label-prefixed-allreduce-seq52-watchdog-terminated-frames.txt"
MPICH_RANKS = CORPUS / "nccl-debug" / "nccl-2.5.6-256rank-bracket-rank-prefix-roce-mixed-ring-p2p-ipc.txt"

_SOURCE = re.compile(r"(?<![\w/.])([\w\-]{1,64}\.(?:cc|cpp|cu|h|py):\d{1,6})")
_ADDRESS = re.compile(r"(?<![\w.])(\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3})(?![\w.])")


def _autolinked(text: str) -> str:
    """Every `file.cc:N` and IPv4 address linked the way the real paste's editor did
    (`[net_ib.cc:101](http://net_ib.cc:101/)`): a transformation of a real fixture."""
    text = _SOURCE.sub(lambda m: f"[{m.group(1)}](http://{m.group(1)}/)", text)
    return _ADDRESS.sub(lambda m: f"[{m.group(1)}](http://{m.group(1)}/)", text)


def _runner_labelled(text: str) -> str:
    """Each line behind the real milabench label (a transformation)."""
    return "\n".join(f"dinov2-giant-nodes.cn-d004 [stderr] {line}" for line in text.split("\n"))


def _numbered(text: str, first: int = 1744) -> str:
    """Each line behind a log viewer's `[N] ` counting up from `first` (the real paste's
    shape; a transformation)."""
    return "\n".join(f"[{first + i}] {line}" for i, line in enumerate(text.split("\n")))


def _facts(log: object) -> tuple:
    return log.counts(), log.ranks, log.prefixed_ranks  # type: ignore[attr-defined]


# ---------------------------------------------------------------- an editor's auto-links


def test_an_autolinked_nccl_paste_names_its_hosts_and_the_vendor_error():
    log = parse_nccl_log(AUTOLINKED.read_text())
    assert [p.host for p in log.processes] == ["node201", "node023"]
    (completion,) = [w for w in log.warns if w.kind == "ib-completion"]
    assert (completion.host, completion.status, completion.vendor_err) == ("node023", 9, 138)
    assert completion.peer.startswith("10.1.3.201") and completion.src == "transport/net_ib.cc:1909"
    assert "access violation work queue error" in log.warns[0].text and log.warns[0].host == "node201"
    assert not log.unrecognized.count


def test_an_auto_link_is_the_text_it_links_and_a_real_link_stays():
    first = AUTOLINKED.read_text().splitlines()[0]
    (line,) = read_line(1, first[2:])
    assert line.text.startswith("node201:127799:127863 [0] transport/net_ib.cc:101 NCCL WARN")
    assert "autolink" in line.repairs
    assert layer.unlinked("[10.1.3.201](http://10.1.3.201/)<33057>") == "10.1.3.201<33057>"
    assert layer.unlinked("[proxy.cc:698](https://proxy.cc:698)") == "proxy.cc:698"
    assert layer.unlinked("[http://a.io/x](http://a.io/x/)") == "http://a.io/x"
    kept = "see [the docs](https://docs.nvidia.com/nccl) and [a](b c)"
    assert layer.unlinked(kept) == kept
    # the GPU tools' reading (pasted_lines) too
    assert pasted_lines("[00000000:C9:00.0](http://00000000:C9:00.0/)\n") == ["00000000:C9:00.0"]


def test_every_text_parser_reads_through_auto_links():
    # real NCCL and torch captures, every `file.cc:N` and address linked (a transformation)
    nccl = IB_COMPLETION.read_text()
    linked = _autolinked(nccl)
    assert linked != nccl and "](http://" in linked
    assert parse_nccl_log(linked) == parse_nccl_log(nccl)
    torch = WATCHDOG.read_text()
    assert _facts(parse_torch_log(_autolinked(torch))) == _facts(parse_torch_log(torch))


def test_unlinking_costs_its_length():
    def read(text: str) -> None:
        list(read_lines(text, max_line=10**7))
    for filler in ("[a](", "[", "[10.1.3.201](http://10.1.3.201/)", "[" + "a" * 300 + "](" + "b" * 600):
        assert_linear(read, filler * (100_000 // len(filler)), filler * (1_000_000 // len(filler)), what=filler)


# ---------------------------------------------------------------- a job runner's stream label


def test_a_runners_stream_label_comes_off_and_the_rank_is_read():
    first = RUNNER.read_text().splitlines()[0]
    (line,) = read_line(1, first)
    assert line.runner == "dinov2-giant-nodes.cn-d004 [stderr]" and line.rank == 14
    assert line.text.startswith("[Rank 14] Watchdog caught collective operation timeout:")
    assert read_line(1, "[stdout] hello")[0].text == "hello"
    # no runner label in the middle of a message, nor a word alone before another bracket
    assert read_line(1, "rank 3 saw [stderr] here")[0].text == "rank 3 saw [stderr] here"
    assert read_line(1, "node1 [stdin] x")[0].runner == ""


def test_a_runner_labelled_watchdog_broken_after_its_colon_names_its_rank():
    log = parse_torch_log(RUNNER.read_text())
    assert [(t.rank, t.pg_rank, t.seq, t.op_type, t.timeout_ms) for t in log.timeouts] == [
        (14, 14, 2070, "REDUCE", 600000), (12, 12, 2070, "REDUCE", 600000),
        (11, 11, 2070, "REDUCE", 600000), (15, 15, 2070, "REDUCE", 600000)]
    (progress,) = log.progress
    assert (progress.rank, progress.kind, progress.last_completed) == (12, "exception-at", 2069)
    assert not log.unrecognized.count


def test_every_text_parser_reads_behind_a_runners_label():
    # real NCCL and torch captures behind the real runner label (a transformation)
    nccl = IB_COMPLETION.read_text()
    assert parse_nccl_log(_runner_labelled(nccl)).warns == parse_nccl_log(nccl).warns
    torch = WATCHDOG.read_text()
    assert _facts(parse_torch_log(_runner_labelled(torch))) == _facts(parse_torch_log(torch))


# ---------------------------------------------------------------- a log viewer's line numbers


def test_a_log_viewers_line_numbers_come_off_and_the_cut_watchdog_names_its_rank():
    text = NUMBERED.read_text()
    assert layer.line_numbered(text.split("\n"))
    lines = list(read_lines(text))
    assert not any(line.text.lstrip().startswith("[17") for line in lines)
    assert all("line-number" in line.repairs for line in lines if line.raw.strip())
    log = parse_torch_log(text)
    (cut,) = log.cut_timeouts
    assert (cut.line, cut.rank, cut.pg_rank) == (20, 5, 5)
    assert cut.text == "Watchdog caught collective operati" and log.prefixed_ranks == (5,)


def test_line_numbers_are_taken_off_every_parsers_lines_but_never_ranks():
    # real NCCL and torch captures numbered the way the real paste is (a transformation)
    nccl = IB_COMPLETION.read_text()
    assert parse_nccl_log(_numbered(nccl)).warns == parse_nccl_log(nccl).warns
    torch = WATCHDOG.read_text()
    assert _facts(parse_torch_log(_numbered(torch))) == _facts(parse_torch_log(torch))
    table = (CORPUS / "nvidia-smi" / "rtx-err-fan-525.125.06.txt").read_text()
    assert parse_nvidia_smi_table(_numbered(table, 1)) == parse_nvidia_smi_table(table)
    # MPICH's `[N] ` ranks (real, 256 ranks) and numbers that do not count up are no viewer's
    assert not layer.line_numbered(MPICH_RANKS.read_text().split("\n"))
    assert not layer.line_numbered(["[0] a", "[1] b", "[2] c", "[3] d", "[4] e"])
    assert not layer.line_numbered(["[3] a", "[1] b", "[3] c", "[1] d", "[3] e"])


# ---------------------------------------------------------------- torn after a progress bar


def test_a_rank_label_glued_to_a_progress_bar_starts_a_line_of_its_own():
    last = NUMBERED.read_text().splitlines()[-1]
    bar = last[len("[1763] "):last.index("[rank5]")]
    # the real bar, then a traceback line (not a c10 one) glued to it: a transformation
    bar_line, ranked = read_line(1, bar + "[rank5]: Traceback (most recent call last):")
    assert bar_line.text == bar and bar_line.rank is None
    assert (ranked.rank, ranked.text, ranked.repairs) == (5, "Traceback (most recent call last):", ("torn",))
    assert len(read_line(1, "loss at [rank5]: 0.1")) == 1  # mid-line elsewhere: the text's own


# ---------------------------------------------------------------- nvidia-smi's bus ids


def test_an_elided_table_reads_its_gpus_and_an_err_fan_is_evidence():
    gpus = parse_nvidia_smi_table(ELIDED_TABLE.read_text()).gpus
    assert [(g.index, g.pci_bus_id, g.memory_total_mib) for g in gpus] == [
        (13, "0000:c9:00.0", 20475), (14, "0000:cc:00.0", 20475)]
    assert (gpus[1].fan_pct, gpus[1].errors, gpus[0].errors) == (None, ["fan"], [])
    # ERR! and [N/A] in the other numeric cells (a transformation of the real row)
    text = ELIDED_TABLE.read_text().replace("|ERR!   68C    P2             99W /  130W |",
                                            "|ERR!  ERR!    P2            ERR! /  130W |")
    assert text != ELIDED_TABLE.read_text()
    (_, err) = parse_nvidia_smi_table(text).gpus
    assert (err.temperature_c, err.power_draw_w, err.power_limit_w) == (None, None, 130.0)
    assert set(err.errors) == {"fan", "temperature", "power_draw"}

