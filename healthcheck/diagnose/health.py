"""The culprits' hosts' health in the job's window, joined to the verdict.

A rank died or hung: was its host well? What the hosts said in the job's window is
gathered for the hosts of the culprit ranks and said in the verdict ("rank 2 on node3
died ...; node3 logged Xid 79 at 2026-11-22 13:00:01 UTC"):

- the kernel events the nodes logged (a live collection reads each node's kernel log from
  the job's start: Xid, OOM kills, HCA link events, each with its host; a kernel log read
  from saved files names no host, so it is not joined);
- hc's own history: a run that FAILed the host in the window (its finding IDs), and an IB
  error counter that rose between the host's last run before the job and its last run in
  the window (beyond the fabric's bandwidth.counters_max_rise where set). report/ and
  diagnose/ are layers apart, so the caller (the CLI) passes a `HistoryLookup` that reads
  the history.

The culprits are the ranks the verdict's first finding names; where it names none (an
Xid no pid ties to a rank), the ranks the other findings name. The window runs from the
job's start (the nodes' kernel-log window: Slurm's StartTime for `hc diagnose job`; else
the earliest stamped line) to when the diagnosis looked (live) or the last stamped line
(saved logs), plus AFTER_S: a health check or epilogue just after a job died judges the
node as the job left it. Kernel lines a first finding that names the rank already stands
on (the OOM kill of a dead rank) are not said again.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from healthcheck.core.errors import HcError
from healthcheck.diagnose.evidence import HealthEvent, JobEvidence
from healthcheck.diagnose.findings import JobFinding

AFTER_S = 900.0  # after the window's end, a health check's FAIL still speaks of the job's node
MAX_HOSTS = 8  # culprit hosts looked up
MAX_SAID = 3  # events said per host in the summary (all are in the verdict's node_health)

HistoryLookup = Callable[[Sequence[str], float, float], list[HealthEvent]]
"""(hosts, start, end) -> the FAILs hc's history holds for those hosts in [start, end]
(epoch seconds); HcError where the history cannot be read."""


@dataclass
class Health:
    events: list[HealthEvent] = field(default_factory=list)  # on the culprits' hosts, in time order
    clause: str = ""  # what the verdict's summary says of them
    notes: list[str] = field(default_factory=list)


def culprit_hosts(findings: Sequence[JobFinding], ev: JobEvidence) -> dict[str, list[int]]:
    """host -> the culprit ranks on it (see the module's docstring)."""
    named = [r for r in findings[0].ranks] if findings else []
    if not named:
        named = [r for f in findings[1:] for r in f.ranks]
    out: dict[str, list[int]] = {}
    for r in dict.fromkeys(named):
        rec = ev.ranks.get(r)
        if rec is not None and rec.host:
            out.setdefault(rec.host, []).append(r)
    return dict(list(out.items())[:MAX_HOSTS])


def window(ev: JobEvidence, times: Iterable[float | None]) -> tuple[float, float] | None:
    """The job's window in epoch seconds (see the module's docstring); None where nothing says.
    A live collection knows the job's start (the nodes' kernel window) and ends when it looked;
    saved logs span their stamped lines."""
    stamped = [t for t in times if t is not None]
    start: float | None
    end: float | None
    if ev.window_start is not None:
        start, end = ev.window_start, _epoch(ev.collected_at)
    else:
        start, end = min(stamped, default=None), max(stamped, default=None)
    if start is None or end is None:
        return None
    return start, max(start, end) + AFTER_S


def kernel_events(ev: JobEvidence, hosts: Iterable[str], already: set[tuple[str, int | None]]) -> list[HealthEvent]:
    wanted = set(hosts)
    return [HealthEvent(host=k.host, kind=k.kind, text=k.text, source=f"{k.source}:{k.line}", time=k.time, xid=k.xid)
            for k in ev.kernel if k.host in wanted and (k.source, k.line) not in already]


def join(ev: JobEvidence, findings: Sequence[JobFinding], times: Iterable[float | None],
         history: HistoryLookup | None = None) -> Health:
    """The culprits' hosts' events in the window, and the clause the verdict says them in."""
    hosts = culprit_hosts(findings, ev)
    if not hosts:
        return Health()
    main = findings[0]
    # a first finding that names the rank already ties its own kernel lines to it (an OOM kill)
    already = {(e.source, e.line) for e in main.lines} if main.ranks else set()
    health = Health(events=kernel_events(ev, hosts, already))
    if history is not None:
        span = window(ev, times)
        if span is None:
            health.notes.append("hc's history was not consulted: nothing dates the job (no time in its logs)")
        else:
            try:
                health.events += history(list(hosts), *span)
            except HcError as exc:
                health.notes.append(f"hc's history could not be read: {exc}")
    health.events.sort(key=lambda e: (e.time is None, e.time or 0.0))
    health.clause = "; ".join(_said(host, ranks, [e for e in health.events if e.host == host])
                              for host, ranks in hosts.items() if any(e.host == host for e in health.events))
    return health


def _said(host: str, ranks: list[int], events: list[HealthEvent]) -> str:
    who = f"{host} (rank {ranks[0]})" if len(ranks) == 1 else f"{host} (ranks {','.join(map(str, ranks[:4]))})"
    counts: dict[str, int] = {}
    for e in events:  # two NVSwitches logging the same SXid in the same second: said once, counted
        phrase = _phrase(e)
        counts[phrase] = counts.get(phrase, 0) + 1
    parts = [p + (f" (x{n})" if n > 1 else "") for p, n in list(counts.items())[:MAX_SAID]]
    more = f" and {len(counts) - MAX_SAID} more" if len(counts) > MAX_SAID else ""
    return f"{who} {', '.join(parts)}{more}"


def _phrase(e: HealthEvent) -> str:
    when = f" at {_clock(e.time)}" if e.time is not None else ""
    if e.said:
        return f"{e.said}{' by ' + _clock(e.time) if e.time is not None else ''}"
    if e.kind == "xid":
        word = "SXid" if "SXid" in e.text else "Xid"  # an NVSwitch's, which the same parser reads
        return f"logged {word} {e.xid if e.xid is not None else '?'}{when}"
    if e.kind == "oom-kill":
        return f"logged an OOM kill{when}"
    if e.kind == "link":
        return f"logged an HCA link event{when}"
    if e.kind == "hc":
        return f"was FAILed by hc{when} ({e.id})" if e.id else f"was FAILed by hc{when}"
    return f"logged {e.kind}{when}"


def _clock(t: float) -> str:
    return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _epoch(text: str) -> float | None:
    try:
        when = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (when if when.tzinfo else when.replace(tzinfo=_dt.timezone.utc)).timestamp()
