"""JobEvidence -> findings: the ordered rules of shared/notes/diagnose.md section 6.

Each rule reads one kind of evidence and emits findings (`findings.job_finding`: kernel
findings of the class's diag.E0xx ID): a class, the ranks it names, the evidence lines
(`source:line` and what the line says) and a confidence. A rule never
names a rank without a line (or a dump, or a stack) that speaks of it; where rules name
different ranks for one failure, the verdict lowers its confidence and says so.

Rules, in the order of precedence the verdict uses:
 1. init-failure: a port in use, rendezvous/store timeouts, NCCL without a usable
    interface, duplicate GPUs, Init START without COMPLETE.
 2. gpu-failure: Xid in the kernel log of the window; NCCL/torch CUDA errors.
 3. dead-rank: a rank killed by a signal (torchrun's block, the live exit status), an OOM
    kill matched by pid, a Python exception on one rank that is not a collective's error
    (error.json, a traceback), NCCL `Cuda failure 'out of memory'`.
 4. shape-mismatch / collective-mismatch: DETAIL's fingerprints (the minority side is
    odd), gloo's `Received data size doesn't match`, Flight Recorder disagreement at one
    seq (sizes/dtypes or op), Flight Recorder seqs some ranks never recorded while their
    stack is outside the function the others wait in (a skipped collective).
 5. host-wedged: the heartbeat monitor (`watchdog got stuck`).
 6. network: IB completion errors (the first names hca and peer), verbs failures,
    socket errors when no rank died.
 7. stuck-rank: NCCL RAS op counts (overrides the watchdog), the desync report, the
    complement of the ranks that timed out at one SeqNum, the stack groups (a minority
    outside c10d while the rest wait in a collective), Flight Recorder lag.
 8. socket-fallback: NCCL on sockets where IB was expected (a performance cliff).
"""

from __future__ import annotations

import datetime as _dt
from collections import Counter
from collections.abc import Iterable

import msgspec

from healthcheck.diagnose.deaths import dead_rank
from healthcheck.diagnose.evidence import RankEvidence
from healthcheck.diagnose.findings import Confidence, Evidence, FailureClass, JobFinding, job_finding
from healthcheck.diagnose.logfacts import COLLATERAL, nccl_colls, world_of
from healthcheck.diagnose.logfacts import ev as _ev
from healthcheck.diagnose.logfacts import fact_rank as _fact_rank
from healthcheck.diagnose.mismatch import mismatch
from healthcheck.diagnose.postmortem import post_mortem
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.stacks import StackGroup, group_stacks, rank_words
from healthcheck.diagnose.startup import init_failure
from healthcheck.parsers.flight_recorder import FlightRecorderDump, FrComparison, compare_ranks

PRECEDENCE: tuple[FailureClass, ...] = ("init-failure", "gpu-failure", "dead-rank", "shape-mismatch",
                                        "collective-mismatch", "host-wedged", "network", "stuck-rank",
                                        "socket-fallback", "unknown")

NEXT_STEP: dict[str, str] = {
    "dead-rank": "read the dead rank's own log and the node's kernel log (OOM killer, segfault); "
                 "peers' 'connection closed' errors are collateral",
    "collective-mismatch": "make every rank call the same collectives in the same order (look for a collective "
                           "inside an `if rank ...` or a data-dependent branch); rerun with "
                           "TORCH_DISTRIBUTED_DEBUG=DETAIL to have torch name the call",
    "shape-mismatch": "make the odd rank's tensor the same shape and dtype as its peers' at that collective "
                      "(uneven last batch, padding, a per-rank dtype)",
    "stuck-rank": "look at the odd rank's stack: a data loader, file system or compute step that never returns; "
                  "py-spy dump it again to see whether it moves",
    "host-wedged": "a CUDA/NCCL call or the GIL blocks the watchdog: py-spy dump --native the rank, check the GPU "
                   "(nvidia-smi, Xid) and run hc node on its host",
    "network": "run hc node --tier standard on the two hosts of the failing link (IB ports, counters, cables); "
               "then hc bw pairs between them",
    "socket-fallback": "NCCL fell back to TCP sockets: check NCCL_IB_HCA / NCCL_SOCKET_IFNAME and that the IB "
                       "devices are visible in the job (hc node --tier standard)",
    "init-failure": "fix the launch: a free MASTER_PORT, every rank reachable on MASTER_ADDR, the right "
                    "NCCL_SOCKET_IFNAME, one GPU per rank; then relaunch",
    "gpu-failure": "drain the node and run hc node --tier deep on it; the Xid names the GPU",
    "unknown": "collect more: per-rank logs with NCCL_DEBUG=INFO, py-spy dump --json of every rank while it "
               "hangs, Flight Recorder dumps (TORCH_FR_BUFFER_SIZE, TORCH_NCCL_DUMP_ON_TIMEOUT=1)",
}


