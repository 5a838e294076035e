"""Tickets: one record per finding to open, update or close, from a run and the history.

A ticket is keyed by the finding's fingerprint (node, check, subject, ID; see
core/stamp.py), so a message that changed (a counter that grew) updates the same
ticket. The runs are replayed oldest first, and each fingerprint goes through
episodes: it opens in the first run that has it, stays open while runs have it or do
not look at it again, and closes in the first run that looked again without finding
it. For the run asked about, a record says:

- `new`: present now, and not open before (never seen, or fixed since);
- `ongoing`: present now and open before;
- `fixed`: open before, absent now, and this run looked again: the node was reached
  and the check that found it ran and judged (PASS, WARN or FAIL: it ran and did not
  report this finding; SKIP or ERROR is not looking), or the analysis that found it
  judged the node, or the pair or group it was about was tested again. A node this
  run did not check keeps its findings open: no record, neither fixed nor ongoing.

`first_seen`, `last_seen` and `times_seen` describe the current episode, as far back
as the history read (`lookback` runs that checked any of this run's nodes); an episode
older than that starts at the oldest run read. Records depend only on the run and the
runs before it (never on the clock or on runs after it), so the same input gives the
same records: `key` (fingerprint, state and the run that opened the episode; for
`ongoing`, this run: each run's update goes out once) is the delivery's idempotency
key. Findings about the run itself (`run_findings`: the guard, Slurm unreachable) name
no node and are not tickets.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from healthcheck.core import catalogue, plugins, typed
from healthcheck.core.errors import HcError
from healthcheck.core.model import READABLE_SCHEMAS, AnalysisRun, CheckResult, Finding, Limit, Report, fingerprint
from healthcheck.core.nodes import HostlistError, fold, parse_hostlist
from healthcheck.core.status import Status
from healthcheck.report.build import foldable, natural_key, sort_nodes
from healthcheck.report.jsonio import check_started
from healthcheck.report.table import printable

if TYPE_CHECKING:
    from healthcheck.core.nodes import Hostlist
    from healthcheck.report.history import History

TICKET_SCHEMA = "hc.ticket/1"
State = Literal["new", "ongoing", "fixed"]
STATES: tuple[State, ...] = ("new", "ongoing", "fixed")
REACH_CHECK = "hc.reach"  # the engine's check name for a node it could not reach (hc.E006)
EVIDENCE_MAX = 16 * 1024  # characters of evidence a record carries (a ticket body, not a log archive)
_RAN = (Status.PASS, Status.WARN, Status.FAIL)  # a check that ended so looked at the node
_TOKEN_RE = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


class Ticket(msgspec.Struct, frozen=True, kw_only=True):
    """One record for a ticketing system: open (new), update (ongoing) or close (fixed)."""

    schema: str = TICKET_SCHEMA
    key: str  # fingerprint:state:run that opened the episode (ongoing: this run) -- the idempotency key
    fingerprint: str
    state: State
    id: str
    title: str  # the catalogue's one-line meaning of the ID
    status: Status  # the finding's status when last seen (now, unless fixed)
    nodes: str  # hostlist of the node, or of the members of a pair or group
    check: str
    subject: str
    component: str
    group: str  # "pair gpu01-gpu02" for a finding about a pair or group; "" for a node's
    message: str
    evidence: str | None
    value: Any
    unit: str | None
    limit: Limit | None
    hint: str
    suggested_action: str
    first_seen: str  # started_at of the first run of this episode that had it
    last_seen: str  # started_at of the last run that had it
    times_seen: int  # runs of this episode that had it
    opened_in: str  # run ID of the first run of this episode
    run_id: str  # the run the record is about
    run_started_at: str
    command: str
    tier: str


# ------------------------------------------------------------ the runs, decoded lean
# A run from the history is decoded into these: findings, checks and analyses only (a
# 2,000-node sweep's metrics are most of its JSON, and tickets never read them).


class _Node(msgspec.Struct, gc=False):
    node: str
    checks: list[CheckResult] = []
    findings: list[Finding] = []
    error: str | None = None


class _Group(msgspec.Struct, gc=False):
    kind: str
    name: str
    members: list[str] = []
    status: Status = Status.SKIP
    findings: list[Finding] = []


class _Run(msgspec.Struct):
    schema: str = ""
    run_id: str = ""
    started_at: str = ""
    nodes: list[_Node] = []
    groups: list[_Group] = []
    analyses: list[AnalysisRun] = []


def _lean(report: Report) -> _Run:
    return _Run(schema=report.schema, run_id=report.run_id, started_at=report.started_at,
                nodes=[_Node(n.node, n.checks, n.findings, n.error) for n in report.nodes],
                groups=[_Group(g.kind, g.name, g.members, g.status, g.findings) for g in report.groups],
                analyses=report.analyses)


def decode_run(data: bytes, source: str) -> _Run:
    """A run from the history, lean; HcError where it is not a report this hc reads."""
    try:
        run = typed.decode_json(data, _Run)
    except msgspec.DecodeError as exc:
        raise HcError(f"{source}: not a valid hc report: {exc}") from None
    if run.schema not in READABLE_SCHEMAS:
        raise HcError(f"{source}: unsupported report schema {run.schema!r} "
                      f"(this hc reads {' and '.join(READABLE_SCHEMAS)})")

    check_started(run.started_at, source)  # episodes are dated by it
    return run


# ------------------------------------------------------------------- one run's view


@dataclass(frozen=True)
class _Seen:
    """A finding as one run had it, and where: on a node, or in a pair's or group's result."""

    finding: Finding
    node: str | None
    group: str | None  # "pair gpu01-gpu02"
    members: tuple[str, ...]


def _key(f: Finding) -> str:
    return f.fingerprint or fingerprint(f.node, f.check, f.subject, f.id)


class _View:
    """What one run found (at or above the status asked for) and what it looked at."""

    def __init__(self, run: _Run, min_rank: int) -> None:
        self.run = run
        self.present: dict[str, _Seen] = {}
        for n in run.nodes:
            for f in n.findings:
                if f.status.rank >= min_rank:
                    self._add(_Seen(f, n.node, None, (n.node,)))
        for g in run.groups:
            group = f"{g.kind} {g.name}"
            for f in g.findings:
                if f.status.rank >= min_rank:
                    self._add(_Seen(f, None, group, tuple(f.members or g.members)))
        self._nodes = {n.node: n for n in run.nodes}
        self._groups_ran = {f"{g.kind} {g.name}" for g in run.groups if g.status in _RAN}
        self._checks: dict[str, dict[str, Status]] = {}
        self._analyses: dict[str, list[tuple[AnalysisRun, Hostlist | None]]] | None = None

    def _add(self, seen: _Seen) -> None:
        key = _key(seen.finding)
        had = self.present.get(key)
        if had is None or seen.finding.status.rank > had.finding.status.rank:  # a duplicate keeps the worst
            self.present[key] = seen

    def _analysis_runs(self, name: str) -> list[tuple[AnalysisRun, Hostlist | None]] | None:
        if self._analyses is None:
            self._analyses = {}
            for a in self.run.analyses:
                try:
                    judged = parse_hostlist(a.nodes) if a.nodes else None
                except HostlistError:
                    judged = None  # nodes it cannot name were not looked at, as far as tickets know
                self._analyses.setdefault(a.name, []).append((a, judged))
        return self._analyses.get(name)

    def rechecked(self, seen: _Seen) -> bool:
        """Whether this run looked again at what found `seen`."""
        if seen.group is not None:
            return seen.group in self._groups_ran
        node = self._nodes.get(seen.node or "")
        if node is None or node.error is not None:
            return False  # not in this run, or not reached: absence of evidence is no fix
        check = seen.finding.check
        if check == REACH_CHECK:
            return True  # reached this time
        analyses = self._analysis_runs(check)
        if analyses is not None:
            return any(a.status in _RAN and judged is not None and node.node in judged for a, judged in analyses)
        ran = self._checks.get(node.node)
        if ran is None:
            ran = self._checks[node.node] = {c.name: c.status for c in node.checks}
        return ran.get(check) in _RAN


# --------------------------------------------------------------------------- episodes


@dataclass
class _Episode:
    opened_in: str
    first_seen: str
    last_seen: str
    times_seen: int
    last: _Seen


def _advance(open_: dict[str, _Episode], view: _View) -> None:
    """Replay one run: open or extend the episodes of what it found, close what it looked at again."""
    run = view.run
    for key, seen in view.present.items():
        ep = open_.get(key)
        if ep is None:
            open_[key] = _Episode(run.run_id, run.started_at, run.started_at, 1, seen)
        else:
            ep.last_seen, ep.times_seen, ep.last = run.started_at, ep.times_seen + 1, seen
    for key in [k for k, ep in open_.items() if k not in view.present and view.rechecked(ep.last)]:
        del open_[key]


def _token(text: str) -> str:
    """`text` where it is safe in an HTTP header and a line of the ledger (a fingerprint, a run
    ID hc made), else a hash of it: a hand-edited report may carry anything."""
    if _TOKEN_RE.match(text):
        return text

    return "h" + hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def idempotency_key(fp: str, state: State, opened_in: str, run_id: str) -> str:
    """fingerprint:state:episode for `new` and `fixed` (once per episode), and
    fingerprint:ongoing:run for `ongoing`: each run's update (last seen, times seen) is
    delivered once, and the same run read again gives the same key."""
    return f"{_token(fp)}:{state}:{_token(run_id if state == 'ongoing' else opened_in)}"


def _nodes_text(names: Iterable[str]) -> str:
    members = sort_nodes(dict.fromkeys(n for n in names if n))
    if members and foldable(members):
        return fold(members)
    return ",".join(members)  # NodeSet would reinterpret brackets and commas in a hostile name


def _ticket(key: str, state: State, ep: _Episode, run: _Run, report: Report) -> Ticket:
    f = ep.last.finding
    spec = catalogue.CATALOGUE.get(f.id)
    evidence = f.evidence
    if evidence is not None and len(evidence) > EVIDENCE_MAX:
        evidence = evidence[:EVIDENCE_MAX] + f"\n... ({len(f.evidence or '') - EVIDENCE_MAX} more characters)"
    return Ticket(
        key=idempotency_key(key, state, ep.opened_in, run.run_id), fingerprint=key, state=state, id=f.id,
        title=spec.title if spec else "", status=f.status, nodes=_nodes_text(ep.last.members), check=f.check,
        subject=f.subject, component=f.component, group=ep.last.group or "", message=f.message,
        evidence=evidence, value=f.value, unit=f.unit, limit=f.limit,
        hint=f.hint or (spec.hint if spec else ""),
        suggested_action=f.suggested_action or (spec.action if spec else ""),
        first_seen=ep.first_seen, last_seen=ep.last_seen, times_seen=ep.times_seen, opened_in=ep.opened_in,
        run_id=run.run_id, run_started_at=run.started_at, command=report.command, tier=report.tier,
    )


def _order(t: Ticket) -> tuple:
    return (STATES.index(t.state), -t.status.rank, t.id, natural_key(t.nodes), t.subject, t.fingerprint)


def build(report: Report, earlier: Iterable[_Run], *, min_status: Status = Status.WARN) -> list[Ticket]:
    """The records for `report`, after replaying `earlier` (the runs before it, oldest first).

    Only findings at or above `min_status` count (FAIL > ERROR > WARN): with FAIL, a
    finding that went from FAIL to WARN is fixed.
    """
    rank = min_status.rank
    open_: dict[str, _Episode] = {}
    for run in earlier:
        _advance(open_, _View(run, rank))
    now = _View(_lean(report), rank)
    _titles({s.finding.id for s in now.present.values()} | {ep.last.finding.id for ep in open_.values()})
    out: list[Ticket] = []
    for key, seen in now.present.items():
        ep = open_.get(key)
        if ep is None:
            state: State = "new"
            ep = _Episode(report.run_id, report.started_at, report.started_at, 1, seen)
        else:
            state = "ongoing"
            ep = _Episode(ep.opened_in, ep.first_seen, report.started_at, ep.times_seen + 1, seen)
        out.append(_ticket(key, state, ep, now.run, report))
    for key, ep in open_.items():
        if key not in now.present and now.rechecked(ep.last):
            out.append(_ticket(key, "fixed", ep, now.run, report))
    out.sort(key=_order)
    return out


def _titles(ids: Iterable[str]) -> None:
    """Fill the catalogue for these IDs: family modules declare theirs when imported."""
    if any(i not in catalogue.CATALOGUE for i in ids):
        plugins.load_declarations()


def earlier_runs(history: History, report: Report, lookback: int) -> Iterator[_Run]:
    """The runs before `report` that checked any of its nodes (at most `lookback`), oldest
    first, decoded one at a time (a long history of large sweeps never sits in memory whole)."""
    names = [n.node for n in report.nodes]
    names += [m for g in report.groups for m in g.members]
    for run_id in history.earlier(report, list(dict.fromkeys(names)), lookback):
        data = history.report_json(run_id)
        if data is not None:  # pruned by a concurrent run since it was listed
            yield decode_run(data, f"history {history.path} run {run_id}")


def tickets_for(report: Report, history: History | None, *, lookback: int,
                min_status: Status = Status.WARN) -> list[Ticket]:
    """The records for `report` against the history (None or empty: every finding is new)."""
    runs: Iterable[_Run] = () if history is None else earlier_runs(history, report, lookback)
    return build(report, runs, min_status=min_status)


# ------------------------------------------------------------------------ rendering


def encode_line(t: Ticket) -> bytes:
    """One record as a JSON line (the webhook's body is the same JSON)."""
    return msgspec.json.encode(t) + b"\n"


def to_jsonl(tickets: Iterable[Ticket]) -> bytes:
    return b"".join(encode_line(t) for t in tickets)


def render(tickets: list[Ticket]) -> str:
    """A table: one line per record, newest state first, then a line of counts."""
    from tabulate import tabulate

    counts = {s: sum(t.state == s for t in tickets) for s in STATES}
    summary = ", ".join(f"{n} {s}" for s, n in counts.items())
    if not tickets:
        return f"no tickets ({summary})"
    rows = [[t.state.upper(), t.status.value, t.id, printable(t.nodes or "-"),
             printable(t.component or t.group or "-"), t.times_seen, t.first_seen, printable(t.message)]
            for t in tickets]
    table = tabulate(rows, headers=["STATE", "STATUS", "ID", "NODES", "SUBJECT", "SEEN", "FIRST SEEN", "MESSAGE"],
                     tablefmt="simple")
    return f"{table}\n\n{summary}"
