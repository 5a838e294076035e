"""msgspec conversion and decoding that are safe from many threads at once.

msgspec builds a type's decoding plan the first time the type is used, evaluating its
annotations in Python code (the GIL is released in between), and two threads doing that
for one type at once crash the interpreter with SIGSEGV. hc hit it in agentless sweeps,
whose per-node threads each convert their node's fabric config. So each type's plan is
built once, under a lock, before any conversion or decode uses it.
"""

from __future__ import annotations

import threading
from typing import Any

import msgspec

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
    """msgspec.json.decode into `tp`, with the type's plan built safely first."""
    prepare(tp)
    return msgspec.json.decode(data, type=tp)


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
