"""Rules on the stacks alone (of the ranks that did not move, where they were sampled):

- group_culprit (collective-mismatch): a rank waits in a collective on a process group
  of its own while the others wait elsewhere: the lone stack is the victim, waiting for a
  member of its group that never entered. torch names that member when it skipped the
  call (`Running OP on global rank N which does not belong to the given group`: it passed
  a group it is not in); without the warning the finding names no rank.
- stack_mismatch (collective-mismatch): every rank waits in a collective, a strict
  minority in another one (or the same op from another function).
- init_stacks (init-failure): most ranks wait in init_process_group while a minority is
  elsewhere, in no collective: the minority never joined.
"""

from __future__ import annotations

from collections.abc import Sequence

from healthcheck.diagnose.analysis import Analysis, log_evidence, minority, stack_evidence, stack_source
from healthcheck.diagnose.desyncorder import behind, other_root
from healthcheck.diagnose.evidence import RankEvidence
from healthcheck.diagnose.extracall import extra_call
from healthcheck.diagnose.findings import Confidence, Evidence, job_finding
from healthcheck.diagnose.motion import collective_group
from healthcheck.diagnose.nomajority import no_majority
from healthcheck.diagnose.roots import collective_root
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.stacks import StackGroup, main_thread, rank_words
from healthcheck.diagnose.stuck import hosts_of, still_groups

_INIT_FRAMES = ("init_process_group", "_create_c10d_store", "rendezvous", "TCPStore", "_store_based_barrier",
                "init_device_mesh")


def _stack_items(col: Collected, groups: Sequence[StackGroup]) -> list[Evidence]:
    return [stack_evidence(col, g) for g in groups]


def rank_group(x: RankEvidence | None) -> str:
    """The process group of the collective a rank waits in: "default", "subgroup", or ""
    where py-spy showed no locals."""
    if x is None:
        return ""
    if x.samples:
        return x.samples[-1].group
    proc = x.stack
    thread = main_thread(proc) if proc is not None else None
    return collective_group(thread.frames) if thread is not None else ""


def _warned(col: Collected, ops: set[str | None]) -> dict[int, Evidence]:
    """Ranks torch warned had called one of `ops` with a group they do not belong to."""
    out: dict[int, Evidence] = {}
    for f in col.evidence.torch_logs:
        assert f.log is not None
        for w in f.log.not_in_group:
            if w.global_rank >= 0 and w.operation in ops:
                out.setdefault(w.global_rank, log_evidence(
                    col, f.source, w.line, f"rank {w.global_rank} ran {w.operation} with a process group it does not "
                                           "belong to: torch skipped the call", w.global_rank))
    return out


def group_culprit(col: Collected, out: Analysis, groups: Sequence[StackGroup]) -> bool:
    """See the module's docstring; True when it made a finding."""
    ev = col.evidence
    kinds = {r: rank_group(ev.ranks.get(r)) for g in groups for r in g.ranks}
    lone = [g for g in groups if any(kinds[r] == "subgroup" for r in g.ranks)]
    world = [g for g in groups if g not in lone]
    if not lone:
        return False
    warned = _warned(col, {g.collective for g in lone})
    victims = tuple(sorted(r for g in lone for r in g.ranks))
    culprits = tuple(sorted(r for r in warned if r not in victims))
    if not world and not culprits:
        return False  # every rank waits on a group of its own (tensor-parallel groups): nothing stands out
    first = lone[0]
    items = [*(warned[r] for r in culprits), *_stack_items(col, groups)]
    others = tuple(sorted(r for g in world for r in g.ranks))
    rest = f"; {rank_words(others)} wait elsewhere ({world[0].label})" if world else ""
    if culprits:
        out.findings.append(job_finding(
            cls="collective-mismatch", ranks=culprits, confidence="high" if world else "medium",
            evidence=tuple(items[:16]), where=first.where,
            summary=f"{rank_words(culprits)}{hosts_of(col, culprits)} did not enter the {first.collective} its process "
                    f"group waits in: it passed a group it does not belong to and torch skipped the call; "
                    f"{rank_words(victims)} waits for it there ({first.label}){rest}"))
        return True
    out.findings.append(job_finding(
        cls="collective-mismatch", confidence="low", evidence=tuple(items[:16]), where=first.where,
        summary=f"{rank_words(victims)} waits in {first.collective} on a process group of its own "
                f"({first.label}){rest}: a member of its group did not enter that collective, and the stacks do "
                "not say which (torch warns 'does not belong to the given group' for a rank that passed a group it "
                "is not in: read the job's output)"))
    return True


def rank_root(x: RankEvidence | None) -> int | None:
    """The root rank (src/dst) of the rooted collective a rank waits in, where py-spy
    showed the call's locals (desyncorder.py)."""
    if x is None:
        return None
    if x.samples:
        return x.samples[-1].root
    thread = main_thread(x.stack) if x.stack is not None else None
    return collective_root(thread.frames, thread.collective) if thread is not None else None


