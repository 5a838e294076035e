"""Rule 1, init-failure: the job failed while starting, and which rank could not.

What it reads: a port already in use, rendezvous/store errors, NCCL without a usable
interface or with two ranks on one GPU, `Init START` without `Init COMPLETE`, live
torchrun agents whose ranks never started (and who holds their port); and the launch
each rank was given: a rank whose MASTER_ADDR, MASTER_PORT or WORLD_SIZE differs from
the others' (as hc read it from the process's environment, or as its store client said
where it tried to connect) cannot join them, and is named.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from healthcheck.core.nodes import fold
from healthcheck.diagnose.analysis import fact_rank, log_evidence, minority
from healthcheck.diagnose.findings import Evidence, JobFinding, job_finding
from healthcheck.diagnose.launchrank import awaited_rank, ranks_past_setup, store_host_impostor, wrong_launch
from healthcheck.diagnose.logfacts import error_evidence, ranks_heard
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.stacks import rank_words
from healthcheck.diagnose.storewait import midrun_store_waits, setup_store_waits
from healthcheck.diagnose.uniqueid import STORE_HOST

_NONE_NAMED = ("; no rank is named: the store's and rendezvous' errors here do not say whose launch differs or "
               "which rank never joined (each rank's RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, as launched, would)")


@dataclass
class _Init:
    items: list[Evidence] = field(default_factory=list)
    ranks: set[int] = field(default_factory=set)
    why: str = ""  # a disagreement of one rank's launch: the summary's reason

    def add(self, item: Evidence, culprit: bool) -> None:
        self.items.append(item)
        if culprit and item.rank is not None:
            self.ranks.add(item.rank)


def _torch_lines(col: Collected, acc: _Init) -> None:
    """Ports in use (the rank that could not listen), rendezvous/store errors, duplicate GPUs.
    A store key a rank waited for after training began is no rendezvous's (storewait.py)."""
    midrun = midrun_store_waits(col)
    for f in col.evidence.torch_logs:
        assert f.log is not None
        for a in f.log.address_in_use:
            rank = fact_rank(a, f.rank)
            host = rank is None and a.setup == "process-group"  # the store's host could not listen
            acc.add(log_evidence(col, f.source, a.line, f"address already in use (port {a.port})" + (
                f" where its process group's setup starts the store's server: under env:// only rank {STORE_HOST}"
                " does" if host else "; torchrun's own store" if a.setup == "launcher" else ""),
                STORE_HOST if host else rank), True)
        for z in (z for z in f.log.rendezvous if fact_rank(z, f.rank) not in midrun):
            acc.add(log_evidence(col, f.source, z.line, f"rendezvous/store {z.kind}: {z.message}",
                                 fact_rank(z, f.rank)), False)
        for b in f.log.backend_errors:
            if "Duplicate GPU" in b.last_error:
                acc.add(log_evidence(col, f.source, b.line, b.last_error, fact_rank(b, f.rank)), True)


def _nccl_lines(col: Collected, acc: _Init) -> None:
    """NCCL with no usable interface, two ranks on one GPU, Init START without COMPLETE."""
    for n in col.evidence.nccl_logs:
        assert n.log is not None
        rank_of = {(p.host, p.pid): (p.ranks[0] if len(p.ranks) == 1 else n.rank) for p in n.log.processes}
        for w in n.log.warns:
            if w.kind in ("no-interface", "duplicate-gpu"):
                acc.add(Evidence(source=n.source, line=w.line, text=w.text, rank=rank_of.get((w.host, w.pid)),
                                 time=w.time), True)
        for c in n.log.comms:
            if c.init_hung and c.init_start_line is not None:
                acc.add(Evidence(source=n.source, line=c.init_start_line, rank=c.rank,
                                 text=f"comm {c.comm} rank {c.rank}: Init START without COMPLETE"), False)


def _launch_values(col: Collected) -> dict[str, tuple[dict[int, str], Callable[[int], str]]]:
    """Each launch variable -> (rank -> its value, where the value was read), from the
    ranks' environments (live)."""
    # only processes hc saw live: a world size a log or a dump implies is no launch variable
    # (a dump of another job among the logs is bad input, not a rank that could not join)
    ranks = {r: x for r, x in col.evidence.ranks.items() if x.state and x.pid is not None}
    found: dict[str, tuple[dict[int, str], Callable[[int], str]]] = {}

    def source(rank: int) -> str:
        return (ranks[rank].sources or ["live collection"])[0]

    for name, attr in (("MASTER_ADDR", "master_addr"), ("MASTER_PORT", "master_port"), ("WORLD_SIZE", "world_size")):
        values = {r: str(getattr(x, attr)) for r, x in ranks.items() if getattr(x, attr, None) not in (None, "")}
        found[name] = (values, source)
    return found


