"""A rank whose launch differs from its peers' could not start: init-failure of that rank,
not dead-rank, where the job never got past its start.

The dead-rank rule (deaths.py) names the rank whose own error ended it, and setupdeath.py
turns that into init-failure where the error was the process group's setup failing. Two
ways a rank's own launch breaks the start that setupdeath.py leaves as deaths:

* it waited in a rendezvous of its own: its init_method (file://, another store) is not
  its peers', so it waits for them in one store while they wait for it in another, and it
  times out there with an error of another kind than every peer's (captured with torch
  2.13: file:// on one rank, env:// on the others: `RuntimeError: Wait timeout` in the
  process group's construction on it, `DistStoreError`/`DistNetworkError` on each peer;
  tests/fixtures/diagnose/rules8). A store wait whose kind every rank shares is a peer's
  consequence and stays a death (a rank that died before it joined, preinit.py);
* its own error, raised before any collective, names a variable of the distributed launch
  (TORCH_DISTRIBUTED_DEBUG, MASTER_ADDR, NCCL_*, GLOO_*...): torch refused its environment
  (captured: TORCH_DISTRIBUTED_DEBUG=TRACE on one rank raises ValueError when torch.distributed
  is imported). A rank dying in its own code for another reason before it joined (a config
  it cannot parse) names no such variable and stays a death.

Both hold only while the job never started: no rank's first error was raised inside a
collective past the process group's setup (a peer training in an all_reduce says the job
ran, and a rank that fails its setup then called it again: setupdeath.started).
"""

from __future__ import annotations

import re

from healthcheck.diagnose.findings import JobFinding, job_finding
from healthcheck.diagnose.logfacts import RankError, error_evidence, first_errors
from healthcheck.diagnose.setupdeath import SETUP_FUNCTIONS, started
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.stacks import rank_words

# a variable of the distributed launch named in an error's message: torch read it and refused it
_LAUNCH_VARIABLE = re.compile(r"\b(?:TORCH_DISTRIBUTED_\w{1,40}|TORCH_NCCL_\w{1,40}|TORCH_GLOO_\w{1,40}|"
                              r"NCCL_[A-Z_]{2,40}|GLOO_[A-Z_]{2,40}|MASTER_ADDR|MASTER_PORT|WORLD_SIZE|"
                              r"LOCAL_WORLD_SIZE|LOCAL_RANK)\b")


def _own_rendezvous(e: RankError, peers: list[RankError]) -> bool:
    """Its error came from its own process group's setup, of another kind than every peer's."""
    return e.collective in SETUP_FUNCTIONS and bool(peers) and all(p.type != e.type for p in peers)


def _refused_environment(e: RankError) -> bool:
    """Raised before any collective, naming a variable of the distributed launch."""
    return not e.collective and _LAUNCH_VARIABLE.search(e.message) is not None


def _why(e: RankError, peers: list[RankError]) -> str:
    if _own_rendezvous(e, peers):
        return (f"it timed out in a rendezvous of its own ({e.type}: {e.message[:80]} in {e.collective}) while "
                f"its peers waited for it in theirs ({peers[0].type}): its init_method or store is not theirs")
    return f"torch refused its launch environment ({e.type}: {e.message[:120]})"


def launch_differs(col: Collected, dead: JobFinding | None) -> JobFinding | None:
    """The init-failure of the dead ranks where each one's launch differs from its peers'
    and the job never started (see the module's docstring); else None."""
    if dead is None or not dead.ranks or started(col, dead.ranks):
        return None
    firsts = first_errors(col)
    own = [firsts.get(r) for r in dead.ranks]
    peers = [e for r, e in sorted(firsts.items()) if r not in dead.ranks]
    if any(e is None or not (_own_rendezvous(e, peers) or _refused_environment(e)) for e in own):
        return None
    errors = [e for e in own if e is not None]
    summary = (f"{rank_words(dead.ranks)} could not start: its launch differs from its peers': "
               f"{_why(errors[0], peers)}; "
               + (f"{rank_words([p.rank for p in peers])} failed in init waiting for it" if peers else
                  "the other ranks printed no error of their own"))
    evidence = tuple(error_evidence(e) for e in errors + peers)[:20]
    return job_finding(cls="init-failure", summary=summary, confidence="high", ranks=dead.ranks, evidence=evidence)


__all__ = ["launch_differs"]