def _ordered(col: Collected, groups: Sequence[StackGroup], odd: tuple[int, ...] | None) -> \
        tuple[tuple[int, ...], str] | None:
    """desyncorder.py: ranks that name another root; else, where no side is a strict
    majority or the minority is several sides, the ranks behind every other one."""
    roots = {r: root for g in groups for r in g.ranks if (root := rank_root(col.evidence.ranks.get(r))) is not None}
    found = other_root(groups, roots)
    if found is not None:
        return found
    if odd is not None and (sum(1 for g in groups if set(g.ranks) & set(odd)) < 2 or extra_call(groups, odd) != odd):
        return None  # one minority side, or extracall.py names the side with the extra call
    back = behind(groups)
    if back is None or (odd is not None and not set(back[0]) <= set(odd)):
        return None
    return back


def stack_mismatch(col: Collected, out: Analysis) -> None:
    """Every still rank waits in a collective, but not all in the same one."""
    groups = still_groups(out.groups, out.motion)
    if len(groups) < 2 or any(g.collective is None for g in groups):
        return
    if group_culprit(col, out, groups):
        return
    sides = {r: f"{g.collective} <- {g.function or '?'}" for g in groups for r in g.ranks}
    pick = minority(sides)
    if pick is not None and len(pick[0]) * 2 >= len(sides):
        pick = None
    ordered = _ordered(col, groups, pick[0] if pick else None)
    if ordered is not None:
        odd, summary = ordered
        where = next((g.where for g in groups if set(g.ranks) & set(odd)), "")
        own = [Evidence(source=stack_source(col.evidence.ranks.get(r)), rank=r, text=f"rank {r}: {summary}"[:300])
               for r in odd[:4]]
        out.findings.append(job_finding(cls="collective-mismatch", ranks=odd, confidence="medium", where=where,
                                        evidence=(*own, *_stack_items(col, groups)[:12]), summary=summary))
        return
    if pick is None:
        no_majority(col, out, groups)  # nomajority.py: no side a minority: the class, no rank
        return
    odd, top, theirs = pick
    summary = (f"{rank_words(odd)} waits in {theirs} while the others wait in {top}: the ranks called "
               "different collectives (a skipped, added or reordered collective)")
    extra = extra_call(groups, odd)  # extracall.py: the side in the majority's op, at another call site
    if extra != odd:
        waiting = tuple(r for r in odd if r not in extra)
        mine = next(g.label for g in groups if set(g.ranks) & set(extra))
        summary = (f"{rank_words(extra)} waits in {mine}, an op the others wait in at another call site ({top}): "
                   f"one collective more on {rank_words(extra)} (an added collective, paired with the others' next "
                   f"one); {rank_words(waiting)} waits for it in a collective it has not reached")
        odd = extra
    where = next((g.where for g in groups if set(g.ranks) & set(odd)), "")
    out.findings.append(job_finding(
        cls="collective-mismatch", ranks=odd, confidence="medium", evidence=tuple(_stack_items(col, groups)[:12]),
        where=where, summary=summary))


def _in_init(g: StackGroup) -> bool:
    return any(f.split(" (")[0] in _INIT_FRAMES or "rendezvous" in f.split(" (")[0] for f in g.frames)


def init_stacks(col: Collected, out: Analysis) -> None:
    """No log says it, but the stacks do: most ranks wait inside init_process_group (the
    store/rendezvous) while a minority is elsewhere, not in any collective: the minority
    never joined (it failed to start its part: the store's port, an exception)."""
    groups = still_groups(out.groups, out.motion)
    if any(f.cls == "init-failure" for f in out.findings) or not groups:
        return
    in_init = [g for g in groups if _in_init(g)]
    others = [g for g in groups if g not in in_init]
    if not in_init or any(g.collective is not None for g in others):
        return
    waiting = {r for g in in_init for r in g.ranks}
    odd = tuple(sorted(r for g in others for r in g.ranks))
    if len(odd) >= len(waiting):
        return
    missing = tuple(sorted(r for r, x in col.evidence.ranks.items() if x.state == "missing"))
    confidence: Confidence = "medium"
    if odd:
        summary = (f"{rank_words(odd)} did not join the job's start: {rank_words(waiting)} wait in "
                   f"init_process_group (store/rendezvous) while {rank_words(odd)} is in {others[0].label}"
                   f" (it failed to start its part: the master port taken, an exception)")
    else:
        odd = missing
        summary = ("every rank waits in init_process_group (store/rendezvous)"
                   + (f"; {rank_words(missing)} never started or died" if missing else
                      ": a rank never joined, or MASTER_ADDR:MASTER_PORT cannot be reached"))
        confidence = "medium" if missing else "low"
    out.findings.append(job_finding(cls="init-failure", summary=summary, confidence=confidence, ranks=odd,
                                evidence=tuple(_stack_items(col, groups)[:12]),
                                where=others[0].where if others else ""))
