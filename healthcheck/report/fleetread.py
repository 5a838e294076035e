"""Fleet-size reports read in bounded memory (issue 22).

A 50,000-node report is ~1.2 GB of JSON and ~4.5 GB decoded whole (each node's ~180
metrics are objects). The commands that read a saved report read only what they use:

- `summary`: the run-level fields and, of each node, its name, fabric, status, mode and
  error (`hc report show` as a table: the counts, the fabrics, the findings summary and
  the groups are run-level). msgspec skips the other fields without building them.
- `verdicts`: every node without its metrics (`hc report diff`: findings and checks).
- `raw_nodes`: the run-level fields and each node's JSON undecoded (msgspec.Raw, a view of
  the bytes read), decoded one at a time as the whole model (`hc report show --format
  json`, `hc baseline`): what is held is the file's bytes and one node.

Every view is checked as `jsonio.decode` checks a report (schema, started_at, /1 upgraded).
A view's nodes are NodeResults with what it leaves out empty: a summary's nodes have no
checks, findings or metrics, and must go only where those are not read.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from typing import Any, BinaryIO

import msgspec

from healthcheck.core import typed
from healthcheck.core.errors import HcError
from healthcheck.core.model import Action, CheckResult, Finding, NodeResult, Report
from healthcheck.core.status import Status
from healthcheck.report.jsonio import decode_as


class NodeSummary(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """What a report's summary reads of a node."""

    node: str
    fabric: str
    status: Status
    mode: str = "local"
    error: str | None = None


class NodeVerdicts(NodeSummary, frozen=True, gc=False, kw_only=True):
    """A node without its metrics: what a diff compares."""

    checks: list[CheckResult] = []
    findings: list[Finding] = []
    action: Action | None = None


@cache
def report_type(node_type: Any) -> Any:
    """A struct with Report's run-level fields (their types and defaults read from Report, so
    the two cannot drift) and `nodes` a list of `node_type`."""

    fields: list[Any] = []
    for f in msgspec.structs.fields(Report):
        tp = list[node_type] if f.name == "nodes" else f.type
        if f.required:
            fields.append((f.name, tp))
        elif f.default_factory is not msgspec.NODEFAULT:
            fields.append((f.name, tp, msgspec.field(default_factory=f.default_factory)))
        else:
            fields.append((f.name, tp, f.default))
    return msgspec.defstruct(f"ReportOf{getattr(node_type, '__name__', 'Raw')}", fields, kw_only=True)


def _as_report(head: Any, nodes: list[NodeResult]) -> Report:
    run = {f: getattr(head, f) for f in Report.__struct_fields__ if f != "nodes"}
    return Report(**run, nodes=nodes)


def _node(view: NodeSummary) -> NodeResult:
    extra = {f: getattr(view, f) for f in ("checks", "findings", "action") if hasattr(view, f)}
    return NodeResult(node=view.node, fabric=view.fabric, status=view.status, mode=view.mode, error=view.error,
                      **extra)


def summary(data: bytes, source: str) -> Report:
    """The report with each node's name, fabric, status, mode and error only."""
    head = decode_as(data, source, report_type(NodeSummary))
    return _as_report(head, [_node(n) for n in head.nodes])


def verdicts(data: bytes, source: str) -> Report:
    """The report with every node's checks and findings, without its metrics."""
    head = decode_as(data, source, report_type(NodeVerdicts))
    return _as_report(head, [_node(n) for n in head.nodes])


class RawReport:
    """A report's run-level fields (`head`, a Report with no nodes) and its nodes' JSON."""

    def __init__(self, head: Report, nodes: list[msgspec.Raw], source: str) -> None:
        self.head = head
        self.raw = nodes
        self.source = source

    def nodes(self) -> Iterator[NodeResult]:
        """Each node decoded and checked as the model, one at a time."""
        decoder = typed.decoder(NodeResult)  # their nesting was checked with the whole report's
        for i, raw in enumerate(self.raw):
            try:
                node = decoder.decode(raw)
            except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):  # ValidationError is a DecodeError
                raise HcError(f"{self.source}: not a valid hc report: {_why(raw)} - at `$.nodes[{i}]`") from None
            yield node


def _why(raw: msgspec.Raw) -> str:
    """What is wrong with a node, worded as core.typed words it everywhere (NotUtf8, TooDeep)."""
    try:
        typed.decode_json(raw, NodeResult)
    except msgspec.DecodeError as exc:
        return str(exc)
    return "it could not be decoded"  # pragma: no cover -- it failed a moment ago


def raw_nodes(data: bytes, source: str) -> RawReport:
    """The report's run-level fields, and its nodes undecoded (views of `data`)."""
    head = decode_as(data, source, report_type(msgspec.Raw))
    return RawReport(_as_report(head, []), head.nodes, source)


_PLACEHOLDER = b'  "nodes": [\n    0\n  ]'


def write_json(report: RawReport, out: BinaryIO) -> None:
    """Write the report as `jsonio.encode` would (indent 2), one node at a time: the same
    bytes, without the whole report decoded or encoded at once. Every node is checked
    before the first byte is written: a bad node is a one-line error, never half a report."""

    for _node in report.nodes():
        pass
    encoder = msgspec.json.Encoder()
    doc = msgspec.to_builtins(report.head)
    doc["nodes"] = [msgspec.Raw(b"0")]
    text = msgspec.json.format(encoder.encode(doc), indent=2) + b"\n"
    # the first list in a report is its nodes (the fields before it are scalars, and a
    # JSON string holds no raw newline), so the placeholder's first match is that list
    before, found, after = text.partition(_PLACEHOLDER)
    if not found:  # pragma: no cover -- the model puts nodes first among the lists
        raise AssertionError("report layout changed: nodes placeholder not found")
    if not report.raw:
        out.write(before + b'  "nodes": []' + after)
        return
    out.write(before + b'  "nodes": [\n')
    for i, node in enumerate(report.nodes()):
        if i:
            out.write(b",\n")
        body = msgspec.json.format(encoder.encode(node), indent=2)
        out.write(b"    " + body.replace(b"\n", b"\n    "))
    out.write(b"\n  ]" + after)
