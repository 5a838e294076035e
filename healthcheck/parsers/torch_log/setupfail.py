"""A launcher's or a library's own report that the job could not be set up (SetupFailed).

Each wording is the tool's documented or source-fixed report of a failure before any rank
ran a step, whatever launched it:

* launch: Slurm's srun (`srun: error: Task launch for StepId=J.S failed on node N: WHY`,
  `Application launch failed: WHY`, `Unable to create step for job J: WHY`, `failed to
  distribute tasks`), Hydra's proxy and mpiexec (MPICH, MVAPICH2, Intel MPI:
  `HYDU_create_process (utils/launch/launch.c:N): execvp error | bind process failed`,
  `launch_procs (pm/pmiserv/pmip_cb.c:N): create process returned error`), Open MPI's
  mpirun (`mpirun was unable to launch the specified application`, `ORTE was unable to
  reliably start one or more daemons`, `There are not enough slots available`);
* mpi-init: `It looks like MPI_INIT failed`, `It looks like orte_init failed`, MPICH's
  `Fatal error in (P)MPI_Init(_thread)`;
* nccl-bootstrap: NCCL's `Bootstrap : no socket interface found` (no interface matches
  NCCL_SOCKET_IFNAME, or none is up), whether a WARN line or torch's `Last error:`;
* nccl-config: NCCL's `no algorithm/protocol available` (enqueue.cc: NCCL_ALGO/NCCL_PROTO
  leave no way to run the collective; it fails at the first call of its kind, on every rank).

The facts name no rank: the report is the launcher's or every rank's alike.
diagnose/setupphase.py judges whether the text shows the job never got past its set-up.
"""

from __future__ import annotations

import re

from healthcheck.parsers.lines import Handler, Line
from healthcheck.parsers.torch_log.facts import SetupFailed, SetupKind
from healthcheck.parsers.torch_log.state import TorchState, agent_where

# each a literal anchor then bounded classes: no nested repetition, linear on a long line
_REPORTS: tuple[tuple[SetupKind, re.Pattern[str]], ...] = (
    ("launch", re.compile(r"srun: error: (?:Task launch for StepId=\S{1,40} failed on node|Application launch "
                          r"failed|Unable to create (?:job )?step|.{0,200}failed to distribute tasks)")),
    ("launch", re.compile(r"\b(?:HYDU_create_process|launch_procs|HYDT_bscd_\w{1,40}_launch_procs) ?\([^)]{1,120}\):"
                          r" (?:execvp error|bind process failed|create process returned error"
                          r"|launcher returned error)")),
    ("launch", re.compile(r"mpirun was unable to launch the specified application|ORTE was unable to reliably "
                          r"start one or more daemons|PRTE was unable to reliably start|There are not enough slots "
                          r"available in the system")),
    ("mpi-init", re.compile(r"It looks like (?:MPI_INIT|orte_init|opal_init|MPI_Init_thread) failed|Fatal error in "
                            r"P?MPI_Init(?:_thread)?\b")),
    ("nccl-bootstrap", re.compile(r"Bootstrap ?: ?no socket interface found")),
    ("nccl-config", re.compile(r"no algorithm/protocol available")),
)

_WORDS = ("srun: error:", "HYD", "launch_procs", "mpirun was", "ORTE was", "PRTE was", "not enough slots",
          "It looks like", "MPI_Init", "Bootstrap", "no algorithm/protocol")


def _has_words(text: str) -> bool:
    return any(w in text for w in _WORDS)


def read_setup_failure(state: TorchState, line: Line) -> bool:
    """One launcher's or library's set-up failure report (module doc)."""
    for kind, pattern in _REPORTS:
        m = pattern.search(line.text, 0, 2000)
        if m is not None:
            state.add("setup_failures", SetupFailed(**agent_where(line), kind=kind,
                                                    text=line.text.strip()[:300]))
            return True
    return False


HANDLERS: tuple[Handler[TorchState], ...] = (
    Handler("setup-failure", _has_words, read_setup_failure),
)

__all__ = ["HANDLERS", "read_setup_failure"]
