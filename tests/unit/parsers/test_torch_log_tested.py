"""The torch log parser tests each distinct text of a parse once (`lines.HandlersByText`,
issue 22): a text that comes again (a communicator's NCCL init lines, word for word for each
communicator) is read through the handlers whose tests held the first time.
Differential: every text fixture parses to the same TorchLog with it as through the whole
table on every line."""

from __future__ import annotations

import msgspec
import pytest
from support import fixture_texts

from healthcheck.core.errors import ParseError
from healthcheck.parsers.lines import HandlersByText
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
        mp.setattr(HandlersByText, "table", lambda self, text: self.handlers)  # every handler, every line
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
    real = HandlersByText.table
    monkeypatch.setattr(HandlersByText, "table", lambda self, text: real(self, text[:30]))
    assert _differing([("again", _AGAIN), *_texts()[:400]])


def test_a_text_seen_again_is_tested_once():
    seen = HandlersByText(reader.HANDLERS)
    first = seen.table("gpu0:1:1 [0] NCCL INFO NCCL version 2.28.9")
    assert seen.table("gpu0:1:1 [0] NCCL INFO NCCL version 2.28.9") is first
    assert "nccl-version" in [h.name for h in first]
