"""The torch log parser tests each distinct text of a parse once (`lines.HandlersByText`,
issue 22): a text that comes again (a communicator's NCCL init lines, word for word for each
communicator) is read through the handlers whose tests held the first time.
Differential: every text fixture parses to the same TorchLog with it as through the whole
table on every line."""

from __future__ import annotations

import re
import types
from collections.abc import Iterator

import msgspec
import pytest
from support import fixture_texts

from healthcheck.core.errors import ParseError
from healthcheck.parsers import lines
from healthcheck.parsers.lines import HandlersByText, dispatch
from healthcheck.parsers.torch_log import parse_torch_log, reader


def _texts() -> list[tuple[str, str]]:
    return list(fixture_texts())


def _parsed(text: str) -> bytes:
    try:
        return msgspec.json.encode(parse_torch_log(text, rank_output=True))
    except ParseError as exc:
        return str(exc).encode()


def _differing(texts: list[tuple[str, str]]) -> list[str]:
    tested = [_parsed(text) for _, text in texts]
    with pytest.MonkeyPatch.context() as mp:
        # every handler tested on every line, a chained handler's rest tested again (read_every)
        mp.setattr(HandlersByText, "dispatch", lambda self, state, line: dispatch(self.handlers, state, line))
        mp.setattr(reader, "IDLE_SKIP", False)  # and no line left unasked while the parser is idle
        whole = [_parsed(text) for _, text in texts]
    return [name for (name, _), a, b in zip(texts, tested, whole, strict=True) if a != b]


# lines that come again, some of them read by a handler whose reading depends on what came before
_AGAIN = ("gpu0:1:1 [0] NCCL INFO NCCL version 2.28.9+cuda13.0\n"
          "[rank0]:[E1127 13:51:30.1 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation "
          "timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
          "600003 milliseconds before timing out.\n"
          "Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n"
          "RuntimeError: NCCL error: unhandled system error\n") * 3


def test_every_fixture_parses_the_same_with_each_text_tested_once():
    texts = [*_texts(), ("again", _AGAIN)]
    assert len(texts) > 1000
    assert _differing(texts) == []


def test_the_differential_catches_a_table_kept_for_another_text(monkeypatch):
    """The comparison can fail: tables kept by a text's first 30 characters (lines of one
    NCCL process share them) read lines through another line's handlers, and facts differ."""
    real = HandlersByText.tested
    monkeypatch.setattr(HandlersByText, "tested", lambda self, text: real(self, text[:30]))
    assert _differing([("again", _AGAIN), *_texts()[:400]])


def test_the_differential_catches_a_chain_whose_rest_is_left_out(monkeypatch):
    """The comparison can fail where a chained handler's rest is taken from the tested table:
    a rest left out (only the first message of a line read) changes facts (a watchdog
    timeout's line also holds the abort and the NCCL error)."""
    monkeypatch.setattr(lines, "tested_reads", lambda found, text: tuple(
        (h.name, h.read.read if isinstance(h.read, lines.ChainedRead) else h.read) for h in found))
    monkeypatch.setattr(reader, "TESTED", HandlersByText(reader.HANDLERS, digit_blind=True))
    assert _differing([("again", _AGAIN), *_texts()[:400]])


def test_the_differential_catches_a_line_left_unasked_that_a_handler_reads_while_idle(monkeypatch):
    """The comparison can fail where a quiet line is left unasked (reader.quiet, idle): with
    `nccl-version` counted as quiet the NCCL version lines go unread, and facts differ."""
    monkeypatch.setattr(reader, "IDLE_QUIET", reader.IDLE_QUIET | {"nccl-version"})
    monkeypatch.setattr(reader, "_QUIET", {})
    monkeypatch.setattr(reader, "_QUIET_TABLES", {})
    assert _differing([("again", _AGAIN), *_texts()[:400]])


def test_a_text_a_quiet_handler_reads_while_idle_is_not_quiet(monkeypatch):
    """What the idle handlers read by its text alone is asked: a box's tail, the line before a
    box's title, the stall inspector's block, an exception; an NCCL INFO line is not."""
    monkeypatch.setattr(reader, "_QUIET", {})
    monkeypatch.setattr(reader, "_QUIET_TABLES", {})
    assert reader.quiet("gpu0:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM")
    for text in ("Root Cause (first observed failure):", "torch.distributed.elastic.ChildFailedError:",
                 "Missing ranks:", "RuntimeError: NCCL error", "  exitcode  : -9 (pid: 14750)",
                 "gpu0:1:1 [0] NCCL INFO NCCL version 2.28.9+cuda13.0"):
        assert not reader.quiet(text), text


