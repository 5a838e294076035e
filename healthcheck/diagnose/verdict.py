"""Findings -> the Verdict: one class with a confidence, the odd ranks (host, pid, GPU),
a summary sentence, the next step, the first failure, the stack groups and a per-rank
table; as a table (tabulate) or as the `hc.diagnosis/2` JSON document, whose JSON
Schema ships in healthcheck/report/schema/hc.diagnosis-2.schema.json (generated from
these structs: `python -m healthcheck.diagnose.verdict --write-schema`).

The verdict's findings are kernel findings (`findings.JobFinding`), stamped here as the
engine stamps a check's: check "diagnose", the culprits' hosts as members, subject
"<job>:<ranks>" and so a fingerprint per job and culprit. A verdict of class unknown
carries a diag.E010 finding (ERROR): a job nothing could be concluded about never reads as
a healthy one. `job_result` makes the verdict a report's GroupResult of kind "job", which
is how tickets, the Prometheus export and the HTML report read it (`hc report ...` takes
an hc.diagnosis document; `hc diagnose ... --prometheus DIR`).

hc.diagnosis/1 (findings with class/summary/evidence lines and no ID) is not read; its
schema stays in report/schema/ as the record of what hc wrote before.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import msgspec

from healthcheck import __version__
from healthcheck.core import typed
from healthcheck.core.errors import HcError
from healthcheck.core.model import Finding, GroupResult
from healthcheck.core.nodes import fold
from healthcheck.core.stamp import stamp
from healthcheck.core.status import Status, worst
from healthcheck.diagnose.analysis import iso
from healthcheck.diagnose.classify import NEXT_STEP, Analysis, analyse, ordered
from healthcheck.diagnose.commondeath import common_deaths
from healthcheck.diagnose.endings import ending
from healthcheck.diagnose.evidence import HealthEvent, JobEvidence, RankEvidence
from healthcheck.diagnose.findings import CHECK, Confidence, FailureClass, JobFinding, job_finding
from healthcheck.diagnose.health import HistoryLookup, join
from healthcheck.diagnose.logfacts import failures_held
from healthcheck.diagnose.ownabort import bare_aborts
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.stacks import StackGroup, fold_ranks, rank_words

DIAGNOSIS_SCHEMA = "hc.diagnosis/2"
SCHEMA_PATH = Path(__file__).resolve().parent.parent / "report" / "schema" / "hc.diagnosis-2.schema.json"
_LOWER: dict[str, Confidence] = {"high": "medium", "medium": "low", "low": "low"}


class OddRank(msgspec.Struct, frozen=True, omit_defaults=True):
    rank: int
    host: str = ""
    pid: int | None = None
    gpu: str = ""
    why: str = ""


class FirstFailure(msgspec.Struct, frozen=True, omit_defaults=True):
    text: str
    source: str
    line: int | None = None
    rank: int | None = None
    time: str = ""  # ISO 8601 UTC, at the log's resolution
    basis: str = ""  # "earliest time" / "log order (no times)"


class RankRow(msgspec.Struct, frozen=True, omit_defaults=True):
    rank: int
    host: str = ""
    pid: int | None = None
    state: str = ""  # "exit -9 (SIGKILL)", "alive", ""
    watchdog_seq: int | None = None  # SeqNum of its watchdog timeout
    last_enqueued: int | None = None  # torch watchdog / Flight Recorder
    last_completed: int | None = None
    nccl_ops: str = ""  # "comm 0x..: 52 AllReduce (opCount 33)"
    stack: str = ""  # its stack group's label
    odd: bool = False


class Unread(msgspec.Struct, frozen=True):
    source: str
    why: str


class Verdict(msgspec.Struct, kw_only=True, omit_defaults=True, rename={"cls": "class"}):
    schema: str  # always DIAGNOSIS_SCHEMA (required: never omitted from the JSON)
    hc_version: str = ""
    job: str = ""
    collected_at: str = ""
    cls: FailureClass
    confidence: Confidence
    summary: str
    next_step: str
    odd_ranks: list[OddRank] = []
    odd_ranks_folded: str = ""  # "3,5-6"
    odd_hosts: str = ""  # ClusterShell hostlist
    world_size: int | None = None
    ranks_seen: str = ""  # folded
    first_failure: FirstFailure | None = None
    divergence: str = ""
    why_unknown: str = ""
    notes: list[str] = []
    findings: list[JobFinding] = []  # kernel findings, stamped; the first is the verdict's
    # what the culprits' hosts said in the job's window (kernel events, hc's history): health.py
    node_health: list[HealthEvent] = []
    stack_groups: list[StackGroup] = []
    ranks: list[RankRow] = []
    inputs: int = 0
    unreadable: list[Unread] = []


def _hosts(names: list[str]) -> str:
    names = [n for n in names if n]
    if not names:
        return ""
    try:
        return fold(names)
    except Exception:  # a name ClusterShell will not fold (an IP with a port): list them
        return ",".join(sorted(set(names)))


def _first_failure(analysis: Analysis) -> FirstFailure | None:
    events = analysis.events
    if not events:
        return None
    timed = [e for e in events if e.time is not None]
    if timed:
        e = min(timed, key=lambda x: (x.time or 0.0))
        return FirstFailure(text=e.text, source=e.source, line=e.line, rank=e.rank, time=iso(e.time),
                            basis="earliest time across the logs")
    e = events[0]
    return FirstFailure(text=e.text, source=e.source, line=e.line, rank=e.rank, basis="first in the input (no times)")


def _watchdog_seqs(ev: JobEvidence) -> dict[int, int]:
    """Per rank, the SeqNum of its first watchdog timeout in the torch logs."""
    seq: dict[int, int] = {}
    for f in ev.torch_logs:
        assert f.log is not None
        for t in f.log.timeouts:
            who = t.rank if t.rank is not None else f.rank
            if who is not None and t.seq is not None:  # torch 1.x's record prints no SeqNum
                seq.setdefault(who, t.seq)
    return seq


def _progress(ev: JobEvidence, analysis: Analysis) -> dict[int, tuple[int | None, int | None]]:
    """Per rank, (last enqueued, last completed): the torch logs' last word, else the Flight
    Recorder's first process group."""
    prog: dict[int, tuple[int | None, int | None]] = {}
    for f in ev.torch_logs:
        assert f.log is not None
        for p in f.log.progress:
            who = p.rank if p.rank is not None else f.rank
            if who is not None and p.last_enqueued is not None:
                prog[who] = (p.last_enqueued, p.last_completed)
    if analysis.fr is not None:
        for grp in analysis.fr.groups[:1]:
            for fp in grp.progress:
                prog.setdefault(fp.rank, (fp.last_enqueued, fp.last_completed))
    return prog


