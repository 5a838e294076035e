"""Rule 3, dead-rank: the rank that died first, and never a peer that failed because of it.

A rank dies by a signal (torchrun's block, a live exit status, the OOM killer matched by
pid), by an exception in its own code, or by leaving early (a shorter loop: it ran out of
data and exited 0); its peers then fail in a collective ("Connection closed by peer",
timeouts, NCCL remote errors): those are victims, never named.

Of several ranks that raised in their own code, the one that raised first in time is the
dead rank: by the logs' time stamps (the rank's own labelled lines where the log labels
ranks), else torchrun's per-rank failure times and the error files' timestamps; where no
time orders them, all are named and the verdict says their order is unknown. The
finding says how the order was decided.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from healthcheck.diagnose.afterfault import aborted_after_faults, aborted_after_shown
from healthcheck.diagnose.analysis import log_evidence
from healthcheck.diagnose.cleanupkill import FAULTS, cleanup_kills
from healthcheck.diagnose.cuttraces import cut_raisers
from healthcheck.diagnose.findings import Confidence, Evidence, JobFinding, job_finding
from healthcheck.diagnose.firstchild import (
    earliest_box_failure,
    failed_child,
    lone_box_failure,
    lone_mpirun_exit,
)
from healthcheck.diagnose.harnesscaught import harness_caught
from healthcheck.diagnose.leavers import (
    agent_stopped,
    exit_codes,
    last_words,
    own_output,
    quiet_ranks,
    silent_first_exits,
    stopped_leavers,
)
from healthcheck.diagnose.logfacts import (
    COLLATERAL,
    RankError,
    collective_error,
    first_errors,
    gloo_size_aborts,
    interrupted,
    interrupted_everywhere,
    rank_errors,
    rank_source,
    torchrun_time,
)
from healthcheck.diagnose.memberends import member_ends
from healthcheck.diagnose.mpiends import improper_exit, lone_abort_call
from healthcheck.diagnose.ownabort import own_aborts
from healthcheck.diagnose.ringsize import ring_world
from healthcheck.diagnose.signals import (
    ONLY_FIRST,
    forced_kills,
    horovod_exits,
    hydra_kills,
    mpd_aborts,
    mpirun_first,
    mpirun_kills,
    outside_sigterms,
    spawn_exits,
)
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.srunends import srun_own_aborts
from healthcheck.diagnose.stacks import rank_words
from healthcheck.diagnose.taskstates import abnormal_while_running
from healthcheck.diagnose.uniqueid import fetch_failures
from healthcheck.diagnose.victims import spoke_of_failure
from healthcheck.parsers.torch_log.mpiabort import ABORT_TYPE
from healthcheck.parsers.torch_log.signalreport import DEATH_TYPES

_PEER_GONE = ("Connection closed by peer", "Connection reset", "Read error", "remote process exit", "ncclRemoteError")
_TOGETHER_S = 0.25  # own-code exceptions this close to the first raised in the same step: together


@dataclass
class _Dead:
    """What the dead-rank rule has found so far: rank -> how it died, and the lines."""

    ranks: dict[int, str] = field(default_factory=dict)
    items: list[Evidence] = field(default_factory=list)
    gone: list[int] = field(default_factory=list)
    where: str = ""
    basis: str = ""
    early: bool = False
    exits: set[int | None] = field(default_factory=set)  # the early ranks' exit statuses (None: unknown)
    said: dict[int, str] = field(default_factory=dict)  # an early rank's last logged warning: why it left
    unsure: bool = False  # named from a launcher's word alone: the rank's own output is not in the text

    def name(self, rank: int, why: str, item: Evidence) -> None:
        self.ranks.setdefault(rank, why)
        self.items.append(item)


@dataclass
class _Candidate:
    """A rank that raised in its own code (not a collective's error)."""

    rank: int
    text: str
    item: Evidence
    time: float | None = None
    frame: str = ""
    how: str = "the logs' time stamps"


def _signalled(col: Collected, acc: _Dead) -> None:
    """Killed by a signal that is not torchrun's collateral SIGTERM (nor gloo's SIGABRT)."""
    ev_ = col.evidence
    own = own_aborts(col)  # ownabort.py: a SIGABRT of the rank's own (a native assert), not gloo's
    forced = forced_kills(col)  # signals.py: the agent's SIGKILL of a worker that hung past its SIGTERM
    cleaned = cleanup_kills(col)  # cleanupkill.py: killed by the launcher's clean-up after others faulted
    for f in ev_.torch_logs:
        assert f.log is not None
        for fail in (x for block in f.log.child_failed for x in block.failures):
            if fail.rank is None or fail.signal in COLLATERAL or not fail.signal or fail.pid in forced:
                continue
            if fail.signal == "SIGABRT" and fail.rank not in own:
                continue
            acc.name(fail.rank, f"killed by {fail.signal}",
                     log_evidence(col, f.source, fail.line, f"rank {fail.rank} (pid {fail.pid}, host {fail.host}) "
                                  f"exitcode {fail.exitcode} ({fail.signal})", fail.rank))
    for rank, r in ev_.ranks.items():
        if r.signal and r.signal not in COLLATERAL and r.signal != "SIGABRT" and rank not in acc.ranks \
                and not (r.signal == "SIGKILL" and r.pid in forced) and rank not in cleaned:
            acc.name(rank, f"killed by {r.signal}", Evidence(source=(r.sources or ["process"])[0], rank=rank,
                                                             text=f"rank {rank} exited with {r.signal} "
                                                                  f"(exit {r.exit_code})"))


def _launcher_kills(col: Collected, acc: _Dead) -> None:
    """Ranks the launcher saw killed (mpirun's box; SIGTERM torchrun did not send): signals.py."""
    for rank, why, item in mpirun_kills(col):
        acc.name(rank, why, item)
        acc.basis = acc.basis or ONLY_FIRST
    for rank, why, item in outside_sigterms(col):
        acc.name(rank, why, item)
    for rank, why, item in hydra_kills(col):  # Hydra's one BAD TERMINATION box
        acc.name(rank, why, item)
    for rank, why, item in horovod_exits(col):  # horovodrun's one `Process N exit with status code C.`
        acc.name(rank, why, item)
    for rank, why, item in mpd_aborts(col):  # mpd's one `caused collective abort of all ranks`
        acc.name(rank, why, item)
        acc.unsure = acc.unsure or "return code" in why
    for ranks, why, item in srun_own_aborts(col):  # srun's tasks that aborted before it ended the step
        for rank in ranks:
            acc.ranks.setdefault(rank, why)
        acc.items.append(item)
        acc.unsure = True  # srun's word alone: the ranks' own output is not what says it
    for rank, why, item in spawn_exits(col):  # mp.spawn's first dead process, by its index
        if rank not in acc.ranks:
            acc.name(rank, why, item)
            acc.unsure = True  # the index is the rank in the common case only


def _gone(col: Collected, acc: _Dead) -> None:
    """Live: ranks the world size says exist that no node holds (while others live), zombies."""
    ev_ = col.evidence
    if not any(r.alive for r in ev_.ranks.values()):
        return
    for rank, r in ev_.ranks.items():
        if rank in acc.ranks or r.state not in ("missing", "zombie"):
            continue
        acc.gone.append(rank)
        acc.name(rank, "its process is gone" if r.state == "missing" else "exited (a zombie, not reaped)",
                 Evidence(source=(r.sources or ["live collection"])[0], rank=rank,
                          text=r.stack_error or f"rank {rank}: {r.state}"))


def _out_of_memory(col: Collected, acc: _Dead) -> None:
    """The OOM killer (kernel log, by pid) and NCCL's `Cuda failure 'out of memory'`."""
    for k in col.evidence.kernel:
        if k.kind == "oom-kill":
            killed = col.pid_ranks.get(k.pid) if k.pid is not None else None
            acc.items.append(Evidence(source=k.source, line=k.line, text=k.text, rank=killed, time=k.time))
            if killed is not None:
                acc.ranks[killed] = "killed by the OOM killer"
    for n in col.evidence.nccl_logs:
        assert n.log is not None
        for w in n.log.warns:
            if w.kind == "cuda" and "out of memory" in w.error:
                oom = col.pid_ranks.get(w.pid)
                acc.items.append(Evidence(source=n.source, line=w.line, text=w.text, rank=oom, time=w.time))
                if oom is not None:
                    acc.ranks.setdefault(oom, "out of GPU memory")


def _failure_times(col: Collected) -> dict[int, float]:
    """torchrun's time of each rank's failure (not the SIGTERM it sent the survivors)."""
    out: dict[int, float] = {}
    for f in col.evidence.torch_logs:
        assert f.log is not None
        for fail in (x for block in f.log.child_failed for x in block.failures):
            t = torchrun_time(fail.time)
            if fail.rank is not None and t is not None and fail.signal not in COLLATERAL:
                out.setdefault(fail.rank, t)
    return out


def _from_logs(col: Collected, firsts: dict[int, RankError]) -> list[_Candidate]:
    """Ranks whose first printed error is their own code's (a traceback that names no collective)."""
    when = _failure_times(col)
    out = []
    for rank, e in sorted(firsts.items()):
        if e.victim:
            continue
        at = f" at {e.frame}" if e.frame else ""
        item = Evidence(source=e.source, line=e.line, rank=rank, time=e.time, text=f"rank {rank}: {e.text}{at}"[:300])
        time, how = e.time, "the logs' time stamps"
        if time is None and rank in when:
            time, how = when[rank], "torchrun's failure times"
        out.append(_Candidate(rank=rank, text=e.text, item=item, time=time, frame=e.frame, how=how))
    return out


def _from_launcher(col: Collected, seen: set[int]) -> list[_Candidate]:
    """torchrun's failure entries and `@record` error files that hold an exception of the
    rank's own code (with their timestamps)."""
    out = []
    for f in col.evidence.torch_logs:
        assert f.log is not None
        for fail in (x for block in f.log.child_failed for x in block.failures):
            if (fail.rank is None or fail.rank in seen or not fail.exception or fail.signal not in ("", "SIGABRT")
                    or collective_error(fail.exception + fail.traceback)):
                continue
            seen.add(fail.rank)
            item = log_evidence(col, f.source, fail.line,
                                f"rank {fail.rank} exitcode {fail.exitcode}: {fail.exception}", fail.rank)
            out.append(_Candidate(rank=fail.rank, text=fail.exception, item=item, time=torchrun_time(fail.time),
                                  how="torchrun's failure times"))
    for e in col.evidence.error_files:
        if e.rank is None or e.rank in seen or collective_error(e.message):
            continue
        seen.add(e.rank)
        item = Evidence(source=e.source, text=f"error file: {e.message}", rank=e.rank, time=e.timestamp)
        out.append(_Candidate(rank=e.rank, text=e.message, item=item, time=e.timestamp,
                              how="the error files' timestamps"))
    return out


def _together_until(cands: list[_Candidate], firsts: dict[int, RankError]) -> float:
    """Until when a candidate raised "together" with the first: a traceback carries the time
    of its rank's last stamped line (the step it was in), so ranks that raised in one step
    are apart by the step's spread only (_TOGETHER_S; a second where torchrun's one-second
    failure times order them). A candidate stamped no later than the last of the peers'
    consequential errors (the collective errors the death caused, each stamped with its
    rank's last line before it failed) made no more progress than a rank that was still
    in that step when it failed: it raised in its own code in the same step, not because of
    the first death (a rank that went on past the step logs a later line first)."""
    first = min(c.time or 0.0 for c in cands)
    window = 1.0 if any(c.how == "torchrun's failure times" for c in cands) else _TOGETHER_S
    victims = [e.time for e in firsts.values() if e.victim and e.time is not None]
    return max(first + window, max(victims, default=first))


def _first_in_time(cands: list[_Candidate], firsts: dict[int, RankError]) -> tuple[list[_Candidate], str]:
    """The candidates that raised first (every one that raised before the peers'
    consequential errors: several ranks may raise at once), and how that was decided."""
    if len(cands) == 1:
        return cands, "the only rank whose error is in its own code, not a collective's"
    if any(c.time is None for c in cands):
        after = aborted_after_faults(firsts, [c.rank for c in cands])  # afterfault.py
        if after and len(after) < len(cands):
            return ([c for c in cands if c.rank not in after],
                    "no time on every error; an abort printed after another rank's fault is its victim")
        return cands, "which of them raised first is not in the logs (no time on every error)"
    until = _together_until(cands, firsts)
    together = [c for c in cands if (c.time or 0.0) <= until]
    hows = sorted({c.how for c in cands})
    basis = f"first in time by {' and '.join(hows)}"
    if len(together) > 1:
        basis += (f"; {len(together)} raised together, each in its own code in the step in which their peers' "
                  "collectives then failed: independent failures")
    return together, basis


def _job_failed(col: Collected, firsts: dict[int, RankError], cands: list[_Candidate]) -> bool:
    """Whether anything says the job failed: a peer's collective error, torchrun's failure
    block, a rank's non-zero exit, or an exception that ends its rank's own file or that
    torch's excepthook printed (uncaught). A healthy job may log a caught exception (a
    retried read): that is no death."""
    if any(e.victim for e in firsts.values()) or any(c.item.source.endswith(".json") for c in cands):
        return True
    if any(firsts[c.rank].uncaught for c in cands if c.rank in firsts):
        return True
    if any(firsts[c.rank].type in (*DEATH_TYPES, ABORT_TYPE) for c in cands if c.rank in firsts):
        return True  # a process's own report that a signal killed it (signalreport.py), or its MPI_Abort
    if any(x.exit_code not in (None, 0) or x.signal for x in col.evidence.ranks.values()):
        return True
    logs = {f.source: f for f in col.evidence.torch_logs if f.log is not None}
    if any(f.log is not None and f.log.child_failed for f in logs.values()):
        return True
    for c in cands:
        f = logs.get(c.item.source)
        if f is not None and f.log is not None and f.rank is not None and (c.item.line or 0) >= f.log.lines - 4:
            return True
    return False


def _launcher_faults(col: Collected) -> list[tuple[str, int, int | None]]:
    """(source, line, task) of each fault signal a launcher reported of a task (srun's `task 1:
    Segmentation fault`, mpirun's `exited on signal 11`), not its own kill after an abort."""
    return [(f.source, t.line, task) for f in col.evidence.torch_logs if f.log is not None
            for t in f.log.task_exits if t.signal in FAULTS and not t.after_abort for task in t.tasks[:64]]


def _own_exceptions(col: Collected, firsts: dict[int, RankError], acc: _Dead) -> None:
    cands = _from_logs(col, firsts)
    cands += _from_launcher(col, {c.rank for c in cands} | set(acc.ranks))
    if interrupted_everywhere(col, rank_errors(col)):  # an operator's Ctrl-C: no launcher entry's interrupt either
        cands = [c for c in cands if not interrupted(c.text.split(":", 1)[0])]
    after = aborted_after_shown(_launcher_faults(col), firsts, [c.rank for c in cands])  # afterfault.py
    cands = [c for c in cands if c.rank not in after]
    if not cands or not _job_failed(col, firsts, cands):
        return
    chosen, acc.basis = _first_in_time(cands, firsts)
    for c in chosen:
        acc.name(c.rank, f"raised {c.text[:120]}" + (f" in {c.frame}" if c.frame else ""), c.item)
    acc.where = chosen[0].frame if len(chosen) == 1 else ""
    later = [c for c in cands if c not in chosen]
    if later:
        acc.basis += "; " + ", ".join(f"rank {c.rank} raised {c.text[:60]} after it" for c in later[:4])


# the TCPStore client's words when the store's host went away under a store call (torch 2.x:
# `DistNetworkError: Failed to recv, got 0 bytes. Connection was likely closed. Did the remote
# server shutdown or crash?`, from store.add/get/wait)
_STORE_GONE = ("Did the remote server shutdown", "Connection was likely closed")
STORE_HOST = 0  # the rank that hosts the default TCPStore under env:// (torchrun's agent hosts its own)


def _store_host_left(col: Collected, peers: list[RankError], quiet: list[int]) -> tuple[list[RankError], list[int]]:
    """(the peers that lost the store, [the store's host]) where every peer that failed lost
    its connection to the TCPStore in a store call, not in a collective, and the rank that
    hosts it (rank 0) printed no error: it left, and the store went with it. ([], quiet)
    otherwise: a quiet rank that hosts no store cannot have closed it; under torchrun (its
    failure block in the text) the store is the agent's, which no worker's exit closes."""
    lost = [e for e in peers if any(w in e.message for w in _STORE_GONE)]
    agent = any(f.log is not None and f.log.child_failed for f in col.evidence.torch_logs)
    if not lost or len(lost) != len(peers) or STORE_HOST not in quiet or agent:
        return [], quiet
    return lost, [STORE_HOST]


def _early_exits(col: Collected, firsts: dict[int, RankError], acc: _Dead) -> None:
    """A rank with no error at all while every peer that failed did so because a peer
    closed its connections (none timed out: nobody waited on a live rank): it left early,
    by exit 0 (out of data), by the script's own exit N, or killed without a word."""
    codes = exit_codes(col)
    quiet = quiet_ranks(col, firsts, codes)
    peers = [e for e in firsts.values() if e.victim]
    if not quiet or not peers or any(e.timed_out for e in peers):
        return
    if gloo_size_aborts(col):
        return  # gloo's size check aborted a rank: the ranks silent after it were stopped (mismatch.py's)
    first = mpirun_first(col)
    if first and not first & set(quiet):
        return  # mpirun says another rank died first: the silent ones are those it stopped
    closed = [e for e in peers if any(w in e.message for w in _PEER_GONE)]
    if not closed:
        closed, quiet = _store_host_left(col, peers, quiet)
    stopped = agent_stopped(col)
    quiet = stopped_leavers(col, quiet, stopped, {e.rank for e in closed})
    if not closed or not quiet:
        return
    acc.early = True
    for rank in quiet:
        code = codes.get(rank)
        how = ("exited 0" if code == 0 else f"exited {code} without printing an error" if code is not None
               else "no error in its output" + ("; torchrun's SIGTERM reached it only after a peer failed"
                                                if rank in stopped else ""))
        acc.name(rank, how, Evidence(source=rank_source(col, rank), rank=rank, text=f"rank {rank}: {how}"))
    acc.exits = {codes.get(r) for r in quiet}
    _their_words(col, quiet, acc)
    e = closed[0]
    acc.items.append(Evidence(source=e.source, line=e.line, rank=e.rank, time=e.time,
                              text=f"rank {e.rank}: {e.text[:200]}"))


def _silent_exits(col: Collected, firsts: dict[int, RankError], acc: _Dead) -> None:
    """The rank a launcher reports exiting non-zero that printed no error: it ended itself
    without a word (leavers.py); the ranks stopped after it are not named."""
    silent = silent_first_exits(col, firsts)
    if not silent:
        return
    acc.early = True
    acc.basis = acc.basis or ONLY_FIRST + _silent_others(col, firsts, set(silent))
    for rank, code in silent.items():
        how = f"exited {code} without printing an error"
        acc.name(rank, how, Evidence(source=rank_source(col, rank), rank=rank,
                                     text=f"rank {rank}: the launcher reports exit {code}; no error in its output"))
    acc.exits = set(silent.values())
    _their_words(col, list(silent), acc)


def _first_child(col: Collected, firsts: dict[int, RankError], acc: _Dead) -> None:
    """The one child a launcher reports failed (firstchild.py), where nothing else named a rank."""
    own = own_output(col)
    found = (failed_child(col, firsts) or lone_box_failure(col, firsts, own)
             or earliest_box_failure(col, firsts, own) or lone_mpirun_exit(col, firsts, own)
             or improper_exit(col, firsts, own) or lone_abort_call(col, firsts))  # mpiends.py
    if found is None:
        return
    acc.name(*found)
    acc.unsure = True
    acc.basis = acc.basis or "the launcher's report of its first failed child; the rank's own output is not in the text"


def _abnormal_tasks(col: Collected, firsts: dict[int, RankError], acc: _Dead) -> None:
    """The tasks srun's task-state report shows exited abnormally while others ran (taskstates.py)."""
    for rank, why, item in abnormal_while_running(col, firsts):
        acc.name(rank, why, item)
        acc.unsure = True
        acc.basis = acc.basis or "srun's report of its tasks' states; the rank's own output is not in the text"


def _harness_caught(col: Collected, firsts: dict[int, RankError], acc: _Dead) -> None:
    """The one rank torch's test harness caught raising (harnesscaught.py)."""
    found = harness_caught(col, firsts)
    if found is None:
        return
    acc.name(*found)
    acc.unsure = True
    acc.basis = acc.basis or "torch's test harness caught the rank's exception"


def _store_fetch(col: Collected, firsts: dict[int, RankError], acc: _Dead) -> None:
    """The rank whose store broke under a peer's NCCL unique-id fetch (uniqueid.py)."""
    for rank, why, item in fetch_failures(col, firsts):
        acc.name(rank, why, item)
        acc.unsure = True
        acc.basis = acc.basis or "a peer lost the store the rank hosts; the rank's own output is not in the text"


def _member_ends(col: Collected, firsts: dict[int, RankError], acc: _Dead) -> None:
    """The ranks any tool's one-line statement shows ending first of their own (memberends.py)."""
    for rank, why, item in member_ends(col, firsts):
        acc.name(rank, why, item)
        acc.unsure = True
        acc.basis = acc.basis or "a tool's statement of each rank's end; the ranks' own output is not in the text"


def _faulted_too(col: Collected, firsts: dict[int, RankError], acc: _Dead) -> None:
    """Ranks a tool states ending on a fault signal (HPE MPT's `Rank 57(g:57) received signal
    SIGSEGV(11).`) beside the ranks the launcher's own report named (srun's `task 0:
    Segmentation fault`): each faulted of its own, so each is a culprit."""
    if not acc.ranks or any("SIG" not in why and "egmentation" not in why for why in acc.ranks.values()):
        return
    for rank, why, item in member_ends(col, firsts):
        if rank not in acc.ranks and any(f"({s})" in why for s in FAULTS):
            acc.name(rank, why, item)


def _cut_raisers(col: Collected, firsts: dict[int, RankError], acc: _Dead) -> None:
    """The rank whose traceback, cut before its exception line, is all the failure shown (cuttraces.py)."""
    for rank, why, item in cut_raisers(col, firsts):
        acc.name(rank, why, item)
        acc.unsure = True
        acc.basis = acc.basis or "the rank's traceback, cut before its exception line; no other rank shows a failure"


def _their_words(col: Collected, ranks: list[int], acc: _Dead) -> None:
    """What the ranks that left without a traceback last logged (a SIGTERM handler's reason)."""
    words = last_words(col)
    for rank in (r for r in ranks if r in words):
        acc.said[rank] = words[rank].text.split(": ", 1)[-1]
        acc.items.append(words[rank])


def _leaving(acc: _Dead) -> str:
    """How the early ranks left, as the summary says it."""
    code = next(iter(acc.exits)) if len(acc.exits) == 1 else None
    said = f", after it logged \"{next(iter(acc.said.values()))[:160]}\"" if len(acc.said) == 1 else (
        f", after each logged why ({len(acc.said)} ranks)" if acc.said else "")
    if code == 0:
        return ("exited 0" + said if said else "exited 0 (it ran out of data, or its loop is shorter)")
    if code is not None:
        return f"exited {code} without printing an error" + (said or " (the script stopped itself: read its last "
                                                                    "lines)")
    if said and set(acc.said) == set(acc.ranks):
        return "ended without an error of its own" + said
    return "ended without an error of its own (it exited early, or was killed: its output does not say)"


def _silent_others(col: Collected, firsts: dict[int, RankError], named: set[int]) -> str:
    """The other ranks that printed no error either: any of them may have left with the
    named one (mpirun names one; the ranks it stopped print nothing either)."""
    world = ring_world(col)
    if world is None:
        return ""
    quiet = sorted(set(range(world)) - set(firsts) - spoke_of_failure(col) - named)
    if not quiet:
        return ""
    return f"; {rank_words(quiet)} printed no error either: stopped by the launcher, or gone with it"


def _victims(firsts: dict[int, RankError], named: set[int]) -> str:
    victims = sorted(r for r, e in firsts.items() if e.victim and r not in named)
    if not victims:
        return ""
    kinds = sorted({"timeouts" if e.timed_out else "peer errors" for r, e in firsts.items() if r in victims})
    after = "it" if len(named) == 1 else "them"
    return (f"; {rank_words(victims)} failed after {after} in collectives ({' and '.join(kinds)}): collateral, "
            "not the cause")


def _summary(col: Collected, acc: _Dead, firsts: dict[int, RankError]) -> str:
    ranks = acc.ranks
    if not ranks:
        return "a rank was killed (OOM kill in the kernel log, no rank matched by pid)"
    if set(ranks) == set(acc.gone) and len(acc.items) == len(acc.gone):
        where = "it on its node" if len(ranks) == 1 else "them on their nodes"
        return (f"{rank_words(ranks)} died: no process of {where} while the other ranks still run "
                "(killed, crashed or exited early; the node's kernel log and the launcher's output say how)")
    why = "; ".join(sorted(set(ranks.values())))[:240]
    summary = f"{rank_words(ranks)} died ({why})"
    if acc.early:
        summary = (f"{rank_words(ranks)} left the job early: it {_leaving(acc)} while its peers still called "
                   "collectives")
    victims = _victims(firsts, set(ranks))
    peers = sum(1 for f in col.evidence.torch_logs if f.log is not None for g in f.log.gloo if g.kind == "peer-closed")
    if victims:
        summary += victims
    elif peers:
        summary += f"; {peers} peer error(s) 'connection closed' are collateral"
    if acc.basis:
        summary += f" (order: {acc.basis})"
    return summary


def dead_rank(col: Collected) -> JobFinding | None:
    """The dead-rank finding, or None: see the module's docstring."""
    acc = _Dead()
    _launcher_kills(col, acc)
    _signalled(col, acc)
    _gone(col, acc)
    _out_of_memory(col, acc)
    firsts = first_errors(col)
    _own_exceptions(col, firsts, acc)
    if not acc.items:
        _harness_caught(col, firsts, acc)
    if not acc.items:
        _silent_exits(col, firsts, acc)
    if not acc.items:
        _store_fetch(col, firsts, acc)
    if not acc.items:
        _first_child(col, firsts, acc)
    if not acc.items:
        _abnormal_tasks(col, firsts, acc)
    if not acc.items:
        _early_exits(col, firsts, acc)
    if not acc.items:
        _member_ends(col, firsts, acc)
    if not acc.items:
        _cut_raisers(col, firsts, acc)
    else:
        _faulted_too(col, firsts, acc)
    if not acc.items:
        return None
    only_gone = bool(acc.ranks) and set(acc.ranks) == set(acc.gone) and len(acc.items) == len(acc.gone)
    if only_gone and gloo_size_aborts(col):
        return None  # gloo's size check aborted them: the mismatch rule names them as its parties
    unordered = len(acc.ranks) > 1 and "not in the logs" in acc.basis
    guessed = only_gone or acc.early or unordered or acc.unsure
    confidence: Confidence = ("medium" if guessed else "high") if acc.ranks else "low"
    return job_finding(cls="dead-rank", summary=_summary(col, acc, firsts), confidence=confidence,
                   ranks=tuple(sorted(acc.ranks)), evidence=tuple(acc.items[:20]), where=acc.where)


__all__ = ["dead_rank"]
