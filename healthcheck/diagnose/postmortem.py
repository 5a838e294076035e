"""Post-mortems: when the peers time out, each says which collective it waited in (gloo:
`Timed out waiting Nms for recv operation` inside the torch.distributed function of its
traceback, with the line of its own code that called it; NCCL: the watchdog's
`WorkNCCL(SeqNum=, OpType=, NumelIn=, NumelOut=)`). Read per rank:

* did_not_time_out: ranks the evidence knows that printed no timeout (and no error of
  their own, nor one a collective raised while the others were timing out) while the
  others did: they never entered the collective the others waited in (stuck-rank);
* waited_elsewhere: every rank timed out, but a minority in another collective (another
  op, SeqNum or call site: collective-mismatch) or in the same one with another element
  count (shape-mismatch). Without a majority, the sides are said and no rank is named.
  Where the minority is several sides, the ranks whose traceback stops first in the
  function all tracebacks share made one collective more and are named alone
  (progorder.py); the sides between waited for them.
  Sides that differ by SeqNum alone are no mismatch where the SeqNums may count different
  groups' calls (seqgroups.py: no group printed and a rank timed out at several).
  Where no side is a majority, the one rank first in program order is named where the
  others are at two or more later places (behindall.py).
  Where the minority waits in a gloo broadcast the others went past, gloo's tree is
  replayed (bcastroot.py): the rank whose src was off is named, not its parent in the
  tree that waited on it; where the tree is symmetric none is.
  A rank whose wait a peer cut short (Connection closed when a peer that timed out
  exited) still says in its traceback which collective it waited in: it counts as a side.
"""

from __future__ import annotations

from collections import Counter

import msgspec

from healthcheck.diagnose.analysis import minority
from healthcheck.diagnose.bcastroot import wrong_src
from healthcheck.diagnose.behindall import earliest_alone
from healthcheck.diagnose.findings import Confidence, Evidence, FailureClass, JobFinding, job_finding
from healthcheck.diagnose.groupwait import config_differs, creating_group
from healthcheck.diagnose.logfacts import (
    RPC_TIMEOUT,
    RankError,
    Wait,
    error_evidence,
    first_errors,
    rank_source,
    rank_waits,
    ranks_heard,
    watchdog_ranks,
)
from healthcheck.diagnose.ncclaborts import aborted_ranks
from healthcheck.diagnose.nonefinished import none_finished
from healthcheck.diagnose.p2pvictims import left_waiting
from healthcheck.diagnose.progorder import first_in_program
from healthcheck.diagnose.ringsize import ring_world
from healthcheck.diagnose.seqgroups import seqs_comparable
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.stacks import rank_words
from healthcheck.diagnose.storewait import store_waits, stuck_in_store
from healthcheck.diagnose.wentpast import went_past

_SAME_FAILURE_S = 1.0  # a peer error this close to the first timeout is that failure's, not a late waker's


def _where(w: Wait) -> str:
    op = w.op or "a collective"  # sides compare as printed: gloo's all_reduce, NCCL's ALLREDUCE never meet
    return op + (f" SeqNum {w.seq}" if w.seq is not None else "") + (f" at {w.where}" if w.where else "")


def _evidence(w: Wait) -> Evidence:
    return Evidence(source=w.source, line=w.line, rank=w.rank, text=f"rank {w.rank}: {w.text}"[:300])


def _first_timeout(waits: dict[int, Wait], firsts: dict[int, RankError]) -> float | None:
    times = [firsts[r].time for r in waits if r in firsts and firsts[r].time is not None]
    return min(t for t in times if t is not None) if times else None


def _same_failure(e: RankError, first: float | None) -> bool:
    """A peer error inside a collective that belongs to the others' timeout: within
    _SAME_FAILURE_S of the first one, or, where the text has no times (plain per-rank
    files), raised inside a collective at all: its traceback says the rank was waiting in
    one when a peer that timed out exited, so it did enter it."""
    if not e.victim:
        return False
    if first is None or e.time is None:
        return bool(e.collective)
    return e.time - first < _SAME_FAILURE_S


def _quiet(col: Collected, waits: dict[int, Wait]) -> list[int]:
    """Known ranks with no timeout whose first error (if any) is not their own code's and
    not a peer error of the same failure (a rank whose peer exited before it timed out)."""
    firsts = first_errors(col)
    first = _first_timeout(waits, firsts)
    out = []
    # ncclaborts.py: a rank whose world communicator aborted was torn down by the failure
    for rank in sorted(ranks_heard(col) - set(waits) - watchdog_ranks(col) - aborted_ranks(col)):
        e = firsts.get(rank)
        if e is not None and not e.victim:
            continue  # an error of its own: the dead-rank rule's
        if e is not None and _same_failure(e, first):
            continue  # failed with the others, before its own timeout fired
        x = col.evidence.ranks.get(rank)
        if x is not None and x.signal and x.signal not in ("SIGTERM", "SIGINT", "SIGHUP"):
            continue  # killed: the dead-rank rule's
        out.append(rank)
    return out