def _nccl_ops(ev: JobEvidence) -> dict[int, str]:
    """Per rank, its first multi-rank communicator's collective count and last op (NCCL logs)."""
    nccl: dict[int, str] = {}
    for n in ev.nccl_logs:
        assert n.log is not None
        for c in n.log.comms:
            if c.rank is not None and c.coll_count and c.nranks and c.nranks > 1:
                nccl.setdefault(c.rank, f"{c.coll_count} COLL, last {c.last_op} opCount {c.last_op_count}")
    return nccl


def _state_text(r: RankEvidence) -> str:
    """A rank's state in a word: its exit, its live state, alive, or why its stack is missing."""
    if r.exit_code is not None:
        return f"exit {r.exit_code}" + (f" ({r.signal})" if r.signal else "")
    if r.state:
        return r.state  # live: running, sleeping, stopped, missing
    if r.alive:
        return "alive"
    if r.stack_error:
        return r.stack_error[:60]
    return ""


def _rows(col: Collected, analysis: Analysis, odd: set[int]) -> list[RankRow]:
    ev = col.evidence
    group_of = {r: g.label for g in analysis.groups for r in g.ranks}
    seq = _watchdog_seqs(ev)
    prog = _progress(ev, analysis)
    nccl = _nccl_ops(ev)
    rows = []
    for rank, r in ev.ranks.items():
        enq, done = prog.get(rank, (None, None))
        rows.append(RankRow(rank=rank, host=r.host, pid=r.pid, state=_state_text(r), watchdog_seq=seq.get(rank),
                            last_enqueued=enq, last_completed=done, nccl_ops=nccl.get(rank, ""),
                            stack=group_of.get(rank, ""), odd=rank in odd))
    return rows


def _events_held(analysis: Analysis) -> str:
    """The failure events the verdict lists (its first failure among them), said where nothing
    else says what the logs hold: an unknown verdict never says it saw no failure beside one."""
    events = analysis.events
    if not events:
        return ""
    first = _first_failure(analysis)
    what = f" (first: {first.text[:160]})" if first is not None else ""
    return (f"the logs hold {len(events)} failure event{'s' if len(events) > 1 else ''}{what}, and none of it "
            "names a culprit rank")


