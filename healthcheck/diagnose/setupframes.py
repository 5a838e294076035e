"""The job's phase read from its tracebacks' structure: an exception raised while the job was
being set up, whatever its message says.

The torch log parser names the set-up step each traceback ran through
(`ExceptionRaised.setup`, parsers/torch_log/setupframes.py: its outermost frame of
init_process_group, a rendezvous handler, the c10d store, torchrun's agent joining its
rendezvous, DeepSpeed's runner checking its hosts, an NCCL communicator's creation, JAX's or
Horovod's initialisation; or the set-up call its message says failed). Such an exception in a
text that shows no step, collective or progress after the set-up (setupphase.past_setup, the
caller's guard) is the job failing to form, in any wording: `Connection reset by peer` from
the agent's store, `host not found` from TCPStore, `ssh ... exit status 255` from the
runner's host check, `unhandled system error` from ncclCommInitRank. These are
`setupphase.py`'s reports, an init-failure naming no rank.

A launcher's own step (its rendezvous, its host check) is set-up only where the text shows
no rank running: torchrun's agent also talks to its rendezvous store while the workers train,
so the same frames after a worker's output, a failure box or a worker's report are no
set-up. Nor is a restarted console's last attempt (an earlier one ran: attempts.py). A
KeyboardInterrupt or SystemExit is the operator's or the program's own exit, not the set-up
failing; torchrun's ChildFailedError is its report of workers that ran.

Two readings follow from the phase:
* a CUDA error raised in a rank's set-up step (init_process_group's first barrier is the
  first CUDA work NCCL does) with no Xid in the kernel log, on processes the text does not
  tell apart or on more than one rank alike, is the environment not giving the job a usable
  device (driver or runtime, the container's devices, CUDA_VISIBLE_DEVICES): the job never
  formed, no GPU stands out, so it is not gpu-failure (evidence against a node);
  `setup_cuda_lines` names those lines for classify.py's GPU rule to leave out;
* a set-up failure that says the backend is not built into this torch or not available on
  it (`Distributed package doesn't have NCCL built in`, `Invalid backend`) is the build's,
  which every process shares: the first process a launcher reported is no culprit
  (`shared_build`, read by setupdeath.py).
"""

from __future__ import annotations

import re

from healthcheck.diagnose.analysis import fact_rank
from healthcheck.diagnose.setupphase import past_setup
from healthcheck.diagnose.sources import Collected
from healthcheck.parsers.torch_log import ExceptionRaised, TorchLog
from healthcheck.parsers.torch_log.setupframes import is_launcher_step

_NOT_SETUP = ("KeyboardInterrupt", "SystemExit", "ChildFailedError")
# the backend missing from the build or the platform: torch's `Distributed package doesn't have
# NCCL built in`, `Invalid backend: 'X'`, `ProcessGroupNCCL is only supported with GPUs, no GPUs
# found!`, a backend `is not available`
_BUILD = re.compile(r"doesn't have \w{2,16} built in|not built with \w{2,16}|Invalid backend"
                    r"|backend \S{1,32} is not available|is only supported with GPUs", re.IGNORECASE)


def _ranks_shown(log: TorchLog) -> bool:
    """The log shows a rank running: a rank's label, a failure box, a worker's report."""
    return bool(log.prefixed_ranks or log.child_failed or log.worker_failures or log.ddp_starts)


def _raised_in_setup(log: TorchLog, e: ExceptionRaised) -> bool:
    if not e.setup or e.type.rsplit(".", 1)[-1] in _NOT_SETUP or e.thread:
        return False
    return not (is_launcher_step(e.setup) and _ranks_shown(log))


def setup_raised(col: Collected) -> list[tuple[str, int, str]]:
    """(source, line, what) for each exception raised in a set-up step (module doc); the
    caller says whether the text shows the job past its set-up. None in the last attempt of a
    console torchrun restarted the workers in (attempts.py): an earlier attempt ran, and the
    new workers' set-up fails on what it left; the verdict reads every attempt."""
    if col.whole is not None:
        return []
    found = []
    for f in col.evidence.torch_logs:
        if f.log is None:
            continue
        for e in f.log.exceptions:
            if _raised_in_setup(f.log, e):
                found.append((f.source, e.line, f"raised in {e.setup}: {e.type}: {e.message}"[:300]))
    return found


def setup_cuda_lines(col: Collected, xid: bool) -> set[tuple[str, int]]:
    """(source, line) of the CUDA errors raised in a rank's set-up step that say nothing
    against one GPU (module doc): none where the kernel log has an Xid (`xid`) or one rank
    alone raised them."""
    if xid or any(f.log is not None and past_setup(f.log) for f in col.evidence.torch_logs):
        return set()
    lines: set[tuple[str, int]] = set()
    ranks: set[int] = set()
    for f in col.evidence.torch_logs:
        if f.log is None:
            continue
        setup = {e.line: e for e in f.log.exceptions if _raised_in_setup(f.log, e) and not is_launcher_step(e.setup)}
        for b in f.log.backend_errors:
            if b.kind == "cuda" and b.line in setup:
                lines.add((f.source, b.line))
                rank = fact_rank(setup[b.line], f.rank)
                ranks |= {rank} if rank is not None else set()
    return set() if len(ranks) == 1 else lines


def shared_build(message: str) -> bool:
    """The set-up failure says the backend is missing from the build (module doc)."""
    return _BUILD.search(message[:1024]) is not None


__all__ = ["setup_cuda_lines", "setup_raised", "shared_build"]
