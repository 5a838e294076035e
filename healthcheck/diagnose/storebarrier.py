"""The store-based barrier's absentees: init-failure of the ranks that never joined.

init_process_group (and new_group) waits in distributed_c10d.py's `_store_based_barrier`
until all `world_size` members have added themselves to the store key; while it waits each
member logs `Waiting in store based barrier ... for rank: N, key: K (world_size=W,
worker_count=C, ...)`, C the members the store counted. Where the members seen waiting on
one key are exactly C distinct ranks of range(W) (the ones counted), the W - C ranks
unseen are the ones that never joined: named, init-failure. Anything else names none: a
count that does not match the ranks seen (a cut paste, members not all shown), a member
outside range(W) (a subgroup's own numbering), or a member that got through the barrier
(`Completed store-based barrier`: every member had joined).

Where no rank can be named, the barrier that failed is still the job's init-failure, naming
none (`store_barrier_failure`): a member that timed out in it (`Timed out initializing process
group in store based barrier`), or any member waiting with more workers counted than the
world (C > W: the count only grows, so the barrier can never complete; two launches on one
store port, or a wrong nproc/world size). A member still waiting with C < W and no timeout
is a job still starting (its barrier may yet complete): no finding.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from healthcheck.diagnose.analysis import log_evidence
from healthcheck.diagnose.findings import Evidence, JobFinding, job_finding
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.stacks import rank_words


@dataclass
class _Key:
    world: set[int] = field(default_factory=set)  # world sizes said
    joined: int = 0  # the most members the store counted
    timed_out: bool = False  # a member timed out in it
    members: set[int] = field(default_factory=set)
    completed: bool = False
    items: list[Evidence] = field(default_factory=list)


def _keys(col: Collected) -> dict[str, _Key]:
    keys: dict[str, _Key] = {}
    for f in col.evidence.torch_logs:
        assert f.log is not None
        for b in f.log.store_barrier:
            k = keys.setdefault(b.key, _Key())
            k.world.add(b.world_size)
            k.completed |= b.state == "completed"
            k.timed_out |= b.state == "timed-out"
            k.members.add(b.member)
            k.joined = max(k.joined, b.joined or 0)
            if len(k.items) < 20:
                k.items.append(log_evidence(col, f.source, b.line, f"rank {b.member} {b.state} in the store-based "
                                            f"barrier on {b.key} (world_size={b.world_size}, joined={b.joined})",
                                            b.member))
    return keys


def never_joined(key: _Key) -> tuple[int, ...]:
    """The ranks of range(W) that never joined the barrier, where the count proves it."""
    if key.completed or len(key.world) != 1:
        return ()
    world = next(iter(key.world))
    if not 0 < key.joined < world or any(m >= world for m in key.members) or len(key.members) != key.joined:
        return ()
    return tuple(sorted(set(range(world)) - key.members))


def store_barrier_absentees(col: Collected) -> JobFinding | None:
    """init-failure naming the ranks the store-based barrier waited for (module docstring)."""
    for name, key in sorted(_keys(col).items()):
        absent = never_joined(key)
        if not absent:
            continue
        world = next(iter(key.world))
        return job_finding(
            cls="init-failure", ranks=absent, confidence="medium", evidence=tuple(key.items),
            summary=f"{rank_words(absent)} never joined the process group: the store-based barrier on {name} "
                    f"counted {key.joined} of {world} members, and the {key.joined} seen waiting are the others")
    return None


def _failed(key: _Key) -> str:
    """Why this key's barrier failed as the lines show it ("" where they do not: completed,
    or still waiting for fewer workers than the world)."""
    if key.completed:
        return ""
    world = max(key.world, default=0)
    if world and key.joined > world:
        return (f"{key.joined} workers joined the store-based barrier of a world of {world}: more than the world (two "
                "launches on one MASTER_PORT, or a wrong nproc/world size); no one rank is at fault")
    if key.timed_out:
        missing = f"{world - key.joined} of {world} ranks never arrived" if 0 < key.joined < world else \
            "some ranks never arrived"
        return f"the store-based barrier of process-group init timed out: {missing}, and the text does not say which"
    return ""


def store_barrier_failure(col: Collected) -> JobFinding | None:
    """init-failure naming no rank: a store-based barrier that timed out, or that counted more
    workers than its world (module docstring); None where the barrier shows no failure."""
    for name, key in sorted(_keys(col).items()):
        why = _failed(key)
        if why:
            return job_finding(cls="init-failure", confidence="medium", evidence=tuple(key.items),
                               summary=f"init failure on {name}: {why}")
    return None


__all__ = ["never_joined", "store_barrier_absentees", "store_barrier_failure"]