def _why_unknown(col: Collected, analysis: Analysis, findings: list[JobFinding], world: int | None) -> str:
    """Why the verdict is unknown ("" when it is not)."""
    ev = col.evidence
    launch_named = bool(findings) and findings[0].cls == "init-failure" and bool(findings[0].ranks)
    if len(analysis.world_sizes) > 1 and not launch_named:  # a rank launched with another WORLD_SIZE is named
        return "the ranks disagree about the world size: " + "; ".join(
            f"{rank_words(rs)} say {size}" for size, rs in sorted(analysis.world_sizes.items()))
    if world is not None and any(r >= world for r in ev.ranks):
        return f"ranks beyond the world size {world} appear: {fold_ranks(r for r in ev.ranks if r >= world)}"
    if findings:
        return ""
    if not ev.inputs:
        return "no file to read"
    if not (ev.torch_logs or ev.nccl_logs or ev.ranks or ev.ras or ev.kernel or ev.error_files):
        return f"none of the {ev.inputs} file(s) is a log hc reads (see unreadable)"
    said = ending(col)  # endings.py: every rank interrupted by its launcher; a job that finished
    held = failures_held(col)
    if held and not said:
        said = f"the logs hold {held}, and none of it names a culprit rank"
    for together in common_deaths(col):  # commondeath.py: workers that died of one signal in one second
        said = (said + "; " if said else "") + together.describe()
    bare = bare_aborts(col)  # ownabort.py: a SIGABRT with nothing of the rank's own
    if bare:
        said = (said + "; " if said else "") + (
            f"torchrun reports {rank_words(sorted(bare))} ended by SIGABRT and nothing of "
            f"{'its' if len(bare) == 1 else 'their'} own is in the text: NCCL's watchdog aborts a rank whose "
            "collective timed out so, no evidence against it")
    said = said or _events_held(analysis) or ("the logs show no failure hc recognises (no error, timeout, mismatch "
                                              "or odd stack)")
    if col.attempts and not held:  # attempts.py: only the last attempt is judged
        said += ("; an earlier attempt failed and torchrun restarted the workers: a transient failure, "
                 "no culprit of how the job ended (see the notes)")
    return said


def _job(col: Collected) -> str:
    return col.evidence.job or "job"


def stamped(col: Collected, findings: list[JobFinding]) -> list[JobFinding]:
    """Each finding stamped as the engine stamps a check's: check "diagnose", the hosts of the
    ranks it names as members, subject "<job>:<ranks>" (the fingerprint: per job and culprit)."""
    ranks = col.evidence.ranks
    job = _job(col)
    out = []
    for f in findings:
        hosts = sorted({ranks[r].host for r in f.ranks if r in ranks and ranks[r].host})
        subject = f"{job}:{f.component}" if f.component else job
        done = stamp(f, check=CHECK, members=hosts, subject=subject)
        assert isinstance(done, JobFinding)  # stamp keeps the type (msgspec.structs.replace)
        out.append(done)
    return out


def build(col: Collected, analysis: Analysis | None = None, *, history: HistoryLookup | None = None) -> Verdict:
    """The verdict of what was collected; `history` reads hc's run history for the culprits'
    hosts (diagnose/health.py; None: not consulted)."""
    analysis = analysis or analyse(col)
    ev = col.evidence
    findings = ordered(analysis.findings)
    notes = list(analysis.notes)
    unread = [Unread(u.source, u.why) for u in ev.unreadable]
    world = max(analysis.world_sizes) if analysis.world_sizes else None
    base: dict[str, Any] = dict(schema=DIAGNOSIS_SCHEMA, hc_version=__version__, job=ev.job,
                                collected_at=ev.collected_at, inputs=ev.inputs, unreadable=unread[:200],
                                stack_groups=analysis.groups, world_size=world, ranks_seen=fold_ranks(ev.ranks),
                                first_failure=_first_failure(analysis))
    why = _why_unknown(col, analysis, findings, world)
    if why and col.whole is not None and failures_held(col):
        whole = _over_every_attempt(col.whole, why, history)  # the last attempt failed, naming no one
        if whole is not None:
            return whole
    if why:
        summary = f"no diagnosis: {why}"
        unknown = job_finding(cls="unknown", summary=summary, confidence="low")
        return Verdict(cls="unknown", confidence="low", summary=summary,
                       next_step=NEXT_STEP["unknown"], why_unknown=why, findings=stamped(col, [unknown, *findings]),
                       ranks=_rows(col, analysis, set()), notes=notes, **base)
    main = findings[0]
    confidence = main.confidence
    others = [f for f in findings[1:] if f.ranks and main.ranks and not set(f.ranks) & set(main.ranks)
              and f.cls not in ("socket-fallback", "network")]
    if others:
        confidence = _LOWER[confidence]
        notes.append("other evidence names other ranks: " + "; ".join(f"{f.cls} {rank_words(f.ranks)}"
                                                                      for f in others[:3]))
    odd = set(main.ranks)
    odd_list = [OddRank(rank=o, host=ev.ranks[o].host if o in ev.ranks else "",
                        pid=ev.ranks[o].pid if o in ev.ranks else None,
                        gpu=ev.ranks[o].gpu if o in ev.ranks else "") for o in sorted(odd)]
    summary = main.message
    if main.where and main.where not in summary:
        summary += f" ({main.where})"
    health = join(ev, findings, (e.time for e in analysis.events), history)
    notes += health.notes
    if health.clause:  # said in the finding too: a ticket carries it
        summary += f"; {health.clause}"
        findings[0] = msgspec.structs.replace(main, message=f"{main.message}; {health.clause}")
    return Verdict(cls=main.cls, confidence=confidence, summary=summary, next_step=NEXT_STEP[main.cls],
                   odd_ranks=odd_list, odd_ranks_folded=fold_ranks(odd),
                   odd_hosts=_hosts([o.host for o in odd_list]),
                   divergence=main.divergence, notes=notes, findings=stamped(col, findings),
                   node_health=health.events, ranks=_rows(col, analysis, odd), **base)


