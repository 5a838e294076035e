"""stuck-rank: the rank(s) the others wait for; and progressing: that nobody waits.

Each source names its candidates and the ranks most sources name are the stuck ones:
- the stacks: ranks outside any collective while others wait inside one, at any count
  (world size 2, a whole node's ranks); where the stacks were sampled (motion.py) only
  ranks that did not move wait, and a rank that moved through a collective is neither;
  where a rank died, the survivors' stacks (their error handling) name no one;
- Flight Recorder: ranks that never recorded the seq the others are at, or came late;
- the logs: the complement of the ranks that timed out, the desync report;
- stopped (T) processes, NCCL opCounts behind (classify computes those).
A rank past the point the others wait at, outside their function, with the Flight
Recorder agreeing, skipped a collective (collective-mismatch).

progressing: every sampled rank's stack, I/O or step counter moved: no culprit, with the
step rate where a step counter shows one, and a straggler (a rank the others waited for
in most samples) named in words, not as a culprit.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Sequence

import msgspec

from healthcheck.core.nodes import fold
from healthcheck.diagnose.analysis import Analysis, fact_rank, log_evidence, stack_evidence, stack_source, world_of
from healthcheck.diagnose.cpubound import busy_progress
from healthcheck.diagnose.findings import Confidence, Evidence, job_finding
from healthcheck.diagnose.hiddenwait import maybe_waiting
from healthcheck.diagnose.ioprogress import io_wait
from healthcheck.diagnose.logfacts import rank_waits
from healthcheck.diagnose.lookdepth import could_not_tell, unsure_ranks
from healthcheck.diagnose.motion import JobMotion, StackSample, waited_for, working_and_logging
from healthcheck.diagnose.postmortem import cut_short
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.stacks import StackGroup, rank_words
from healthcheck.diagnose.waitwhy import wait_reason
from healthcheck.parsers.flight_recorder import FlightRecorderDump

NcclBehind = tuple[tuple[int, ...], list[Evidence], str]  # ranks, evidence, "NCCL opCount .. on comm .."
STRAGGLER_SHARE = 0.6  # of the sample rounds in which the others waited for one rank


class StackSides(msgspec.Struct, frozen=True):
    """Ranks that wait in a collective (and did not move), ranks outside any."""

    blocked: tuple[int, ...]
    outside: tuple[StackGroup, ...]

    @property
    def outside_ranks(self) -> tuple[int, ...]:
        return tuple(sorted(r for g in self.outside for r in g.ranks))

    @property
    def odd(self) -> tuple[int, ...]:
        """Outside any collective while others wait inside one: at any count."""
        return self.outside_ranks if self.blocked else ()


class Candidates(msgspec.Struct, kw_only=True):
    """Each source's stuck ranks."""

    stacks: tuple[int, ...] = ()
    fr_missing: tuple[int, ...] = ()
    fr_lag: tuple[int, ...] = ()
    complement: tuple[int, ...] = ()
    stopped: tuple[int, ...] = ()
    nccl: tuple[int, ...] = ()

    def named(self) -> list[tuple[str, tuple[int, ...]]]:
        return [(name, c) for name, c in (("stacks", self.stacks), ("flight recorder", self.fr_missing),
                                          ("flight recorder lag", self.fr_lag),
                                          ("timeouts' complement", self.complement),
                                          ("stopped processes", self.stopped), ("NCCL opCounts", self.nccl)) if c]

    def vote(self) -> tuple[tuple[int, ...], bool]:
        """The ranks most sources name, and whether every source names just those."""
        named = [c for _, c in self.named()]
        if not named:
            return (), False
        votes: Counter[int] = Counter(r for c in named for r in c)
        top = max(votes.values())
        odd = tuple(sorted(r for r, n in votes.items() if n == top))
        return odd, all(set(c) == set(odd) for c in named)


def still_groups(groups: Sequence[StackGroup], motion: JobMotion | None) -> list[StackGroup]:
    """The stack groups with the ranks that moved left out (all of them where nothing was sampled)."""
    if motion is None:
        return list(groups)
    return without_ranks(groups, (r for r, m in motion.ranks.items() if m.moved))


def _samples(col: Collected) -> dict[int, list[StackSample]]:
    return {r: x.samples for r, x in col.evidence.ranks.items() if x.samples}


def without_ranks(groups: Sequence[StackGroup], ranks: Iterable[int]) -> list[StackGroup]:
    """The stack groups with those ranks left out (a group left empty is dropped)."""
    drop = set(ranks)
    if not drop:
        return list(groups)
    out = []
    for g in groups:
        keep = tuple(r for r in g.ranks if r not in drop)
        if keep:
            out.append(msgspec.structs.replace(g, ranks=keep))
    return out


