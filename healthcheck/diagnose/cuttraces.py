"""A rank's own end shown only by a traceback the text ends inside (a paste cut before its
exception line): vLLM v1's `(VllmWorker rank=2 ...) WorkerProc failed to start.` then frames,
SGLang's `[... TP5] Scheduler hit an exception: Traceback ...`, DeepSpeed's `[rank0]:` frames.

The rank was raising something, what is unknown, so such a traceback alone is no proof of a
death: it may be a victim's. It names the culprit only as the last resort, where it is all the
failure the text holds: no rank's first error, no timeout, no other fact the torch log reader
makes of any line (no warning, set-up failure, tool's statement of an end: Megatron's ranks each
warning `NCCL WARN Error : no algorithm/protocol available` while one's traceback is cut are
all failing; an NCCL WARN, SGLang's `socketStartConnect: Connect to ... failed` with NCCL's
set-up returning the error before TP0's cut scheduler traceback, is a set-up failure beside it:
field-25), and the cut traceback's header is in the text (a paste of frames only, torchrec's `[rank0]:`
frames with no header, shows a fragment, not a rank's end: field-4; unprefixed frames after a
prefixed header are that traceback's own; frames that open at the process's outermost, a script's
`<module>` or multiprocessing's `_bootstrap` (vLLM v1's `(VllmWorker rank=5 ...)` frames), show the
traceback from its top, only its header line left out: field-25), and the ranks cut are
fewer than every rank the text shows (all of them raising
is the collective's end, not one rank's).
"""

from __future__ import annotations

from healthcheck.diagnose.analysis import fact_rank, log_evidence
from healthcheck.diagnose.findings import Evidence
from healthcheck.diagnose.logfacts import RankError, any_timed_out, ranks_heard
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.victims import spoke_of_failure
from healthcheck.parsers.torch_log.facts import FACT_KINDS


def _cuts(col: Collected) -> dict[int, tuple[str, int | None]]:
    out: dict[int, tuple[str, int | None]] = {}
    for f in col.evidence.torch_logs:
        if f.log is None:
            continue
        for c in f.log.cut_tracebacks:
            r = fact_rank(c, f.rank)
            if c.headed and r is not None and r not in out:
                out[r] = (f.source, c.line)
    return out


def cut_raisers(col: Collected, firsts: dict[int, RankError]) -> list[tuple[int, str, Evidence]]:
    """(rank, how, the traceback's header) for each rank whose cut traceback is all the failure
    the text shows (module doc); [] otherwise."""
    if firsts or any_timed_out(col, firsts):
        return []
    if any(getattr(f.log, kind) for f in col.evidence.torch_logs if f.log is not None for kind in FACT_KINDS):
        return []
    if any(getattr(f.log, "warns", ()) for f in col.evidence.nccl_logs):
        return []  # NCCL's own WARN (SGLang's `socketStartConnect ... failed` in set-up): a failure beside it
    cuts = _cuts(col)
    if not cuts or set(cuts) & spoke_of_failure(col):
        return []
    heard = ranks_heard(col)
    if len(cuts) > 2 or (len(cuts) > 1 and heard <= set(cuts)):
        return []
    text = "a traceback its output opens, cut before its exception line"
    return [(r, "raised (traceback cut before its exception)", log_evidence(col, s, line, f"rank {r}: {text}", r))
            for r, (s, line) in sorted(cuts.items())]


__all__ = ["cut_raisers"]