def _launch_disagreement(col: Collected, acc: _Init) -> None:
    """A strict minority of ranks whose launch variable differs from the others'."""
    for name, (values, source) in _launch_values(col).items():
        if len(values) < 2:
            continue
        pick = minority(values)
        if pick is None:
            continue
        odd, theirs, mine = pick
        for r in odd:
            acc.add(Evidence(source=source(r), rank=r, text=f"rank {r}: {name} {values[r]}"), True)
        other = next(r for r in values if r not in odd)
        acc.add(Evidence(source=source(other), rank=other, text=f"rank {other}: {name} {theirs} (as the others)"),
                False)
        acc.why = acc.why or f"its {name} is {mine} where the other ranks have {theirs}"


def _store_addresses(col: Collected) -> tuple[dict[int, tuple[str, Evidence]], dict[int, str], list[Evidence]]:
    """(ranks whose store client never connected -> the address it dialled, ranks connected
    to the store -> its address, the store server's `J/W clients joined`)."""
    failed: dict[int, tuple[str, Evidence]] = {}
    joined: dict[int, str] = {}
    server: list[Evidence] = []
    for f in col.evidence.torch_logs:
        assert f.log is not None
        for z in f.log.rendezvous:
            rank = fact_rank(z, f.rank)
            item = log_evidence(col, f.source, z.line, f"rendezvous/store {z.kind}: {z.message}", rank)
            if z.kind == "clients-timeout":
                server.append(item)
            elif rank is not None and z.kind in ("client-timeout", "connect-failed") and z.address:
                failed.setdefault(rank, (z.address, item))
            elif rank is not None and z.kind == "store-wait" and z.address:
                joined.setdefault(rank, z.address)
    return {r: v for r, v in failed.items() if r not in joined}, joined, server


def _store_strangers(col: Collected, acc: _Init) -> None:
    """Ranks whose store client never connected while the store was up (other ranks
    connected to it, or its server counted the clients that joined): their launch points
    elsewhere when the address they dialled is not the one the others reached."""
    failed, joined, server = _store_addresses(col)
    if not failed or not (joined or server) or len(failed) > max(len(joined), 1):
        return
    reached = sorted(set(joined.values()))
    for _address, item in (failed[r] for r in sorted(failed)):
        acc.add(item, True)
    acc.items.extend(server[:2])
    dialled = sorted({a for a, _ in failed.values()})
    if reached and not set(dialled) & set(reached):
        acc.why = (f"it dialled the store at {', '.join(dialled)} where the others are connected to "
                   f"{', '.join(reached)}: its MASTER_ADDR/MASTER_PORT differs")
    else:
        acc.why = f"its store client could not connect to {', '.join(dialled)}, which the others reached"


def _beyond_the_world(col: Collected, acc: _Init) -> None:
    """A rank that waits in the store for a rank no other evidence knows (`keys: .../3` in a
    job whose heard ranks are 0-2), or for one no peer that finished init needed (a peer
    past the setup, in a collective, had every key of its world published: rank K is not
    in it): it was launched with a larger WORLD_SIZE."""
    heard = ranks_heard(col)
    whole = bool(heard) and heard == set(range(len(heard)))
    past = ranks_past_setup(col)
    for f in col.evidence.torch_logs:
        assert f.log is not None
        for z in f.log.rendezvous:
            rank = fact_rank(z, f.rank)
            awaited = awaited_rank(z.message) if z.kind == "wait-timeout" else None
            if rank is None or awaited is None or awaited in heard or not (whole or past - {rank}):
                continue
            acc.add(log_evidence(col, f.source, z.line, f"rendezvous/store {z.kind}: {z.message}", rank), True)
            acc.why = acc.why or _larger_world(awaited, heard, whole, past - {rank})


def _larger_world(awaited: int, heard: set[int], whole: bool, past: set[int]) -> str:
    if whole:
        return (f"it waits in the store for rank {awaited}, which no other rank knows (ranks 0-{len(heard) - 1} "
                "were heard): it was launched with a larger WORLD_SIZE")
    return (f"it waits in the store for rank {awaited}, while {rank_words(sorted(past))} finished init without "
            f"rank {awaited} and went on into a collective (so no rank {awaited} is in their world): it was "
            "launched with a larger WORLD_SIZE")


