"""A job that never got past its set-up, in whatever words its launcher or library says so:
an init-failure naming no rank, read where no other rule found anything.

Set-up is launching the tasks, MPI_Init, the rendezvous, the process group and NCCL's
communicators up to the first collective. A failure there has many wordings (srun's task
launch, Hydra's proxy, mpirun, MPI_Init, NCCL's bootstrap and algorithm choice,
parsers/torch_log/setupfail.py; torch's NCCL error `invalid argument`/`invalid usage`, the
caller's arguments refused, or its `Last error:` naming the bootstrap; an NCCL error whose
INFO return trail unwinds through init.cc, parsers/nccl_log.py's `init_error_line`; Lightning's
`GLOBAL_RANK: R, MEMBER: m/N` claims with nothing after them but a traceback), and one
reading: the world never formed. No rank is named: the launch or the configuration is at
fault, not a rank, so the rule cannot add a false culprit.

The phase must be shown by the text, never guessed: any sign the job got past set-up (a
step or loop counter logged, a collective's timeout or progress report, a collective
entered under DETAIL, a desync or mismatch report, Horovod's stall inspector, a monitored
barrier, a gloo timeout or size mismatch) withdraws it, so victims of a timeout after
training ran stay what the other rules make of them.
"""

from __future__ import annotations

from collections.abc import Sequence

from healthcheck.diagnose.analysis import log_evidence
from healthcheck.diagnose.findings import Evidence, JobFinding, job_finding
from healthcheck.diagnose.sources import Collected
from healthcheck.parsers.torch_log import TorchLog

# NCCL's results for arguments the caller gave wrongly (a rank >= nranks, a bad config)
_USAGE = ("invalid argument", "invalid usage")
_PAST = ("timeouts", "progress", "cut_timeouts", "desync", "mismatches", "stalled", "barrier_failures",
         "last_fingerprints", "last_steps")
_CLAIMS_ONLY = {"ddp_starts", "exceptions"}


def past_setup(log: TorchLog) -> bool:
    """Whether the log shows the job got past its set-up (module doc)."""
    return (log.loop_rounds > 1 or any(getattr(log, name) for name in _PAST)
            or any(g.kind in ("timeout", "size-mismatch") for g in log.gloo))


def _reports(source: str, log: TorchLog) -> list[tuple[str, int, str]]:
    """(source, line, what) for each set-up failure the log reports."""
    found = [(source, f.line, f"{f.kind}: {f.text}") for f in log.setup_failures]
    for e in log.backend_errors:
        if "Bootstrap" in e.last_error and "no socket interface" in e.last_error:
            found.append((source, e.line, f"nccl-bootstrap: {e.last_error}"))
        elif e.kind == "nccl" and e.reason in _USAGE:
            found.append((source, e.line, f"NCCL refused its arguments ({e.reason}) at {e.where or 'set-up'}"))
    return found


def _claims_then_nothing(source: str, log: TorchLog) -> list[tuple[str, int, str]]:
    """Lightning's start claims where the log holds nothing after them but a traceback
    outside any collective: the processes stopped in the process group's set-up."""
    if not log.ddp_starts or set(log.counts()) - _CLAIMS_ONLY:
        return []
    last = log.ddp_starts[-1].line
    if any(e.collective or e.line < last for e in log.exceptions):
        return []
    # the job cancelled from outside after them (slurmstepd's CANCELLED, TIME LIMIT, srun's
    # step aborted) was ended, which does not show that its set-up failed
    if log.step_aborted:
        return []
    return [(source, c.line, f"a process starts its process group as global rank {c.global_rank} of {c.world}, "
                             "and nothing after it shows the group formed") for c in log.ddp_starts]


def _nccl_init_errors(col: Collected) -> list[tuple[str, int, str]] | None:
    """(source, line, what) for each process whose NCCL error unwound through init.cc (a
    communicator's set-up: ncclCommInitRank, its transports' connect) while none of its
    communicators shows a collective; None where some process shows one (past set-up)."""
    found = []
    for n in col.evidence.nccl_logs:
        if n.log is None:
            continue
        for p in n.log.processes:
            comms = [c for c in n.log.comms if c.host == p.host and c.pid == p.pid]
            if any(c.coll_count or c.last_op_count for c in comms):
                return None
            if p.init_error_line is not None:
                found.append((n.source, p.init_error_line, f"{p.host or '?'} pid {p.pid}: NCCL's error unwound "
                                                           "through init.cc (a communicator being set up)"))
    return found


def setup_failure(col: Collected, raised: Sequence[tuple[str, int, str]] = ()) -> JobFinding | None:
    """The init-failure of a job that never got past its set-up, or None (module doc).
    `raised`: (source, line, what) of the exceptions whose frames put them in a set-up step
    (setupframes.py), set-up reports like the launchers' own."""
    logs = [(f.source, f.log) for f in col.evidence.torch_logs if f.log is not None]
    nccl = _nccl_init_errors(col)
    if nccl is None or any(past_setup(log) for _, log in logs):
        return None
    found = [r for source, log in logs for r in _reports(source, log)] + nccl + list(raised)
    how = "its launcher or library reports it could not set the job up"
    if not found:
        found = [r for source, log in logs for r in _claims_then_nothing(source, log)]
        how = "every process announced its process group's set-up and none shows a step after it"
    if not found:
        return None
    items: list[Evidence] = [log_evidence(col, source, line, text, None) for source, line, text in found[:20]]
    summary = (f"the job never got past its set-up: {how} (first: {found[0][2][:160]}); no rank is at fault "
               "that the text shows: check the launch (tasks, world size, binding), the network interface and "
               "NCCL's settings")
    return job_finding(cls="init-failure", summary=summary, confidence="low", ranks=(), evidence=tuple(items))


__all__ = ["past_setup", "setup_failure"]
