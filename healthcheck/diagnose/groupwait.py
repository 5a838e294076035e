"""A post-mortem side that waited to CREATE a process group is no rank that called one
collective more.

A rank whose timeout (or whose store connection lost under it: `Failed to recv, got 0
bytes`) came inside new_group (`_new_process_group_helper`) waited in the store for the
group's other members. torch names a group by how many groups its process made before
(grouporder.py), so a member that built its groups in another order or number (its
environment said another tensor-parallel size) never meets it there; the waiting rank is
that member's victim, and which member it is the logs do not say. The finding names no
rank and says so (captured: tests/fixtures/diagnose/rules11, groupcount: rank 3 builds a
group per rank where its peers build pairs; rank 2 waits in new_group and was named as
"made one collective more").

Where the ranks' own logs say it (loggednumbers.one_rank_off: one rank alone logged another
number in a line every rank logged, `2 nodes of 3` where its peers say `of 2`), that rank
built its groups from another configuration (its environment): init-failure of that rank,
medium confidence (`config_differs`).
"""

from __future__ import annotations

from collections.abc import Sequence

from healthcheck.diagnose.findings import Evidence, JobFinding, job_finding
from healthcheck.diagnose.logfacts import Wait
from healthcheck.diagnose.loggednumbers import Logged, one_rank_off
from healthcheck.diagnose.stacks import rank_words

_UNSAID = ": a member of that group"  # where creating_group's words go on to say the logs name no one
GROUP_SETUP = frozenset({"new_group", "_new_process_group_helper", "new_subgroups", "new_subgroups_by_enumeration"})


def creating_group(waits: dict[int, Wait], odd: Sequence[int], items: tuple[Evidence, ...], top: str) \
        -> JobFinding | None:
    """The no-rank finding where an odd side waited in group creation; None otherwise."""
    setup = sorted(r for r in odd if waits[r].op in GROUP_SETUP)
    if not setup:
        return None
    w = waits[setup[0]]
    return job_finding(
        cls="collective-mismatch", confidence="low", evidence=items, divergence=top,
        where=w.where,
        summary=f"{rank_words(setup)} waited to create a process group ({w.op}"
                f"{' at ' + w.where if w.where else ''}) while the others timed out in {top}{_UNSAID} "
                "built its groups in another order or number (its environment or its code differs), so "
                "they never met in the store; the waiting rank is its victim, and the logs do not say which "
                "member (compare each rank's group sizes, the TP/PP sizes of its environment)")


def config_differs(setup: JobFinding, logged: Logged, ranks: set[int]) -> JobFinding | None:
    """The init-failure of the one rank whose own logged configuration is off every peer's,
    where ranks waited to create a group (`setup`: creating_group's finding); else None."""
    odd = one_rank_off(logged, ranks)
    if odd is None:
        return None
    rank, words = odd
    return job_finding(
        cls="init-failure", confidence="medium", ranks=(rank,), evidence=setup.lines, where=setup.where,
        summary=f"rank {rank} built its process groups from another configuration than its peers: {words}; "
                f"{setup.message.split(_UNSAID, 1)[0]}: the groups never met in the store")


__all__ = ["GROUP_SETUP", "config_differs", "creating_group"]