class Analysis(msgspec.Struct, kw_only=True):
    """Everything the rules found, with what the verdict needs beside it."""

    findings: list[JobFinding] = []
    groups: list[StackGroup] = []
    fr: FrComparison | None = None
    events: list[Evidence] = []  # every error event, for the first failure
    world_sizes: dict[int, list[int]] = {}  # world size -> ranks that said it
    notes: list[str] = []


def _iso(t: float | None) -> str:
    if t is None:
        return ""
    return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# ---------------------------------------------------------------- rules


def _gpu(col: Collected, out: Analysis) -> None:
    ev = col.evidence
    items: list[Evidence] = []
    ranks: set[int] = set()
    pid_rank = col.pid_ranks
    for k in ev.kernel:
        if k.kind == "xid":
            r = pid_rank.get(k.pid) if k.pid is not None else None
            items.append(Evidence(source=k.source, line=k.line, text=k.text, rank=r, time=k.time))
            if r is not None:
                ranks.add(r)
    for f in ev.torch_logs:
        assert f.log is not None
        for b in f.log.backend_errors:
            if b.kind == "cuda" and "out of memory" not in b.reason:
                r = _fact_rank(b, f.rank)
                items.append(_ev(col, f.source, b.line, f"CUDA error: {b.reason or b.detail}", r))
                if r is not None:
                    ranks.add(r)
    if not items:
        return
    xid = [i for i in items if "Xid" in i.text]
    summary = (f"GPU failure: Xid in the kernel log{' of ' + rank_words(ranks) if ranks else ''}" if xid
               else f"{rank_words(ranks) if ranks else 'a rank'} hit a CUDA error")
    out.findings.append(job_finding(cls="gpu-failure", summary=summary, confidence="high" if xid else "medium",
                                ranks=tuple(sorted(ranks)), evidence=tuple(items[:20])))


def _nccl_behind(col: Collected) -> tuple[tuple[int, ...], list[Evidence], str]:
    """Ranks whose last NCCL operation on a communicator is behind the others' (a strict
    minority): they never launched the collective the rest are in."""
    for comm, ranks in nccl_colls(col).items():
        if len(ranks) < 2:
            continue
        top = max(c.op_count for c in ranks.values())
        behind = tuple(sorted(r for r, c in ranks.items() if c.op_count < top))
        if not behind or len(behind) * 2 >= len(ranks):
            continue
        items = [_ev(col, ranks[r].source, ranks[r].line, f"rank {r}: last NCCL {ranks[r].op} opCount "
                     f"{ranks[r].op_count:#x} on comm {comm}", r) for r in behind[:8]]
        ahead = next(r for r, c in ranks.items() if c.op_count == top)
        items.append(_ev(col, ranks[ahead].source, ranks[ahead].line, f"rank {ahead}: last NCCL {ranks[ahead].op} "
                         f"opCount {top:#x} (the others reached it)", ahead))
        return behind, items, f"NCCL opCount {top:#x} on comm {comm}"
    return (), [], ""


def _minority(sides: dict[int, str]) -> tuple[tuple[int, ...], str, str] | None:
    """rank -> what it ran: the ranks of the smallest side when one side is a strict
    majority; with the majority's and the minority's values."""
    counts = Counter(sides.values())
    if len(counts) < 2:
        return None
    (top, n_top), *rest = counts.most_common()
    if rest and rest[0][1] == n_top:
        return None
    odd = tuple(sorted(r for r, v in sides.items() if v != top))
    return odd, top, sides[odd[0]]


