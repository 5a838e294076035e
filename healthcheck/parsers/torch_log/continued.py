"""Lines that finish a fact opened on a line before them, for the same rank (a line with no
prefix: the fact opened last): NCCL's detail and last error after `NCCL error in:`, a C++
`what():` after `terminate called`, the Flight Recorder's stack frames."""

from __future__ import annotations

import re

from healthcheck.core.inputs import clip
from healthcheck.parsers.lines import Line
from healthcheck.parsers.peers import PEER, endpoint
from healthcheck.parsers.torch_log.state import TorchState, rank_key, said_by
from healthcheck.parsers.torch_log.text import MESSAGE_MAX

FRAMES_MAX = 32  # Flight Recorder frames kept of one stack

_NCCL_DETAIL = re.compile(r"(nccl[A-Z]\w{0,63}): ?(.*)")
_FR_FRAME = re.compile(r"#\d{1,6} \S")
_LAST_ERROR = "Last error:"
# the peer in NCCL's last error: `Got completion from peer ADDR<PORT>`, `closed by remote peer ADDR<PORT>`
_LAST_PEER = re.compile(rf"\bpeer ({PEER})")
_WHAT = "what():"


def read_nccl_detail(state: TorchState, line: Line) -> bool:
    """`ncclInvalidUsage: <detail>`, `Last error:` and NCCL's last error (on it or the next line)."""
    if not state.open:
        return False
    key = rank_key(line)
    o = state.find_open("backend", key)
    if o is None:
        return False
    b = line.text
    if o.expect_last:
        state.amend("backend_errors", o.index, **_last_error(b))
        state.close("backend", o.key)
        return True
    m = _NCCL_DETAIL.match(b)
    if m:
        state.amend("backend_errors", o.index, nccl_error=m.group(1), detail=clip(m.group(2).strip(), MESSAGE_MAX))
        return True
    if b.startswith(_LAST_ERROR):
        rest = b[len(_LAST_ERROR):].strip()
        if rest:
            state.amend("backend_errors", o.index, **_last_error(rest))
            state.close("backend", o.key)
        else:
            o.expect_last = True
        return True
    if o.key == key:  # a line with no prefix leaves a prefixed rank's error open
        state.close("backend", o.key)
    return False


def _last_error(text: str) -> dict[str, object]:
    """NCCL's last error as a BackendError's fields: the text, and the peer it names."""
    fields: dict[str, object] = {"last_error": clip(text.strip(), MESSAGE_MAX)}
    m = _LAST_PEER.search(text, 0, MESSAGE_MAX)
    found = endpoint(m.group(1)) if m else None
    if found is not None:
        fields.update(peer=found.address, port=found.port)
    return fields


def read_what(state: TorchState, line: Line) -> bool:
    """`what():  <message>` after `terminate called after throwing an instance of 'T'`: the
    exception's message (True); another line of the same rank ends the wait (False), but a
    second process's terminate line before the first's what() waits for the next what()."""
    if not state.open:
        return False
    key = rank_key(line)
    stripped = line.text.lstrip()
    what = stripped.startswith(_WHAT)
    o = state.find_open("terminate", key) or (state.find_open("terminate-next", key) if what else None)
    if o is None:
        return False
    if stripped.startswith("terminate called after"):
        return False  # another process's terminate line: both wait for their what() (read_terminate)
    if o.key == key or what:
        state.close(o.kind, o.key)
    if what:
        message = clip(stripped[len(_WHAT):].strip(), MESSAGE_MAX)
        raised = state.facts["exceptions"][o.index] if 0 <= o.index < len(state.facts["exceptions"]) else None
        state.amend("exceptions", o.index, message=message, **said_by(message, raised.rank if raised else 0))
    return what


def is_fr_frame(body: str) -> bool:
    """A Flight Recorder stack frame: `#0 all_reduce from .../distributed_c10d.py:3174`."""
    if not _FR_FRAME.match(body) or " from " not in body:
        return False
    tail = body.rstrip().rsplit(":", 1)
    return len(tail) == 2 and tail[1].isascii() and tail[1].isdigit()


def read_fr_frame(state: TorchState, line: Line) -> bool:
    """A frame of the failed collective's stack the Flight Recorder printed."""
    if not state.open:
        return False
    key = rank_key(line)
    o = state.find_open("fr-stack", key)
    if o is None:
        return False
    b = line.text
    if is_fr_frame(b):
        frames = state.facts["flight_recorder"][o.index].frames
        if len(frames) < FRAMES_MAX:
            state.amend("flight_recorder", o.index, frames=(*frames, clip(b.strip(), MESSAGE_MAX)))
        return True
    if o.key == key:
        state.close("fr-stack", o.key)
    return False
