"""Rule 4, shape-mismatch / collective-mismatch: ranks that called different collectives,
or the same one with tensors of another shape or dtype, pinned to a rank where the
evidence allows.

Where the sides come from, strongest first: TORCH_DISTRIBUTED_DEBUG=DETAIL's fingerprints
(the minority side is odd), the Flight Recorder's disagreement at one seq, NCCL COLL lines
(another operation at one opCount); then gloo's size check (`op.preamble.length <=
op.nbytes. R vs E`, on the receiving side):

* several receivers that all got the same R bytes where they expected the same E share
  one sender: the rank that reported no size error (a broadcast's source) is odd;
* R:E of 2:1 (or 1:2) is the same element count in a dtype twice as wide (float64 vs
  float32, float32 vs float16/bfloat16): said in the verdict;
* otherwise gloo's ring gives each report's two ranks (the reporter and the rank it
  receives from, ringsize.py): a rank is named where the reports leave a strict
  minority of sizes, else the two ranks are said and none is named;
* otherwise the aborted ranks are the parties and the verdict says the text cannot tell
  which one held the other size.

Where gloo's size reports leave no rank named and one rank logged a step off every
peer's (outofstep.py), that rank skipped or added a collective: collective-mismatch,
named.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from healthcheck.diagnose.analysis import fact_rank, log_evidence, minority, world_of
from healthcheck.diagnose.bcastsize import in_broadcast, odd_receivers, undecided
from healthcheck.diagnose.evidence import RankEvidence
from healthcheck.diagnose.findings import Confidence, Evidence, FailureClass, JobFinding, job_finding
from healthcheck.diagnose.firstdiffer import agreeing, first_differing, is_shape, least_world
from healthcheck.diagnose.logfacts import (
    error_evidence,
    first_errors,
    gloo_size_aborts,
    nccl_colls,
    ranks_heard,
)
from healthcheck.diagnose.loggednumbers import logged_odd
from healthcheck.diagnose.outofstep import out_of_step
from healthcheck.diagnose.p2psize import not_ring_nor_broadcast
from healthcheck.diagnose.ringsize import (
    SizeReport,
    pairwise_exchange,
    ring_parties,
    ring_sender,
    ring_step,
    ring_world,
)
from healthcheck.diagnose.scalarmeet import scalar_meets_tensor
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.stacks import rank_words
from healthcheck.diagnose.transportsize import size_reports
from healthcheck.parsers.flight_recorder import FrComparison
from healthcheck.parsers.torch_log import CollectiveMismatch


@dataclass
class _Sides:
    sides: dict[int, str] = field(default_factory=dict)  # rank -> what it ran (DETAIL, NCCL)
    items: list[Evidence] = field(default_factory=list)
    shape: bool = False
    seq: int | None = None
    sizes: list[SizeReport] = field(default_factory=list)
    fr_odd: tuple[int, ...] = ()
    fp_odd: tuple[int, ...] = ()  # the rank the fingerprint checks differ at (firstdiffer.py)
    fp_undecided: str = ""  # both sides of a fingerprint report that names no rank, and why
    fr_text: str = ""
    divergence: str = ""
    notes: list[str] = field(default_factory=list)
    reported: bool = False  # the only evidence is a transport's or MPI's size report (transportsize.py)


def _fingerprints(col: Collected, acc: _Sides) -> None:
    """DETAIL's `Detected mismatch between collectives on ranks`: both sides' fingerprints,
    and the rank the checks differ at (firstdiffer.py)."""
    reports = []
    for f in col.evidence.torch_logs:
        assert f.log is not None
        for m in f.log.mismatches:
            reports.append(m)
            for fp in (m.local, m.remote):
                if fp is not None:
                    acc.sides[fp.rank] = f"{fp.op_type} [{fp.shape}] {fp.dtypes}"
                    acc.seq = fp.seq if fp.seq is not None else acc.seq
            acc.shape = acc.shape or is_shape(m)
            text = (f"Detected mismatch between collectives: rank {m.local.rank} runs "
                    f"{acc.sides.get(m.local.rank, '?')}"
                    + (f", rank {m.remote.rank} runs {acc.sides.get(m.remote.rank, '?')}" if m.remote else "")
                    + (f" ({m.differences})" if m.differences else ""))
            acc.items.append(log_evidence(col, f.source, m.line, text, fact_rank(m, f.rank)))
    seen, world = world_of(col)
    launched = {f.log.launched_world for f in col.evidence.torch_logs if f.log is not None and f.log.launched_world}
    world = world or (launched.pop() if len(launched) == 1 else None)
    acc.fp_odd = first_differing(reports, world, seen)
    acc.fp_undecided = "" if acc.fp_odd else _undecided(reports, acc, world or least_world(reports, seen), bool(world))


def _undecided(reports: list[CollectiveMismatch], acc: _Sides, world: int, known: bool) -> str:
    """Both sides of the first two-sided report that names no rank, and why none is named."""
    m = next((m for m in reports if m.remote is not None and m.remote.rank != m.local.rank), None)
    if m is None or m.remote is None:
        return ""
    side = sorted(agreeing(m))
    size = f"the world of {world}" if known else f"the {world} ranks the text shows at least"
    return (f"{rank_words(side)} {'runs' if len(side) == 1 else 'run'} {acc.sides.get(m.local.rank, '?')}, rank "
            f"{m.remote.rank} runs {acc.sides.get(m.remote.rank, '?')}; the fingerprint check compares in rank order, "
            f"and {rank_words(side)} {'is' if len(side) == 1 else 'are'} no strict majority of {size}: either side "
            "may be the odd one")


def _gloo_sizes(col: Collected, acc: _Sides) -> None:
    for f in col.evidence.torch_logs:
        assert f.log is not None
        for g in f.log.gloo:
            if g.kind != "size-mismatch":
                continue
            acc.shape = True
            rank = fact_rank(g, f.rank)
            acc.items.append(log_evidence(col, f.source, g.line, f"gloo: received {g.received_bytes} bytes, expected "
                                f"{g.expected_bytes} (Received data size doesn't match)", rank))
            if rank is not None and g.received_bytes is not None and g.expected_bytes is not None:
                acc.sizes.append(SizeReport(rank, g.received_bytes, g.expected_bytes))


def _nccl_ops(col: Collected, acc: _Sides) -> None:
    """NCCL COLL lines: one opCount, different operations on different ranks."""
    for comm, at in nccl_colls(col).items():
        counts = {c.op_count for c in at.values()}
        if len(at) >= 2 and len(counts) == 1 and len({c.op for c in at.values()}) > 1 and not acc.sides:
            for r, c in at.items():
                acc.sides[r] = f"{c.op} (NCCL opCount {c.op_count:#x})"
                acc.items.append(log_evidence(col, c.source, c.line,
                                              f"rank {r}: NCCL {c.op} opCount {c.op_count:#x} on comm {comm}", r))


def _fr_source(r: RankEvidence | None) -> str:
    if r is None:
        return "flight recorder"
    return next((s for s in r.sources if "trace" in s or s.endswith((".pkl", ".pickle"))),
                r.sources[0] if r.sources else "flight recorder")


def _flight_recorder(col: Collected, fr: FrComparison | None, acc: _Sides) -> None:
    """The first seq of the first group where the Flight Recorder dumps disagree."""
    if fr is None:
        return
    grp = next((g for g in fr.groups if g.mismatches), None)
    if grp is None:
        return
    mm = grp.mismatches[0]
    variants = {r: v.value for v in mm.variants for r in v.ranks}
    pick = minority(variants)
    label = f"seq {mm.seq} of {grp.pg_desc or grp.pg_name}"
    acc.divergence = label
    for v in mm.variants:
        for r in v.ranks[:8]:
            acc.items.append(Evidence(source=_fr_source(col.evidence.ranks.get(r)), rank=r,
                                      text=f"Flight Recorder {label}: {mm.field} {v.value}"))
    acc.shape = acc.shape or mm.field != "op"
    if pick is not None:
        acc.fr_odd = pick[0]
        acc.fr_text = f"{mm.field} {pick[2]} where the others have {pick[1]}"
    else:
        acc.fr_text = f"{mm.field} differs: " + "; ".join(f"{rank_words(v.ranks)}: {v.value}" for v in mm.variants)


def _two_to_one(s: SizeReport) -> bool:
    return bool(s.received and s.expected) and max(s.received, s.expected) == 2 * min(s.received, s.expected)


def dtype_ratio(sizes: list[SizeReport]) -> str:
    """A 2:1 byte ratio between what was received and what was expected in every report: one
    element count in a dtype twice as wide, or another element count (gloo's ring cuts a
    tensor into 2 segments per rank, the last ones partial: 13 elements against 12 at world
    4 gave `8 vs 4`, captured). Reports with other ratios beside it: element counts, no
    dtype (a dtype scales every segment alike)."""
    reported = {(s.received, s.expected) for s in sizes if s.received and s.expected}
    if not reported or not all(_two_to_one(s) for s in sizes if s.received and s.expected):
        return ""
    s = next(s for s in sizes if _two_to_one(s))
    return (f"{s.received} bytes against {s.expected}: a 2:1 ratio: the same element count in a dtype twice as wide "
            "(float64 vs float32, or float32 vs float16/bfloat16), or another element count (gloo's ring cuts each "
            "tensor into 2 segments per rank, the last ones partial)")


def _past_the_broadcast(col: Collected, others: list[int]) -> list[int]:
    """Of the ranks that reported no size error, those not failing inside a broadcast,
    when some did (receivers that waited for the data): the source got past it."""
    firsts = first_errors(col)
    inside = [r for r in others if r in firsts and firsts[r].collective == "broadcast"]
    return [r for r in others if r not in inside] if inside else []


def broadcast_source(col: Collected, sizes: list[SizeReport], items: list[Evidence]) -> tuple[tuple[int, ...], str]:
    """Receivers that report one (received, expected) share a sender: the one rank that
    reported no size error, or of those the one that got past the broadcast the others
    failed in (a broadcast's source completes its sends and goes on). The others' errors
    go into items."""
    reporters = {s.rank for s in sizes}
    pairs = {(s.received, s.expected) for s in sizes}
    if not reporters or len(pairs) != 1:
        return (), ""
    others = sorted(ranks_heard(col) - reporters)
    how = "the only rank that reported no size error"
    source = others if len(others) == 1 and len(reporters) >= 2 else []
    # in a broadcast, one reporter alone may hold the odd size itself (bcastsize.py): the rank past it is no source
    if not source and (len(reporters) >= 2 or not in_broadcast(col, sizes)):
        source, how = _past_the_broadcast(col, others), "it went on past the broadcast the others failed in"
    if len(source) != 1:
        return (), ""
    received, expected = next(iter(pairs))
    firsts = first_errors(col)
    items.extend(error_evidence(firsts[r]) for r in others if r in firsts)
    return (source[0],), (f"{rank_words(reporters)} received {received} bytes where their own tensor holds "
                          f"{expected}; their common sender, rank {source[0]} (the broadcast's source: {how}), "
                          "holds the other size")


def _aborted(col: Collected, acc: _Sides) -> list[int]:
    """Ranks gone by SIGABRT or gone from a live job while others run: those gloo's size
    check aborted, when the text shows one."""
    ev_ = col.evidence
    out = {r for r, x in ev_.ranks.items() if x.signal == "SIGABRT"}
    if any(x.alive for x in ev_.ranks.values()):
        out |= {r for r, x in ev_.ranks.items() if x.state in ("missing", "zombie")}
    for f in ev_.torch_logs:
        assert f.log is not None
        out |= {fail.rank for block in f.log.child_failed for fail in block.failures
                if fail.rank is not None and fail.signal == "SIGABRT"}
    return sorted(out)


def _parties(col: Collected, acc: _Sides) -> tuple[tuple[int, ...], str]:
    """gloo checks sizes on the receiving side: the ranks it aborted are the parties, and
    nothing in the text says which one held the other size."""
    odd = tuple(_aborted(col, acc))
    if not odd:
        return (), ""
    for r in odd:
        x = col.evidence.ranks.get(r)
        if x is not None and not any(i.rank == r for i in acc.items):
            acc.items.append(Evidence(source=(x.sources or ["live collection"])[0], rank=r,
                                      text=x.stack_error or f"rank {r}: {x.signal or x.state or 'gone'}"))
    return odd, (f"{rank_words(odd)} disagreed with a peer on a tensor size and gloo aborted "
                 f"{'it' if len(odd) == 1 else 'them'} (Received data size doesn't match); which rank "
                 "holds the other size the text does not say: rerun under hc run --debug-desync "
                 "(TORCH_DISTRIBUTED_DEBUG=DETAIL names the collective and the shapes)")


def _fp_sides(acc: _Sides) -> str:
    """`: runs X where ranks A, B run Y`, where the fingerprints' other side is one."""
    others = {r: v for r, v in acc.sides.items() if r not in acc.fp_odd}
    odd = {acc.sides[r] for r in acc.fp_odd if r in acc.sides}
    if len(odd) != 1 or len(set(others.values())) != 1:
        return ""
    verb = "runs" if len(others) == 1 else "run"
    return f": runs {odd.pop()} where {rank_words(others)} {verb} {next(iter(others.values()))}"


def _conclude(col: Collected, acc: _Sides) -> tuple[tuple[int, ...], str, Confidence]:
    """The odd ranks, the summary and the confidence, from the strongest side evidence."""
    what = "tensor shape/dtype" if acc.shape else "collective"
    pick = minority(acc.sides) if acc.sides else None
    if pick and acc.fr_odd and set(pick[0]) != set(acc.fr_odd):
        acc.notes.append(f"DETAIL names {rank_words(pick[0])}, the Flight Recorder {rank_words(acc.fr_odd)}")
    if acc.fp_odd:
        return acc.fp_odd, (f"{rank_words(acc.fp_odd)} called a {what} its peers did not match: the fingerprint "
                            "check found it the first rank to differ, the ranks before it agreeing with the "
                            f"reporter{_fp_sides(acc)}"), "high"
    if acc.fp_undecided and not pick:
        return (), f"ranks disagree on a {what}: {acc.fp_undecided}", "medium"
    if pick:
        return pick[0], f"{rank_words(pick[0])} called a {what} its peers did not match: runs {pick[2]} where the " \
                        f"others run {pick[1]}", "high"
    if acc.fr_odd:
        return acc.fr_odd, f"{rank_words(acc.fr_odd)} called a {what} its peers did not match: {acc.fr_text}", "high"
    source, text = broadcast_source(col, acc.sizes, acc.items)
    if source:
        return source, f"rank {source[0]} sent a tensor of another size: {text}", "high"
    return _sized(col, acc, what)


def _sized(col: Collected, acc: _Sides, what: str) -> tuple[tuple[int, ...], str, Confidence]:
    """gloo's size reports read as the collective they failed in: a broadcast (bcastsize.py),
    else the ring of all_reduce (ringsize.py); where neither names a rank, the ranks gloo aborted.
    A message of a point-to-point exchange or a rooted send is neither (p2psize.py)."""
    if acc.sizes or (acc.shape and gloo_size_aborts(col)):
        exchange = not_ring_nor_broadcast(col, acc.sizes)
        if exchange is not None:
            return exchange[0], exchange[1], "medium" if exchange[0] else "low"
    odd, text = odd_receivers(col, acc.sizes)
    if odd:
        return odd, f"{rank_words(odd)} held a tensor of another size than the broadcast's source: {text}", "medium"
    if acc.sizes and in_broadcast(col, acc.sizes):
        return (), f"ranks disagree on a {what}: {undecided(acc.sizes)}", "medium"
    ring, text = ring_parties(col, acc.sizes)
    logged = logged_party(col, acc.sizes) if text and not ring else None
    if logged is not None:
        return (logged[0],), f"rank {logged[0]} held a tensor of another size than its peers': {logged[1]}", "medium"
    if text:
        return ring, f"{rank_words(ring)} held a tensor of another size than its peers': {text}" if ring else \
            f"ranks disagree on a {what}: {text}", "medium"
    if acc.shape and gloo_size_aborts(col):
        odd, text = _parties(col, acc)
        if odd:
            return odd, text, "medium"
    if acc.reported:
        return (), ("a message arrived with another size than its receiver posted (the transport's or MPI's own "
                    "report): the ranks disagree on a tensor's size; the report names neither the sender nor "
                    "which side holds the odd size"), "medium"
    return (), f"ranks disagree on a {what}" + (f": {acc.fr_text}" if acc.fr_text else
                                                " (no majority to name the odd rank)"), "medium"


def logged_party(col: Collected, sizes: list[SizeReport]) -> tuple[int, str] | None:
    """Of the two ranks one gloo ring report holds (every report from one receiver), the one
    whose own logged size is off every peer's (loggednumbers.py)."""
    world = ring_world(col)
    if world is None or len({s.rank for s in sizes}) != 1 or pairwise_exchange(col, sizes):
        return None
    s = sizes[0]
    sender = ring_sender(s, world, ring_step(col, sizes))
    odd = logged_odd(col.logged, set(range(world)), s.rank, sender)
    if odd is None:
        return None
    return odd[0], (f"rank {s.rank} received {s.received} bytes per chunk from rank {sender} (gloo's ring) where its "
                    f"own tensor gives {s.expected}; {odd[1]}")


def mismatch(col: Collected, fr: FrComparison | None) -> tuple[JobFinding | None, list[str]]:
    """The mismatch finding (or None) and the notes for the verdict."""
    acc = _Sides()
    _fingerprints(col, acc)
    _gloo_sizes(col, acc)
    _nccl_ops(col, acc)
    _flight_recorder(col, fr, acc)
    if not acc.items:
        reported = size_reports(col)  # transportsize.py: a transport's or MPI's size report, no side named
        if not reported:
            return None, acc.notes
        acc.shape = acc.reported = True
        acc.items.extend(reported)
    odd, summary, confidence = _conclude(col, acc)
    cls: FailureClass = "shape-mismatch" if acc.shape else "collective-mismatch"
    # outofstep.py: a rank a step off the others; never where the report was a point-to-point
    # message (p2psize.py): a pipeline's stages run steps apart by design, and nothing skipped
    pairwise = acc.sizes and not_ring_nor_broadcast(col, acc.sizes) is not None
    stepped = out_of_step(col) if acc.sizes and not odd and not pairwise else None
    if stepped is not None:
        odd, why, lines = stepped
        acc.items[:0] = lines
        s = acc.sizes[0]
        return job_finding(cls="collective-mismatch", confidence="medium", ranks=odd, evidence=tuple(acc.items[:24]),
                           summary=f"{why}; gloo's size check then failed on the mispaired call (rank {s.rank} "
                                   f"received {s.received} bytes where it expected {s.expected})"), acc.notes
    # scalarmeet.py: a desync; a one-element tensor met by chunks of many is no tensor of
    # another size, whatever a rank's logged sizes say (fewer batches log fewer steps)
    met = scalar_meets_tensor(col, acc.sizes) if acc.sizes else None
    if met is not None:
        odd, why, lines = met
        return job_finding(cls="collective-mismatch", confidence="medium", ranks=odd, summary=why,
                           evidence=tuple([*acc.items, *lines][:24])), acc.notes
    ratio = dtype_ratio(acc.sizes)
    if ratio:
        summary += f"; {ratio}"
    divergence = acc.divergence or (f"SequenceNumber {acc.seq}" if acc.seq is not None else "")
    return job_finding(cls=cls, summary=summary, confidence=confidence, ranks=odd, evidence=tuple(acc.items[:24]),
                   divergence=divergence), acc.notes


__all__ = ["broadcast_source", "dtype_ratio", "mismatch"]