def _stack_mismatch(col: Collected, out: Analysis) -> None:
    """Every stacked rank waits in a collective, but a strict minority in another one (or
    the same op called from another function): they called a collective the others did
    not (a skipped or added collective)."""
    groups = out.groups
    if len(groups) < 2 or any(g.collective is None for g in groups):
        return
    sides = {r: f"{g.collective} <- {g.function or '?'}" for g in groups for r in g.ranks}
    pick = _minority(sides)
    if pick is None or len(pick[0]) * 2 >= len(sides):
        return
    odd, top, theirs = pick
    ev = col.evidence
    items = [Evidence(source=_stack_source(ev.ranks.get(g.ranks[0])), rank=g.ranks[0], text=f"stack: {g.text}")
             for g in groups]
    where = next((g.where for g in groups if set(g.ranks) & set(odd)), "")
    out.findings.append(job_finding(
        cls="collective-mismatch", ranks=odd, confidence="medium", evidence=tuple(items[:12]), where=where,
        summary=f"{rank_words(odd)} waits in {theirs} while the others wait in {top}: the ranks called "
                "different collectives (a skipped, added or reordered collective)"))


_INIT_FRAMES = ("init_process_group", "_create_c10d_store", "rendezvous", "TCPStore", "_store_based_barrier",
                "init_device_mesh")


def _init_stacks(col: Collected, out: Analysis) -> None:
    """No log says it, but the stacks do: most ranks wait inside init_process_group (the
    store/rendezvous) while a minority is elsewhere, not in any collective: the minority
    never joined (it failed to start its part: the store's port, an exception)."""
    if any(f.cls == "init-failure" for f in out.findings) or not out.groups:
        return
    in_init = [g for g in out.groups if any(f.split(" (")[0] in _INIT_FRAMES or "rendezvous" in f.split(" (")[0]
                                            for f in g.frames)]
    if not in_init:
        return
    waiting = {r for g in in_init for r in g.ranks}
    others = [g for g in out.groups if g not in in_init]
    if any(g.collective is not None for g in others):
        return
    odd = tuple(sorted(r for g in others for r in g.ranks))
    ev = col.evidence
    missing = tuple(sorted(r for r, x in ev.ranks.items() if x.state == "missing"))
    if len(odd) >= len(waiting):
        return
    items = [Evidence(source=_stack_source(ev.ranks.get(g.ranks[0])), rank=g.ranks[0], text=f"stack: {g.text}")
             for g in out.groups]
    if odd:
        summary = (f"{rank_words(odd)} did not join the job's start: {rank_words(waiting)} wait in "
                   f"init_process_group (store/rendezvous) while {rank_words(odd)} is in {others[0].label}"
                   f" (it failed to start its part: the master port taken, an exception)")
        confidence: Confidence = "medium"
    else:
        odd = missing
        summary = ("every rank waits in init_process_group (store/rendezvous)"
                   + (f"; {rank_words(missing)} never started or died" if missing else
                      ": a rank never joined, or MASTER_ADDR:MASTER_PORT cannot be reached"))
        confidence = "medium" if missing else "low"
    out.findings.append(job_finding(cls="init-failure", summary=summary, confidence=confidence, ranks=odd,
                                evidence=tuple(items[:12]), where=others[0].where if others else ""))


def _wedged(col: Collected, out: Analysis) -> None:
    items: list[Evidence] = []
    ranks: set[int] = set()
    for f in col.evidence.torch_logs:
        assert f.log is not None
        for s in f.log.stuck:
            r = _fact_rank(s, f.rank)
            text = f"watchdog {s.kind}" + (f" for {s.seconds} s" if s.seconds else "")
            items.append(_ev(col, f.source, s.line, text, r))
            if r is not None:
                ranks.add(r)
    if items:
        who = rank_words(ranks) if ranks else "a rank"
        out.findings.append(job_finding(cls="host-wedged", ranks=tuple(sorted(ranks)), evidence=tuple(items[:20]),
                                    confidence="high" if ranks else "medium",
                                    summary=f"{who}: the host side is wedged (the ProcessGroupNCCL watchdog made no "
                                            "progress: a CUDA/NCCL call or the GIL blocks it)"))


