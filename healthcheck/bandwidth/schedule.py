"""Which nodes to measure together, round by round: pure planning, no I/O, no launching.

A *round* is a list of disjoint tests run at the same time; a *test* measures its member
nodes together (a pair: `ib_write_bw` or a 2-node `all_reduce_perf`; a group: an
allreduce over its members). Wall time is rounds x the duration of one test, whatever
the number of tests in a round, so every plan here minimises rounds.

- `circle_rounds`: every pair exactly once, the circle method of a round-robin
  tournament (SuperBench's `pair-wise` pattern): n-1 rounds of n/2 disjoint pairs for
  even n; for odd n a bye, so n rounds of (n-1)/2 pairs with one node sitting out each.
  The exhaustive plan: it is the only one that finds a slow *link* (a pair slow while
  both nodes are fine with others) wherever it is, at n-1 rounds.
- `groups` / `group_rounds`: disjoint groups of about k nodes covering every node (the
  remainder is spread over the groups, never left untested as SuperBench's `k-batch`
  leaves n % k), regrouped at random from a seed each round with earlier partners kept
  apart; with `rails` (node -> the leaf switch or rail group it hangs off) each group
  mixes as many leaves as it can.
- `split_tests`: bisection of a group that fell short: its two halves, down to pairs of
  one member and a known-good partner (the confirmation that names a culprit).

localize.py judges the results; `localize.localize_adaptive` drives these plans.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

import msgspec

Pair = tuple[str, str]
Seed = int | str
# why a test was planned: "screen" (circle or group rounds: chosen knowing nothing),
# "split" (a half of a group that fell short), "confirm" (a suspect and a known-good
# partner), "narrow" (a pair inside a group that fell short while every member was fine
# elsewhere: looking for the slow link)
Purpose = Literal["screen", "split", "confirm", "narrow"]


class Test(msgspec.Struct, frozen=True):
    """One planned measurement of its member nodes together."""

    members: tuple[str, ...]
    purpose: Purpose = "screen"

    __test__ = False  # not a pytest test class, whatever imports it


def unique_nodes(nodes: Iterable[str]) -> list[str]:
    names = list(nodes)
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise ValueError(f"node {n!r} is listed twice")
        seen.add(n)
    return names


# ------------------------------------------------------------------------ circle method


def circle_rounds(nodes: Sequence[str]) -> list[list[Pair]]:
    """Every pair of `nodes` exactly once, in rounds of disjoint pairs (the circle method).

    Even n: n-1 rounds of n/2 pairs. Odd n: a bye is added, so n rounds of (n-1)/2
    pairs, one node sitting out each round (each node exactly once). The first node
    stays put while the others rotate; a pair names its nodes in the input's order.
    Deterministic for a given order; fewer than two nodes give no rounds.
    """
    names = unique_nodes(nodes)
    if len(names) < 2:
        return []
    index = {n: i for i, n in enumerate(names)}
    ring: list[str | None] = list(names)
    if len(ring) % 2:
        ring.append(None)  # the bye: whoever meets it sits the round out
    m = len(ring)
    rounds: list[list[Pair]] = []
    for _ in range(m - 1):
        pairs: list[Pair] = []
        for i in range(m // 2):
            a, b = ring[i], ring[m - 1 - i]
            if a is None or b is None:
                continue
            pairs.append((a, b) if index[a] < index[b] else (b, a))
        rounds.append(pairs)
        ring = [ring[0], ring[-1], *ring[1:-1]]  # keep the first, rotate the rest by one
    return rounds


# --------------------------------------------------------------------- group testing


def group_sizes(n: int, k: int) -> list[int]:
    """Sizes of the disjoint groups `groups` makes of n nodes for a target size k.

    ceil(n/k) groups, sizes differing by at most one, none above k: the remainder is
    spread, never dropped. Only k = 2 with odd n would leave a group of one (which
    cannot be measured): then one group of three instead.
    """
    if k < 2:
        raise ValueError(f"a group needs at least two nodes, not k={k}")
    if n < 2:
        raise ValueError(f"cannot make groups of {n} node(s): a test needs two")
    g = math.ceil(n / k)
    if n // g < 2:
        g = n // 2
    base, extra = divmod(n, g)
    return [base + 1] * extra + [base] * (g - extra)


def _spread(names: list[str], rails: Mapping[str, str], rng: random.Random) -> list[str]:
    """`names` ordered so that any run of consecutive nodes mixes as many rail labels as it can.

    Each label's nodes are shuffled and given evenly spaced positions in [0, 1) from a
    random offset (stratified interleaving), so a big label and a small one both spread
    over the whole order instead of the big one filling the tail.
    """
    by_label: dict[str, list[str]] = {}
    for n in names:
        by_label.setdefault(rails.get(n, ""), []).append(n)
    keyed: list[tuple[float, float, str]] = []
    for label in sorted(by_label):
        members = by_label[label]
        rng.shuffle(members)
        offset = rng.random()
        tie = rng.random()
        keyed.extend(((j + offset) / len(members), tie, n) for j, n in enumerate(members))
    keyed.sort()
    return [n for _, _, n in keyed]


def groups(nodes: Sequence[str], k: int, seed: Seed = 0, rails: Mapping[str, str] | None = None, *,
           avoid: Iterable[Iterable[str]] = ()) -> list[list[str]]:
    """Every node in exactly one of ceil(n/k) disjoint groups of about k (see `group_sizes`).

    Random from `seed` (the same seed, nodes and k give the same groups). `rails`: node
    -> the label of its leaf switch, rail group or scalable unit; each group then takes
    its members from as many different labels as it can, so a group test crosses the
    spine and one leaf's nodes are spread over many groups. Nodes `rails` does not name
    share the label "". `avoid`: earlier groups (or tests) whose members should not meet
    again: a node goes to the next group with room and none of its earlier partners,
    else to the one with the fewest (regrouping gives every node new partners, so a
    node that shared two tests with a slow one is not mistaken for slow itself).
    """
    names = unique_nodes(nodes)
    sizes = group_sizes(len(names), k)
    rng = random.Random(f"hc.groups/{seed}")
    order = sorted(names)  # independent of the input order: the seed alone decides
    if rails:
        order = _spread(order, rails, rng)
    else:
        rng.shuffle(order)
    met: dict[str, set[str]] = {}
    wanted = set(names)
    for earlier in avoid:
        together = [m for m in earlier if m in wanted]
        for m in together:
            met.setdefault(m, set()).update(together)
    if not met:
        out, start = [], 0
        for size in sizes:
            out.append(order[start:start + size])
            start += size
        return out
    # greedy, so a few seeded orders are tried and the one with the fewest clashes kept
    best: tuple[tuple[int, int], list[list[str]]] = ((len(names) ** 2, len(names) ** 2), [])
    for attempt in range(_ATTEMPTS):
        if attempt:
            order = sorted(names)
            if rails:
                order = _spread(order, rails, rng)
            else:
                rng.shuffle(order)
        out, cost = _assign(order, sizes, met, rails or {})
        if attempt and cost >= best[0]:
            break  # no better: the clashes left are likely unavoidable (k too big for n)
        best = (cost, out)
        if cost == (0, 0) or (cost[0] == 0 and not rails):
            break
    return best[1]


_ATTEMPTS = 8  # orders `groups` tries when it must keep earlier partners apart


def _assign(order: list[str], sizes: list[int], met: dict[str, set[str]], rails: Mapping[str, str]
            ) -> tuple[list[list[str]], tuple[int, int]]:
    """`order` dealt into groups of `sizes`, each node into the group its position would
    chunk it into if that has none of its earlier partners (nor, with rails, a node of
    its label), else the next such group, else the one with the fewest; and the cost:
    (earlier partners put together again, nodes of one label put together)."""
    g = len(sizes)
    chunk: list[int] = [i for i, size in enumerate(sizes) for _ in range(size)]
    out: list[list[str]] = [[] for _ in sizes]
    total = [0, 0]
    for p, node in enumerate(order):
        seen = met.get(node, ())
        label = rails.get(node, "") if rails else None
        best, fewest = -1, (math.inf, math.inf)
        for j in range(g):
            gi = (chunk[p] + j) % g
            if len(out[gi]) >= sizes[gi]:
                continue
            clash = sum(1 for x in out[gi] if x in seen) if seen else 0
            same = sum(1 for x in out[gi] if rails.get(x, "") == label) if label is not None else 0
            if (clash, same) < fewest:
                best, fewest = gi, (clash, same)
                if clash == 0 and same == 0:
                    break
        out[best].append(node)
        total[0] += int(fewest[0])
        total[1] += int(fewest[1])
    return out, (total[0], total[1])


def round_seed(seed: Seed, r: int) -> Seed:
    """The seed of regrouping round r (0-based) of `group_rounds` (round 0 uses `seed` itself)."""
    return seed if r == 0 else f"{seed}/{r}"


def group_rounds(nodes: Sequence[str], k: int, seed: Seed = 0, rounds: int = 2,
                 rails: Mapping[str, str] | None = None) -> list[list[list[str]]]:
    """`rounds` independent random groupings of the same nodes (random regrouping).

    A bad node fails every group it is in; a healthy one only those it shares with a
    bad one, so each regrouping clears most of the healthy members of a failed group.
    Each round avoids putting together nodes an earlier round already did.
    """
    out: list[list[list[str]]] = []
    for r in range(rounds):
        out.append(groups(nodes, k, round_seed(seed, r), rails, avoid=[g for rnd in out for g in rnd]))
    return out


# -------------------------------------------------------------------------- bisection


def split_tests(group: Sequence[str], known_good: Iterable[str], *, pair_at: int = 2, pad: bool = False
                ) -> list[Test]:
    """The next tests that split `group` (members of a test that fell short, still unexplained).

    - `len(group) <= pair_at`: each member with its own known-good partner ("confirm"),
      which is what names a culprit;
    - otherwise its two halves ("split"), each measured alone; a half of one node gets
      a known-good partner instead. `pad=True` fills each half up to the group's size
      with known-good nodes, so every test has as many members as the one that fell
      short (and its threshold still applies).

    Known-good partners are used at most once, in the order given, never a member of
    `group`. Where they run out, the members still without a test get none (plan them
    next round): the result may cover only part of the group.
    """
    members = unique_nodes(group)
    if not members:
        return []
    inside = set(members)
    partners = iter([g for g in known_good if g not in inside])

    def partner() -> str | None:
        return next(partners, None)

    tests: list[Test] = []
    if len(members) <= max(pair_at, 1):
        for m in members:
            p = partner()
            if p is None:
                break
            tests.append(Test((m, p), "confirm"))
        return tests
    half = math.ceil(len(members) / 2)
    for part in (members[:half], members[half:]):
        if len(part) == 1:
            p = partner()
            if p is not None:
                tests.append(Test((part[0], p), "confirm"))
            continue
        if pad:
            fill = []
            for _ in range(len(members) - len(part)):
                p = partner()
                if p is None:
                    break
                fill.append(p)
            part = part + fill
        tests.append(Test(tuple(part), "split"))
    return tests


def bisection_rounds(n: int, pair_at: int = 2) -> int:
    """Rounds `split_tests` needs, at worst, to bring a group of n with one culprit to its confirmation."""
    rounds, size = 0, n
    while size > max(pair_at, 1):
        size = math.ceil(size / 2)
        rounds += 1
        if size == 1:  # a half of one is confirmed in the round that split it off
            return rounds
    return rounds + 1
