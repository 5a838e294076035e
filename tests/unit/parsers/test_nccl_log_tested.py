"""The NCCL log parser tests each distinct INFO message of a parse once (nccl_log's
`_Builder.info_table`, issue 22): a message that comes again (a communicator's init lines,
word for word for each communicator) is read through the handlers whose tests held the
first time; and each distinct line's prefix is split once (`_Builder.prefix_of`). Differential: every text fixture parses to the same NcclLog with it as through
the whole table on every line."""

from __future__ import annotations

import msgspec
import pytest
from support import fixture_texts

from healthcheck.core.errors import ParseError
from healthcheck.parsers import nccl_log
from healthcheck.parsers.nccl_log import parse_nccl_log


def _texts() -> list[tuple[str, str]]:
    return [(name, text) for name, text in fixture_texts() if " NCCL " in text or "NCCL version" in text]


def _parsed(text: str) -> bytes:
    try:
        return msgspec.json.encode([parse_nccl_log(text), parse_nccl_log(text, marked_only=True)])
    except ParseError as exc:
        return str(exc).encode()


def _differing(texts: list[tuple[str, str]]) -> list[str]:
    tested = [_parsed(text) for _, text in texts]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(nccl_log._Builder, "info_table", lambda self, message: nccl_log._INFO_HANDLERS)
        mp.setattr(nccl_log._Builder, "prefix_of", lambda self, line: nccl_log._nccl_prefix(line))
        whole = [_parsed(text) for _, text in texts]
    return [name for (name, _), a, b in zip(texts, tested, whole, strict=True) if a != b]


# init lines that come again word for word, for each of three communicators
_AGAIN = "".join(
    f"gpu0:1:{t} [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n"
    f"gpu0:1:{t} [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n"
    f"gpu0:1:{t} [0] NCCL INFO comm 0x55{c} rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1000 commId 0x{c} - Init START\n"
    f"gpu0:1:{t} [0] NCCL INFO Channel 00/02 :    0   1\n"
    f"gpu0:1:{t} [0] NCCL INFO Connected all rings\n"
    f"gpu0:1:{t} [0] NCCL INFO comm 0x55{c} rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1000 commId 0x{c} - Init COMPLETE\n"
    for t, c in ((1, "a1"), (1, "b2"), (2, "c3")))


def test_every_fixture_parses_the_same_with_each_message_tested_once():
    texts = [*_texts(), ("again", _AGAIN)]
    assert len(texts) > 100
    assert _differing(texts) == []


def test_the_differential_catches_a_table_kept_for_another_message(monkeypatch):
    """The comparison can fail: tables kept by a message's first 6 characters (`comm 0`,
    `Channe`, ...) read messages through another one's handlers, and facts differ."""
    def by_start(self, message):
        key = message[:6]
        if key not in self.tested.holding:
            self.tested.holding[key] = tuple(h for h in nccl_log._INFO_HANDLERS if h.when(message))
        return self.tested.holding[key]

    monkeypatch.setattr(nccl_log._Builder, "info_table", by_start)
    assert _differing([*_texts(), ("again", _AGAIN)]) != []


def test_the_differential_catches_a_prefix_kept_for_another_line(monkeypatch):
    """The comparison can fail: prefixes kept by a line's first 20 characters (`gpu0:1:1 [0]
    NCCL IN`) give a line another line's message, and facts differ."""
    def by_start(self, line):
        key = line.text[:20]
        if key not in self.prefixes:
            self.prefixes[key] = nccl_log._nccl_prefix(line)
        return self.prefixes[key]

    monkeypatch.setattr(nccl_log._Builder, "prefix_of", by_start)
    assert _differing([("again", _AGAIN), *_texts()[:100]]) != []
