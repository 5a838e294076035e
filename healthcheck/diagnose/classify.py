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
    complement of the ranks that timed out at one SeqNum, the stack groups (ranks
    outside c10d while still ranks wait in a collective, at any count), Flight Recorder lag.
 8. socket-fallback: NCCL on sockets where IB was expected (a performance cliff).
 9. progressing: live, every sampled rank's stack, I/O or step counter moved (stuck.py).
The stack rules (7's stacks, 9, the stack mismatch of 4, the init stacks of 1) are in
stuck.py and stackrules.py, on the stacks as sampled (motion.py).
"""

from __future__ import annotations

import datetime as _dt
from collections import Counter
from collections.abc import Iterable

import msgspec

from healthcheck.diagnose.analysis import Analysis, iso, line_time, world
from healthcheck.diagnose.analysis import fact_rank as _fact_rank
from healthcheck.diagnose.analysis import log_evidence as _ev
from healthcheck.diagnose.evidence import RankEvidence
from healthcheck.diagnose.findings import Confidence, Evidence, FailureClass, JobFinding, job_finding
from healthcheck.diagnose.motion import job_motion
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.stackrules import init_stacks, stack_mismatch
from healthcheck.diagnose.stacks import group_stacks, rank_words
from healthcheck.diagnose.stuck import progress_rule, stuck_rule
from healthcheck.parsers.flight_recorder import FlightRecorderDump, compare_ranks

_iso = iso  # the verdict's name for it
_t = line_time
_world = world

PRECEDENCE: tuple[FailureClass, ...] = ("init-failure", "gpu-failure", "dead-rank", "shape-mismatch",
                                        "collective-mismatch", "host-wedged", "network", "stuck-rank",
                                        "socket-fallback", "progressing", "unknown")

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
    "progressing": "nothing hangs: every rank moved while hc looked; if the job is slow, look at the straggler "
                   "named (its data loading, its node: hc node) or profile a step",
    "unknown": "collect more: per-rank logs with NCCL_DEBUG=INFO, py-spy dump --json of every rank while it "
               "hangs, Flight Recorder dumps (TORCH_FR_BUFFER_SIZE, TORCH_NCCL_DUMP_ON_TIMEOUT=1)",
}


_COLLATERAL = ("SIGTERM", "SIGINT", "SIGHUP")
_COLLECTIVE_ERRORS = ("DistBackendError", "DistNetworkError", "DistStoreError", "Connection closed by peer",
                      "Timed out waiting", "Connection reset", "NCCL error", "Watchdog caught", "ncclRemoteError",
                      "Read error", "failed to pass monitoredBarrier", "Detected mismatch", "ChildFailedError",
                      "preamble.length", "Received data size", "watchdog", "collective operation timeout")


def _init(col: Collected, out: Analysis) -> None:
    ev = col.evidence
    items: list[Evidence] = []
    ranks: set[int] = set()
    for f in ev.torch_logs:
        assert f.log is not None
        for a in f.log.address_in_use:
            r = _fact_rank(a, f.rank)
            items.append(_ev(col, f.source, a.line, f"address already in use (port {a.port})", r))
            if r is not None:
                ranks.add(r)
        for z in f.log.rendezvous:
            r = _fact_rank(z, f.rank)
            items.append(_ev(col, f.source, z.line, f"rendezvous/store {z.kind}: {z.message}", r))
        for b in f.log.backend_errors:
            if "Duplicate GPU" in b.last_error:
                r = _fact_rank(b, f.rank)
                items.append(_ev(col, f.source, b.line, b.last_error, r))
                if r is not None:
                    ranks.add(r)
    for n in ev.nccl_logs:
        assert n.log is not None
        rank_of = {(p.host, p.pid): (p.ranks[0] if len(p.ranks) == 1 else n.rank) for p in n.log.processes}
        for w in n.log.warns:
            if w.kind in ("no-interface", "duplicate-gpu"):
                r = rank_of.get((w.host, w.pid))
                items.append(Evidence(source=n.source, line=w.line, text=w.text, rank=r, time=w.time))
                if r is not None:
                    ranks.add(r)
        for c in n.log.comms:
            if c.init_hung and c.init_start_line is not None:
                items.append(Evidence(source=n.source, line=c.init_start_line, rank=c.rank,
                                      text=f"comm {c.comm} rank {c.rank}: Init START without COMPLETE"))
    launchers = _launchers(col, items)
    if not items:
        return
    ports = any("address already in use" in i.text for i in items)
    what = "the master port is already in use" if ports else "the job failed while starting (init/rendezvous)"
    if ranks:
        summary = f"{rank_words(ranks)} could not start: {what}"
    elif launchers:
        summary = launchers
        ports = ports or "held by" in launchers
    else:
        summary = f"init failure: {what}"
    out.findings.append(job_finding(cls="init-failure", summary=summary,
                                    confidence="high" if ports or ranks else "medium",
                                ranks=tuple(sorted(ranks)), evidence=tuple(items[:20])))


def _launchers(col: Collected, items: list[Evidence]) -> str:
    """Live, agents (torchrun) whose ranks never started: where they wait, and a foreign
    process on the rendezvous port (the store cannot start: every agent waits on a
    listener that never answers). Their evidence goes into items; the summary is returned
    ("" when there are none, or ranks did start)."""
    ev = col.evidence
    if not ev.launchers or any(r.alive for r in ev.ranks.values()):
        return ""
    from healthcheck.core.nodes import fold

    taken = [a for a in ev.launchers if a.listening and not a.holder_is_launcher]
    for a in taken:
        who = f"pid {a.holder_pid} ({a.holder_command})" if a.holder_pid is not None else "a process hc cannot see"
        items.append(Evidence(source=a.source, text=f"port {a.port} on {a.host} is held by {who}, not a torchrun "
                                                    f"agent: the rendezvous store at {a.endpoint} cannot start"))
    for a in ev.launchers[:16]:
        items.append(Evidence(source=a.source, text=f"torchrun agent pid {a.pid} on {a.host}: no rank started"
                              + (f"; it waits in {a.waiting_in}" if a.waiting_in else "")
                              + (f" (rendezvous at {a.endpoint})" if a.endpoint else "")))
    hosts = fold(sorted({a.host for a in ev.launchers}))
    if taken:
        a = taken[0]
        who = f"pid {a.holder_pid} ({a.holder_command[:80]})" if a.holder_pid is not None else "another process"
        return (f"no rank started: the rendezvous port {a.port} on {a.host} is held by {who}, so the torchrun "
                f"agents on {hosts} wait on a store that never answers")
    waiting = [a for a in ev.launchers if a.waiting_in]
    return (f"no rank started: the torchrun agents on {hosts} "
            + ("wait in the rendezvous" if waiting else "have started no worker")
            + (f" at {ev.launchers[0].endpoint}" if ev.launchers[0].endpoint else "")
            + " (a node that has not joined, or an endpoint they cannot reach)")


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


def _collective_error(text: str) -> bool:
    return any(word in text for word in _COLLECTIVE_ERRORS)


def _dead(col: Collected, out: Analysis) -> None:
    ev = col.evidence
    items: list[Evidence] = []
    ranks: dict[int, str] = {}
    for f in ev.torch_logs:
        assert f.log is not None
        for block in f.log.child_failed:
            for fail in block.failures:
                if fail.rank is None or fail.signal in _COLLATERAL:
                    continue
                if fail.signal and fail.signal != "SIGABRT":
                    ranks[fail.rank] = f"killed by {fail.signal}"
                    items.append(_ev(col, f.source, fail.line, f"rank {fail.rank} (pid {fail.pid}, host {fail.host}) "
                                     f"exitcode {fail.exitcode} ({fail.signal})", fail.rank))
                elif fail.exception and not _collective_error(fail.exception + fail.traceback):
                    ranks[fail.rank] = f"crashed: {fail.exception}"
                    items.append(_ev(col, f.source, fail.line, f"rank {fail.rank} exitcode {fail.exitcode}: "
                                     f"{fail.exception}", fail.rank))
    for rank, r in ev.ranks.items():
        if r.signal and r.signal not in _COLLATERAL and r.signal != "SIGABRT" and rank not in ranks:
            ranks[rank] = f"killed by {r.signal}"
            items.append(Evidence(source=(r.sources or ["process"])[0], rank=rank,
                                  text=f"rank {rank} exited with {r.signal} (exit {r.exit_code})"))
    # live: ranks the world size says exist that no node holds (while others live), zombies
    live = any(r.alive for r in ev.ranks.values())
    gone: list[int] = []
    for rank, r in ev.ranks.items():
        if rank in ranks or not live:
            continue
        if r.state in ("missing", "zombie"):
            ranks[rank] = "its process is gone" if r.state == "missing" else "exited (a zombie, not reaped)"
            gone.append(rank)
            items.append(Evidence(source=(r.sources or ["live collection"])[0], rank=rank,
                                  text=r.stack_error or f"rank {rank}: {r.state}"))
    for k in ev.kernel:
        if k.kind == "oom-kill":
            killed = col.pid_ranks.get(k.pid) if k.pid is not None else None
            items.append(Evidence(source=k.source, line=k.line, text=k.text, rank=killed, time=k.time))
            if killed is not None:
                ranks[killed] = "killed by the OOM killer"
    for e in ev.error_files:
        if not _collective_error(e.message):
            items.append(Evidence(source=e.source, text=f"error file: {e.message}", rank=e.rank, time=e.timestamp))
            if e.rank is not None:
                ranks.setdefault(e.rank, f"crashed: {e.message[:120]}")
    for n in ev.nccl_logs:
        assert n.log is not None
        for w in n.log.warns:
            if w.kind == "cuda" and "out of memory" in w.error:
                oom = col.pid_ranks.get(w.pid)
                items.append(Evidence(source=n.source, line=w.line, text=w.text, rank=oom, time=w.time))
                if oom is not None:
                    ranks.setdefault(oom, "out of GPU memory")
    if not items:
        return
    peers = sum(1 for f in ev.torch_logs if f.log is not None for g in f.log.gloo if g.kind == "peer-closed")
    why = "; ".join(sorted(set(ranks.values())))[:200]
    summary = (f"{rank_words(ranks)} died ({why})" if ranks else "a rank was killed (OOM kill in the kernel log, "
               "no rank matched by pid)")
    if peers and ranks:
        summary += f"; {peers} peer error(s) 'connection closed' are collateral"
    only_gone = bool(ranks) and set(ranks) == set(gone) and len(items) == len(gone)
    if only_gone and _gloo_size_aborts(col):
        return  # gloo's size check aborted them: the mismatch rule names them as its parties
    if only_gone:
        where = "it on its node" if len(ranks) == 1 else "them on their nodes"
        summary = (f"{rank_words(ranks)} died: no process of {where} while the other ranks still run "
                   "(killed, crashed or exited early; the node's kernel log and the launcher's output say how)")
    out.findings.append(job_finding(cls="dead-rank", summary=summary,
                                confidence=("medium" if only_gone else "high") if ranks else "low",
                                ranks=tuple(sorted(ranks)), evidence=tuple(items[:20])))


def _gloo_size_aborts(col: Collected) -> bool:
    """A gloo 'Received data size doesn't match' in the text: gloo aborts (SIGABRT) the
    ranks whose check failed, so their deaths are the mismatch's consequence."""
    return any(g.kind == "size-mismatch" for f in col.evidence.torch_logs if f.log is not None for g in f.log.gloo)


def _aborted(col: Collected) -> list[int]:
    """Ranks gone by SIGABRT or gone from a live job while others run: those gloo's size
    check aborted, when the text shows one."""
    ev = col.evidence
    out = {r for r, x in ev.ranks.items() if x.signal == "SIGABRT"}
    if any(x.alive for x in ev.ranks.values()):
        out |= {r for r, x in ev.ranks.items() if x.state in ("missing", "zombie")}
    for f in ev.torch_logs:
        assert f.log is not None
        out |= {fail.rank for block in f.log.child_failed for fail in block.failures
                if fail.rank is not None and fail.signal == "SIGABRT"}
    return sorted(out)


class _CollAt(msgspec.Struct, frozen=True):
    """One rank's last NCCL COLL line on one communicator."""

    op_count: int
    op: str
    source: str
    line: int | None


def _nccl_colls(col: Collected) -> dict[str, dict[int, _CollAt]]:
    """NCCL_DEBUG_SUBSYS=COLL: per communicator (commId, the same on every rank; else its
    size), each global rank's last COLL line. A process's rank is its pid's where the
    evidence places it, else its rank in a communicator as big as the world."""
    _, world = _world(col)
    out: dict[str, dict[int, _CollAt]] = {}
    for n in col.evidence.nccl_logs:
        assert n.log is not None
        for c in n.log.comms:
            if c.last_op_count is None:
                continue
            rank = col.pid_ranks.get(c.pid)
            if rank is None and c.rank is not None and (world is None or c.nranks == world):
                rank = c.rank
            if rank is None:
                continue
            key = c.comm_id or (f"nranks={c.nranks}" if c.nranks else "")
            if key:
                out.setdefault(key, {})[rank] = _CollAt(c.last_op_count, c.last_op, n.source, c.last_coll_line)
    return out


def _nccl_behind(col: Collected) -> tuple[tuple[int, ...], list[Evidence], str]:
    """Ranks whose last NCCL operation on a communicator is behind the others' (a strict
    minority): they never launched the collective the rest are in."""
    for comm, ranks in _nccl_colls(col).items():
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


def _mismatch(col: Collected, out: Analysis, dumps: dict[int, FlightRecorderDump]) -> None:
    ev = col.evidence
    sides: dict[int, str] = {}
    items: list[Evidence] = []
    shape = False
    seq = None
    for f in ev.torch_logs:
        assert f.log is not None
        for m in f.log.mismatches:
            for fp in (m.local, m.remote):
                if fp is None:
                    continue
                sides[fp.rank] = f"{fp.op_type} [{fp.shape}] {fp.dtypes}"
                seq = fp.seq if fp.seq is not None else seq
            diff = m.differences.lower()
            shape = shape or "shape" in diff or "dtype" in diff
            items.append(_ev(col, f.source, m.line, f"Detected mismatch between collectives: rank {m.local.rank} "
                             f"runs {sides.get(m.local.rank, '?')}"
                             + (f", rank {m.remote.rank} runs {sides.get(m.remote.rank, '?')}" if m.remote else "")
                             + (f" ({m.differences})" if m.differences else ""), _fact_rank(m, f.rank)))
        for g in f.log.gloo:
            if g.kind == "size-mismatch":
                shape = True
                items.append(_ev(col, f.source, g.line, f"gloo: received {g.received_bytes} bytes, expected "
                                 f"{g.expected_bytes} (Received data size doesn't match)", _fact_rank(g, f.rank)))
    # NCCL COLL lines: one opCount, different operations on different ranks
    for comm, at in _nccl_colls(col).items():
        counts = {c.op_count for c in at.values()}
        if len(at) >= 2 and len(counts) == 1 and len({c.op for c in at.values()}) > 1 and not sides:
            for r, c in at.items():
                sides[r] = f"{c.op} (NCCL opCount {c.op_count:#x})"
                items.append(_ev(col, c.source, c.line, f"rank {r}: NCCL {c.op} opCount {c.op_count:#x} on comm "
                                 f"{comm}", r))
    fr_odd: tuple[int, ...] = ()
    fr_text = ""
    divergence = ""
    if out.fr is not None:
        for grp in out.fr.groups:
            for mm in grp.mismatches:
                variants = {r: v.value for v in mm.variants for r in v.ranks}
                pick = _minority(variants)
                label = f"seq {mm.seq} of {grp.pg_desc or grp.pg_name}"
                divergence = divergence or label
                for v in mm.variants:
                    for r in v.ranks[:8]:
                        items.append(Evidence(source=_fr_source(ev.ranks.get(r)), rank=r,
                                              text=f"Flight Recorder {label}: {mm.field} {v.value}"))
                if mm.field != "op":
                    shape = True
                if pick is not None and not fr_odd:
                    fr_odd = pick[0]
                    fr_text = f"{mm.field} {pick[2]} where the others have {pick[1]}"
                if not pick and not fr_odd:
                    fr_text = f"{mm.field} differs: " + "; ".join(f"{rank_words(v.ranks)}: {v.value}"
                                                                  for v in mm.variants)
                break
            if grp.mismatches:
                break
    if not items:
        return
    pick = _minority(sides) if sides else None
    odd = pick[0] if pick else fr_odd
    if pick and fr_odd and set(pick[0]) != set(fr_odd):
        out.notes.append(f"DETAIL names {rank_words(pick[0])}, the Flight Recorder {rank_words(fr_odd)}")
    cls: FailureClass = "shape-mismatch" if shape else "collective-mismatch"
    what = "tensor shape/dtype" if shape else "collective"
    aborted = _aborted(col) if not odd and shape and _gloo_size_aborts(col) else []
    if odd:
        detail = f"runs {pick[2]} where the others run {pick[1]}" if pick else fr_text
        summary = f"{rank_words(odd)} called a {what} its peers did not match: {detail}"
        confidence: Confidence = "high"
    elif aborted:
        # gloo checks sizes on the receiving side: the rank with the other size and a peer
        # it exchanged with are aborted, and nothing in the text says which is which
        odd = tuple(aborted)
        summary = (f"{rank_words(odd)} disagreed with a peer on a tensor size and gloo aborted "
                   f"{'it' if len(odd) == 1 else 'them'} (Received data size doesn't match); which rank "
                   "holds the other size the text does not say: rerun under hc run --debug-desync "
                   "(TORCH_DISTRIBUTED_DEBUG=DETAIL names the collective and the shapes)")
        confidence = "medium"
        for r in odd:
            x = ev.ranks.get(r)
            if x is not None and not any(i.rank == r for i in items):
                items.append(Evidence(source=(x.sources or ["live collection"])[0], rank=r,
                                      text=x.stack_error or f"rank {r}: {x.signal or x.state or 'gone'}"))
    else:
        summary = f"ranks disagree on a {what}" + (f": {fr_text}" if fr_text else " (no majority to name the odd rank)")
        confidence = "medium"
    if seq is not None and not divergence:
        divergence = f"SequenceNumber {seq}"
    out.findings.append(job_finding(cls=cls, summary=summary, confidence=confidence, ranks=odd,
                                evidence=tuple(items[:24]), divergence=divergence))


def _fr_source(r: RankEvidence | None) -> str:
    if r is None:
        return "flight recorder"
    return next((s for s in r.sources if "trace" in s or s.endswith((".pkl", ".pickle"))),
                r.sources[0] if r.sources else "flight recorder")


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
            if fail.signal not in _COLLATERAL:
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
    out.motion = job_motion({r: x.samples for r, x in ev.ranks.items() if x.samples})
    if out.motion is not None:
        out.notes.append(f"stacks: {out.motion.describe()}")
    dumps = {r: x.flight_recorder for r, x in ev.ranks.items() if x.flight_recorder is not None}
    if dumps:
        out.fr = compare_ranks(dumps)
    out.events = _events(col)
    _init(col, out)
    _gpu(col, out)
    _dead(col, out)
    ras = _ras(col, out)
    out.findings.extend(f for f in ras if f.cls == "dead-rank")
    init_stacks(col, out)
    _mismatch(col, out, dumps)
    if not any(f.cls in ("collective-mismatch", "shape-mismatch") for f in out.findings):
        stack_mismatch(col, out)
    _wedged(col, out)
    _network(col, out)
    stuck_from_ras = [f for f in ras if f.cls == "stuck-rank"]
    if stuck_from_ras:
        out.findings.extend(stuck_from_ras)  # RAS overrides the watchdog for "who is behind"
    else:
        stuck_rule(col, out, dumps, _nccl_behind(col))
    progress_rule(col, out)
    _fallback(col, out)
    return out


def ordered(findings: Iterable[JobFinding]) -> list[JobFinding]:
    return sorted(findings, key=lambda f: PRECEDENCE.index(f.cls))


__all__ = ["PRECEDENCE", "Analysis", "Confidence", "Evidence", "FailureClass", "JobFinding", "analyse", "ordered",
           "_iso"]
