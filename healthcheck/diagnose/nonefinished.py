"""Every rank timed out in one collective, at one call site, some waiting to send and some
to receive: all of them entered it and none finished (collective-mismatch, no rank named).

No rank stayed out (postmortem.did_not_time_out names the one that did) and none waited
elsewhere (postmortem.waited_elsewhere): the collective itself failed among ranks that
all called it. On gloo a rank's wait on a send is a peer that has not posted the matching
receive: the ranks disagree on what this call is (two buckets all_reduced in another order
on one rank, another element count: captured with torch 2.13, tests/fixtures/diagnose/
rules8: 11 and 4, or 12 and 5 in either order, swapped on one rank of 6 or 7, every rank
times out, in gloo's
ring some on sends and some on receives). Which rank's call differs the waits do not say
(the rank whose order is off was found on either side of the ring's send/receive
boundary, depending on which bucket it reduced first), so none is named; the verdict says
where they all waited. A WORLD_SIZE one smaller on rank 0 or 1 that still gets through
init ends the same way (captured), and the verdict says that too. Named nowhere else: a
job whose ranks all wait on receives alone (every rank waiting for data nobody sends) is
not this rule's, nor are logs whose ranks are not 0..N-1 (a rank in between left no output:
the one that never entered, whose peers' waits show the same mix of sends and receives).
"""

from __future__ import annotations

from healthcheck.diagnose.findings import Evidence, JobFinding, job_finding
from healthcheck.diagnose.logfacts import Wait, first_errors, known_ranks
from healthcheck.diagnose.ringsize import ring_world
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.stacks import rank_words


def _side(w: Wait) -> str:
    return f"{w.op} at {w.where}"


def none_finished(col: Collected, waits: dict[int, Wait]) -> JobFinding | None:
    """The finding where the module's conditions hold; else None."""
    world = ring_world(col)  # the ranks heard are 0..N-1: no rank in between left no output
    if world is None or len(waits) != world or set(waits) != known_ranks(col):
        return None
    if not all(w.op and w.where for w in waits.values()):
        return None
    if len({_side(w) for w in waits.values()}) != 1:
        return None
    firsts = first_errors(col)  # the whole message: a Wait's text is cut short
    said = {r: firsts[r].message if r in firsts else w.text for r, w in waits.items()}
    sending = sorted(r for r, text in said.items() if "for send operation" in text)
    receiving = sorted(r for r, text in said.items() if "for recv operation" in text)
    if not sending or not receiving:
        return None
    where = _side(next(iter(waits.values())))
    items = tuple(Evidence(source=w.source, line=w.line, rank=w.rank, text=f"rank {w.rank}: {w.text}"[:300])
                  for w in list(waits.values())[:12])
    return job_finding(cls="collective-mismatch", confidence="low", evidence=items, divergence=where,
                       summary=f"every rank the logs hold (ranks 0-{world - 1}) timed out in {where}: all of them "
                               "entered it and none finished "
                               f"({rank_words(sending)} waiting to send, {rank_words(receiving)} to receive): "
                               "their calls there disagree (tensors passed in another order or of another size "
                               "on some rank), or their process groups do (a WORLD_SIZE or RANK off on some rank "
                               "that still got through init); which rank's call differs the timeouts do not "
                               "say (a rank whose output is missing here may be one that never entered): rerun "
                               "with TORCH_DISTRIBUTED_DEBUG=DETAIL to have torch compare each call")


__all__ = ["none_finished"]