def test_the_handlers_are_named_once():
    """reader.quiet goes by the handlers' names: no two of the table share one."""
    names = [h.name for h in reader.HANDLERS]
    assert len(names) == len(set(names))


def test_the_tables_kept_are_bounded_and_start_again(monkeypatch):
    """A process's kept tables (reader.TESTED serves every parse) never pass
    TESTED_TEXTS_MAX texts: full, they start again, and a text is still answered right."""
    monkeypatch.setattr(lines, "TESTED_TEXTS_MAX", 8)
    seen = HandlersByText(reader.HANDLERS)
    for n in range(40):
        names = [h.name for h in seen.table(f"gpu0:1:1 [0] NCCL INFO NCCL version 2.{n}.9")]
        assert len(seen.holding) <= 8
        assert "nccl-version" in names


def test_a_text_seen_again_is_tested_once():
    seen = HandlersByText(reader.HANDLERS)
    first = seen.table("gpu0:1:1 [0] NCCL INFO NCCL version 2.28.9")
    assert seen.table("gpu0:1:1 [0] NCCL INFO NCCL version 2.28.9") is first
    assert "nccl-version" in [h.name for h in first]


# ---------------------------------------------------------------- digit-blind tests

_ZEROED = str.maketrans("123456789", "000000000")


def _regex_words(pattern: str) -> str:
    """A pattern's text without what is blind to digits' values: `\\d`, `\\D` and counts."""
    return re.sub(r"\\[dD]|\{\d+(?:,\d*)?\}", "", pattern)


def _looked_for(obj: object, seen: set[int]) -> Iterator[str]:
    """Every string a test (a function) may look for: its code's constants, nested code too,
    the strings, tuples of strings and patterns it names in its module (or a module it names),
    the functions it calls there, and its closure's cells."""
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, re.Pattern):
        yield _regex_words(str(obj.pattern))
    elif isinstance(obj, (tuple, list, frozenset, set)):
        for item in obj:
            yield from _looked_for(item, seen)
    elif isinstance(obj, types.CodeType):
        for const in obj.co_consts:
            yield from _looked_for(const, seen)
    elif isinstance(obj, types.FunctionType):
        yield from _looked_for(obj.__code__, seen)
        for cell in obj.__closure__ or ():
            yield from _looked_for(cell.cell_contents, seen)
        names = obj.__code__.co_names
        found = [obj.__globals__[n] for n in names if n in obj.__globals__]
        modules = [g for g in found if isinstance(g, types.ModuleType)]
        found += [getattr(m, n) for m in modules for n in names if hasattr(m, n)]
        for g in found:
            if not isinstance(g, types.ModuleType):
                yield from _looked_for(g, seen)


def _digit_words(when: object) -> list[str]:
    return [w for w in _looked_for(when, set()) if any(c in "0123456789" for c in w)]


def test_no_test_of_the_torch_table_looks_for_a_digit():
    """The table is digit-blind (HandlersByText keys a text by its digits made 0s): no test
    looks for a word with a digit in it (`errno: 98`, `c10d`: their handlers read those)."""
    assert {h.name: _digit_words(h.when) for h in reader.HANDLERS if _digit_words(h.when)} == {}


def test_the_digit_check_sees_a_digit_in_a_test():
    assert _digit_words(lambda b: "errno: 98" in b) == ["errno: 98"]
    assert _digit_words(reader._names_torch) == ["c10d"]
    assert _digit_words(reader.COLLAPSED_LINES) == []  # `frame #\d{1,6}: `: blind to the digits' values


def test_every_test_gives_one_answer_for_a_fixture_line_and_its_digits_made_0():
    texts = {line.text for _, text in _texts() for line in reader.read_torch_lines(text)}
    assert len(texts) > 10000
    differ = [(h.name, t[:80]) for t in texts if t.translate(_ZEROED) != t
              for h in reader.HANDLERS if bool(h.when(t)) != bool(h.when(t.translate(_ZEROED)))]
    assert differ == []


def test_lines_that_differ_in_their_digits_share_one_table():
    seen = HandlersByText(reader.HANDLERS, digit_blind=True)
    first = seen.table("INFO rank0 step 12 loss 0.5714")
    assert seen.table("INFO rank3 step 98 loss 1.2857") is first
    assert "step" in [h.name for h in first]