def _over_every_attempt(whole: Collected, why: str, history: HistoryLookup | None) -> Verdict | None:
    """A restarted job whose last attempt failed with no culprit of its own (every rank
    failing alike as it started again, on what the first attempt left): judged over every
    attempt, said so; None where that names no one either."""
    verdict = build(whole, history=history)
    if verdict.cls == "unknown":
        return None
    said = (f"the last attempt failed naming no rank ({why}); judged over every attempt torchrun ran: "
            "the earlier attempt's failure is what the restart did not get past")
    return msgspec.structs.replace(verdict, notes=[said, *verdict.notes])


def status_of(verdict: Verdict) -> Status:
    """The verdict's status as a report would count it: its findings' worst."""
    return worst((f.status for f in verdict.findings), default=Status.SKIP)


def job_result(verdict: Verdict) -> GroupResult:
    """The verdict as a report's result about a job: kind "job", named after the job, its
    members every host a rank of it ran on, its findings the verdict's as plain kernel
    findings (what tickets, the Prometheus export and the HTML report read)."""
    hosts = sorted({r.host for r in verdict.ranks if r.host} | {h for f in verdict.findings for h in f.members})
    plain = [Finding(**{name: getattr(f, name) for name in Finding.__struct_fields__}) for f in verdict.findings]
    return GroupResult(kind="job", name=verdict.job or "job", members=hosts, status=status_of(verdict),
                       findings=plain)


# ---------------------------------------------------------------- output


def encode(verdict: Verdict) -> bytes:
    return msgspec.json.format(msgspec.json.encode(verdict), indent=2) + b"\n"


def decode(data: bytes, source: str = "diagnosis") -> Verdict:
    """An hc.diagnosis/2 document (`hc diagnose ... -o FILE`); HcError (one line, exit 4)
    for anything else, /1 included: its findings carry no ID, so no ticket could key on them."""

    try:
        verdict = typed.decode_json(data, Verdict)
    except msgspec.DecodeError as exc:
        if b'"hc.diagnosis/1"' in data[:4096]:
            raise HcError(f"{source}: an hc.diagnosis/1 document (its findings carry no finding ID): diagnose the "
                          "job again with this hc to get hc.diagnosis/2") from None
        raise HcError(f"{source}: not a valid {DIAGNOSIS_SCHEMA} document: {exc}") from None
    if verdict.schema != DIAGNOSIS_SCHEMA:
        raise HcError(f"{source}: unsupported diagnosis schema {verdict.schema!r} (this hc reads {DIAGNOSIS_SCHEMA})")
    return verdict


_ODD_SHOWN = 16  # entries of the odd line spelled out


