"""Deaths by signal that the launchers report, for the dead-rank rule (deaths.py).

* mpirun: Open MPI's box `process rank R with PID P on node H exited on signal N` names the
  first rank it saw killed (SIGSEGV, SIGTERM, SIGKILL, SIGBUS...); mpirun then stops the
  others itself, so they are collateral and never named. It reports one rank only: where
  several died at once, the others are not in the text (the finding says so). SIGABRT of a
  rank whose output holds a collective's failure is gloo's abort (victims.spoke_of_failure),
  not a death of its own.
* SIGTERM under torchrun (its `Signal 15 (SIGTERM)` entries) or hc run (the tee's
  `end exit=-15` in the rank's hc-run.rank*.log): torchrun sends SIGTERM to every worker
  it stops (`Sending process P closing signal SIGTERM`). A rank that ended by SIGTERM whose
  pid the agent never signalled was killed from outside: it died first, the others were
  stopped because of it. Where the agent itself got a death signal (the job was cancelled)
  every SIGTERM is the agent's relay: none is named. Without the agent's word (mpirun and
  srun stop the survivors with SIGTERM and do not list them) no SIGTERM is named here.
* MPICH's Hydra: its BAD TERMINATION box (`RANK R PID P RUNNING AT H`, `KILLED BY SIGNAL:
  S`), read only where the text holds one box: its cleanup's SIGKILLs are boxed too.
* MPICH's mpd: `rank R in job J caused collective abort of all ranks` and `exit status of
  rank R: killed by signal S` / `return code C`, printed once, for the rank whose end made
  mpd abort the job (it kills the others itself): that rank's death, where its own output
  reports no collective's failure and the signal is not a relay (SIGTERM/SIGINT/SIGHUP). A
  return code alone is named as a launcher's word (an MPI rank may also exit on a peer's
  fault), said so.
* HPE PALS's `rank N died from signal S` lines are srun's `task N:` words (sources.py's
  link_task_exits): a SIGKILL among the others' SIGTERM is the first death.
* torch.multiprocessing.spawn: `ProcessExitedException: process N terminated with signal S`
  (or `with exit code C`), also quoted in a sentence, names the first process it saw die
  without a traceback of its own. N is spawn's process index, the rank the job gives it
  where one mp.spawn starts the world (the common case): named dead, saying so. As for
  mpirun, a SIGABRT or exit of a process whose output reports a collective's failure is
  the watchdog's or gloo's abort, not a death of its own; SIGTERM/SIGINT/SIGHUP are a relay.
"""

from __future__ import annotations

from collections.abc import Iterator

from healthcheck.diagnose.analysis import log_evidence
from healthcheck.diagnose.findings import Evidence
from healthcheck.diagnose.logfacts import COLLATERAL
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.victims import spoke_of_failure
from healthcheck.parsers.torch_log.facts import TaskExit

ONLY_FIRST = "mpirun names only the first rank it saw die; any other rank that died with it is not in the text"


def mpirun_kills(col: Collected) -> Iterator[tuple[int, str, Evidence]]:
    """(rank, how it died, the box's line) for each rank Open MPI's box names."""
    aborted = spoke_of_failure(col)
    for f in col.evidence.torch_logs:
        if f.log is None:
            continue
        for t in f.log.task_exits:
            if t.launcher != "mpirun" or not t.tasks or not t.signal:
                continue
            rank = t.tasks[0]
            if t.signal == "SIGABRT" and rank in aborted:
                continue  # gloo's check aborted it: the mismatch's consequence
            text = f"mpirun: rank {rank} on {t.host or '?'} {t.state} ({t.signal})"
            yield rank, f"killed by {t.signal}", log_evidence(col, f.source, t.line, text, rank)


def lone_launcher_report(col: Collected, launcher: str) -> tuple[str, TaskExit] | None:
    """(its source, the report) where the text's reports by `launcher` of a task's end all
    name one rank, the first of them; None where they name none or several (a launcher's
    cleanup reports the processes it killed too, in no order of death)."""
    reports = [(f.source, t) for f in col.evidence.torch_logs if f.log is not None
               for t in f.log.task_exits if t.launcher == launcher and t.tasks]
    if len({t.tasks[0] for _, t in reports}) != 1:
        return None
    return reports[0]


def hydra_kills(col: Collected) -> Iterator[tuple[int, str, Evidence]]:
    """(rank, how it died, the box's line) for MPICH Hydra's BAD TERMINATION box where the
    text holds one only: Hydra boxes the processes its cleanup killed too (SIGKILL), in no
    order of death, so several boxes name none. As for mpirun, a SIGABRT of a rank whose
    output holds a collective's failure is the watchdog's or gloo's abort; a SIGTERM a relay."""
    lone = lone_launcher_report(col, "hydra")
    if lone is None:
        return
    source, t = lone
    rank = t.tasks[0]
    if not t.signal or t.signal in COLLATERAL or (t.signal == "SIGABRT" and rank in spoke_of_failure(col)):
        return
    text = f"Hydra: rank {rank} (pid {t.pid}) on {t.host or '?'} {t.state} ({t.signal})"
    yield rank, f"killed by {t.signal}", log_evidence(col, source, t.line, text, rank)


def lone_own_end(col: Collected, launcher: str) -> tuple[str, TaskExit, int] | None:
    """(source, report, rank) of the one process `launcher` reports ending badly, where that
    end is the rank's own: not a relay signal, not without an exit code or a signal, and not
    a rank whose own output holds a collective's failure (it ended as a victim)."""
    lone = lone_launcher_report(col, launcher)
    if lone is None:
        return None
    source, t = lone
    rank = t.tasks[0]
    if t.signal in COLLATERAL or (not t.signal and not t.exitcode) or rank in spoke_of_failure(col):
        return None
    return source, t, rank