def did_not_time_out(col: Collected, waits: dict[int, Wait]) -> JobFinding | None:
    quiet = _quiet(col, waits)
    if not quiet or len(quiet) > len(waits):
        return None
    sides = Counter(_where(w) for w in waits.values())
    where = sides.most_common(1)[0][0]
    items = [_evidence(w) for w in list(waits.values())[:8]]
    firsts = first_errors(col)
    for rank in quiet[:8]:
        e = firsts.get(rank)
        items.insert(0, error_evidence(e) if e is not None else Evidence(
            source=rank_source(col, rank), rank=rank, text=f"rank {rank}: no timeout and no error in its output"))
    confidence: Confidence = "high" if len(quiet) < len(waits) else "medium"
    rpc = all(RPC_TIMEOUT in w.text for w in waits.values())  # torch.distributed.rpc: no collective, a call
    store = all(w.op == "store.wait" for w in waits.values())  # storewait.py: a key its peers waited for
    why = ("never answered the RPCs they waited on (its handler stuck or busy elsewhere)" if rpc
           else "never set the store key they waited for (stuck or busy elsewhere)" if store
           else "never entered that collective (stuck or busy elsewhere)")
    return job_finding(cls="stuck-rank", ranks=tuple(quiet), confidence=confidence, evidence=tuple(items),
                   divergence=where,
                   summary=f"{rank_words(quiet)} did not time out while {rank_words(waits)} timed out waiting in "
                           f"{where}: {rank_words(quiet)} {why}")


def broadcast_tree(col: Collected, waits: dict[int, Wait], sides: dict[int, str], items: tuple[Evidence, ...]) \
        -> JobFinding | None:
    """Some ranks (two or more) wait in a gloo broadcast and the others in one other
    collective they went on to: gloo's tree replayed (bcastroot.py) says whose src was
    off, or that the text cannot say. None where it does not apply or explains nothing."""
    stuck = tuple(sorted(r for r, w in waits.items() if w.op == "broadcast"))
    others = {sides[r] for r in waits if r not in stuck}
    world = ring_world(col)
    if world is None or len(stuck) < 2 or len(others) != 1 or len({sides[r] for r in stuck}) != 1:
        return None
    firsts = first_errors(col)
    found = wrong_src({r: firsts[r].message if r in firsts else waits[r].text for r in stuck},
                      [r for r in waits if r not in stuck], world)
    if found is None:
        return None
    named, why = found
    return job_finding(cls="collective-mismatch", ranks=named, confidence="high" if named else "medium",
                       evidence=items, divergence=next(iter(others)),
                       where=next((waits[r].where for r in stuck if waits[r].where), ""),
                       summary=f"{rank_words(stuck)} waited in {sides[stuck[0]]} while the others timed out in "
                               f"{next(iter(others))}: {why}")