def _network(col: Collected, out: Analysis) -> None:
    first = None
    items: list[Evidence] = []
    for n in col.evidence.nccl_logs:
        assert n.log is not None
        for w in n.log.warns:
            if w.kind in ("ib-completion", "ibverbs", "socket"):
                e = Evidence(source=n.source, line=w.line, text=w.text, rank=col.pid_ranks.get(w.pid), time=w.time)
                items.append(e)
                if w.kind != "socket" and (first is None or (w.time or 0) < (first[0].time or 0)):
                    first = (w, n.source)
    if not items:
        return
    # HCA link events in the job's window (kernel log): the link's side of the same failure. Alone
    # they make no finding: a port that flapped is not proof that this job's traffic used it
    items.extend(Evidence(source=k.source, line=k.line, text=k.text, time=k.time)
                 for k in col.evidence.kernel if k.kind == "link")
    if first is not None:
        w = first[0]
        link = f"hca {w.hca or '?'} on {w.host} to peer {w.peer or '?'}"
        status = f" (status {w.status})" if w.status is not None else ""
        summary = f"network failure: the first IB error is on {link}{status}"
        rank = col.pid_ranks.get(w.pid)
        ranks: tuple[int, ...] = (rank,) if rank is not None else ()
        out.findings.append(job_finding(cls="network", summary=summary, confidence="high", ranks=ranks,
                                    evidence=tuple(items[:20])))
    else:
        out.findings.append(job_finding(cls="network", confidence="low", evidence=tuple(items[:20]),
                                    summary="socket errors between ranks (a peer closed or reset the connection)"))


def _ras(col: Collected, out: Analysis) -> list[JobFinding]:
    found = []
    for reply in col.evidence.ras:
        st = reply.status
        for op, ranks in ((op, r) for c in st.communicators for op, r in c.behind.items()):
            found.append(job_finding(cls="stuck-rank", confidence="high", ranks=ranks,
                                 summary=f"{rank_words(ranks)} is behind: NCCL RAS counts fewer {op} operations",
                                 evidence=(Evidence(source=reply.source,
                                                    text=f"RAS: {op} behind on {rank_words(ranks)}"),)))
        for issue in st.issues:
            for oc in issue.op_counts:
                behind = oc.behind
                if behind is not None and behind.ranks:
                    rs = tuple(r.rank for r in behind.ranks)
                    found.append(job_finding(cls="stuck-rank", confidence="high", ranks=rs,
                                         summary=f"{rank_words(rs)} is behind: NCCL RAS says it launched up to "
                                                 f"{oc.operation} operation {behind.value}",
                                         evidence=tuple(Evidence(source=reply.source, rank=r.rank,
                                                                 text=f"Rank {r.rank} has launched up to operation "
                                                                      f"{behind.value} -- process {r.pid} on node "
                                                                      f"{r.node}") for r in behind.ranks[:10])))
        if st.dead:
            found.append(job_finding(cls="dead-rank", confidence="medium",
                                 summary=f"NCCL RAS considers {len(st.dead)} process(es) dead: "
                                         + ", ".join(f"pid {p.pid} on {p.node}" for p in st.dead[:5]),
                                 ranks=tuple(sorted({col.pid_ranks[p.pid] for p in st.dead if p.pid in col.pid_ranks})),
                                 evidence=(Evidence(source=reply.source, text="RAS: DEAD processes"),)))
    return found