def mpd_aborts(col: Collected) -> Iterator[tuple[int, str, Evidence]]:
    """(rank, how it died, mpd's line) for the rank mpd says caused the job's abort, where
    the text holds one such rank (module doc)."""
    own = lone_own_end(col, "mpd")
    if own is None:
        return
    source, t, rank = own
    how = f"killed by {t.signal}" if t.signal else f"exited with return code {t.exitcode}"
    text = f"mpd: rank {rank} caused collective abort of all ranks; exit status {t.state}"
    yield rank, f"{how}; mpd says it caused the job's abort", log_evidence(col, source, t.line, text, rank)


SPAWN_INDEX = "mp.spawn's process index, the rank it was given where one mp.spawn starts the world"


# mp.spawn's words for the process it saw fail: killed, exited non-zero, or raised (its
# `-- Process N terminated with the following error:` head; the child exits 1 after it)
_SPAWN_DEATHS = ("terminated with signal", "terminated with exit code", "terminated with an error")


def horovod_exits(col: Collected) -> Iterator[tuple[int, str, Evidence]]:
    """(rank, how it ended, horovodrun's line) for the one process horovodrun reports ending
    badly (`Process N exit with status code C.`); none where it reports several (it prints
    the line for every process that ends badly, its own kills among them), a relay signal, or
    a rank whose own output holds a collective's failure."""
    own = lone_own_end(col, "horovodrun")
    if own is None:
        return
    source, t, rank = own
    how = f"killed by {t.signal}" if t.signal else f"exited {t.exitcode}"
    text = f"horovodrun: process {rank} {t.state}; no other process reported"
    yield rank, how, log_evidence(col, source, t.line, text, rank)


def spawn_exits(col: Collected) -> Iterator[tuple[int, str, Evidence]]:
    """(rank, how it died, the line) for the process mp.spawn reports failed (exited or raised)."""
    victims = spoke_of_failure(col)
    for f in col.evidence.torch_logs:
        if f.log is None:
            continue
        for t in f.log.task_exits:
            if t.launcher != "spawn" or not t.tasks or not t.state.startswith(_SPAWN_DEATHS):
                continue
            rank = t.tasks[0]
            if t.signal in COLLATERAL or (not t.signal and not t.exitcode) or rank in victims:
                continue
            text = f"mp.spawn: process {rank} {t.state} (process {rank}: {SPAWN_INDEX})"
            how = f"killed by {t.signal}" if t.signal else f"exited with code {t.exitcode}"
            yield rank, f"{how}; mp.spawn's process {rank}", log_evidence(col, f.source, t.line, text, rank)


def mpirun_first(col: Collected) -> set[int]:
    """The ranks Open MPI's `exited on signal` box names as the first killed (any signal,
    gloo's abort too): a rank that printed nothing beside them was stopped by mpirun, it
    did not leave early. (Its non-zero-exit box is no such word: a rank that exited 0
    early is never in it, the first victim to exit 1 is.)"""
    return {t.tasks[0] for f in col.evidence.torch_logs if f.log is not None
            for t in f.log.task_exits if t.launcher == "mpirun" and t.tasks and t.signal}


def _agent_word(col: Collected) -> tuple[set[int], bool]:
    """The pids torchrun's agent sent a closing signal, and whether the agent itself was
    signalled (the whole job cancelled)."""
    closed: set[int] = set()
    cancelled = False
    for f in col.evidence.torch_logs:
        if f.log is None:
            continue
        closed |= {c.pid for c in f.log.closing_signals}
        cancelled = cancelled or any(a.kind == "death-signal" for a in f.log.agent_signals)
    return closed, cancelled


def forced_kills(col: Collected) -> set[int]:
    """The pids torchrun's agent SIGKILLed because its closing signal did not end them
    (`Unable to shutdown process P via 15, forcefully exiting via 9`): a worker that outlived
    the agent's SIGTERM for its whole grace period hung (in a signal handler waiting on a lock
    its own interrupted code held, in a blocked call); its SIGKILL is the agent's, not how the
    rank failed."""
    return {c.pid for f in col.evidence.torch_logs if f.log is not None for c in f.log.closing_signals if c.forced}


def outside_sigterms(col: Collected) -> Iterator[tuple[int, str, Evidence]]:
    """(rank, how, evidence) for ranks killed by SIGTERM from outside the launcher."""
    closed, cancelled = _agent_word(col)
    ranks = col.evidence.ranks
    termed = {r: x for r, x in ranks.items() if x.signal == "SIGTERM"}
    if cancelled or not termed or not closed:
        return  # no agent's word: mpirun and srun stop the survivors with SIGTERM and do not say whom
    odd = {r: x for r, x in termed.items() if x.pid is not None and x.pid not in closed}
    why = "the launcher sent no closing signal to its pid"
    if len(odd) == len(termed):
        return  # every SIGTERM unexplained: the text cannot tell the cause from the relay
    for rank, x in sorted(odd.items()):
        text = f"rank {rank} (pid {x.pid}) ended by SIGTERM: {why}"
        yield rank, "killed by SIGTERM from outside the job", Evidence(
            source=(x.sources or ["logs"])[0], rank=rank, text=text)


__all__ = ["ONLY_FIRST", "SPAWN_INDEX", "forced_kills", "horovod_exits", "hydra_kills", "lone_launcher_report",
           "mpd_aborts", "mpirun_first", "mpirun_kills", "outside_sigterms", "spawn_exits"]
