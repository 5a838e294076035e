"""A rank's connection to the TCPStore lost after it was made (facts.StoreLost): c10d's
socket errors and ProcessGroupNCCL's failed `should dump` check.

The wording is torch 2.x's TCPStore.cpp, as torch 2.13's libtorch_cpu.so holds it
(`recvValue failed on {}: {}`, `recvValueWithTimeout failed on {}: {}`, `recvVector
failed on {}: {}`, `sendBytes failed on {}: {}`, the `{}` a `SocketImpl(fd={}, addr={},
remote={})`) and as real logs print it (field/issues-11; tests/fixtures/diagnose' ranks
whose store's host exited), each after a glog or c10 prefix, a `[rankN]:`, or none. The
socket's error ends the line; a renderer that put the C++ exception's `Exception raised
from` on the same line ends it there.

Also the store-based barrier (facts.StoreBarrier), distributed_c10d.py `_store_based_barrier`'s
own words: torch 1.x `Waiting in store based barrier to initialize process group for rank: N,
key: K (world_size=W, worker_count=C, timeout=T)` and its `Timed out initializing process group
in store based barrier on rank: N, for key: K (world_size=W, worker_count=C, timeout=T)`; torch
2.x (2.13's distributed_c10d.py) `Waiting in store based barrier to initialize process group for
S secondsrank: N, key: K (world_size=W, num_workers_joined=C, timeout=T error=E)`, `... on rank
N, for key: K (world_size=W, num_workers_joined=C, ...)` and `Rank N: Completed store-based
barrier for key:K with W nodes.`
"""

from __future__ import annotations

import re

from healthcheck.core.inputs import clip
from healthcheck.parsers.lines import Handler, Line
from healthcheck.parsers.torch_log.facts import StoreBarrier, StoreBarrierState, StoreLost, StoreOp
from healthcheck.parsers.torch_log.state import TorchState, group_where, where
from healthcheck.parsers.torch_log.text import MESSAGE_MAX, host_port, to_int

_SOCKET_FAILED = re.compile(
    r"\b(recvValueWithTimeout|recvValue|recvVector|sendBytes) failed on SocketImpl\(([^()]{0,600})\): ?"
)
_REMOTE = re.compile(r"\bremote=([^\s,()]{1,300})")
_DUMP_CHECK = '"should dump" flag on TCPStore'
_WITH_ERROR = "with error: "
_EXCEPTION_AFTER = " Exception raised from "  # the C++ exception's next line, put on this one


def _error(body: str, at: int) -> str:
    """The socket's error from `at` to the line's end (or to a collapsed `Exception raised from`)."""
    end = body.find(_EXCEPTION_AFTER, at)
    return clip(body[at:end if end >= 0 else len(body)].strip(), MESSAGE_MAX)


def _socket_failed(state: TorchState, line: Line) -> bool:
    """`[c10d] recvValue failed on SocketImpl(..., remote=[localhost]:29500): Connection reset by peer`."""
    b = line.text
    found = False
    for m in _SOCKET_FAILED.finditer(b):
        remote = _REMOTE.search(m.group(2))
        op: StoreOp = m.group(1)  # type: ignore[assignment]  # the pattern's alternatives are StoreOp's
        state.add("store_lost", StoreLost(**group_where(line, b), operation=op,
                                          address=host_port(remote.group(1)) if remote else "",
                                          message=_error(b, m.end())))
        found = True
    return found


def _dump_check(state: TorchState, line: Line) -> bool:
    """ProcessGroupNCCL's `Failed to check the "should dump" flag on TCPStore, (maybe TCPStore
    server has shut down too early), with error: failed to recv, got 0 bytes`."""
    b = line.text
    at = b.find(_DUMP_CHECK)
    if at < 0:
        return False
    cause = b.find(_WITH_ERROR, at)
    message = _error(b, cause + len(_WITH_ERROR)) if cause >= 0 else _error(b, at)
    state.add("store_lost", StoreLost(**group_where(line, b), operation="should-dump-check", message=message))
    return True


def read_store_lost(state: TorchState, line: Line) -> bool:
    """A store socket's failure or the watchdog's failed store check (see the module's docstring)."""
    return _dump_check(state, line) or _socket_failed(state, line)


_BARRIER_WORDS = ("store based barrier", "Completed store-based barrier")
# bounded pieces only (no nested repetition): linear on a long line
_BARRIER_WAIT = re.compile(
    r"(Waiting in|Timed out initializing process group in) store based barrier "
    r"(?:to initialize process group for [^,()]{0,80}?rank: |on rank:? )(\d{1,9}),? (?:for )?key: ?([^\s()]{1,200}) "
    r"\(world_size=(\d{1,9}), (?:worker_count|num_workers_joined)=(\d{1,9})"
)
_BARRIER_DONE = re.compile(
    r"(?:Rank (\d{1,9}): )?Completed store-based barrier for key: ?([^\s()]{1,200}) with (\d{1,9})\b"
)


def read_store_barrier(state: TorchState, line: Line) -> bool:
    """Members waiting in, timed out of, or through the store-based barrier: every one the
    line holds (lines of one length read as hard-wrapped are joined into one)."""
    b = line.text
    found = False
    for m in _BARRIER_WAIT.finditer(b):
        kind: StoreBarrierState = "waiting" if m.group(1) == "Waiting in" else "timed-out"
        state.add("store_barrier", StoreBarrier(**where(line), state=kind, member=to_int(m.group(2)) or 0,
                                                key=m.group(3), world_size=to_int(m.group(4)) or 0,
                                                joined=to_int(m.group(5))))
        found = True
    for d in _BARRIER_DONE.finditer(b):
        member = to_int(d.group(1)) if d.group(1) else where(line)["rank"]
        if member is None:
            continue
        state.add("store_barrier", StoreBarrier(**where(line), state="completed", member=member,
                                                key=d.group(2).rstrip("."), world_size=to_int(d.group(3)) or 0))
        found = True
    return found


HANDLERS: tuple[Handler[TorchState], ...] = (
    Handler("store-barrier", lambda b: any(w in b for w in _BARRIER_WORDS), read_store_barrier),
    Handler("store-lost", lambda b: " failed on SocketImpl(" in b or _DUMP_CHECK in b, read_store_lost),
)