def _stuck(col: Collected, out: Analysis, dumps: dict[int, FlightRecorderDump]) -> None:
    ev = col.evidence
    known, world = world_of(col)
    everyone = set(range(world)) if world else known
    # the desync report names the lagging ranks itself
    for f in ev.torch_logs:
        assert f.log is not None
        lag = [d for d in f.log.desync if d.kind in ("never-joined", "not-finished")]
        if lag:
            ranks = tuple(sorted({r for d in lag for r in d.ranks}))
            out.findings.append(job_finding(cls="stuck-rank", confidence="high", ranks=ranks,
                                        summary=f"{rank_words(ranks)} never joined or never finished the collective "
                                                "the others wait in (desync report)",
                                        evidence=tuple(_ev(col, f.source, d.line, f"desync: {d.kind} {list(d.ranks)}",
                                                           f.rank) for d in lag[:10])))
            return
    # watchdog timeouts (NCCL) and gloo timeouts: who waited, at which SeqNum
    waiting: dict[int, Evidence] = {}
    seqs: Counter[int] = Counter()
    for f in ev.torch_logs:
        assert f.log is not None
        for t in f.log.timeouts:
            r = _fact_rank(t, f.rank)
            if r is not None:
                text = f"watchdog timeout at SeqNum {t.seq} ({t.op_type})"
                waiting.setdefault(r, _ev(col, f.source, t.line, text, r))
                seqs[t.seq] += 1
        for g in f.log.gloo:
            if g.kind == "timeout":
                r = _fact_rank(g, f.rank)
                if r is not None:
                    waiting.setdefault(r, _ev(col, f.source, g.line, f"gloo: timed out waiting {g.timeout_ms} ms for "
                                                                     f"{g.operation}", r))
    # the stacks: who waits in a collective, who does not
    outside = [g for g in out.groups if g.collective is None]
    inside = [g for g in out.groups if g.collective is not None]
    n_in = sum(len(g.ranks) for g in inside)
    n_out = sum(len(g.ranks) for g in outside)
    stack_odd: tuple[int, ...] = ()
    where = ""
    if inside and outside and n_out < n_in:
        stack_odd = tuple(sorted(r for g in outside for r in g.ranks))
        where = outside[0].label
    # Flight Recorder: who never recorded the seq the others are at, who came late
    fr_missing: tuple[int, ...] = ()
    divergence = ""
    if out.fr is not None:
        for grp in out.fr.groups:
            if grp.missing:
                m = grp.missing[-1]
                if len(m.missing) < len(m.present):
                    fr_missing = m.missing
                    divergence = f"seq {m.seq} ({m.op}) of {grp.pg_desc or grp.pg_name}"
                    break
    lag_odd, lag_text = _fr_lag(dumps)
    nccl_odd, nccl_items, nccl_at = _nccl_behind(col)
    if nccl_at and not divergence:
        divergence = nccl_at
    complement: tuple[int, ...] = ()
    if waiting and world:
        rest = everyone - set(waiting)
        if rest and len(rest) < len(waiting):
            complement = tuple(sorted(rest))
    stopped = tuple(sorted(r for r, x in ev.ranks.items() if x.state == "stopped"))
    if stopped and len(stopped) * 2 >= len(ev.ranks):
        stopped = ()  # most ranks stopped: the whole job was suspended, no odd one
    candidates = [c for c in (stack_odd, fr_missing, lag_odd, complement, stopped, nccl_odd) if c]
    if not candidates:
        return
    votes: Counter[int] = Counter(r for c in candidates for r in c)
    odd = tuple(sorted(r for r, n in votes.items() if n == max(votes.values())))
    agree = all(set(c) == set(odd) for c in candidates)
    items: list[Evidence] = []
    for sg in out.groups:
        if set(sg.ranks) & set(odd):
            r0 = sg.ranks[0]
            items.append(Evidence(source=_stack_source(ev.ranks.get(r0)), rank=r0, text=f"stack: {sg.text}"))
    for sg in out.groups:
        if sg.collective is not None and not set(sg.ranks) & set(odd):
            items.append(Evidence(source=_stack_source(ev.ranks.get(sg.ranks[0])), rank=sg.ranks[0],
                                  text=f"stack: {sg.text}"))
            break
    for r in stopped:
        x = ev.ranks[r]
        items.insert(0, Evidence(source=(x.sources or ["live collection"])[0], rank=r,
                                 text=f"rank {r} (pid {x.pid}, {x.host}) is stopped (state T): SIGSTOP, a debugger "
                                      "or job control froze it"))
    if fr_missing:
        items.append(Evidence(source="flight recorder", text=f"Flight Recorder: {rank_words(fr_missing)} never "
                                                             f"recorded {divergence}"))
    if lag_text:
        items.append(Evidence(source="flight recorder", text=lag_text))
    items.extend(nccl_items)
    items.extend(list(waiting.values())[:8])
    if complement:
        items.append(Evidence(source="logs", text=f"{rank_words(waiting)} timed out waiting; "
                                                  f"{rank_words(complement)} did not (world size {world})"))
    # a rank past the point the others wait at, outside their function: it skipped a collective
    skipped = False
    if stack_odd and fr_missing and set(stack_odd) == set(fr_missing) and inside:
        funcs = {f.split(" (")[0] for g in inside for f in g.frames if not f.startswith(("all_reduce", "_exception"))}
        waiting_fn = inside[0].function
        odd_frames = [f.split(" (")[0] for g in outside for f in g.frames]
        skipped = bool(waiting_fn) and waiting_fn not in odd_frames and bool(funcs)
    if skipped:
        wait_at = inside[0].where
        out.findings.append(job_finding(
            cls="collective-mismatch", ranks=odd, confidence="medium" if agree else "low", evidence=tuple(items[:24]),
            where=outside[0].where, divergence=divergence,
            summary=f"{rank_words(odd)} skipped a collective: the others wait in {inside[0].collective} at {wait_at} "
                    f"({divergence}), {rank_words(odd)} recorded none and is past it, in {where}"))
        return
    what = _stuck_kind(outside)
    if stopped and set(stopped) & set(odd):
        what = "stopped: state T, SIGSTOP or a debugger" + (f"; {what}" if what else "")
    summary = f"{rank_words(odd)} is behind" + (f", stuck in {where}" if where and stack_odd else "")
    if what:
        summary += f" ({what})"
    if waiting:
        summary += f"; {rank_words(waiting)} wait for it in a collective"
    if nccl_odd and set(nccl_odd) == set(odd):
        summary += f"; it never launched {nccl_at.split(' on comm ')[0]}, which the other ranks did"
    confidence: Confidence = "high" if agree and len(candidates) >= 2 else "medium" if agree else "low"
    if not agree:
        out.notes.append("the evidence for the stuck rank disagrees: " + "; ".join(
            f"{name} {rank_words(c)}" for name, c in (("stacks", stack_odd), ("flight recorder", fr_missing),
                                                       ("flight recorder lag", lag_odd),
                                                       ("timeouts' complement", complement),
                                                       ("stopped processes", stopped),
                                                       ("NCCL opCounts", nccl_odd)) if c))
    out.findings.append(job_finding(cls="stuck-rank", ranks=odd, confidence=confidence, evidence=tuple(items[:24]),
                                summary=summary, where=outside[0].where if outside and stack_odd else "",
                                divergence=divergence))


