"""msgspec conversion and decoding that are safe from many threads at once, and bounded.

msgspec builds a type's decoding plan the first time the type is used, evaluating its
annotations in Python code (the GIL is released in between), and two threads doing that
for one type at once crash the interpreter with SIGSEGV. hc hit it in agentless sweeps,
whose per-node threads each convert their node's fabric config. So each type's plan is
built once, under a lock, before any conversion or decode uses it.

msgspec decodes nested arrays and objects by recursion, guarded only by the
interpreter's recursion limit: 100,000 `[` are a RecursionError, which no caller expects
from a decode. `decode_json` therefore measures the nesting first (`check_depth`: a few
passes of bytes methods, linear in the input) and refuses more than MAX_DEPTH levels
with `TooDeep`, a `msgspec.DecodeError`: every caller that reports a malformed document
in one line reports this one too. Bytes that are not UTF-8 inside a string are
msgspec's UnicodeDecodeError, which decode_json turns into `NotUtf8`, a DecodeError too.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import msgspec

MAX_DEPTH = 64  # levels of arrays and objects; hc's own documents nest about 8 deep
_BRACKETS = bytes.maketrans(b"{}", b"[]")  # one kind of pair: depth is all that counts
_NOT_STRUCTURE = bytes(c for c in range(256) if c not in b'"[]{}')


class TooDeep(msgspec.DecodeError):
    """A JSON document nested deeper than hc reads (a DecodeError: callers say it in one line)."""


class NotUtf8(msgspec.DecodeError):
    """A JSON document with bytes that are not UTF-8 inside a string: msgspec raises
    UnicodeDecodeError there (not its DecodeError, which it raises for such bytes elsewhere),
    which no caller expects from a decode; this is a DecodeError, said in one line."""


def _not_utf8(data: bytes | str) -> NotUtf8:
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return NotUtf8(f"JSON is not UTF-8 (byte {exc.start}: {raw[exc.start:exc.start + 1]!r})")
    return NotUtf8("JSON is not UTF-8")


def check_depth(data: bytes | str, limit: int = MAX_DEPTH) -> None:
    """TooDeep where `data`'s arrays and objects nest more than `limit` levels.

    Linear time, in bytes methods (no Python loop per byte): escapes and strings are taken
    out, the brackets left are removed innermost pair by innermost pair, at most `limit`
    passes. Brackets that do not pair (not JSON) are left for the decoder to name, unless
    more than `limit` of them are open."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    if len(raw) <= STRUCTURE_CHUNK and raw.count(b"[") + raw.count(b"{") <= limit:
        return  # too few brackets to nest that deep: most documents stop here
    text = b"".join(_structure(raw))
    # two quotes in a row go without changing which brackets are inside a string (every
    # string without brackets is such a pair); what is left is split at the quotes
    text = text.replace(b'""', b"")
    if b'"' in text:
        text = b"".join(text.split(b'"')[::2])  # outside strings only
    if b"[" * (limit + 1) in text:
        raise TooDeep(f"JSON nested deeper than {limit} levels")
    for _ in range(limit):
        inner = text.replace(b"[]", b"")  # the innermost level
        if len(inner) == len(text):
            break  # nothing left, or only brackets that do not pair (not JSON)
        text = inner
    # a pair left after `limit` levels came off, or more than `limit` opened and never closed
    if b"[]" in text or text.count(b"[") > limit:
        raise TooDeep(f"JSON nested deeper than {limit} levels")


# A large document is reduced to its structure a slice at a time: taking the escapes out of
# a 1.2 GB report at once copied all of it (issue 22: a report read in its own size).
STRUCTURE_CHUNK = 64 * 1024 * 1024


def _structure(raw: bytes) -> Iterator[bytes]:
    """`raw`'s brackets and quotes (escaped quotes and backslashes taken out first, then quotes
    two in a row), slice by slice. A slice never ends on a backslash, so no escape is cut in two: a byte that is not
    a backslash ends either plain text or an escape."""
    start, n = 0, len(raw)
    while start < n:
        end = min(start + STRUCTURE_CHUNK, n)
        while start < end < n and raw[end - 1] == 0x5C:
            end -= 1
        if end == start:  # a slice of nothing but backslashes: end it after the run's next byte
            end = _past_backslashes(raw, start + STRUCTURE_CHUNK)
        part = raw[start:end]
        if b"\\" in part:  # an escaped backslash, then an escaped quote, never ends a string
            part = part.replace(b"\\\\", b"").replace(b'\\"', b"")
        # two quotes in a row go here already (see check_depth), so what is kept is small
        yield part.translate(_BRACKETS, _NOT_STRUCTURE).replace(b'""', b"")
        start = end


def _past_backslashes(raw: bytes, at: int) -> int:
    """Just past the first byte at or after `at` that is not a backslash, a window at a time."""
    while at < len(raw):
        window = raw[at : at + STRUCTURE_CHUNK]
        run = len(window) - len(window.lstrip(b"\\"))
        at += run
        if run < len(window):
            break
    return min(len(raw), at + 1)


_READY: set[Any] = set()
_DECODERS: dict[Any, Any] = {}
_LOCK = threading.Lock()


def prepare(tp: Any) -> None:
    """Build msgspec's plan for `tp` (and every type inside it) once, in one thread."""
    if tp in _READY:
        return
    with _LOCK:
        if tp not in _READY:
            msgspec.json.Decoder(tp)  # builds and caches the plan of every Struct inside tp
            _READY.add(tp)


def convert(data: Any, tp: Any, **kwargs: Any) -> Any:
    """msgspec.convert, with the type's plan built safely first."""
    prepare(tp)
    return msgspec.convert(data, tp, **kwargs)


def decode_json(data: bytes | str, tp: Any) -> Any:
    """msgspec.json.decode into `tp`, with the type's plan built safely first; TooDeep (a
    DecodeError) past MAX_DEPTH levels of nesting, NotUtf8 (a DecodeError) for bytes that
    are not UTF-8 in a string."""
    prepare(tp)
    check_depth(data)
    try:
        return msgspec.json.decode(data, type=tp)
    except RecursionError:  # called from deep in a stack already: still one line
        raise TooDeep("JSON nested too deep to decode here") from None
    except UnicodeDecodeError:
        raise _not_utf8(data) from None


def decoder(tp: Any) -> msgspec.json.Decoder:
    """A JSON decoder into `tp`, built once under the lock and shared (Decoder.decode is thread-safe)."""
    found = _DECODERS.get(tp)
    if found is None:
        with _LOCK:
            found = _DECODERS.get(tp)
            if found is None:
                found = _DECODERS[tp] = msgspec.json.Decoder(tp)
                _READY.add(tp)
    return found
