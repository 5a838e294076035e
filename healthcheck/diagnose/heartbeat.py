"""The heartbeat monitor (`Heartbeat monitor timed out!`, `ProcessGroupNCCL's watchdog got
stuck for N seconds ... workMetaList_.size()=K`): host-wedged only where it contrasts.

PyTorch's heartbeat monitor fires when the ProcessGroupNCCL watchdog thread itself made no
progress for TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC: a CUDA/NCCL call or the GIL blocked it. That
is a wedged host when one rank shows it and its peers do not; but it is as often every
rank's symptom after a collective timed out (the watchdog hangs aborting its communicator),
so a rank is named only with contrast:
- other ranks shown in the evidence show something else (they progress, or time out and
  finish their abort): the ranks with the symptom are named;
- every rank shown has it, but a strict minority of them report a different number of
  outstanding works (`workMetaList_.size()`) than the rest, who agree: that minority.
Every rank shown alike (one rank shown is alike with itself) names none; a note says what
the monitor means.
"""

from __future__ import annotations

from collections import Counter

from healthcheck.diagnose.analysis import Analysis, fact_rank, log_evidence
from healthcheck.diagnose.findings import Evidence, job_finding
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.stacks import rank_words

MEANING = ("PyTorch's heartbeat monitor fires when the ProcessGroupNCCL watchdog thread made no progress "
           "(a CUDA/NCCL call or the GIL blocks it); after a collective timeout it is as often every rank's "
           "symptom (the watchdog hangs aborting its communicator), so it names no rank by itself")


def _symptoms(col: Collected) -> tuple[list[Evidence], dict[int, set[int]], set[int]]:
    """Evidence lines, the outstanding-work counts each rank reported, and the ranks seen."""
    items: list[Evidence] = []
    works: dict[int, set[int]] = {}
    ranks: set[int] = set()
    for f in col.evidence.torch_logs:
        assert f.log is not None
        for s in f.log.stuck:
            r = fact_rank(s, f.rank)
            text = f"watchdog {s.kind}" + (f" for {s.seconds} s" if s.seconds else "")
            text += f" (workMetaList_.size()={s.pending_works})" if s.pending_works is not None else ""
            items.append(log_evidence(col, f.source, s.line, text, r))
            if r is not None:
                ranks.add(r)
                if s.pending_works is not None:
                    works.setdefault(r, set()).add(s.pending_works)
    return items, works, ranks


def odd_work_counts(works: dict[int, set[int]]) -> set[int]:
    """The strict minority of ranks whose outstanding-work count differs from the one count
    the rest agree on; none where a rank reported two counts or no majority agrees."""
    if len(works) < 3 or any(len(v) != 1 for v in works.values()):
        return set()
    counts = Counter(next(iter(v)) for v in works.values())
    common, n = counts.most_common(1)[0]
    odd = {r for r, v in works.items() if common not in v}
    return odd if odd and n > len(works) / 2 else set()


def shown_ranks(col: Collected) -> set[int]:
    """Every rank the evidence speaks of: its rank records and the ranks of its log facts."""
    seen = set(col.evidence.ranks)
    for f in col.evidence.torch_logs:
        if f.rank is not None:
            seen.add(f.rank)
        if f.log is not None:
            seen.update(f.log.ranks)
    return seen


def wedged(col: Collected, out: Analysis) -> None:
    """host-wedged for the ranks whose heartbeat monitor fired where others differ."""
    items, works, ranks = _symptoms(col)
    if not items:
        return
    others = shown_ranks(col) - ranks
    named = set(ranks) if ranks and others else odd_work_counts(works)
    if not named:
        who = rank_words(ranks) if ranks else "a rank"
        out.notes.append(f"heartbeat monitor on {who}, alike on every rank shown: {MEANING}")
        return
    why = (f"the others ({rank_words(others)}) show no such stall" if others
           else "their count of outstanding works differs from the rest's")
    out.findings.append(job_finding(
        cls="host-wedged", ranks=tuple(sorted(named)), confidence="medium",
        evidence=tuple(e for e in items if e.rank in named)[:20],
        summary=f"{rank_words(named)}: the host side is wedged (the ProcessGroupNCCL watchdog made no progress: "
                f"a CUDA/NCCL call or the GIL blocks it; {why})"))


__all__ = ["MEANING", "odd_work_counts", "shown_ranks", "wedged"]
