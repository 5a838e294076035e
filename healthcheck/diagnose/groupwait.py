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
"""

from __future__ import annotations

from collections.abc import Sequence

from healthcheck.diagnose.findings import Evidence, JobFinding, job_finding
from healthcheck.diagnose.logfacts import Wait
from healthcheck.diagnose.stacks import rank_words

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
                f"{' at ' + w.where if w.where else ''}) while the others timed out in {top}: a member of that "
                "group built its groups in another order or number (its environment or its code differs), so "
                "they never met in the store; the waiting rank is its victim, and the logs do not say which "
                "member (compare each rank's group sizes, the TP/PP sizes of its environment)")


__all__ = ["GROUP_SETUP", "creating_group"]