def _stuck_kind(groups: list[StackGroup]) -> str:
    text = " ".join(f for g in groups for f in g.frames).lower()
    if "dataloader" in text or "_next_data" in text or "queue.py" in text:
        return "in the data loader"
    if "socket.py" in text or "ssl.py" in text or " read" in text or "open (" in text:
        return "in I/O"
    return ""


def _stack_source(r: RankEvidence | None) -> str:
    if r is None:
        return "py-spy"
    return next((s for s in r.sources if "spy" in s.lower()), r.sources[0] if r.sources else "py-spy")


def _fr_lag(dumps: dict[int, FlightRecorderDump]) -> tuple[tuple[int, ...], str]:
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
    ordered = sorted(times.values())
    median = ordered[len(ordered) // 2]
    late = tuple(sorted(r for r, t in times.items() if t - median > 1_000_000_000))
    if not late or len(late) * 2 >= len(times):
        return (), ""
    lag = max(times[r] - median for r in late) / 1e9
    return late, f"Flight Recorder: {rank_words(late)} entered seq {seq} {lag:.1f} s after the others"


def _fallback(col: Collected, out: Analysis) -> None:
    items = []
    for n in col.evidence.nccl_logs:
        assert n.log is not None
        log_hosts = {q.host for q in n.log.processes}
        for p in n.log.processes:
            # sockets matter only between nodes: a one-node communicator (a 1-GPU job, NVLink
            # inside a node) never touches the network, whatever NCCL chose for it
            nodes = [c.nnodes for c in n.log.comms if c.host == p.host and c.pid == p.pid and c.nnodes]
            if not (max(nodes) > 1 if nodes else len(log_hosts) > 1):
                continue
            if p.socket_fallback and (p.ib_no_device or any(e.name == "NCCL_IB_HCA" for e in p.env)
                                      or any(q.network.startswith("IB") for q in n.log.processes)):
                items.append(Evidence(source=n.source, line=p.first_line,
                                      text=f"{p.host} pid {p.pid}: NCCL uses sockets (network {p.network or 'Socket'})",
                                      rank=p.ranks[0] if len(p.ranks) == 1 else None))
    if items:
        hosts = sorted({i.text.split(" ")[0] for i in items})
        out.findings.append(job_finding(cls="socket-fallback", confidence="medium", evidence=tuple(items[:20]),
                                    summary=f"NCCL fell back to TCP sockets on {', '.join(hosts[:8])}: a performance "
                                            "cliff, not a hang"))


def _events(col: Collected) -> list[Evidence]:
    """Every error a log printed, with its time where the log has one: for the first failure."""
    ev = col.evidence
    events: list[Evidence] = []
    for f in ev.torch_logs:
        assert f.log is not None
        log = f.log
        for fail in (x for b in log.child_failed for x in b.failures):
            t = None
            try:
                t = _dt.datetime.strptime(fail.time, "%Y-%m-%d_%H:%M:%S").replace(tzinfo=_dt.timezone.utc).timestamp()
            except ValueError:
                pass
            if fail.signal not in COLLATERAL:
                events.append(Evidence(source=f.source, line=fail.line, rank=fail.rank, time=t,
                                       text=f"exitcode {fail.exitcode} {fail.signal}".strip()))
        for kind in ("timeouts", "gloo", "mismatches", "backend_errors", "address_in_use", "rendezvous", "stuck"):
            for fact in getattr(log, kind):
                events.append(_ev(col, f.source, fact.line, f"{kind}: {_short(fact)}", _fact_rank(fact, f.rank)))
        for e in log.exceptions:
            events.append(_ev(col, f.source, e.line, f"{e.type}: {e.message}", _fact_rank(e, f.rank)))
    for n in ev.nccl_logs:
        assert n.log is not None
        for w in n.log.warns:
            events.append(Evidence(source=n.source, line=w.line, text=w.text, rank=col.pid_ranks.get(w.pid),
                                   time=w.time))
    for k in ev.kernel:
        events.append(Evidence(source=k.source, line=k.line, text=k.text, time=k.time,
                               rank=col.pid_ranks.get(k.pid) if k.pid is not None else None))
    for ef in ev.error_files:
        events.append(Evidence(source=ef.source, text=ef.message, rank=ef.rank, time=ef.timestamp))
    return events


def _short(fact: object) -> str:
    for name in ("message", "differences", "op_type", "kind", "reason"):
        value = getattr(fact, name, "")
        if value:
            return str(value)[:160]
    return type(fact).__name__


def analyse(col: Collected) -> Analysis:
    ev = col.evidence
    out = Analysis()
    sizes: dict[int, list[int]] = {}
    for rank, r in ev.ranks.items():
        if r.world_size:
            sizes.setdefault(r.world_size, []).append(rank)
    out.world_sizes = sizes
    out.groups = group_stacks({r: x.stack for r, x in ev.ranks.items() if x.stack is not None})
    dumps = {r: x.flight_recorder for r, x in ev.ranks.items() if x.flight_recorder is not None}
    if dumps:
        out.fr = compare_ranks(dumps)
    out.events = _events(col)
    init = init_failure(col)
    if init is not None:
        out.findings.append(init)
    _gpu(col, out)
    dead = dead_rank(col)
    if dead is not None:
        out.findings.append(dead)
    ras = _ras(col, out)
    out.findings.extend(f for f in ras if f.cls == "dead-rank")
    _init_stacks(col, out)
    found, notes = mismatch(col, out.fr)
    if found is not None:
        out.findings.append(found)
    out.notes.extend(notes)
    if not any(f.cls in ("collective-mismatch", "shape-mismatch") for f in out.findings):
        _stack_mismatch(col, out)
    _wedged(col, out)
    _network(col, out)
    stuck_from_ras = [f for f in ras if f.cls == "stuck-rank"]
    if stuck_from_ras:
        out.findings.extend(stuck_from_ras)  # RAS overrides the watchdog for "who is behind"
    else:
        _stuck(col, out, dumps)
        pm = post_mortem(col)  # after the stacks' finding: where they name the rank, they say where it is
        if pm is not None:
            out.findings.append(pm)
    _fallback(col, out)
    return out


def ordered(findings: Iterable[JobFinding]) -> list[JobFinding]:
    return sorted(findings, key=lambda f: PRECEDENCE.index(f.cls))


__all__ = ["PRECEDENCE", "Analysis", "Confidence", "Evidence", "FailureClass", "JobFinding", "analyse", "ordered",
           "_iso"]
