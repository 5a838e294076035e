"""c10d's NCCL unique-id fetch from a rank that went away: that rank's death.

Before its first NCCL collective a rank fetches the communicator's ncclUniqueId that the
root put in the c10d key-value store; where the store's connection breaks under that get,
ProcessGroupNCCL raises (broadcastUniqueNCCLID): `[R] is setting up NCCL communicator and
retrieving ncclUniqueId from [S] via c10d key-value store by key 'K', but store->get('K')
got error: Connection reset by peer. This may indicate a possible application crash on rank
S or a network set up issue.` (also `Broken pipe`, `Connection closed by peer`, torch 2.x's
`Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server shutdown
or crash?`). R is a victim; the store's host went away, and under env:// (no torchrun agent:
its store outlives its workers) the default store's host is rank 0, which is also the root
S of the default group's first communicator. So S is named, dead-rank at medium confidence
with R's error as the evidence, only where S is rank 0, no torchrun agent is in the text,
and nothing shows S alive after R's error (an error of S's own that a collective raised, a
line of S's later in the same file).

A get that timed out (`Socket Timeout`, the store's `Timeout waiting for key` or `wait
timeout`) is no connection that broke: the store answered until then, so its host is alive
(a reset would be its death), and the id's root S never published the id, which it does on
reaching the communicator's first collective. S is alive and behind: stuck-rank naming S, at
medium confidence, where every such timeout names one S other than the asker and the text
shows no error of S's own nor any rank's death; under torchrun's agent-hosted store too (the
id is S's to publish, not the agent's).
"""

from __future__ import annotations

import re

from healthcheck.diagnose.analysis import fact_rank, log_evidence
from healthcheck.diagnose.findings import Evidence, JobFinding, job_finding
from healthcheck.diagnose.logfacts import RankError
from healthcheck.diagnose.sources import Collected
from healthcheck.parsers.torch_log import FACT_KINDS

# torch 1.x spelled it `retreiving`
_FETCH = re.compile(r"\[(\d{1,9})\] is setting up NCCL communicator and retr(?:ie|ei)ving ncclUniqueId from "
                    r"\[(\d{1,9})\] via c10d key-value store by key '[^']{0,256}', "
                    r"but store->get\('[^']{0,256}'\) got error: (.{0,300})")
_BROKEN = ("Connection reset by peer", "Broken pipe", "Connection closed by peer", "Connection was likely closed",
           "got 0 bytes")
_TIMED_OUT = ("Socket Timeout", "Timeout waiting for key", "wait timeout", "timed out", "Timed out")
STORE_HOST = 0  # under env:// the default TCPStore lives in rank 0's process


def _under_torchrun(col: Collected) -> bool:
    """torchrun's agent is in the text: its store outlives a worker's death."""
    return any(f.log is not None and (f.log.child_failed or f.log.worker_failures or f.log.launched_world
                                      or f.log.worker_group) for f in col.evidence.torch_logs)


def _alive_after(col: Collected, rank: int, source: str, line: int, firsts: dict[int, RankError]) -> bool:
    """Whether the text shows `rank` alive after that line: a collective's error of its own
    (it was still in the job), or a fact of its own later in the same file."""
    own = firsts.get(rank)
    if own is not None and own.victim:
        return True
    for f in col.evidence.torch_logs:
        if f.log is None or f.source != source:
            continue
        for kind in FACT_KINDS:
            facts = getattr(f.log, kind)
            if any(getattr(x, "rank", None) == rank and (getattr(x, "line", 0) or 0) > line for x in facts):
                return True
        if any(s.rank == rank and s.line > line for s in (*f.log.last_steps, *f.log.last_warnings)):
            return True
    return False


def fetch_failures(col: Collected, firsts: dict[int, RankError]) -> list[tuple[int, str, Evidence]]:
    """(the rank that went away, how, the evidence line) from the unique-id fetches whose
    store connection broke (module doc); [] where none names a rank."""
    if _under_torchrun(col):
        return []
    out: dict[int, tuple[int, str, Evidence]] = {}
    for e in firsts.values():
        m = _FETCH.search(e.message)
        if m is None or not any(w in m.group(3) for w in _BROKEN):
            continue
        asker, gone = int(m.group(1)), int(m.group(2))
        if gone != STORE_HOST or gone == asker or gone in out or _alive_after(col, gone, e.source, e.line, firsts):
            continue
        cause = next(w for w in _BROKEN if w in m.group(3))
        out[gone] = (gone, f"went away: rank {asker}'s fetch of the NCCL unique id from its store failed "
                           f"({cause}), the store rank {gone} hosts",
                     Evidence(source=e.source, line=e.line, rank=e.rank, time=e.time,
                              text=f"rank {e.rank}: {e.text}"[:300]))
    return list(out.values())


def _fetch_timeouts(col: Collected, firsts: dict[int, RankError]) -> list[tuple[int, int, Evidence]]:
    """(asker, root, the line) for each unique-id get that timed out: a rank's first
    exception, or the torch log parser's rendezvous/store error (a paste's lone line)."""
    said = [(e.message, Evidence(source=e.source, line=e.line, rank=e.rank, time=e.time,
                                 text=f"rank {e.rank}: {e.text}"[:300])) for e in firsts.values()]
    for f in col.evidence.torch_logs:
        if f.log is not None:
            said.extend((z.message, log_evidence(col, f.source, z.line, z.message, fact_rank(z, f.rank)))
                        for z in f.log.rendezvous)
    out = []
    for message, item in said:
        m = _FETCH.search(message)
        if m is not None and any(w in m.group(3) for w in _TIMED_OUT):
            out.append((int(m.group(1)), int(m.group(2)), item))
    return out


def _own_failure(col: Collected, rank: int, firsts: dict[int, RankError]) -> bool:
    """Whether the text shows an error of `rank`'s own: an exception, or a rendezvous/store error."""
    return rank in firsts or any(fact_rank(z, f.rank) == rank for f in col.evidence.torch_logs if f.log is not None
                                 for z in f.log.rendezvous)


def unpublished_id(col: Collected, firsts: dict[int, RankError]) -> JobFinding | None:
    """stuck-rank naming the root whose NCCL unique id its peers timed out waiting for
    (module doc); None where the timeouts name several roots, an asker is the root, or the
    root printed an error of its own. The caller has found no rank dead."""
    waits = _fetch_timeouts(col, firsts)
    roots = {root for _, root, _ in waits}
    if len(roots) != 1:
        return None
    root = roots.pop()
    if any(asker == root for asker, _, _ in waits) or _own_failure(col, root, firsts):
        return None
    askers = sorted({asker for asker, _, _ in waits})
    who = ("rank " if len(askers) == 1 else "ranks ") + ", ".join(map(str, askers))
    items = tuple(item for _, _, item in waits[:12])
    return job_finding(cls="stuck-rank", confidence="medium", ranks=(root,), evidence=items,
                       summary=f"rank {root} never published the NCCL unique id {who} waited for in the store "
                               f"(the get timed out: the store answered, so rank {root}'s process is alive, but it "
                               "had not reached the communicator's first collective)")


__all__ = ["STORE_HOST", "fetch_failures", "unpublished_id"]