def _setup_store_wait(col: Collected, acc: _Init) -> None:
    """Ranks that waited in the store for a key of their own setup while every other rank went
    on into a collective and waited for them (storewait.setup_store_waits)."""
    if acc.ranks:
        return
    waits, why = setup_store_waits(col)
    for e in waits.values():
        acc.add(error_evidence(e), True)
    acc.why = acc.why or why


def _impostor(col: Collected, acc: _Init) -> None:
    """A rank that hosts the store without being rank 0: it, not the rank 0 that then
    could not listen on the port, is named (launchrank.py)."""
    odd = store_host_impostor(col)
    if odd is None:
        return
    rank, items, why = odd
    acc.items.extend(items)
    acc.ranks = {rank}
    acc.why = why


def _wrong_rank_or_world(col: Collected, acc: _Init) -> None:
    """A rank whose RANK or WORLD_SIZE differs, as the store's timeouts show it (launchrank.py)."""
    if acc.ranks:
        return
    odd = wrong_launch(col)
    if odd is None:
        return
    rank, items, why = odd
    for item in items:
        acc.add(item, item.rank == rank)
    acc.ranks.add(rank)
    acc.why = why


def _launchers(col: Collected, items: list[Evidence]) -> str:
    """Live, agents (torchrun) whose ranks never started: where they wait, and a foreign
    process on the rendezvous port (the store cannot start: every agent waits on a
    listener that never answers). Their evidence goes into items; the summary is returned
    ("" when there are none, or ranks did start)."""
    ev_ = col.evidence
    if not ev_.launchers or any(r.alive for r in ev_.ranks.values()):
        return ""

    taken = [a for a in ev_.launchers if a.listening and not a.holder_is_launcher]
    for a in taken:
        who = f"pid {a.holder_pid} ({a.holder_command})" if a.holder_pid is not None else "a process hc cannot see"
        items.append(Evidence(source=a.source, text=f"port {a.port} on {a.host} is held by {who}, not a torchrun "
                                                    f"agent: the rendezvous store at {a.endpoint} cannot start"))
    for a in ev_.launchers[:16]:
        items.append(Evidence(source=a.source, text=f"torchrun agent pid {a.pid} on {a.host}: no rank started"
                              + (f"; it waits in {a.waiting_in}" if a.waiting_in else "")
                              + (f" (rendezvous at {a.endpoint})" if a.endpoint else "")))
    hosts = fold(sorted({a.host for a in ev_.launchers}))
    if taken:
        a = taken[0]
        who = f"pid {a.holder_pid} ({a.holder_command[:80]})" if a.holder_pid is not None else "another process"
        return (f"no rank started: the rendezvous port {a.port} on {a.host} is held by {who}, so the torchrun "
                f"agents on {hosts} wait on a store that never answers")
    waiting = [a for a in ev_.launchers if a.waiting_in]
    return (f"no rank started: the torchrun agents on {hosts} "
            + ("wait in the rendezvous" if waiting else "have started no worker")
            + (f" at {ev_.launchers[0].endpoint}" if ev_.launchers[0].endpoint else "")
            + " (a node that has not joined, or an endpoint they cannot reach)")


def init_failure(col: Collected) -> JobFinding | None:
    """The init-failure finding, or None: see the module's docstring."""
    acc = _Init()
    _torch_lines(col, acc)
    _nccl_lines(col, acc)
    _impostor(col, acc)
    ports = any("address already in use" in i.text for i in acc.items)
    if not ports:
        _launch_disagreement(col, acc)
        _store_strangers(col, acc)
        _beyond_the_world(col, acc)
        _wrong_rank_or_world(col, acc)
        _setup_store_wait(col, acc)
    launchers = _launchers(col, acc.items)
    if not acc.items:
        return None
    what = "the master port is already in use" if ports else "the job failed while starting (init/rendezvous)"
    if acc.why and acc.ranks:
        summary = f"{rank_words(acc.ranks)} could not join the others: {acc.why}"
    elif acc.ranks:
        summary = f"{rank_words(acc.ranks)} could not start: {what}"
    elif launchers:
        summary = launchers
        ports = ports or "held by" in launchers
    else:
        summary = f"init failure: {what}" + ("" if ports else _NONE_NAMED)
    return job_finding(cls="init-failure", summary=summary, confidence="high" if ports or acc.ranks else "medium",
                   ranks=tuple(sorted(acc.ranks)), evidence=tuple(acc.items[:20]))


__all__ = ["init_failure"]
