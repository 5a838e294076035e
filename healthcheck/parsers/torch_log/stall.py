"""Horovod's stall inspector, read as the ranks that did not submit a collective.

Horovod's coordinator (rank 0 of the process set) warns when tensors were submitted by some
ranks and not the others for longer than HOROVOD_STALL_CHECK_TIME_SECONDS (60 s), in the
wordings Horovod's history gives (horovod/common/operations.cc, then stall_inspector.cc):

* before 0.13: `WARNING: One or more tensors were submitted to be reduced, gathered or
  broadcasted by subset of ranks and are waiting for remainder of ranks for more than 60
  seconds. ... Stalled ops: NAME [ready ranks: 5, 1, 4, 7, 2, 3], NAME2 [ready ranks: ...]`,
  all on one line: the ranks that DID submit (the missing are the world's others);
* 0.13: `NAME [ready ranks: 0, 2], [missing ranks: 1]`, one op a line; then `NAME [missing
  ranks: 1]` (to 0.16), each line behind glog's `[time: W horovod/common/operations.cc:588] `;
* 0.16.2+: the warning, then `Stalled ranks:` (0.20+: `Missing ranks:`) and one line a
  rank, `R: [NAME, NAME, ... ]` (at most six names, then ` ...`), `R!:` where the rank stalled
  past HOROVOD_STALL_SHUTDOWN_TIME_SECONDS. R is the global rank.

Each op (or rank line) is a StalledTensors fact. The rank the line's labels name (mpirun
`--tag-output`'s `[1,0]<stderr>:`) is the coordinator that reports, never the culprit; a
`R: ` line may look like srun's label to the line layer, so R is read from the labels'
end as well as from the text. Linear: bounded character classes, no nested repetition.
"""

from __future__ import annotations

import re

from healthcheck.core.inputs import clip
from healthcheck.parsers.lines import Handler, Line
from healthcheck.parsers.torch_log.facts import StalledTensors
from healthcheck.parsers.torch_log.state import TorchState, where
from healthcheck.parsers.torch_log.text import rank_list

WARNING = "One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks"
_BLOCK_HEADS = ("Missing ranks:", "Stalled ranks:")
_OPS_HEAD = "Stalled ops:"
# `NAME [missing ranks: 1]`, `NAME [ready ranks: 0, 2]`, `NAME [ready ranks: 0, 2], [missing ranks: 1]`
_OP = re.compile(r"([^\s\[\],]{1,512}) \[(ready|missing) ranks:([\d ,]{0,16384})\]"
                 r"(?:, \[missing ranks:([\d ,]{0,16384})\])?")
_RANK_LINE = re.compile(r"(\d{1,7})(!?): \[([^\]]{0,65536})")
_LABEL_RANK = re.compile(r"(\d{1,7})(!?): $")
_NAMES_MAX = 16


def _reporter(state: TorchState, line: Line, labelled: bool = True) -> dict:
    """Where, with the reporting rank: the warning's, else the line's label's where it is no
    `R: ` line (`labelled`), else none."""
    at = where(line)
    if state.stall_report or not labelled:
        at["rank"] = state.stall_reporter
    return at


def read_warning(state: TorchState, line: Line) -> bool:
    """The warning: a new report, by the rank its line names; the oldest wording's ops follow
    on the same line."""
    at = line.text.find(WARNING)
    if at < 0:
        return False
    state.stall_report += 1
    state.stall_reporter = where(line)["rank"]
    state.stall_block = False
    _read_ops(state, line, line.text[at:])
    return True


def _read_ops(state: TorchState, line: Line, text: str) -> bool:
    found = False
    for m in _OP.finditer(text):
        name, kind, ranks, missing = m.groups()
        ready = rank_list(ranks) if kind == "ready" else ()
        gone = rank_list(ranks) if kind == "missing" else rank_list(missing) if missing is not None else ()
        state.add("stalled", StalledTensors(**_reporter(state, line), op=clip(name.removeprefix("ops:"), 256),
                                            missing=gone, ready=ready, report=state.stall_report))
        found = True
    return found


def read_ops(state: TorchState, line: Line) -> bool:
    """One op's `[missing ranks: ...]` / `[ready ranks: ...]` (also in a fragment a
    mid-line interleave left)."""
    state.stall_block = False
    return _read_ops(state, line, line.text) or line.text.strip() == _OPS_HEAD


def opens_block(text: str) -> bool:
    """Whether a line's text is the head of the stall inspector's `Missing ranks:` block."""
    return text.strip().endswith(_BLOCK_HEADS)


def read_block(state: TorchState, line: Line) -> bool:
    """`Missing ranks:` (`Stalled ranks:`) and the `R: [NAMES]` lines after it."""
    text = line.text.strip()
    if opens_block(text):
        state.stall_block = True
        return True
    if not state.stall_block:
        return False
    m = _RANK_LINE.match(text)
    label = _LABEL_RANK.search(line.labels) if m is None and text.startswith("[") else None
    if m is None and label is None:
        state.stall_block = False
        return False
    rank, bang = (m.group(1), m.group(2)) if m is not None else (label.group(1), label.group(2))  # type: ignore[union-attr]
    names = (m.group(3) if m is not None else text[1:]).split(", ", _NAMES_MAX)
    for name in names[:_NAMES_MAX]:
        name = name.strip().removesuffix(" ...").rstrip("]").strip()
        state.add("stalled", StalledTensors(**_reporter(state, line, labelled=False), op=clip(name, 256),
                                            missing=(int(rank),),
                                            shutdown=bang == "!", report=state.stall_report))
    return True


HANDLERS: tuple[Handler[TorchState], ...] = (
    Handler("horovod-stall", lambda b: WARNING in b, read_warning),
    Handler("horovod-stalled-op", lambda b: WARNING not in b and ((" ranks:" in b and "[" in b)
                                                                 or b.strip() == _OPS_HEAD), read_ops),
    Handler("horovod-stall-ranks", lambda b: True, read_block),
)

__all__ = ["HANDLERS", "WARNING", "opens_block", "read_block", "read_ops", "read_warning"]
