"""One collective too many on one rank, on the stacks (collective-mismatch, the rank named).

A rank that calls one collective more than its peers (a metric only it reduces) pairs that
call with its peers' next call of the same op: backends match collectives by their order,
not by where in the program they were called. The stacks then show the peers in that op
at their own call site and the odd rank in the same op at another call site, while a
rank caught between (in a collective the odd rank has not reached yet) waits for it. The
stack mismatch (stackrules.py) names every minority side; of those, the side in the
majority's op at another call site made the extra call, and the sides in another op
wait for it: only the first is named. Where no side shares the majority's op, nothing
here changes the answer.
"""

from __future__ import annotations

from collections.abc import Sequence

from healthcheck.diagnose.stacks import StackGroup


def extra_call(groups: Sequence[StackGroup], odd: tuple[int, ...]) -> tuple[int, ...]:
    """Of the odd ranks, those in the majority's collective at another call site; `odd`
    itself where there are none (or where they are all the odd ranks already)."""
    odd_set = set(odd)
    majority = [g for g in groups if not set(g.ranks) & odd_set]
    if not majority:
        return odd
    top = max(majority, key=lambda g: len(g.ranks))
    same_op = tuple(sorted(r for g in groups if set(g.ranks) <= odd_set and g.collective == top.collective
                           and g.function != top.function for r in g.ranks))
    return same_op if same_op and len(same_op) < len(odd) else odd


__all__ = ["extra_call"]
