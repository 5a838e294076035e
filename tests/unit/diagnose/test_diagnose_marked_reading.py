"""The fast path of `hc diagnose logs` (issue 22): NCCL's parser reads only the lines its
marks find (parsers/nccl_log.NCCL_MARKS through lines.marked_lines). Differential: with and
without it, every log under tests/fixtures gives the same NCCL facts, and every job set
the same evidence and verdict; only the count of unread lines, which no rule reads, may
differ. And the text is read once for the torch log parser and read_logged where the two
readings agree (loggednumbers.same_reading): the same numbers logged on every fixture."""

from __future__ import annotations

import datetime as dt
import re

import msgspec
import pytest
from support import FIXTURES, fixture_texts

from healthcheck.core.errors import ParseError
from healthcheck.diagnose import sources
from healthcheck.diagnose.loggednumbers import read_logged, same_reading
from healthcheck.diagnose.sources import collect
from healthcheck.diagnose.verdict import build
from healthcheck.parsers import nccl_log
from healthcheck.parsers.lines import NOTHING_UNREAD, marked_lines
from healthcheck.parsers.nccl_log import NcclLog, parse_nccl_log
from healthcheck.parsers.torch_log import read_torch_lines


def _texts() -> list[tuple[str, str]]:
    return list(fixture_texts())


def _nccl(text: str, marked_only: bool) -> NcclLog | str:
    try:
        return msgspec.structs.replace(parse_nccl_log(text, marked_only=marked_only), unrecognized=NOTHING_UNREAD)
    except ParseError as exc:
        return f"ParseError: {exc}"


def _differing(texts: list[tuple[str, str]]) -> list[str]:
    return [name for name, text in texts if _nccl(text, False) != _nccl(text, True)]


def test_every_fixture_log_gives_the_same_nccl_facts_with_the_fast_path():
    texts = _texts()
    assert len(texts) > 2000  # every set: diagnose, diagnose-jobs, diagnose-field, field, corpus
    assert {name.split("/")[0] for name, _ in texts} >= {"diagnose", "diagnose-jobs", "diagnose-field", "field",
                                                         "corpus"}
    assert _differing(texts) == []


def test_the_differential_catches_a_mark_the_fast_path_lacks(monkeypatch):
    """The comparison above can fail: without split_sourced_warn's ` WARN ` mark, or the
    old prefix's `host:pid:tid [dev]`, the fixtures that hold only such lines differ."""
    texts = [(n, t) for n, t in _texts() if "WARN " in t or re.search(r":\d{1,10}:\d{1,10}[ \t]\[", t)]
    weaker = re.compile(nccl_log.NCCL_MARKS.pattern.replace("|WARN ", "").replace(r"|:\d{1,10}:\d{1,10}[ \t]\[", ""))
    monkeypatch.setattr(nccl_log, "NCCL_MARKS", weaker)
    assert _differing(texts)


def test_a_mend_inside_a_line_turns_the_fast_path_off():
    # a colour code whose ESC was lost, inside NCCL's word: the layer joins what the raw text splits
    text = "gpu1:12:13 [0] NC[0;31mCL WARN Call to connect failed\nsome other line\n"
    assert marked_lines(text, text.splitlines(), nccl_log.NCCL_MARKS) is None
    assert marked_lines("x NCCL y\nz\nw\nv\n", ["x NCCL y", "z", "w", "v"], nccl_log.NCCL_MARKS) == {1, 2, 4}


def _job_sets() -> list:
    roots = [FIXTURES / "diagnose", FIXTURES / "diagnose-field", FIXTURES / "h100-captures"]
    return sorted(d for root in roots for d in root.iterdir() if d.is_dir())


def _judged(path) -> bytes:
    col = collect([path], now=dt.datetime(2026, 11, 28, tzinfo=dt.timezone.utc))
    verdict = build(col)
    col.evidence.nccl_logs = [f if f.log is None else msgspec.structs.replace(
        f, log=msgspec.structs.replace(f.log, unrecognized=NOTHING_UNREAD)) for f in col.evidence.nccl_logs]
    return msgspec.json.encode([col.evidence, verdict])


@pytest.mark.parametrize("path", _job_sets(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_job_set_gets_the_same_evidence_and_verdict_with_the_fast_path(path, monkeypatch):
    fast = _judged(path)
    monkeypatch.setattr(sources, "NCCL_MARKED_ONLY", False)
    assert _judged(path) == fast


def _logged(text: str, lines: list | None) -> dict:
    into: dict = {}
    read_logged(text, None, into, lines)
    read_logged(text, 7, into, lines)  # and as one rank's own file
    return into


def test_every_fixture_log_gives_the_same_logged_numbers_from_the_torch_parsers_lines():
    """hc diagnose logs reads a text once for the torch log parser and read_logged, where
    same_reading says the two readings agree: on every fixture log, what each rank logged
    is what read_logged's own reading finds."""
    differing, shared = [], 0
    for name, text in _texts():
        lines = read_torch_lines(text)
        if same_reading(text, lines):
            shared += 1
            if _logged(text, lines) != _logged(text, None):
                differing.append(name)
    assert shared > 2000 and differing == []


def test_a_parallel_shells_hosts_or_a_cut_last_word_read_the_text_again():
    """The torch parser takes pdsh's `HOST: ` off and the last word of a text cut inside it;
    read_logged does neither, so those texts are read again (else the numbers differ)."""
    pdsh = "".join(f"gpu00{r}: [rank{r}]: sharded 1 layer: {256 + (r == 2)} of 768 params here\n" for r in range(4))
    assert not same_reading(pdsh, read_torch_lines(pdsh))
    assert _logged(pdsh, read_torch_lines(pdsh)) != _logged(pdsh, None)
    cut = "[rank0]: sharded 1 layer: 256 of 768 params here\n[rank1]: sharded 1 layer: 256 of 7"
    assert not same_reading(cut, read_torch_lines(cut))


def test_tail_headers_name_the_file_of_marked_lines_as_of_every_line():
    """No fixture log holds tail's `==> FILE <==` headers: the differential over a real
    capture put under two of them (the header names the file of the lines after it, so
    the fast path reads every header)."""
    real = (FIXTURES / "h100-captures" / "nccl-watchdog-timeout-1rank" / "nccl.vm.636.log").read_text()
    text = "==> logs/a.log <==\n" + real + "\nsome output\n\n==> logs/b.log <==\n" + real
    assert _nccl(text, True) == _nccl(text, False) and not isinstance(_nccl(text, True), str)
    raw = text.split("\n")[:-1]
    headers = {n for n, line in enumerate(raw, 1) if line.startswith("==> ")}
    wanted = marked_lines(text, raw, nccl_log.NCCL_MARKS)
    assert len(headers) == 2 and wanted is not None and headers <= wanted
