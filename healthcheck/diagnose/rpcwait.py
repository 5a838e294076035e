"""Rule 7 (stuck-rank, live): the callee of torch.distributed.rpc calls that never return.

A job on torch.distributed.rpc (a parameter server, a driver and its workers) has no
process group and no collective: a caller waits in `rpc_sync` for its callee's answer,
and the callee runs each request on a thread of its RPC agent (`_run_function` in
torch/distributed/rpc/internal.py calling the job's function). Where every rank was
sampled still, some ranks' main threads wait in `rpc_sync` and a rank's agent threads are
blocked in the job's own handler code (its own lock taken twice, a queue no one fills),
the callee is the stuck rank; the callers are its victims (their RPC timeouts, later, are
victims' lines too: logfacts.RPC_TIMEOUT). The callee's own main thread is wherever the
program left it (a server's in `rpc.shutdown()`, waiting for every worker), not what
blocks it. Named only where no rank moved and the blocked callees are no more than the
callers. (Captured live here: tests/fixtures/diagnose/rules11, rpclock-live.)
"""

from __future__ import annotations

from healthcheck.diagnose.analysis import Analysis, stack_source
from healthcheck.diagnose.findings import Evidence, JobFinding, job_finding
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.stacks import main_thread, rank_words
from healthcheck.parsers.py_spy import PySpyProcess, PySpyThread

_RPC = "torch/distributed/rpc/"


def _torch(file: str) -> bool:
    return "torch/" in file or file.startswith(("threading.py", "queue.py", "concurrent/"))


def waits_on_rpc(proc: PySpyProcess) -> bool:
    """Whether the rank's main thread waits in rpc_sync for a callee's answer."""
    t = main_thread(proc)
    return t is not None and any(f.name == "rpc_sync" and _RPC in f.file for f in t.frames)


def blocked_handlers(proc: PySpyProcess) -> list[PySpyThread]:
    """The rank's RPC agent threads that run a request in the job's own code."""
    out = []
    for t in proc.threads:
        runs = any(f.name == "_run_function" and _RPC in f.file for f in t.frames)
        if runs and t.frames and not _torch(t.frames[0].file):
            out.append(t)
    return out


def _handler_evidence(col: Collected, rank: int, threads: list[PySpyThread]) -> Evidence:
    f = threads[0].frames[0]
    return Evidence(source=stack_source(col.evidence.ranks.get(rank)), rank=rank,
                    text=f"rank {rank}: {len(threads)} RPC handler thread(s) blocked, the first in {f.name} "
                         f"({f.file}:{f.line})")


def rpc_callee(col: Collected, out: Analysis) -> JobFinding | None:
    """See the module's docstring."""
    motion = out.motion
    if motion is None or not motion.ranks or any(m.moved for m in motion.ranks.values()):
        return None
    stacks = {r: x.stack for r, x in col.evidence.ranks.items() if x.stack is not None and r in motion.ranks}
    callers = sorted(r for r, p in stacks.items() if waits_on_rpc(p))
    callees = {r: h for r, p in stacks.items() if r not in callers and (h := blocked_handlers(p))}
    if not callers or not callees or len(callees) > len(callers):
        return None
    named = tuple(sorted(callees))
    items = [_handler_evidence(col, r, callees[r]) for r in named]
    items += [Evidence(source=stack_source(col.evidence.ranks.get(r)), rank=r,
                       text=f"rank {r}: main thread waits in rpc_sync") for r in callers[:8]]
    first = callees[named[0]][0].frames[0]
    return job_finding(
        cls="stuck-rank", ranks=named, confidence="high", evidence=tuple(items[:16]),
        where=f"{first.name} ({first.file}:{first.line})",
        summary=f"{rank_words(named)}'s RPC handler is blocked in its own code ({first.name}, {first.file}:"
                f"{first.line}) while {rank_words(callers)} wait in rpc_sync for its answer; no rank moved over "
                f"{motion.describe()}: the callee is stuck, the callers are its victims")


__all__ = ["blocked_handlers", "rpc_callee", "waits_on_rpc"]
