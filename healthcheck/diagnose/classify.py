"""JobEvidence -> findings: the ordered rules of the diagnosis (ARCHITECTURE.md, diagnose/).

Each rule reads one kind of evidence and emits findings (`findings.job_finding`: kernel
findings of the class's diag.E0xx ID): a class, the ranks it names, the evidence lines
(`source:line` and what the line says) and a confidence. A rule never
names a rank without a line (or a dump, or a stack) that speaks of it; where rules name
different ranks for one failure, the verdict lowers its confidence and says so.

Rules, in the order of precedence the verdict uses:
 1. init-failure: a port in use, rendezvous/store timeouts, NCCL without a usable
    interface, duplicate GPUs, Init START without COMPLETE, the ranks the store-based
    barrier never counted (storebarrier.py), gloo's full mesh that never connected
    (meshconnect.py, naming no rank).
 2. gpu-failure: Xid in the kernel log of the window; NCCL/torch CUDA errors that point at
    the device (a CUDA fault of the program's own making, an illegal memory access, without
    an Xid is its rank's death: cudafault.py; one raised in the job's set-up with no Xid and
    no GPU standing out is the set-up's: setupframes.py).
 3. dead-rank: a rank killed by a signal (torchrun's block, the live exit status), an OOM
    kill matched by pid, a Python exception on one rank that is not a collective's error
    (error.json, a traceback), NCCL `Cuda failure 'out of memory'`; never workers that died
    of one signal in one second (commondeath.py: a common cause, no rank stands out), nor
    ranks SIGKILLed beside others' own faults (cleanupkill.py: the launcher's clean-up).
 4. shape-mismatch / collective-mismatch: DETAIL's fingerprints (the minority side is
    odd), gloo's `Received data size doesn't match`, Flight Recorder disagreement at one
    seq (sizes/dtypes or op), Flight Recorder seqs some ranks never recorded while their
    stack is outside the function the others wait in (a skipped collective), a rank
    whose own call gloo refused before any exchange (argcheck.py).
 5. host-wedged: the heartbeat monitor (`watchdog got stuck`), only where other ranks
    differ (heartbeat.py); alike on every rank shown it is a note.
 6. network: IB completion errors (the first names hca and peer), verbs failures,
    socket errors beside a link event in the window (socket errors alone are what a
    dead peer leaves too: a note, no finding).
 7. stuck-rank: NCCL RAS op counts (overrides the watchdog), the desync report, the
    complement of the ranks that timed out at one SeqNum, the stack groups (ranks
    outside c10d while still ranks wait in a collective, at any count), Flight Recorder lag.
 8. socket-fallback: NCCL on sockets where IB was expected (a performance cliff).
 9. progressing: live, every sampled rank's stack, I/O or step counter moved (stuck.py).
The stack rules (7's stacks, 9, the stack mismatch of 4, the init stacks of 1) are in
stuck.py and stackrules.py, on the stacks as sampled (motion.py). A thread's uncaught
exception is no rank's death; threads.py adds it to a stuck finding naming its rank.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable

from healthcheck.diagnose.analysis import Analysis, fact_rank, log_evidence
from healthcheck.diagnose.argcheck import refused_arguments
from healthcheck.diagnose.commondeath import first_seen, without_common_death
from healthcheck.diagnose.coordination import coordination_timeout
from healthcheck.diagnose.coordlost import lost_tasks
from healthcheck.diagnose.cudafault import cuda_death, is_software_fault, software_faults
from healthcheck.diagnose.ddpclaims import duplicate_rank_claims
from healthcheck.diagnose.ddpshape import param_shape
from healthcheck.diagnose.deaths import dead_rank
from healthcheck.diagnose.findings import Confidence, Evidence, FailureClass, JobFinding, job_finding
from healthcheck.diagnose.frmissing import fr_missing
from healthcheck.diagnose.grouporder import group_order
from healthcheck.diagnose.heartbeat import wedged
from healthcheck.diagnose.hvdstall import horovod_stall
from healthcheck.diagnose.launchdiff import launch_differs
from healthcheck.diagnose.logfacts import COLLATERAL, first_errors, nccl_colls
from healthcheck.diagnose.mbarrier import barrier_absentees, barrier_blamed
from healthcheck.diagnose.meshconnect import mesh_failure, without_mesh_victims
from healthcheck.diagnose.mismatch import mismatch
from healthcheck.diagnose.motion import job_motion
from healthcheck.diagnose.p2p import p2p_deadlock
from healthcheck.diagnose.postmortem import post_mortem
from healthcheck.diagnose.preinit import died_before_joining
from healthcheck.diagnose.programbarrier import program_barrier
from healthcheck.diagnose.rpcwait import rpc_callee
from healthcheck.diagnose.setupdeath import died_in_setup
from healthcheck.diagnose.setupframes import setup_cuda_lines, setup_raised
from healthcheck.diagnose.setupphase import setup_failure
from healthcheck.diagnose.skippedgroup import skipped_group
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.stackrules import init_stacks, stack_mismatch
from healthcheck.diagnose.stacks import group_stacks, rank_words
from healthcheck.diagnose.startup import init_failure
from healthcheck.diagnose.storebarrier import store_barrier_absentees, store_barrier_failure
from healthcheck.diagnose.stuck import progress_rule, stuck_rule
from healthcheck.diagnose.stuckdied import stuck_died
from healthcheck.diagnose.threads import with_dead_threads
from healthcheck.diagnose.uniqueid import unpublished_id
from healthcheck.diagnose.wrapperlag import wrapper_behind
from healthcheck.parsers.flight_recorder import FlightRecorderDump, compare_ranks

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


def _gpu(col: Collected, out: Analysis) -> set[int]:
    """gpu-failure from Xid and the CUDA errors that point at the device (a CUDA error of the
    program's own making, with no Xid, is cudafault.py's); the ranks an Xid names."""
    ev = col.evidence
    items: list[Evidence] = []
    ranks: set[int] = set()
    pid_rank = col.pid_ranks
    in_setup = setup_cuda_lines(col, any(k.kind == "xid" for k in ev.kernel))  # setupframes.py: no GPU stands out
    for k in ev.kernel:
        if k.kind == "xid":
            r = pid_rank.get(k.pid) if k.pid is not None else None
            items.append(Evidence(source=k.source, line=k.line, text=k.text, rank=r, time=k.time))
            if r is not None:
                ranks.add(r)
    for f in ev.torch_logs:
        assert f.log is not None
        for b in f.log.backend_errors:
            if (b.kind == "cuda" and "out of memory" not in b.reason and not is_software_fault(b.reason)
                    and (f.source, b.line) not in in_setup):
                r = fact_rank(b, f.rank)
                items.append(log_evidence(col, f.source, b.line, f"CUDA error: {b.reason or b.detail}", r))
                if r is not None:
                    ranks.add(r)
    xid = [i for i in items if "Xid" in i.text]
    xid_ranks = {i.rank for i in xid if i.rank is not None}
    if xid:  # the driver says the GPU failed: the program's own CUDA faults on those ranks are its symptoms
        items.extend(i for i in software_faults(col)[0] if i.rank in xid_ranks)
    if not items:
        return xid_ranks
    summary = (f"GPU failure: Xid in the kernel log{' of ' + rank_words(ranks) if ranks else ''}" if xid
               else f"{rank_words(ranks) if ranks else 'a rank'} hit a CUDA error")
    out.findings.append(job_finding(cls="gpu-failure", summary=summary, confidence="high" if xid else "medium",
                                ranks=tuple(sorted(ranks)), evidence=tuple(items[:20])))
    return xid_ranks


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
        items = [log_evidence(col, ranks[r].source, ranks[r].line, f"rank {r}: last NCCL {ranks[r].op} opCount "
                              f"{ranks[r].op_count:#x} on comm {comm}", r) for r in behind[:8]]
        ahead = next(r for r, c in ranks.items() if c.op_count == top)
        items.append(log_evidence(col, ranks[ahead].source, ranks[ahead].line,
                                  f"rank {ahead}: last NCCL {ranks[ahead].op} opCount {top:#x} (the others reached it)",
                                  ahead))
        return behind, items, f"NCCL opCount {top:#x} on comm {comm}"
    return (), [], ""


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
    links = [Evidence(source=k.source, line=k.line, text=k.text, time=k.time)
             for k in col.evidence.kernel if k.kind == "link"]
    items.extend(links)
    if first is None and not links:
        # a broken pipe or a connection the remote end closed is what a peer that died leaves
        # too: without the network's own word (an IB completion error, a verbs failure, a
        # link event) no network fault is claimed
        out.notes.append(f"socket errors between ranks ({items[0].text[:160]}): a peer went away or the network "
                         "failed; the text holds no IB completion error or link event to tell which")
        return
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
                                    summary="socket errors between ranks (a peer closed or reset the connection) "
                                            "beside a link event in the job's window"))


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
        # lines without NCCL's host:pid:tid prefix form a process with no host: no node to name
        log_hosts = {q.host for q in n.log.processes if q.host}
        for p in (q for q in n.log.processes if q.host):
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
                events.append(log_evidence(col, f.source, fact.line, f"{kind}: {_short(fact)}",
                                           fact_rank(fact, f.rank)))
        for e in log.exceptions:
            events.append(log_evidence(col, f.source, e.line, f"{e.type}: {e.message}", fact_rank(e, f.rank)))
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


def _start(col: Collected, out: Analysis) -> JobFinding | None:
    """The init-failure (into out) and the dead-rank finding (returned): a dead rank whose
    own error is its process group's setup could not start; peers that waited in the store
    for a rank that died before it joined are its consequence."""
    init, dead = init_failure(col), without_common_death(col, dead_rank(col))  # commondeath.py: died together
    dead = first_seen(col, dead)  # commondeath.py: the box's later seconds were alive at the agent's first look
    dead = without_mesh_victims(col, dead)  # meshconnect.py: a rank that could not reach a peer did not die
    dead = dead or lost_tasks(col)  # coordlost.py: JAX's coordination service lost a task's heartbeat
    coordination = coordination_timeout(col)  # coordination.py: JAX's start-up barrier timed out
    if coordination is not None and dead is None and (init is None or not init.ranks):
        init = coordination
    absent = store_barrier_absentees(col)  # storebarrier.py: the ranks the store-based barrier never counted
    if absent is not None and (init is None or not init.ranks):
        if dead is not None and set(dead.ranks) & set(absent.ranks):  # it died before it joined: a death
            out.notes.append(f"{absent.message} ({rank_words(dead.ranks)} died)")
        else:
            init = absent
    elif init is None:
        init = store_barrier_failure(col)  # storebarrier.py: the barrier failed, no rank it can name
    if init is None and dead is None:
        init = duplicate_rank_claims(col)  # ddpclaims.py: two processes took one global rank
    if init is None and dead is None:
        init = mesh_failure(col)  # meshconnect.py: gloo's full mesh never connected
    setup = died_in_setup(col, dead)  # setupdeath.py: the dead rank's own error is its process group's setup
    setup = setup or launch_differs(col, dead)  # launchdiff.py: its own rendezvous, or its environment refused
    if setup is not None:
        init, dead = setup, None
    if dead is None and (init is None or not init.ranks):
        behind = unpublished_id(col, first_errors(col))  # uniqueid.py: the NCCL id's root alive and behind
        if behind is not None:
            out.findings.append(behind)
            return None
    consequence = died_before_joining(col, init, dead)  # preinit.py: peers waited in the store for a dead rank
    if consequence:
        out.notes.append(consequence)
    elif init is not None:
        out.findings.append(init)
    return dead


def _stuck(col: Collected, out: Analysis, ras: list[JobFinding], dumps: dict[int, FlightRecorderDump]) -> None:
    """Who is behind: RAS where it says, else the stacks, the watchdog and the post-mortem;
    where none names a stuck rank, the ranks monitored_barrier reports absent."""
    stuck_from_ras = [f for f in ras if f.cls == "stuck-rank"]
    analysed = fr_missing(col)  # frmissing.py: the flight recorder analyser's merge of every rank's buffer
    if analysed is not None and not stuck_from_ras:
        stuck_from_ras = [analysed]
    if stuck_from_ras:
        out.findings.extend(stuck_from_ras)  # RAS overrides the watchdog for "who is behind"
    else:
        stuck_rule(col, out, dumps, _nccl_behind(col))
        pm = post_mortem(col)  # after the stacks' finding: where they name the rank, they say where it is
        if pm is not None:
            out.findings.append(pm)
    if not any(f.cls in ("stuck-rank", "collective-mismatch") for f in out.findings):
        stall = horovod_stall(col)  # hvdstall.py: the ranks Horovod's stall inspector lists missing
        if stall is not None:
            out.findings.append(stall)
    if not any(f.cls == "stuck-rank" for f in out.findings):
        callee = rpc_callee(col, out)  # rpcwait.py: torch.distributed.rpc callers wait on a blocked handler
        if callee is not None:
            out.findings.append(callee)
    if not any(f.cls == "stuck-rank" for f in out.findings):
        absent = program_barrier(col)  # programbarrier.py: tasks that never reached JAX's barrier after start-up
        absent = absent or barrier_absentees(col, out.findings)  # mbarrier.py: monitored_barrier names who never came
        if absent is not None:
            out.findings.append(absent)
    if not out.findings:
        lag = wrapper_behind(col)  # wrapperlag.py: DETAIL's log of the collectives each rank entered
        if lag is not None:
            out.findings.append(lag)
    blamed = barrier_blamed(col, out.findings)  # mbarrier.py: the rank all others lost at the barrier
    if blamed is not None:
        out.findings.append(blamed)


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
    out.notes.extend(col.attempts)  # attempts.py: earlier attempts a restart got past, judged no more
    dead = param_shape(col, _start(col, out))  # ddpshape.py: a death by DDP's shape check is a shape mismatch
    xid_ranks = _gpu(col, out)
    dead = dead or cuda_death(col, xid_ranks)  # cudafault.py: a CUDA fault of the program's own, no Xid
    if dead is not None:
        out.findings.append(dead)
    ras = _ras(col, out)
    out.findings.extend(f for f in ras if f.cls == "dead-rank")
    init_stacks(col, out)
    found, notes = mismatch(col, out.fr)
    if found is None or found.cls == "collective-mismatch":
        found = skipped_group(col) or found  # skippedgroup.py: the rank torch warned skipped its group's call
    found = found or refused_arguments(col)  # argcheck.py: a rank's own arguments refused before any exchange
    if found is not None:
        out.findings.append(found)
    out.notes.extend(notes)
    if not any(f.cls in ("collective-mismatch", "shape-mismatch") for f in out.findings):
        stack_mismatch(col, out)
    if not any(f.cls in ("collective-mismatch", "shape-mismatch") for f in out.findings):
        p2p_deadlock(col, out)  # p2p.py: ranks in send/recv while the others wait in collectives
    if not any(f.cls in ("collective-mismatch", "shape-mismatch") for f in out.findings):
        group_order(col, out)  # grouporder.py: a member past the new_group its peers wait in
    wedged(col, out)  # heartbeat.py: the heartbeat monitor, host-wedged only with contrast
    _network(col, out)
    _stuck(col, out, ras, dumps)
    died = stuck_died(col, out.findings)  # stuckdied.py: the rank that never came, whose crash the text holds
    if died is not None:
        out.findings.append(died)
    progress_rule(col, out)
    if not out.findings:
        # setupphase.py: the text shows the job never got past its set-up; setupframes.py: by its frames
        late = setup_failure(col, setup_raised(col))
        if late is not None:
            out.findings.append(late)
    _fallback(col, out)
    out.findings = [with_dead_threads(col, f) for f in out.findings]  # threads.py: why a stuck rank waits
    return out


def ordered(findings: Iterable[JobFinding]) -> list[JobFinding]:
    return sorted(findings, key=lambda f: PRECEDENCE.index(f.cls))


__all__ = ["PRECEDENCE", "Analysis", "Confidence", "Evidence", "FailureClass", "JobFinding", "analyse", "ordered"]