def stack_sides(groups: Sequence[StackGroup], motion: JobMotion | None) -> StackSides:
    """Who waits in a collective and did not move; who is outside any collective (in
    every sample, moving or not: a busy loop keeps the others waiting too)."""
    blocked: list[int] = []
    outside: list[StackGroup] = []
    ranks = motion.ranks if motion is not None else {}
    for g in groups:
        if g.collective is not None:
            blocked.extend(r for r in g.ranks if r not in ranks or (not ranks[r].moved and ranks[r].in_collective))
            continue
        if maybe_waiting(g):
            continue  # in backward with no locals to tell DDP's wait from its own work (hiddenwait.py)
        # a rank whose own I/O goes on is working (ioprogress.py), not stuck
        # and a busy rank that keeps logging works through a long phase (logprogress.py)
        # and a rank whose own thread keeps running on the CPU works, silent or not (cpubound.py)
        keep = tuple(r for r in g.ranks if r not in ranks or (ranks[r].outside and not ranks[r].io_active
                                                               and not working_and_logging(ranks[r])
                                                               and not ranks[r].running))
        if keep:
            outside.append(msgspec.structs.replace(g, ranks=keep))
    return StackSides(blocked=tuple(sorted(blocked)), outside=tuple(outside))


def _desync(col: Collected, out: Analysis) -> bool:
    """The desync report names the lagging ranks itself."""
    for f in col.evidence.torch_logs:
        assert f.log is not None
        lag = [d for d in f.log.desync if d.kind in ("never-joined", "not-finished")]
        if lag:
            ranks = tuple(sorted({r for d in lag for r in d.ranks}))
            out.findings.append(job_finding(cls="stuck-rank", confidence="high", ranks=ranks,
                                        summary=f"{rank_words(ranks)} never joined or never finished the collective "
                                                "the others wait in (desync report)",
                                        evidence=tuple(log_evidence(col, f.source, d.line,
                                                                    f"desync: {d.kind} {list(d.ranks)}", f.rank)
                                                       for d in lag[:10])))
            return True
    return False


def _timeout_text(seq: int | None, op: str) -> str:
    """The watchdog timeout's words: its SeqNum where the record printed one (torch 1.11+)."""
    return f"watchdog timeout at SeqNum {seq} ({op})" if seq is not None else f"watchdog timeout in {op}"


def _timed_out(col: Collected) -> dict[int, Evidence]:
    """Ranks whose watchdog (NCCL) or gloo timed out waiting, with the line that says so."""
    waiting: dict[int, Evidence] = {}
    for f in col.evidence.torch_logs:
        assert f.log is not None
        for t in f.log.timeouts:
            r = fact_rank(t, f.rank)
            if r is not None:
                waiting.setdefault(r, log_evidence(col, f.source, t.line,
                                                   _timeout_text(t.seq, t.op_type), r))
        for g in f.log.gloo:
            r = fact_rank(g, f.rank)
            if g.kind == "timeout" and r is not None:
                waiting.setdefault(r, log_evidence(col, f.source, g.line, f"gloo: timed out waiting {g.timeout_ms} ms "
                                                                          f"for {g.operation}", r))
    return waiting


def _fr_missing(out: Analysis) -> tuple[tuple[int, ...], str]:
    """Flight Recorder: a minority that never recorded the seq the others are at."""
    if out.fr is None:
        return (), ""
    for grp in out.fr.groups:
        if grp.missing:
            m = grp.missing[-1]
            if len(m.missing) < len(m.present):
                return m.missing, f"seq {m.seq} ({m.op}) of {grp.pg_desc or grp.pg_name}"
    return (), ""


