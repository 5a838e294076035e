"""A big text log is read condensed (diagnose/condense.py, issue 22): the middle of each long
run of lines that differ only in digits left out, every kept line with its number in the
whole file. Differential: forced on every text fixture (no size threshold, runs of more than
5 lines condensed to their first and last 2), each file gives the same evidence, the same
numbers logged and the same time at every line it kept, and every job set the same verdict;
only the counts of lines no parser recognised, which no rule reads, may differ."""

from __future__ import annotations

import datetime as dt
from itertools import groupby

import msgspec
import pytest
from support import FIXTURES

from healthcheck.diagnose import condense, sources
from healthcheck.diagnose.condense import condensed
from healthcheck.diagnose.evidence import JobEvidence
from healthcheck.diagnose.sources import Collected, _is_binary, collect, read_data
from healthcheck.diagnose.verdict import build
from healthcheck.parsers.lines import NOTHING_UNREAD, numbered_as, read_line, read_lines
from healthcheck.parsers.torch_log import parse_torch_log

MAX_BYTES = 4 * 2**20
NOW = dt.datetime(2026, 11, 28, tzinfo=dt.timezone.utc)


def _texts() -> list[tuple[str, bytes]]:
    out = []
    for path in sorted(p for p in FIXTURES.rglob("*") if p.is_file()):
        data = path.read_bytes()
        if len(data) <= MAX_BYTES and data.strip() and not _is_binary(data):
            out.append((str(path.relative_to(FIXTURES)), data))
    return out


@pytest.fixture
def forced(monkeypatch):
    monkeypatch.setattr(condense, "BIG_TEXT_BYTES", 0)
    monkeypatch.setattr(condense, "RUN_KEEP", 2)


def _read(name: str, data: bytes) -> tuple[bytes, Collected]:
    col = Collected(evidence=JobEvidence(job="x", collected_at="2026-11-28T00:00:00Z"))
    read_data(name, data, col, 2026)
    ev = col.evidence
    ev.nccl_logs = [f if f.log is None else msgspec.structs.replace(
        f, log=msgspec.structs.replace(f.log, unrecognized=NOTHING_UNREAD)) for f in ev.nccl_logs]
    ev.torch_logs = [f if f.log is None else msgspec.structs.replace(  # the rules read loop_rounds >= 2 only
        f, log=msgspec.structs.replace(f.log, unrecognized=NOTHING_UNREAD, loop_rounds=min(f.log.loop_rounds, 2)))
        for f in ev.torch_logs]
    return msgspec.json.encode([ev, col.logged]), col


def _times(col: Collected, lines: list[int]) -> list:
    out = []
    for stamps in col.stamps.values():
        ranks = [None, *stamps.by_rank, *col.evidence.ranks]
        out.append([stamps.at(n, r) for n in lines for r in ranks])
    return out


def _differing(first_only: bool = False) -> tuple[list[str], int]:
    """The fixtures whose condensed reading differs from the whole one, and how many condensed
    (`first_only`: up to the first that differs, enough to show the comparison can fail)."""
    differing: list[str] = []
    condensed_files = 0
    for name, data in _texts():
        if first_only and differing:
            break
        text = data.decode("utf-8", errors="replace")
        big = condensed(data, text)
        if big is None:
            continue
        condensed_files += 1
        fast, fast_col = _read(name, data)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(condense, "BIG_TEXT_BYTES", 10**12)
            whole, whole_col = _read(name, data)
        if fast != whole or _times(fast_col, big.numbers) != _times(whole_col, big.numbers):
            differing.append(name)
    return differing, condensed_files


def test_every_fixture_log_gives_the_same_evidence_read_condensed(forced):
    differing, condensed_files = _differing()
    assert condensed_files > 25  # the forced runs condense dozens of fixtures (32 today), not a handful
    assert differing == []


def _job_sets() -> list:
    roots = [FIXTURES / "diagnose", FIXTURES / "diagnose-field", FIXTURES / "h100-captures"]
    return sorted(d for root in roots for d in root.iterdir() if d.is_dir())


