"""The line layer reads each distinct raw line of a text once (`lines.LinesByRaw`, issue 22):
a line that comes again word for word (a communicator's NCCL init lines, again for each
communicator) is its first reading with its own number. Differential: every text fixture
reads to the same Lines, with every option the parsers use, as with read_line on every line."""

from __future__ import annotations

import msgspec
import pytest
from support import fixture_texts

from healthcheck.parsers import lines
from healthcheck.parsers.nccl_log import NCCL_MARKS
from healthcheck.parsers.torch_log import read_torch_lines

# the readings hc's parsers ask for: NCCL's (stamps left on, marked lines only), a table's, torch's
_READINGS = (
    lambda text: list(lines.read_lines(text, stamps=False, cut_end=True, marks=NCCL_MARKS)),
    lambda text: list(lines.read_lines(text, stamps=False, srun=False)),
    read_torch_lines,
)


def _texts() -> list[tuple[str, str]]:
    return list(fixture_texts())


def _read(text: str) -> bytes:
    return msgspec.json.encode([reading(text) for reading in _READINGS])


def _every_line_read(self: lines.LinesByRaw, number: int, raw: str, indent: str, pytest: bool) -> list[lines.Line]:
    return self.read(number, raw, indent=indent, pytest=pytest)


def _differing(texts: list[tuple[str, str]]) -> list[str]:
    once = [_read(text) for _, text in texts]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(lines.LinesByRaw, "__call__", _every_line_read)
        every = [_read(text) for _, text in texts]
    return [name for (name, _), a, b in zip(texts, once, every, strict=True) if a != b]


# lines that come again word for word: NCCL init lines of three communicators, a torn line, a
# prompt, a tail header and a torch traceback, each again at other numbers
_AGAIN = ("gpu0:1:1 [0] NCCL INFO Channel 00/02 :    0   1\n"
          "$ tail -f a.log b.log\n==> a.log <==\n"
          "[rank0]:[E1127 13:51:30.1 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation "
          "timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE)[rank1]:[E1127 13:51:30.1 ProcessGroupNCCL.cpp:632] x\n"
          "    Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n"
          "RuntimeError: NCCL error: unhandled system error\n") * 3


def test_every_fixture_reads_the_same_with_each_raw_line_read_once():
    texts = [*_texts(), ("again", _AGAIN)]
    assert len(texts) > 1000
    assert _differing(texts) == []


def test_the_differential_catches_a_reading_kept_for_another_line(monkeypatch):
    """The comparison can fail: readings kept by a line's first 12 characters (an NCCL
    process's lines share them) give a line another line's text, and the Lines differ."""
    def by_start(self, number, raw, indent, pytest):
        key = (raw[:12], indent, pytest)
        if key not in self.holding:
            self.holding[key] = self.read(number, raw, indent=indent, pytest=pytest)
        return [msgspec.structs.replace(line, number=number) for line in self.holding[key]]

    monkeypatch.setattr(lines.LinesByRaw, "__call__", by_start)
    assert _differing([("again", _AGAIN), *_texts()[:200]]) != []


def test_a_line_again_is_read_once_with_its_own_number():
    calls = []

    def read(number, raw, **options):
        calls.append(number)
        return lines.read_line(number, raw, **options)

    again = lines.LinesByRaw(read)
    first = again(3, "gpu0:1:1 [0] NCCL INFO Connected all rings", "", False)
    second = again(9, "gpu0:1:1 [0] NCCL INFO Connected all rings", "", False)
    assert calls == [3]
    assert [x.number for x in first] == [3] and [x.number for x in second] == [9]
    assert second[0].text == first[0].text


def test_every_fixture_reads_the_same_with_its_shapes_kept_for_every_parser():
    """`lines.shapes_kept` (hc diagnose logs around the parsers of one text) decides a text's
    shapes once for the NCCL, table and torch readings: the same Lines as each deciding them."""
    texts = _texts()
    alone = [_read(text) for _, text in texts]
    kept = []
    for _, text in texts:
        with lines.shapes_kept():
            kept.append(_read(text))
    assert [name for (name, _), a, b in zip(texts, alone, kept, strict=True) if a != b] == []


def test_a_texts_shapes_are_decided_once_while_kept(monkeypatch):
    calls: list[str] = []
    real = lines.text_shapes
    monkeypatch.setattr(lines, "text_shapes", lambda text: calls.append(text) or real(text))
    text = "gpu0:1:1 [0] NCCL INFO NCCL version 2.28.9\n[rank0]: Traceback (most recent call last):\n"
    with lines.shapes_kept():
        for reading in _READINGS:
            reading(text)
        reading(text[:-1])  # another text: its own shapes
    for reading in _READINGS:
        reading(text)  # outside the block: decided each time
    assert calls == [text, text[:-1], text, text, text]