def waited_elsewhere(waits: dict[int, Wait], col: Collected | None = None) -> JobFinding | None:
    if not all(w.op for w in waits.values()):  # a watchdog status line names the SeqNum only
        if len({w.seq for w in waits.values()}) < 2 or any(w.seq is None for w in waits.values()):
            return None
        waits = {r: msgspec.structs.replace(w, op="", where="") for r, w in waits.items()}
    sides = {r: _where(w) for r, w in waits.items()}
    if col is not None and len({w.key for w in waits.values()}) > 1 and len({w.key[0] for w in waits.values()}) == 1 \
            and not seqs_comparable(col):
        return None  # seqgroups.py: the SeqNums may count different groups' calls
    cls: FailureClass = "collective-mismatch"
    if len(set(sides.values())) == 1:
        sides = {r: f"{_where(w)} with {w.numel_in} elements" for r, w in waits.items() if w.numel_in is not None}
        if len(set(sides.values())) < 2:
            return None
        cls = "shape-mismatch"
    items = tuple(_evidence(w) for w in list(waits.values())[:12])
    tree = broadcast_tree(col, waits, sides, items) if col is not None and cls == "collective-mismatch" else None
    if tree is not None:
        return tree
    pick = minority(sides)
    what = "tensor size" if cls == "shape-mismatch" else "collective"
    alone = earliest_alone({r: w.chain for r, w in waits.items()}, sides) if pick is None else None
    if alone is not None:  # behindall.py: no majority, one rank first in program order
        odd, summary = alone
        return job_finding(cls=cls, ranks=odd, confidence="medium", evidence=items, summary=summary,
                           where=next((waits[r].where for r in odd if waits[r].where), ""))
    if pick is None:
        text = "; ".join(f"{rank_words([r for r in sides if sides[r] == v])}: {v}" for v in sorted(set(sides.values())))
        return job_finding(cls=cls, confidence="medium", evidence=items,
                       summary=f"every rank timed out, in different {what}s and no majority names the odd one: "
                               f"{text}")
    odd, top, theirs = pick
    setup = creating_group(waits, odd, items, top)  # groupwait.py: a victim of a member's other groups
    if setup is not None:
        differs = config_differs(setup, col.logged, ranks_heard(col) | set(waits)) if col is not None else None
        return differs or setup
    back = behind_the_others(waits, sides, odd, top)
    if back is not None:
        odd, summary = back
        return job_finding(cls=cls, ranks=odd, confidence="medium", evidence=items, divergence=top,
                           where=next((waits[r].where for r in odd if waits[r].where), ""), summary=summary)
    victims = left_waiting(waits, odd, top, theirs, items)  # p2pvictims.py: the waiters' partner is elsewhere
    if victims is not None:
        return victims
    past = went_past(col, waits, odd, top, theirs, items) if col is not None and cls == "collective-mismatch" \
        else None
    if past is not None:  # wentpast.py: the others all wait on sends, so the odd ranks' data reached them
        return past
    return job_finding(cls=cls, ranks=odd, confidence="high", evidence=items, divergence=top,
                   where=next((waits[r].where for r in odd if waits[r].where), ""),
                   summary=f"{rank_words(odd)} timed out in {theirs} while the others timed out in {top}: "
                           f"the ranks called different {what}s")


def behind_the_others(waits: dict[int, Wait], sides: dict[int, str], odd: tuple[int, ...], top: str) -> \
        tuple[tuple[int, ...], str] | None:
    """Where the minority is several sides (a barrier, a broadcast and the others' all_reduce),
    the ranks whose own frames stop first in the function every traceback shares
    (desyncorder.first_in_program): they made one collective more, the sides between
    waited for them. None where one side is the minority or the tracebacks do not say."""
    if len({sides[r] for r in odd}) < 2 or not all(w.chain for w in waits.values()):
        return None
    found = first_in_program({r: w.chain for r, w in waits.items()})
    if found is None or not set(found[0]) < set(odd):
        return None
    back, function, line = found
    between = sorted(r for r in odd if r not in back)
    return back, (f"{rank_words(back)} timed out in {sides[back[0]]}, before every other rank in {function} "
                  f"(line {line}): its peers went past that call, so it made one collective more; "
                  f"{rank_words(between)} timed out in {sides[between[0]]} waiting for it, the others in {top}")


def cut_short(col: Collected, waits: dict[int, Wait]) -> dict[int, Wait]:
    """Ranks whose wait a peer cut short: no timeout of their own, but a peer error
    (Connection closed) inside a collective, within _SAME_FAILURE_S of the first timeout
    (a peer that timed out exited and closed its connections). The traceback still says
    which collective the rank was waiting in, as a timeout would have."""
    firsts = first_errors(col)
    first = _first_timeout(waits, firsts)
    out: dict[int, Wait] = {}
    for rank, e in firsts.items():
        if rank in waits or not e.collective or not _same_failure(e, first):
            continue
        out[rank] = Wait(rank=rank, source=e.source, line=e.line, op=e.collective, where=e.frame, chain=e.chain,
                         text=f"in {e.collective}" + (f" at {e.frame}" if e.frame else "")
                              + f" when a peer that timed out closed its connections: {e.message[:100]}")
    return out


def post_mortem(col: Collected) -> JobFinding | None:
    """The culprit the ranks' timeouts point at (see the module's docstring), or None."""
    in_store = stuck_in_store(col)  # storewait.py: ranks in a store wait of their own while the others wait for them
    if in_store is not None:
        return in_store
    waits = {**store_waits(col), **rank_waits(col)}  # storewait.py: a key waited for mid-run is a timeout too
    if not waits:
        return None
    return (did_not_time_out(col, waits) or waited_elsewhere({**waits, **cut_short(col, waits)}, col)
            or none_finished(col, waits))  # nonefinished.py: all in one call, none finished


__all__ = ["cut_short", "did_not_time_out", "post_mortem", "waited_elsewhere"]
