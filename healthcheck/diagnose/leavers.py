"""Ranks that left the job without an error of their own, for the dead-rank rule (deaths.py).

A rank that leaves (its shard ran out: destroy_process_group and exit 0; a worker thread's
`os._exit(N)`; the script's own `sys.exit(N)`) prints no traceback; its peers then fail in
a collective ("Connection closed by peer"). What says a rank printed no error, and how
it ended:

* quiet_ranks: ranks with no error in their own output and no death of their own. Their
  output is in the text where the rank has a file or labelled lines, or where its
  launcher's console carries its workers' stderr: torch prefixes every uncaught exception
  of a rank with `[rankN]:`, so in a torchrun console that holds `[rankN]:` lines of some
  of the ranks its failure block lists, a listed rank without one raised nothing. The
  SIGTERM torchrun's agent sent (`Sending process P closing signal SIGTERM`) is how it
  stopped a rank after the first failure, not how that rank ended its part: a rank that
  had left and was still writing its last files when the agent stopped everyone is
  quiet too.
* block_implied: a local rank torchrun's block skips below the highest it lists exited 0
  before the failure (the block lists every worker that failed or that it stopped).
* last_words: the last warning a rank's own code logged, where it left without a
  traceback (a SIGTERM handler that logs why and exits 0): the reason, in its words.
* silent_first_exits: the rank a launcher reports as the first to exit non-zero (Open
  MPI's `exited with non-zero status ... Process name: [[J,1],R] Exit code: N` box), or
  that torchrun lists with a non-zero exit (not a signal), whose own output holds no
  error: it ended itself without a word (os._exit, sys.exit). mpirun names only the
  first; the ranks it stopped after it print nothing either and are never named.
"""

from __future__ import annotations

from healthcheck.diagnose.analysis import fact_rank, log_evidence
from healthcheck.diagnose.findings import Evidence
from healthcheck.diagnose.logfacts import RankError, ranks_heard
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.victims import spoke_of_failure


def last_words(col: Collected) -> dict[int, Evidence]:
    """rank -> the last warning or error its own code logged (a SIGTERM handler's `SIGTERM
    received (preemption): checkpointing and exiting`): why a rank that left without a
    traceback left, in its own words."""
    out: dict[int, Evidence] = {}
    for f in col.evidence.torch_logs:
        if f.log is None:
            continue
        for w in f.log.last_warnings:
            rank = fact_rank(w, f.rank)
            if rank is not None:
                out[rank] = log_evidence(col, f.source, w.line, f"rank {rank} logged: {w.text}", rank)
    return out


def agent_stopped(col: Collected) -> set[int]:
    """Ranks whose recorded end is the SIGTERM torchrun's agent sent them (its pid is in a
    `closing signal` line): stopped after the first failure, not a death of their own."""
    closed = {c.pid for f in col.evidence.torch_logs if f.log is not None for c in f.log.closing_signals}
    out: set[int] = set()
    for f in col.evidence.torch_logs:
        if f.log is None:
            continue
        for x in (x for b in f.log.child_failed for x in b.failures):
            if x.rank is not None and x.signal == "SIGTERM" and x.pid in closed:
                out.add(x.rank)
    out |= {r for r, x in col.evidence.ranks.items() if x.signal == "SIGTERM" and x.pid in closed}
    return out


def block_implied(col: Collected) -> set[int]:
    """Ranks a torchrun failure block implies but does not list: one agent's workers are
    local ranks 0..N-1 at global ranks base+0..base+N-1, and the block lists every worker
    that failed and every one the agent stopped, so a local rank below the highest listed
    one that is not listed had exited 0 before the failure."""
    out: set[int] = set()
    for f in col.evidence.torch_logs:
        if f.log is None:
            continue
        for b in f.log.child_failed:
            pairs = {(x.host, x.rank - x.local_rank, x.local_rank) for x in b.failures
                     if x.rank is not None and x.local_rank is not None and 0 <= x.local_rank <= x.rank}
            for host, base in {(h, b0) for h, b0, _ in pairs}:
                local = {lr for h, b0, lr in pairs if (h, b0) == (host, base)}
                if max(local) < 4096:
                    out |= {base + lr for lr in range(max(local)) if lr not in local}
    return out


def exit_codes(col: Collected) -> dict[int, int]:
    """Each rank's exit status where known: its record (live, hc run), torchrun's failure
    block, and 0 for a heard rank the block leaves out (torchrun lists every rank that
    failed and every one it stopped). The SIGTERM torchrun's agent sent is left out: it
    says when the agent stopped the rank, not how the rank ended its part."""
    stopped = agent_stopped(col)
    codes = {r: x.exit_code for r, x in col.evidence.ranks.items() if x.exit_code is not None and r not in stopped}
    listed: set[int] = set()
    for f in col.evidence.torch_logs:
        assert f.log is not None
        for x in (x for b in f.log.child_failed for x in b.failures):
            if x.rank is None:
                continue
            listed.add(x.rank)
            if x.exitcode is not None and x.rank not in stopped:
                codes.setdefault(x.rank, x.exitcode)
    if listed:
        for r in (ranks_heard(col) | block_implied(col)) - listed:
            codes.setdefault(r, 0)
    return codes


