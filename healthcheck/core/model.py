"""The result model: findings, metrics, per-check, per-node and per-group results, and the report.

All are msgspec Structs, so a report encodes to JSON (and decodes back) without glue
code. The per-node structs never form reference cycles, so they are created with
gc=False: the garbage collector would otherwise dominate decoding 10,000 node reports.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal, TypedDict

import msgspec

from healthcheck.core.status import Status

REPORT_SCHEMA = "hc.report/2"
# the report schemas this hc reads; an older one is upgraded in memory on decode
READABLE_SCHEMAS = ("hc.report/1", REPORT_SCHEMA)


class Limit(msgspec.Struct, gc=False, frozen=True, omit_defaults=True):
    """The configured value a measurement was compared with, and where it came from."""

    op: str  # "==", ">=", "<=", "in", "present"
    value: Any
    key: str  # config key, e.g. "ib.rate_gbps"
    source: str | None = None  # "configs/fabrics/h100-ndr400.yaml:12", stamped by the engine


class Finding(msgspec.Struct, gc=False, frozen=True, kw_only=True):
    """One verdict about one subject.

    Checks fill in id, status, component, message and the measurement; the engine
    stamps node, check, subject, hint, suggested_action and fingerprint. Every key is
    always present in the JSON (null where unknown), so ticketing can rely on it.
    """

    id: str
    status: Status
    message: str
    component: str = ""  # the part of the node, e.g. "mlx5_2/1"; "" for the node itself
    value: Any = None
    unit: str | None = None
    limit: Limit | None = None
    evidence: str | None = None  # raw excerpt (a kernel log line, a tool's stderr)
    node: str = ""
    check: str = ""
    subject: str = ""  # "gpu017:mlx5_2/1"
    hint: str = ""
    suggested_action: str = ""
    fingerprint: str = ""
    # the nodes a finding about a pair, group or job names (node is "" for those); () otherwise.
    # A tuple: a list per finding and metric made decoding 10,000 reports 3.5x slower
    # (millions of GC-tracked empty lists); the empty tuple is one shared object.
    members: tuple[str, ...] = ()


class Metric(msgspec.Struct, gc=False, frozen=True, omit_defaults=True):
    """A measured value worth keeping even when healthy (for drift and outlier analysis)."""

    name: str  # e.g. "mtu", "rate_gbps", "fw_ver"
    value: Any
    unit: str | None = None
    component: str = ""
    members: tuple[str, ...] = ()  # the nodes measured together, where not the whole group's (one pair of a job)


class CheckResult(msgspec.Struct, gc=False, frozen=True, omit_defaults=True):
    """What one check did on one node."""

    name: str
    status: Status
    duration_s: float
    reason: str | None = None  # why it was skipped or could not run


class Action(msgspec.Struct, gc=False, frozen=True, omit_defaults=True):
    """What was done (or would have been done) to the node in the scheduler."""

    kind: str  # "none", "drain", "resume", "guarded"
    reason: str | None = None
    dry_run: bool = False
    ok: bool = True
    message: str | None = None


class ActionRecord(msgspec.Struct, gc=False, frozen=True, kw_only=True, omit_defaults=True):
    """One scheduler action hc took (or, with --dry-run, would have taken)."""

    time: str
    nodes: str  # a hostlist: one scontrol call acts on many nodes with the same reason
    action: str  # drain | resume | rollback
    ok: bool
    command: str  # the exact scontrol command line
    reason: str | None = None
    dry_run: bool = False
    message: str | None = None  # Slurm's answer, or why it failed
    attempts: int = 1


class NodeResult(msgspec.Struct, gc=False, frozen=True, kw_only=True):
    node: str
    fabric: str
    status: Status
    mode: str = "local"  # local | agent | agentless | slurm
    checks: list[CheckResult] = []
    findings: list[Finding] = []
    metrics: list[Metric] = []
    action: Action | None = None
    error: str | None = None  # the node could not be checked at all (unreachable)


GroupKind = Literal["pair", "group", "job"]


class GroupResult(msgspec.Struct, gc=False, frozen=True, kw_only=True):
    """A result about several nodes together: a pair (A <-> B bandwidth), a group, or a job's ranks.

    Its findings name their member nodes (Finding.members); its metrics carry value and
    unit (busbw per message size: name "busbw", component the size).
    """

    kind: GroupKind
    name: str  # unique within the report and stable across runs, e.g. "gpu01-gpu02" or "job 4711"
    members: list[str]  # the nodes, in the order the result names them (a pair: A, B)
    status: Status
    findings: list[Finding] = []
    metrics: list[Metric] = []


class FindingGroup(TypedDict):
    """Identical findings folded across nodes (or a group's members): one row of the table."""

    status: str
    id: str
    component: str
    message: str
    nodes: str  # a hostlist, or names joined by commas where a name cannot be folded
    count: int


class AnalysisRun(msgspec.Struct, gc=False, frozen=True, kw_only=True, omit_defaults=True):
    """One analysis over many nodes' results: the nodes it judged, and how it ended.

    Its findings are on the nodes (check = its name); resuming a node drained for one
    needs the analysis to have judged the node again.
    """

    name: str  # e.g. "fleet.drift"
    scope: str  # fleet | pairs | history | job
    status: Status  # worst of its findings (PASS: none); SKIP: it did not apply; ERROR: it failed
    nodes: str = ""  # hostlist of the nodes it judged
    reason: str | None = None  # why it was skipped or failed


class Report(msgspec.Struct, kw_only=True):
    schema: str = REPORT_SCHEMA
    run_id: str
    hc_version: str
    command: str
    tier: str
    config_digest: str
    config_path: str
    started_at: str
    finished_at: str
    duration_s: float
    host: str
    status: Status
    nodes: list[NodeResult]
    summary: dict[str, int] = {}
    findings_summary: list[FindingGroup] = []
    # findings about the run rather than one node (the blast-radius guard refusing,
    # Slurm unreachable) and the actions taken
    run_findings: list[Finding] = []
    actions: list[ActionRecord] = []
    # results about pairs, groups of nodes and jobs (bandwidth pair matrices, hang diagnosis)
    groups: list[GroupResult] = []
    # the analyses that ran over the nodes (drift, outliers, flaps, pairs), for resuming
    analyses: list[AnalysisRun] = []


def fingerprint(node: str, check: str, subject: str, finding_id: str) -> str:
    """A stable key for ticket de-duplication: same node, check, subject and ID -> same key."""
    raw = "\x1f".join((node, check, subject, finding_id)).encode("utf-8", "surrogateescape")
    return hashlib.sha256(raw).hexdigest()[:16]
