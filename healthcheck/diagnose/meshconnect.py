"""gloo's full mesh that never connected, for classify.py: an init failure naming no rank.

ProcessGroupGloo's constructor connects every pair of the group's ranks
(`gloo::rendezvous::Context::connectFullMesh`) before the group exists; where a pair cannot
connect it raises, and torch logs it (ProcessGroupGloo.cpp: `Gloo connectFullMesh failed
with [.../pair.cc:144] no error`, `... [.../pair.h:301] Connect timeout [none]`, torch 2.x;
older releases raise gloo's own `[.../pair.cc:N] connect [ADDR]:PORT: Connection refused`
from the same constructor, under init_process_group or new_group). The process group never
formed: the job failed while starting (init-failure), whatever prefix the line wears (a
`[rankN]:` label, a Ray worker's, backticks) or wherever it is printed (a spawned process's
traceback). The line is the reporting rank's, which could not reach a peer; the peer is
named by its address at most (often `[none]`: none known), not by its rank, so no rank is
named. Only where no rank's own death explains it (deaths.py): a rank that died first
leaves its peers' meshes unconnected too; nor in the last attempt of a console torchrun
restarted the workers in (attempts.py): the new workers fail to connect on what the failed
attempt left, and the verdict is built over every attempt (`verdict._over_every_attempt`).
"""

from __future__ import annotations

from healthcheck.diagnose.analysis import fact_rank, log_evidence
from healthcheck.diagnose.findings import Evidence, JobFinding, job_finding
from healthcheck.diagnose.setupdeath import SETUP_FUNCTIONS
from healthcheck.diagnose.sources import Collected
from healthcheck.parsers.torch_log import GlooError


def _setup_lines(col: Collected) -> set[tuple[str, int]]:
    """(source, line) of every exception raised in a process group's setup."""
    return {(f.source, e.line) for f in col.evidence.torch_logs if f.log is not None
            for e in f.log.exceptions if e.collective in SETUP_FUNCTIONS}


def _mesh_errors(col: Collected) -> list[tuple[str, GlooError, int | None]]:
    """(source, error, rank) of every gloo connect error of a full mesh being set up."""
    setup = _setup_lines(col)
    return [(f.source, g, fact_rank(g, f.rank)) for f in col.evidence.torch_logs if f.log is not None
            for g in f.log.gloo
            if g.kind == "connect" and (g.operation == "connectFullMesh" or (f.source, g.line) in setup)]


def without_mesh_victims(col: Collected, dead: JobFinding | None) -> JobFinding | None:
    """`dead`, or None where every line it stands on is a gloo mesh's connect error: the rank
    that printed it could not reach a peer, it did not die of its own fault."""
    if dead is None or not dead.lines:
        return dead
    mesh = {(source, g.line) for source, g, _ in _mesh_errors(col)}
    if mesh and all(e.line is not None and (e.source, e.line) in mesh for e in dead.lines):
        return None
    return dead


def mesh_failure(col: Collected) -> JobFinding | None:
    """The init-failure of a gloo mesh that never connected, or None (see the module's docstring)."""
    if col.whole is not None:
        return None  # a restart's workers connecting to what the failed attempt left: verdict.py reads every attempt
    items: list[Evidence] = []
    for source, g, rank in _mesh_errors(col):
        peer = f" (peer {g.peer}{':' + str(g.port) if g.port else ''})" if g.peer else ""
        items.append(log_evidence(col, source, g.line, f"gloo could not connect its full mesh{peer}: {g.message}",
                                  rank))
    if not items:
        return None
    return job_finding(cls="init-failure", confidence="medium", evidence=tuple(items[:20]),
                       summary="init failure: gloo could not connect the process group's full mesh, so the group "
                               "never formed; no rank is named: the line is the side that could not reach a peer, "
                               "not which peer never came (check that every rank can reach every other's address: "
                               "GLOO_SOCKET_IFNAME, firewalls, a host name resolving to 127.0.1.1)")


__all__ = ["mesh_failure", "without_mesh_victims"]
