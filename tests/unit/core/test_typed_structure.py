"""The nesting check reads a large document a slice at a time (issue 22: a 1.2 GB report was
copied whole to take its escapes out): the slices give what the whole document gives,
whatever escapes fall on their edges."""

from __future__ import annotations

import random

import pytest

from healthcheck.core import typed


def whole(raw: bytes) -> bytes:
    """The structure as check_depth took it before: escapes out of the whole, then translated."""
    if b"\\" in raw:
        raw = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    return raw.translate(typed._BRACKETS, typed._NOT_STRUCTURE).replace(b'""', b"")


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 8, 64])
def test_slices_give_the_structure_of_the_whole(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    monkeypatch.setattr(typed, "STRUCTURE_CHUNK", chunk)
    rng = random.Random(chunk)
    alphabet = [b"\\", b"\\\\", b'\\"', b'"', b"[", b"]", b"{", b"}", b"a", b"\\n", b"\\\\\\\\"]
    for _ in range(300):
        raw = b"".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 40)))
        assert b"".join(typed._structure(raw)).replace(b'""', b"") == whole(raw), raw
    run = b'["' + b"\\\\" * (3 * chunk) + b'"]'  # a slice of nothing but backslashes
    assert b"".join(typed._structure(run)).replace(b'""', b"") == whole(run) == b"[]"


def test_a_deep_document_past_a_slice_is_still_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(typed, "STRUCTURE_CHUNK", 16)
    with pytest.raises(typed.TooDeep):
        typed.check_depth(b'{"a": "\\\\\\"["}' + b"[" * 100 + b"]" * 100)
    typed.check_depth(b'{"a": "\\\\\\"[[[["}' + b"[" * 30 + b"]" * 30)