def _judged(path) -> bytes:
    col = collect([path], now=NOW)
    verdict = build(col)
    return msgspec.json.encode({"class": verdict.cls, "ranks": [o.rank for o in verdict.odd_ranks],
                                "findings": [(f.cls, f.ranks) for f in verdict.findings]})


@pytest.mark.parametrize("path", _job_sets(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_job_set_gets_the_same_verdict_read_condensed(path, monkeypatch):
    whole = _judged(path)
    monkeypatch.setattr(condense, "BIG_TEXT_BYTES", 0)
    monkeypatch.setattr(condense, "RUN_KEEP", 2)
    assert _judged(path) == whole


def test_below_the_threshold_a_text_is_read_whole():
    """The invariant: at or below BIG_TEXT_BYTES nothing is condensed (every fixture reads as ever)."""
    text = "".join(f"2026-11-27 13:11:{s % 60:02d},000 INFO rank0 step {s} loss 0.5\n" for s in range(500))
    data = text.encode()
    assert len(data) < condense.BIG_TEXT_BYTES and condensed(data, text) is None


def test_a_long_run_keeps_its_ends_with_their_numbers(forced):
    steps = "".join(f"2026-11-27 13:11:{s % 60:02d},000 INFO rank0 step {s} loss 0.5\n" for s in range(100))
    text = "start\n" + steps + "Traceback (most recent call last):\n"
    big = condensed(text.encode(), text)
    assert big is not None
    assert big.numbers == [1, 2, 3, 100, 101, 102, 103]
    with numbered_as(big.numbers):
        read = [(line.number, line.text) for line in read_lines(big.text)]
    assert read[3] == (100, "INFO rank0 step 98 loss 0.5") and read[5][0] == 102
    log = parse_torch_log(big.text, rank_output=True)
    assert [s.step for s in log.last_steps] == [99]


@pytest.mark.parametrize("run", [
    "".join(f"[rank{r % 2}]: step {r} loss 0.5\n" for r in range(40)),  # a label: two ranks' lines
    "".join(f"INFO rank{r % 2} step {r} loss 0.5\n" for r in range(40)),  # a rank named in words
    "".join(f"step {r} loss 0.5 on rank{1 if r < 20 else 12}\n" for r in range(40)),  # ... at the line's end
    "".join(f"[Rank {r // 20}] step {r} of ranks 0-1\n" for r in range(40)),  # torch's own words, two ranks
    "".join(f"gpu00{r % 2}: step {r} loss 0.5\n" for r in range(40)),  # a parallel shell's hosts
    "".join(f"[{r}] step loss 0.5\n" for r in range(40)),  # a viewer's line numbers
    "".join(f"host:1:2 [0] NCCL INFO Channel {r:02d}/32 : 0 1\n" for r in range(40)),  # NCCL's lines
])
def test_a_run_whose_lines_differ_by_source_is_read_whole(forced, run):
    assert condensed(run.encode(), run) is None


def test_the_differential_catches_a_condensing_that_drops_a_ranks_lines(forced, monkeypatch):
    """The comparison can fail: condensing runs whatever their source (two ranks' step
    lines interleaved), a rank's last step is left out and the fixtures that show it differ."""
    monkeypatch.setattr(condense, "_condensable", lambda *_: True)
    differing, _ = _differing(first_only=True)  # every fixture read twice is 20 s of CI's CPU
    assert differing


def test_the_bench_shape_condenses_to_its_ends():
    """A rank's log as bin/bench writes it, past the threshold: its step lines condensed, its
    NCCL lines and its end kept, every kept line's number the whole file's."""
    steps = "".join(f"2026-11-27 13:{s // 60 % 60:02d}:{s % 60:02d},000 INFO rank3 step {s} loss {s % 97 / 7:.4f}\n"
                    for s in range(30000))
    text = "gpu0:1:2 [0] NCCL INFO NCCL version 2.28.9\n" + steps + "[rank3]:[E1127 13:51:30] Watchdog caught\n"
    big = condensed(text.encode(), text)
    assert big is not None and len(big.numbers) == 2 + 2 * condense.RUN_KEEP + 1
    assert big.numbers[-2:] == [30002, 30003]
    assert sources._stamps(big.text, 2026, big.numbers).at(30002) == sources._stamps(text, 2026).at(30002)


def test_a_text_whose_shape_the_kept_lines_would_decide_otherwise_is_read_whole(forced):
    """A process manager's `worker-N | ` labels on a third of the lines: no majority over the
    whole text, a majority over the kept lines once the step lines are condensed. Read whole,
    so the labels are read (or not) as over the whole text."""
    labelled = "".join(f"worker-{r % 2} | [rank{r % 2}]: hello {r}\n" for r in range(20))
    steps = "".join(f"2026-11-27 13:11:{s % 60:02d},000 INFO step {s} loss 0.5\n" for s in range(40))
    text = labelled + steps
    assert condensed(text.encode(), text) is None
    assert condensed(steps.encode(), steps) is not None


def test_a_text_whose_ci_clock_stamps_the_kept_lines_would_decide_otherwise_is_read_whole(forced):
    """A CI runner's `HH:MM:SS   ` stamps on the first lines only (round 24's clock_stamped,
    decided over the first lines): too few of the whole text's first lines to be a CI paste,
    most of the kept ones once the run after them is condensed. Read whole."""
    words = ("OK", "ran", "tests", "passed", "failed", "setup", "teardown", "collect", "done", "skip",
             "xfail", "error", "warn", "cache", "build", "link", "lint", "types", "docs", "bench")  # no run
    stamped = "".join(f"15:50:32   {word}\n" for word in words)
    steps = "".join(f"2026-11-27 13:11:{s % 60:02d},000 INFO step {s} loss 0.5\n" for s in range(400))
    text = stamped + steps
    assert condensed(text.encode(), text) is None
    assert condensed(steps.encode(), steps) is not None


def test_a_text_whose_widest_lines_follow_one_another_is_read_whole(forced):
    """Lines exactly as wide as the line before them, nothing taken off them, and no line
    wider are how a terminal's hard wrap is told (lines.terminal_width): where a condensed
    run's lines could be such pieces (no stamp taken off them), a text whose widest lines
    follow one another, or whose widest line would be left out, is read whole; where a stamp
    comes off every left-out line, none of them counts and the text is condensed."""
    wrapped = "x" * 90 + "\n" + "y" * 90 + "\nend of the message\n"
    bare = "".join(f"step {s} loss 0.5 lr 0.001 grad norm 1.0 tokens per second 1000\n" for s in range(40))
    stamped = "".join(f"2026-11-27 13:11:{s % 60:02d},000 INFO step {s} loss 0.5\n" for s in range(40))
    assert condensed((wrapped + bare).encode(), wrapped + bare) is None
    assert condensed((wrapped + stamped).encode(), wrapped + stamped) is not None
    widest_inside = "".join(f"step {s} loss 0.5 lr 0.001 grad norm 1.0 tokens per second 1000\n" for s in range(1, 100))
    assert condensed(widest_inside.encode(), widest_inside) is None  # steps 10..99 the widest, one after another
    widest_left_out = bare.replace("step 20 ", "step 200000 ")
    assert condensed(widest_left_out.encode(), widest_left_out) is None
    stamped_left_out = stamped.replace("step 20 ", "step 200000 ")  # no pair of stamped lines counts
    assert condensed(stamped_left_out.encode(), stamped_left_out) is not None


def test_a_condensed_logs_kernel_events_and_facts_keep_the_whole_files_lines(forced):
    """A training log that holds a kernel line (a real Xid, tests/fixtures/corpus/xid-dmesg) after
    its step lines: read condensed, the Xid's and the traceback's lines are the whole file's."""
    xid = next(line for line in (FIXTURES / "corpus" / "xid-dmesg" / "xid48-63-94-dbe-rowremap-contained.txt")
               .read_text().splitlines() if "NVRM: Xid" in line)
    steps = "".join(f"2026-11-27 13:11:{s % 60:02d},000 INFO rank0 step {s} loss 0.5\n" for s in range(200))
    text = steps + xid + "\nTraceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n" \
        "RuntimeError: CUDA error: uncorrectable ECC error encountered\n"
    assert condensed(text.encode(), text) is not None
    fast, fast_col = _read("rank0.log", text.encode())
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(condense, "BIG_TEXT_BYTES", 10**12)
        whole, whole_col = _read("rank0.log", text.encode())
    assert fast == whole
    assert [k.line for k in fast_col.evidence.kernel] == [201]
    assert [e.line for e in fast_col.evidence.torch_logs[0].log.exceptions] == [204]


# ---------------------------------------------------------------- the runs found over the bytes


def _reference(data: bytes, text: str) -> tuple[str, list[int]] | None:
    """condense.condensed as it was first written, one line at a time: every line's template
    (digits one mark, runs of marks one), `groupby`, the shapes and the widths over every line.
    The runs found over the bytes in stretches (template_runs) must give exactly this."""
    if len(data) <= condense.BIG_TEXT_BYTES or "\n" not in text:
        return None
    keep, raw = condense.RUN_KEEP, text.split("\n")
    marked = data.translate(bytes.maketrans(b"0123456789", b"\0" * 10))
    while b"\0\0" in marked:
        marked = marked.replace(b"\0\0", b"\0")
    kept: list[int] = []
    at, bare = 0, False
    for _, group in groupby(marked.split(b"\n")):
        n = len(list(group))
        run = raw[at:at + n]
        if n > 2 * keep + 1 and condense._condensable(run[0], run[-1], n, lambda run=run: "\n".join(run) + "\n"):
            kept += [*range(at, at + keep), *range(at + n - keep, at + n)]
            bare = bare or not read_line(1, raw[at])[0].labels
        else:
            kept.extend(range(at, at + n))
        at += n
    lines = [raw[i] for i in kept]
    pipes = " | " in text
    if len(kept) == len(raw) or condense._shapes(lines, pipes) != condense._shapes(raw, pipes):
        return None
    widths = list(map(len, raw))
    widest, kept_widths = max(widths), [widths[i] for i in kept]
    if not bare:
        if max(kept_widths) != widest and any(kept_widths[n - 1] == kept_widths[n] == max(kept_widths)
                                             and not read_line(1, lines[n])[0].labels for n in range(1, len(kept))):
            return None
    elif max(kept_widths) != widest or any(
            b - a == 1 for pairs in ([n for n, w in enumerate(widths) if w == widest],
                                     [n for n, w in enumerate(kept_widths) if w == widest])
            for a, b in zip(pairs, pairs[1:], strict=False)):
        return None
    return "\n".join(lines), [i + 1 for i in kept]


def _tricky_texts() -> list[str]:
    """Texts whose runs the stretches must join and split exactly as line by line: counters
    that grow a digit, numbers that appear and vanish, characters of several bytes and bytes
    no character is, CRs, no last newline, blank lines, the widest lines inside a run."""
    steps = [f"2026-11-27 13:11:{s % 60:02d},000 INFO rank0 step {s} loss {s % 97 / 7:.4f}" for s in range(300)]
    return [
        "\n".join(steps) + "\n",
        "\n".join(steps),  # no last newline
        "\n".join(steps[:50]) + "\n\n\n\n" + "\n".join(steps[50:]) + "\n\n",
        "".join(f"step {s} ✓ loss é{s % 3}\n" for s in range(200)),  # characters of two and three bytes
        "".join(f"step {s} loss {s}\r\n" for s in range(200)),
        "".join(f"step {s}{'' if s % 40 else ' x'} loss 1.{s}\n" for s in range(300)),  # a word now and then
        "".join(f"step {s}.{s} loss\n" if s % 50 else f"step {s} loss\n" for s in range(300)),
        "".join(f"[rank{s // 100}]: step {s}\n" for s in range(300)),
        "".join(f"step {s} loss 0.5 lr 0.001 grad norm 1.0 tokens per second 1000\n" for s in range(1, 300)),
        "\n".join(steps[:40]) + "\n" * 60 + "\n".join(steps[40:]),  # a run of blank lines
        "a\nbb\n" + "\n" * 60 + "ccc\n",  # ... condensed
        # the widest lines two of another digit count each, one after the other, in the left-out middle
        "step 100 loss 1000\n" + "step 1 loss 1\n" * 20 + "step 1000 loss 100\nstep 10 loss 10000\n"
        + "step 1 loss 1\n" * 20,
    ]


def test_the_runs_found_over_the_bytes_condense_as_line_by_line(forced):
    """template_runs (stretches of identical digit-marked lines compared in C, a template
    made once a stretch) condenses every text fixture and the tricky texts exactly as the
    line-by-line reading it replaced: the same kept text, the same numbers."""
    cases = [data for _, data in _texts()] + [t.encode() for t in _tricky_texts()]
    cases.append("".join(f"step {s} \xff loss\n" for s in range(100)).encode("latin-1") + b"\xc3\nend\n")
    condensed_cases = 0
    for data in cases:
        text = data.decode("utf-8", errors="replace")
        big = condensed(data, text)
        assert (big and (big.text, big.numbers)) == _reference(data, text), text[:200]
        condensed_cases += big is not None
    assert condensed_cases > 30


def test_a_run_counted_over_its_bytes_counts_as_its_decoded_lines():
    """`_run_count` (over the bytes, no decoding) gives what the decoded run's count gives for
    an ASCII string, invalid UTF-8 beside it and the text's last line without a newline; a
    count that forgot that newline would differ."""
    data = b"x\n" + b"\xe2rank3 step 1 \xff\xfe\n" * 5 + b"\xe2rank3 step 2 \xff\xfe"
    run = condense.Run(first=1, count=6, start=2, end=len(data), widths=[(6, 15)])
    lines = condense._run_lines(data, run)()
    for literal in ("rank3 ", "rank3", "step 2 ", "\n", " \ufffd\n"[:1] + "\n", "x", "e2"):
        assert condense._run_count(data, run)(literal) == lines.count(literal), literal
    ended = b"x\n" + b"\xe2rank3 end\n" * 5 + b"\xe2rank3 end"  # the last line ends in ASCII, no newline
    run = condense.Run(first=1, count=6, start=2, end=len(ended), widths=[(6, 10)])
    lines = condense._run_lines(ended, run)()
    assert condense._run_count(ended, run)("end\n") == lines.count("end\n") == 6


def test_a_text_marked_as_the_one_before_is_given_its_runs_and_condenses_the_same(forced):
    """template_runs keeps the last ASCII text's runs by its digit-marked bytes: a text the
    same but for its digits' values (another rank's file of the job) gets those runs again
    (the same objects), and every fixture and tricky text read right after such a copy of
    itself still condenses as the line-by-line reading; a text marked otherwise is run afresh."""
    cases = [data for _, data in _texts()] + [t.encode() for t in _tricky_texts()]
    other_digits = bytes.maketrans(b"0123456789", b"1234567890")
    again = 0
    for data in cases:
        before = condense.template_runs(data.translate(other_digits))
        runs = condense.template_runs(data)
        reused = len(runs) == len(before) and all(a is b for a, b in zip(runs, before, strict=True))
        assert reused == data.isascii(), data[:200]
        again += reused
        text = data.decode("utf-8", errors="replace")
        big = condensed(data, text)
        assert (big and (big.text, big.numbers)) == _reference(data, text), text[:200]
    assert again > 30
    condense.template_runs(b"step 1\n" * 40)
    runs = condense.template_runs(b"step 10\n" * 40)
    assert (runs[0].count, runs[0].widths) == (40, [(40, 7)])  # not the 6-wide runs of `step 1`
