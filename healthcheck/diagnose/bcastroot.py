"""A broadcast some ranks called with another src, read through gloo's binomial tree.

gloo's broadcast (gloo/broadcast.cc) is a binomial tree rooted at src: in round i a rank
whose virtual rank (rank - src mod world) has bits i.. clear sends to vrank ^ (1 << i), and
the rank with bit i set receives from it (blocking before its own sends). A rank that
calls it with another src sends to, or waits for, ranks that follow the others' tree:
those sends and receives never match. gloo then times out per rank, and the timeout says
which side it was on (`Timed out waiting Nms for send operation` / `for recv operation`),
while the ranks whose tree part matched complete and time out later in the next
collective. Captured with torch 2.13 (tests/fixtures/diagnose/rules5, `wrongroot`): the
rank with the wrong src and its parent in the others' tree both wait on a send, the
others go on; so the two stuck ranks look alike and naming both names a victim.

Which rank's src was off is settled by replaying the tree: every (the others' src, the
odd rank, its src) whose predicted outcome (completes, waits on a send, waits on a
receive) matches every rank's observed one. A rank is named where all the explanations
that fit agree on it; where the tree is symmetric (world 4: rank 0 with src 0 among
src 2, or rank 2 with src 2 among src 0) the candidates are said and none is named.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from healthcheck.diagnose.stacks import rank_words

MAX_WORLD = 16  # every (src, odd rank, its src) is replayed: world**3 trees, each O(world log world)

StepOutcome = str  # "ok" (completed), "send" (waits on a send), "recv" (waits on a receive), "stuck" (either)


def tree_ops(rank: int, root: int, world: int) -> list[tuple[str, int]]:
    """The sends and receives (in order) of `rank` in gloo's binomial broadcast from `root`."""
    vrank = (rank - root) % world
    dim = (world - 1).bit_length()
    mask = (1 << dim) - 1
    ops = []
    for i in range(dim):
        mask ^= 1 << i
        vpeer = vrank ^ (1 << i)
        if vrank & mask or vpeer >= world:
            continue
        ops.append(("recv" if vrank & (1 << i) else "send", (vpeer + root) % world))
    return ops


def _advance(ops: list[tuple[str, int]], rank: int, at: int, sends: set, recvs: set) -> int:
    """One rank's position after posting what it can: sends post at once, a receive waits
    for its peer's send."""
    while at < len(ops):
        kind, peer = ops[at]
        if kind == "send":
            sends.add((rank, peer))
        else:
            recvs.add((rank, peer))
            if (peer, rank) not in sends:
                break
        at += 1
    return at


def simulate(roots: Sequence[int]) -> list[StepOutcome]:
    """Each rank's outcome when rank k broadcasts from roots[k]."""
    world = len(roots)
    ops = [tree_ops(k, roots[k], world) for k in range(world)]
    at = [0] * world
    sends: set[tuple[int, int]] = set()
    recvs: set[tuple[int, int]] = set()
    moved = True
    while moved:
        before = list(at)
        at = [_advance(ops[k], k, at[k], sends, recvs) for k in range(world)]
        moved = at != before
    out: list[StepOutcome] = []
    for k in range(world):
        if at[k] < len(ops[k]):
            out.append("recv")
        else:
            out.append("send" if any(kind == "send" and (p, k) not in recvs for kind, p in ops[k]) else "ok")
    return out


def _fits(observed: StepOutcome | None, predicted: StepOutcome) -> bool:
    """None: nothing known of the rank; "stuck": it waited in the broadcast, on which side
    its error does not say (a peer closed the connection first)."""
    return observed is None or observed == predicted or (observed == "stuck" and predicted != "ok")


def explanations(observed: Sequence[StepOutcome | None]) -> set[tuple[int, int, int]]:
    """Every (the others' src, the odd rank, its src) whose tree gives the observed
    outcomes (_fits)."""
    world = len(observed)
    found = set()
    for src in range(world):
        for odd in range(world):
            for its in (r for r in range(world) if r != src):
                roots = [src] * world
                roots[odd] = its
                if all(_fits(o, p) for o, p in zip(observed, simulate(roots), strict=True)):
                    found.add((src, odd, its))
    return found


def outcome_of(message: str) -> StepOutcome | None:
    """gloo's timeout says which side of a transfer a rank waited on."""
    if "for send operation" in message:
        return "send"
    if "for recv operation" in message:
        return "recv"
    return None


def wrong_src(stuck: Mapping[int, str], went_on: Sequence[int], world: int) -> tuple[tuple[int, ...], str] | None:
    """The rank whose broadcast src was off, from the ranks stuck in the broadcast (rank ->
    its error message) and those that went on to the next collective: ((rank,), text)
    where the tree settles it, ((), text) where it leaves several candidates, None where
    no single src off explains what the ranks printed."""
    if world > MAX_WORLD or len(stuck) < 2 or set(stuck) & set(went_on):
        return None
    observed: list[StepOutcome | None] = [None] * world
    for r in went_on:
        observed[r] = "ok"
    for r, message in stuck.items():
        observed[r] = outcome_of(message) or "stuck"
    fits = explanations(observed)
    odd = sorted({o for _, o, _ in fits})
    if not odd:
        return None
    how = (f"gloo's broadcast is a binomial tree from src: replaying it, only {rank_words(odd)} calling it with "
           "another src gives what every rank printed (which ranks waited on a send or a receive, which went on)")
    if len(odd) == 1:
        srcs = sorted({src for src, _, _ in fits})
        return (odd[0],), f"{how}; the others' src: {' or '.join(f'rank {s}' for s in srcs)}"
    return (), (f"gloo's broadcast is a binomial tree from src, and a src off on any of {rank_words(odd)} gives what "
                "every rank printed (the tree is symmetric here): which rank's src was off the text does not say")


__all__ = ["MAX_WORLD", "explanations", "outcome_of", "simulate", "tree_ops", "wrong_src"]