def _odd_line(odd: list[OddRank]) -> str:
    """The odd ranks, one entry each, except that ranks known by their host alone (no pid, no
    GPU: a launcher's word, srun's `tasks 1408-1423`) fold per host into one entry; at most
    _ODD_SHOWN entries, the rest counted."""
    entries: list[str | tuple[str, list[int]]] = []  # a rank's own entry, or one host's fold
    folds: dict[str, list[int]] = {}
    for o in odd:
        if o.pid or o.gpu:
            entries.append(f"rank {o.rank}" + (f" on {o.host}" if o.host else "") + (f" pid {o.pid}" if o.pid else "")
                           + (f" {o.gpu}" if o.gpu else ""))
        elif o.host in folds:
            folds[o.host].append(o.rank)
        else:
            folds[o.host] = [o.rank]
            entries.append((o.host, folds[o.host]))
    shown = [e if isinstance(e, str) else rank_words(e[1]) + (f" on {e[0]}" if e[0] else "") for e in entries]
    more = len(shown) - _ODD_SHOWN
    return "; ".join(shown[:_ODD_SHOWN]) + (f"; and {more} more" if more > 0 else "")


def render(verdict: Verdict, *, max_rows: int = 64) -> str:
    out = [f"{verdict.cls}  (confidence {verdict.confidence})", verdict.summary]
    if verdict.odd_ranks:
        out.append("odd: " + _odd_line(verdict.odd_ranks))
    if verdict.first_failure is not None:
        f = verdict.first_failure
        out.append(f"first failure: {f.time + ' ' if f.time else ''}"
                   f"{'rank ' + str(f.rank) + ': ' if f.rank is not None else ''}{f.text} "
                   f"[{f.source}{':' + str(f.line) if f.line else ''}] ({f.basis})")
    if verdict.divergence:
        out.append(f"divergence: {verdict.divergence}")
    out.append(f"next: {verdict.next_step}")
    for n in verdict.notes:
        out.append(f"note: {n}")
    if verdict.stack_groups:
        out.append("")
        out.append("stacks:")
        for g in verdict.stack_groups:
            out.append(("  * " if g.singleton else "    ") + g.text)
    if verdict.findings:
        out.append("")
        out.append("evidence:")
        for fd in verdict.findings[:4]:
            out.append(f"  [{fd.cls}, {fd.confidence}] {fd.id} {fd.message}")
            for e in fd.lines[:8]:
                out.append(f"    {e.where}: {e.text}")
    if verdict.ranks:
        out.append("")
        out.append(_rank_table(verdict.ranks[:max_rows]))
        if len(verdict.ranks) > max_rows:
            out.append(f"... {len(verdict.ranks) - max_rows} more ranks (--format json lists them all)")
    if verdict.unreadable:
        out.append("")
        out.append(f"not read ({len(verdict.unreadable)}):")
        for u in verdict.unreadable[:10]:
            out.append(f"  {u.source}: {u.why}")
    return "\n".join(out)


_RANK_COLUMNS = ("", "rank", "host", "pid", "state", "seq", "enqueued", "completed", "nccl", "stack")


def _rank_table(ranks: list[RankRow]) -> str:
    """The per-rank table, without the columns no rank fills (a gloo job has no NCCL
    counts or watchdog seqs; a live one no exit codes)."""
    from tabulate import tabulate

    rows = [["*" if r.odd else "", r.rank, r.host, r.pid or "", r.state, r.watchdog_seq or "",
             "" if r.last_enqueued is None else r.last_enqueued,
             "" if r.last_completed is None else r.last_completed,
             r.nccl_ops, r.stack[:60]] for r in ranks]
    keep = [i for i, name in enumerate(_RANK_COLUMNS) if name == "rank" or any(row[i] != "" for row in rows)]
    return tabulate([[row[i] for i in keep] for row in rows], headers=[_RANK_COLUMNS[i] for i in keep])


def json_schema() -> dict:
    schema = msgspec.json.schema(Verdict)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://hc.invalid/schema/hc.diagnosis-1.schema.json"
    schema["title"] = DIAGNOSIS_SCHEMA
    defs = schema.get("$defs", {})
    if "Verdict" in defs:
        defs["Verdict"]["properties"]["schema"] = {"const": DIAGNOSIS_SCHEMA}
        defs["Verdict"]["required"] = sorted(set(defs["Verdict"].get("required", [])) | {"schema"})
    return schema


def schema_text() -> str:
    return json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":  # python -m healthcheck.diagnose.verdict --write-schema | --check
    text = schema_text()
    if "--write-schema" in sys.argv:
        SCHEMA_PATH.write_text(text)
    elif SCHEMA_PATH.read_text() != text:
        print(f"{SCHEMA_PATH} is stale: python -m healthcheck.diagnose.verdict --write-schema", file=sys.stderr)
        sys.exit(1)