def fr_lag(dumps: dict[int, FlightRecorderDump]) -> tuple[tuple[int, ...], str]:
    """Ranks that entered the last seq every rank recorded much later than the rest."""
    if len(dumps) < 3:
        return (), ""
    created: dict[int, dict[int, int]] = {}
    for rank, d in dumps.items():
        for e in d.entries:
            if e.is_p2p or e.collective_seq_id is None or e.time_created_ns is None:
                continue
            if e.pg_desc in ("default_pg", "") or e.pg_name in ("0", ""):
                created.setdefault(rank, {})[e.collective_seq_id] = e.time_created_ns
    common = set.intersection(*(set(v) for v in created.values())) if len(created) == len(dumps) else set()
    if not common:
        return (), ""
    seq = max(common)
    times = {r: created[r][seq] for r in created}
    median = sorted(times.values())[len(times) // 2]
    late = tuple(sorted(r for r, t in times.items() if t - median > 1_000_000_000))
    if not late or len(late) * 2 >= len(times):
        return (), ""
    lag = max(times[r] - median for r in late) / 1e9
    return late, f"Flight Recorder: {rank_words(late)} entered seq {seq} {lag:.1f} s after the others"


def _complement(col: Collected, waiting: dict[int, Evidence]) -> tuple[int, ...]:
    """The ranks of the world that did not time out, when they are a minority. A rank
    whose wait in the same collective a peer's exit cut short (Connection closed within
    a second of the timeouts, postmortem.cut_short) waited too: it is no complement."""
    _, size = world_of(col)
    if not waiting or not size:
        return ()
    rest = set(range(size)) - set(waiting) - set(cut_short(col, rank_waits(col)))
    return tuple(sorted(rest)) if rest and len(rest) < len(waiting) else ()


def _stopped(col: Collected) -> tuple[int, ...]:
    ranks = col.evidence.ranks
    stopped = tuple(sorted(r for r, x in ranks.items() if x.state == "stopped"))
    return () if len(stopped) * 2 >= len(ranks) else stopped  # most stopped: the whole job was suspended


def hosts_of(col: Collected, ranks: Iterable[int]) -> str:
    """" on node2" / " on node[1-2]" for the ranks' hosts, "" where none is known."""
    known = col.evidence.ranks
    names = sorted({known[r].host for r in ranks if r in known and known[r].host})
    if not names:
        return ""
    try:
        return f" on {fold(names)}"
    except Exception:  # a name ClusterShell will not fold: list them
        return " on " + ",".join(names)


def _stack_items(col: Collected, groups: Sequence[StackGroup], odd: tuple[int, ...]) -> list[Evidence]:
    """The odd ranks' stack groups, then one group that waits in a collective."""
    items = [stack_evidence(col, g) for g in groups if set(g.ranks) & set(odd)]
    waiter = next((g for g in groups if g.collective is not None and not set(g.ranks) & set(odd)), None)
    if waiter is not None:
        items.append(stack_evidence(col, waiter))
    return items


def _items(col: Collected, out: Analysis, c: Candidates, odd: tuple[int, ...], waiting: dict[int, Evidence],
           fr_text: tuple[str, str], nccl_items: list[Evidence]) -> list[Evidence]:
    ev = col.evidence
    items = _stack_items(col, out.groups, odd)
    for r in c.stopped:
        x = ev.ranks[r]
        items.insert(0, Evidence(source=(x.sources or ["live collection"])[0], rank=r,
                                 text=f"rank {r} (pid {x.pid}, {x.host}) is stopped (state T): SIGSTOP, a debugger "
                                      "or job control froze it"))
    divergence, lag_text = fr_text
    if c.fr_missing:
        items.append(Evidence(source="flight recorder", text=f"Flight Recorder: {rank_words(c.fr_missing)} never "
                                                             f"recorded {divergence}"))
    if lag_text:
        items.append(Evidence(source="flight recorder", text=lag_text))
    items.extend(nccl_items)
    items.extend(list(waiting.values())[:8])
    if c.complement:
        _, size = world_of(col)
        items.append(Evidence(source="logs", text=f"{rank_words(waiting)} timed out waiting; "
                                                  f"{rank_words(c.complement)} did not (world size {size})"))
    return items


def _skipped(sides: StackSides, c: Candidates, groups: Sequence[StackGroup]) -> bool:
    """The odd rank is past the point the others wait at, outside their function, and
    the Flight Recorder says it never recorded that collective: it skipped it."""
    inside = [g for g in groups if g.collective is not None]
    if not (c.stacks and c.fr_missing and set(c.stacks) == set(c.fr_missing) and inside):
        return False
    funcs = {f.split(" (")[0] for g in inside for f in g.frames if not f.startswith(("all_reduce", "_exception"))}
    odd_frames = [f.split(" (")[0] for g in sides.outside for f in g.frames]
    return bool(inside[0].function) and inside[0].function not in odd_frames and bool(funcs)


def _kind(groups: Sequence[StackGroup]) -> str:
    text = " ".join(f for g in groups for f in g.frames).lower()
    if "dataloader" in text or "_next_data" in text or "queue.py" in text:
        return "in the data loader"
    if "socket.py" in text or "ssl.py" in text or " read" in text or "open (" in text:
        return "in I/O"
    return ""


def _why(col: Collected, sides: StackSides, odd: tuple[int, ...]) -> str:
    """What the first odd rank's stack waits on (waitwhy.py: pdb, a lock)."""
    for g in sides.outside:
        for r in g.ranks:
            if r in odd:
                x = col.evidence.ranks.get(r)
                return wait_reason(g.frames, x.stack if x is not None else None)
    return ""


def _verb(ranks: Sequence[int] | dict[int, Evidence]) -> str:
    return "waits" if len(ranks) == 1 else "wait"


def _sampled_still(motion: JobMotion | None, sides: StackSides, odd: tuple[int, ...]) -> bool:
    """Sampling saw it: the odd ranks and the ranks waiting for them did not move."""
    if motion is None:
        return False
    seen = [motion.ranks.get(r) for r in (*odd, *sides.blocked)]
    return all(m is not None and not m.moved and m.samples >= 3 for m in seen)


def _still_words(motion: JobMotion | None, odd: tuple[int, ...]) -> str:
    if motion is None or not any(r in motion.ranks for r in odd):
        return ""
    busy = [r for r in odd if r in motion.ranks and motion.ranks[r].moved]
    if busy:
        return f"busy, but in no collective ({motion.describe()})"
    still = min(motion.ranks[r].still_s for r in odd if r in motion.ranks)
    return f"its stack did not move for {still:.1f} s ({motion.describe()})"


def _summary(col: Collected, out: Analysis, sides: StackSides, c: Candidates, odd: tuple[int, ...],
             waiting: dict[int, Evidence], nccl_at: str) -> str:
    where = sides.outside[0].label if sides.outside else ""
    what = _why(col, sides, odd) or _kind(sides.outside)
    if c.stopped and set(c.stopped) & set(odd):
        what = "stopped: state T, SIGSTOP or a debugger" + (f"; {what}" if what else "")
    summary = f"{rank_words(odd)}{hosts_of(col, odd)} {'is' if len(odd) == 1 else 'are'} behind"
    summary += f", stuck in {where}" if where and c.stacks else ""
    summary += f" ({what})" if what else ""
    still = _still_words(out.motion, odd) if c.stacks else ""
    summary += f"; {still}" if still else ""
    if waiting:
        summary += f"; {rank_words(waiting)} {_verb(waiting)} for it in a collective"
    elif c.stacks and sides.blocked:
        summary += f"; {rank_words(sides.blocked)} {_verb(sides.blocked)} in a collective"
    if c.nccl and set(c.nccl) == set(odd):
        summary += f"; it never launched {nccl_at.split(' on comm ')[0]}, which the other ranks did"
    return summary


def stuck_rule(col: Collected, out: Analysis, dumps: dict[int, FlightRecorderDump], nccl: NcclBehind) -> None:
    """The stuck-rank finding (see the module's docstring)."""
    if _desync(col, out):
        return
    waiting = _timed_out(col)
    # a rank the samples could not tell still or moving is neither a candidate nor a waiter (lookdepth.py)
    sides = stack_sides(without_ranks(out.groups, unsure_ranks(_samples(col), out.motion)), out.motion)
    fr_missing, divergence = _fr_missing(out)
    lag_odd, lag_text = fr_lag(dumps)
    nccl_odd, nccl_items, nccl_at = nccl
    # a rank died: the survivors' stacks are their error handling, not a second culprit
    dead = any(f.cls == "dead-rank" and f.ranks for f in out.findings)
    c = Candidates(stacks=() if dead else sides.odd, fr_missing=fr_missing, fr_lag=lag_odd,
                   complement=_complement(col, waiting), stopped=_stopped(col), nccl=nccl_odd)
    odd, agree = c.vote()
    if not odd:
        return
    divergence = divergence or nccl_at
    items = _items(col, out, c, odd, waiting, (divergence, lag_text), nccl_items)
    named = c.named()
    if _skipped(sides, c, out.groups):
        inside = next(g for g in out.groups if g.collective is not None)
        out.findings.append(job_finding(
            cls="collective-mismatch", ranks=odd, confidence="medium" if agree else "low", evidence=tuple(items[:24]),
            where=sides.outside[0].where, divergence=divergence,
            summary=f"{rank_words(odd)} skipped a collective: the others wait in {inside.collective} at {inside.where} "
                    f"({divergence}), {rank_words(odd)} recorded none and is past it, in {sides.outside[0].label}"))
        return
    strong = len(named) >= 2 or (set(c.stacks) == set(odd) and _sampled_still(out.motion, sides, odd))
    confidence: Confidence = "high" if agree and strong else "medium" if agree else "low"
    if not agree:
        out.notes.append("the evidence for the stuck rank disagrees: " + "; ".join(
            f"{name} {rank_words(ranks)}" for name, ranks in named))
    out.findings.append(job_finding(cls="stuck-rank", ranks=odd, confidence=confidence, evidence=tuple(items[:24]),
                                summary=_summary(col, out, sides, c, odd, waiting, nccl_at),
                                where=sides.outside[0].where if sides.outside and c.stacks else "",
                                divergence=divergence))


# ---------------------------------------------------------------- progressing


def stragglers(col: Collected) -> tuple[tuple[int, ...], int, int]:
    """Ranks the others waited for in most sample rounds: (ranks, rounds waited, rounds)."""
    samples = {r: x.samples for r, x in col.evidence.ranks.items() if len(x.samples) >= 3}
    if len(samples) < 2:
        return (), 0, 0
    rounds = min(len(s) for s in samples.values())
    counts = waited_for(samples)
    lagging = tuple(sorted(r for r, n in counts.items() if n >= STRAGGLER_SHARE * rounds))
    if not lagging or len(lagging) * 2 > len(samples):
        return (), 0, rounds
    return lagging, max(counts[r] for r in lagging), rounds


def _rate_words(motion: JobMotion) -> str:
    rate, counter = motion.step_rate()
    if rate is None:
        return ""
    name = counter.split(":", 1)[-1]
    where = counter.split(":", 1)[0]
    return f"; about {rate:.2g} steps/s (`{name}` in {where})"


def _io_progress(col: Collected, out: Analysis) -> None:
    """The others wait for a rank whose own I/O goes on (ioprogress.py): progressing."""
    wait = io_wait(out.groups, out.motion)
    if wait is None or out.motion is None:
        return
    motion = out.motion
    inside = f" in {wait.collective}" if wait.collective else " in collectives"
    summary = (f"progressing: {rank_words(wait.working)}{hosts_of(col, wait.working)} "
               f"{'is' if len(wait.working) == 1 else 'are'} outside any collective reading, writing or logging "
               f"(its own I/O went on over the samples) while {rank_words(wait.waiting)} "
               f"{_verb(wait.waiting)} for it{inside} ({motion.describe()}); slow, not stuck")
    items = [Evidence(source=stack_source(col.evidence.ranks.get(r)), rank=r,
                      text=f"rank {r}: its own thread's read and written bytes rose by "
                           f"{motion.ranks[r].io_growth} over {motion.ranks[r].span_s:.1f} s")
             for r in wait.working[:16]]
    out.findings.append(job_finding(cls="progressing", summary=summary, evidence=tuple(items), confidence="medium"))


def _could_not_tell(col: Collected, out: Analysis) -> None:
    """Nothing decided, and some ranks' samples could not tell still from moving: say so
    (lookdepth.py), naming no rank."""
    samples = _samples(col)
    unsure = unsure_ranks(samples, out.motion)
    if unsure and not out.findings:
        out.findings.append(could_not_tell(samples, unsure))


def progress_rule(col: Collected, out: Analysis) -> None:
    """Every sampled rank moved: the job progresses, no rank is named. Where the others
    wait for a rank whose own I/O goes on, that too (ioprogress.py)."""
    motion = out.motion
    if motion is not None and not motion.all_moved and not any(f.ranks for f in out.findings):
        _io_progress(col, out)
        busy_progress(col, out)  # cpubound.py: the others wait for a rank whose thread runs
    if motion is None or not motion.all_moved:
        _could_not_tell(col, out)
        return
    unsampled = [r for r in col.evidence.ranks if r not in motion.ranks]
    lagging, waited, rounds = stragglers(col)
    summary = f"progressing: every rank's stack or I/O moved ({motion.describe()})"
    if unsampled:
        summary = (f"progressing: every sampled rank's stack or I/O moved ({motion.describe()}); "
                   f"{rank_words(unsampled)} not sampled")
    summary += _rate_words(motion)
    if lagging:
        summary += (f"; {rank_words(lagging)}{hosts_of(col, lagging)} lags: the others waited for it in a "
                    f"collective in {waited} of {rounds} samples (a straggler, not stuck)")
    spans = [m.span_s for m in motion.ranks.values()]
    items = [Evidence(source=stack_source(col.evidence.ranks.get(r)), rank=r,
                      text=f"rank {r}: moved over {m.samples} samples in {m.span_s:.1f} s"
                           + (f", {m.counter} at {m.step_rate:.2g}/s" if m.step_rate else ""))
             for r, m in sorted(motion.ranks.items())[:16]]
    out.findings.append(job_finding(cls="progressing", summary=summary, evidence=tuple(items),
                                confidence="high" if not unsampled and statistics.median(spans) > 0 else "medium"))