def _console_ranks(col: Collected) -> set[int]:
    """The ranks of a torchrun failure block whose console also holds `[rankN]:` lines of
    some of them: their workers' stderr is in it (see the module's docstring)."""
    out: set[int] = set()
    for f in col.evidence.torch_logs:
        if f.log is None or not f.log.child_failed or f.rank is not None:
            continue
        listed = {x.rank for b in f.log.child_failed for x in b.failures if x.rank is not None}
        if listed & set(f.log.prefixed_ranks):
            out |= listed
    return out


def own_output(col: Collected) -> set[int]:
    """Ranks whose own lines are in the text (a rank's file, its labelled lines, a console
    that carries its stderr): where it printed no error, it printed none. A rank only
    torchrun's block or a manifest names is not: its lines may be in a console that
    labels nobody."""
    ev_ = col.evidence
    blocks = {f.source for f in ev_.torch_logs if f.log is not None and f.log.child_failed}
    own = {f.rank for f in (*ev_.torch_logs, *ev_.nccl_logs) if f.rank is not None}
    own |= {r for f in ev_.torch_logs if f.log is not None for r in f.log.prefixed_ranks}
    own |= {r for r, x in ev_.ranks.items() if any(s not in blocks for s in x.sources)}
    return own | _console_ranks(col)


def cut_short(col: Collected) -> set[int]:
    """Ranks whose output opens a traceback that the text ends before its exception line (a
    paste cut there): the rank was raising something, so its output does not say it printed
    no error. That traceback is no evidence of its death either: it may be a victim's."""
    out: set[int] = set()
    for f in col.evidence.torch_logs:
        if f.log is not None:
            out |= {r for r in (fact_rank(c, f.rank) for c in f.log.cut_tracebacks) if r is not None}
    return out


def quiet_ranks(col: Collected, firsts: dict[int, RankError], codes: dict[int, int]) -> list[int]:
    """Ranks that printed no error and were not killed: their own output says nothing of a
    failure (not even a traceback cut before its exception), or torchrun says they exited 0."""
    own = own_output(col)
    out = []
    for r in sorted((ranks_heard(col) | block_implied(col)) - set(firsts) - spoke_of_failure(col) - cut_short(col)):
        code = codes.get(r)
        if code == 0 or (r in own and (code is None or code > 0)):
            out.append(r)
    return out


def stopped_leavers(col: Collected, quiet: list[int], stopped: set[int], closed: set[int]) -> list[int]:
    """The quiet ranks, less those the agent stopped unless every other rank heard failed
    because a peer closed its connections (`closed`) and no other quiet rank left by
    itself (an exit 0): then only a rank that left can have closed them. Otherwise a
    silent rank the agent stopped was only stopped before it printed its error (a victim
    slower than its peers, beside gloo's size abort or a rank that exited 0)."""
    others = (ranks_heard(col) | block_implied(col)) - set(quiet)
    if others <= closed and all(r in stopped for r in quiet):
        return quiet
    return [r for r in quiet if r not in stopped]


def _launcher_nonzero(col: Collected) -> dict[int, int]:
    """rank -> the non-zero exit status a launcher reports for it, not a signal: mpirun's
    first-non-zero box, torchrun's failure entries."""
    out: dict[int, int] = {}
    for f in col.evidence.torch_logs:
        if f.log is None:
            continue
        for t in f.log.task_exits:
            if t.launcher == "mpirun" and t.tasks and not t.signal and t.exitcode:
                out.setdefault(t.tasks[0], t.exitcode)
        for x in (x for b in f.log.child_failed for x in b.failures):
            if x.rank is not None and not x.signal and x.exitcode and x.exitcode > 0:
                out.setdefault(x.rank, x.exitcode)
    return out


def silent_first_exits(col: Collected, firsts: dict[int, RankError]) -> dict[int, int]:
    """rank -> exit status, for the ranks a launcher reports exiting non-zero whose own
    output holds no error (see the module's docstring)."""
    said = set(firsts) | spoke_of_failure(col) | cut_short(col)
    own = own_output(col)
    return {r: code for r, code in sorted(_launcher_nonzero(col).items()) if r in own and r not in said}


__all__ = ["agent_stopped", "block_implied", "cut_short", "exit_codes", "own_output", "quiet_ranks",
           "silent_first_exits", "stopped_leavers"]
