"""The diagnosis joined with the culprit's host's health (issue 19): an Xid, an OOM kill, an
HCA link event the culprit's host logged in the job's window (real kernel-log captures,
read through the collector's kernel reader as it reads /dev/kmsg), or a FAIL hc's history
holds for it then, is said in the verdict; another host's, or another time's, is not."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import msgspec
from support import FIXTURES, run_hc

from healthcheck.cli.diagnose import history_events
from healthcheck.core.model import CheckResult, Metric, NodeResult
from healthcheck.core.stamp import stamp
from healthcheck.core.status import Status
from healthcheck.diagnose.collect import KernelLog, NodeCollection, decode_collection, read_kernel
from healthcheck.diagnose.live import evidence_from_nodes
from healthcheck.diagnose.verdict import build
from healthcheck.report.build import make_report
from healthcheck.report.history import History

LIVE = FIXTURES / "diagnose-live"
KERNEL_LOG = FIXTURES / "kernel-log"
UTC = dt.timezone.utc
JOB_START = dt.datetime(2026, 11, 23, 7, 50, tzinfo=UTC)  # the stop-torchrun job ran then (its collections)


def collections(name: str) -> list[NodeCollection]:
    return [decode_collection(f.read_bytes()) for f in sorted((LIVE / name).glob("collect-node*.json"))]


def replayed(capture: str, since: float) -> KernelLog:
    """A real kernel-log capture, read by the collector's kernel reader from `since` (its
    source a stand-in for /dev/kmsg)."""
    text = (KERNEL_LOG / capture).read_text()
    return read_kernel(since, sources=[(f"file {capture}", lambda: (text, ""))], year=2026)  # type: ignore[list-item]


def with_kernel(cols: list[NodeCollection], logs: dict[str, KernelLog]) -> list[NodeCollection]:
    return [msgspec.structs.replace(c, kernel=logs[c.host]) if c.host in logs else c for c in cols]


def test_an_xid_on_the_culprits_host_is_said_in_the_verdict():
    # stop-torchrun: rank 3 on node4 is SIGSTOPped while the others wait in all_reduce
    since = dt.datetime(2026, 11, 22, 12, 0, tzinfo=UTC).timestamp()
    xid = replayed("journal-short-xid79-sxid.txt", since)
    assert [(e.kind, e.xid) for e in xid.events][:1] == [("xid", 79)]
    v = build(evidence_from_nodes(with_kernel(collections("stop-torchrun"), {"node4": xid}), job="j").collected)
    on4 = [e for e in v.node_health if e.host == "node4"]
    assert on4 and on4[0].kind == "xid" and on4[0].xid == 79
    assert on4[0].source.startswith("node4: file journal-short-xid79-sxid.txt:")
    assert "node4 (rank 3) logged Xid 79 at " in v.summary
    assert dt.datetime.fromtimestamp(on4[0].time, UTC).strftime("%Y-%m-%d %H:%M:%S UTC") in v.summary
    assert "logged SXid 20034 at 2026-11-22 13:00:13 UTC (x2)" in v.summary  # two NVSwitches, said once
    assert "node4 (rank 3) logged Xid 79" in v.findings[0].message  # the ticket carries it too


def test_an_xid_on_another_host_is_not_the_culprits():
    since = dt.datetime(2026, 11, 22, 12, 0, tzinfo=UTC).timestamp()
    xid = replayed("journal-short-xid79-sxid.txt", since)
    v = build(evidence_from_nodes(with_kernel(collections("sleep-srun"), {"node1": xid}), job="j").collected)
    assert [o.rank for o in v.odd_ranks] == [2] or any(2 in f.ranks for f in v.findings)
    assert v.node_health == [] and "logged Xid" not in v.summary  # node1 ran no culprit


def test_a_kill_the_verdict_already_stands_on_is_not_said_twice():
    """The OOM kill that names a dead rank is the finding's own evidence: no second mention."""
    from healthcheck.diagnose.collect import KernelLine, RankProcess

    def r(pid: int, rank: int, host: str) -> RankProcess:
        return RankProcess(pid=pid, host=host, state="S", state_name="sleeping", rank=rank, world_size=4)

    def _node(host: str, ranks: tuple[RankProcess, ...], events: tuple) -> NodeCollection:
        return NodeCollection(host=host, collected_at="2026-01-01T00:00:00Z", job_id="55", ranks=ranks,
                              kernel=KernelLog(since=1.0e9, source="/dev/kmsg", lines=100, events=events))

    ours = KernelLine("oom-kill", "Out of memory: Killed process 931 (pt_main_thread)", 9, 1.1e9, pid=931,
                      process="pt_main_thread")
    nodes = [_node("n1", (r(101, 0, "n1"), r(102, 1, "n1")), ()), _node("n2", (r(201, 3, "n2"),), (ours,))]
    v = build(evidence_from_nodes(nodes, job="slurm job 55").collected)
    assert v.cls == "dead-rank" and [(o.rank, o.host) for o in v.odd_ranks] == [(2, "n2")]
    assert v.node_health == [] and "logged an OOM kill" not in v.summary


def _record(history: History, when: dt.datetime, node: str, status: Status, finding_id: str = "ib.E005",
            metrics: list[Metric] | None = None) -> None:
    findings = []
    if status is Status.FAIL:
        from healthcheck.core.catalogue import CATALOGUE
        from healthcheck.core.plugins import load_declarations

        load_declarations()
        findings = [stamp(CATALOGUE[finding_id].fail("mlx5_0/1 symbol_error rose by 40", component="mlx5_0/1"),
                          check="ib.counters", node=node)]
    result = NodeResult(node=node, fabric="t", status=status, findings=findings, metrics=metrics or [],
                        checks=[CheckResult(name="ib.counters", status=status, duration_s=0.1)])
    report = make_report(command="health", tier="standard", config_digest="x", config_path="c", started=when,
                         finished=when + dt.timedelta(seconds=2), nodes=[result])
    with history:
        history.record(report)


def test_a_fail_in_hcs_history_in_the_window_is_said(tmp_path):
    history = History(tmp_path / "history.sqlite")
    _record(history, JOB_START + dt.timedelta(minutes=3), "node4", Status.FAIL, "ib.E005")  # said
    _record(history, JOB_START - dt.timedelta(days=1), "node4", Status.FAIL, "gpu.E010")  # before the job
    _record(history, JOB_START + dt.timedelta(minutes=4), "node1", Status.FAIL, "gpu.E020")  # not the culprit
    _record(history, JOB_START + dt.timedelta(minutes=5), "node4", Status.PASS)  # looked, was fine
    window = KernelLog(since=JOB_START.timestamp(), source="/dev/kmsg", lines=10)
    cols = with_kernel(collections("stop-torchrun"), {f"node{i}": window for i in range(1, 5)})
    v = build(evidence_from_nodes(cols, job="j").collected,
              history=lambda hosts, start, end: history_events(history, hosts, start, end))
    assert v.cls == "stuck-rank" and [o.rank for o in v.odd_ranks] == [3]
    (event,) = v.node_health
    assert (event.host, event.kind, event.id) == ("node4", "hc", "ib.E005")
    assert "symbol_error rose by 40" in event.text and event.source.startswith("hc history ")
    assert "node4 (rank 3) was FAILed by hc at 2026-11-23 07:53:00 UTC (ib.E005)" in v.summary
    assert "gpu.E010" not in v.summary and "gpu.E020" not in v.summary


def _counters(symbol_error: int, link_downed: int, port: str = "mlx5_0/1") -> list[Metric]:
    return [Metric("symbol_error", symbol_error, component=port), Metric("link_downed", link_downed, component=port)]


def test_an_ib_counter_that_rose_over_the_window_is_said(tmp_path):
    """ib.counters PASSes below its limits, yet a counter that rose while the job ran on the
    culprit's host is part of its story: its last reading before the job against its last in
    the window; a reset, another host's rise, or a rise the fabric allows is not said."""
    history = History(tmp_path / "history.sqlite")
    _record(history, JOB_START - dt.timedelta(hours=2), "node4", Status.PASS,
            metrics=[*_counters(10, 2), *_counters(30, 0, "mlx5_1/1")])
    _record(history, JOB_START + dt.timedelta(minutes=6), "node4", Status.PASS,
            metrics=[*_counters(50, 2), *_counters(0, 0, "mlx5_1/1")])  # mlx5_1/1 reset: no rise
    _record(history, JOB_START - dt.timedelta(hours=1), "node1", Status.PASS, metrics=_counters(0, 0))
    _record(history, JOB_START + dt.timedelta(minutes=6), "node1", Status.PASS, metrics=_counters(900, 3))
    window = KernelLog(since=JOB_START.timestamp(), source="/dev/kmsg", lines=10)
    cols = with_kernel(collections("stop-torchrun"), {f"node{i}": window for i in range(1, 5)})
    v = build(evidence_from_nodes(cols, job="j").collected,
              history=lambda hosts, start, end: history_events(history, hosts, start, end))
    (event,) = v.node_health
    assert (event.host, event.kind) == ("node4", "counters")
    assert "mlx5_0/1 symbol_error rose from 10" in event.text and "to 50" in event.text
    assert "node4 (rank 3) had symbol_error of mlx5_0/1 rise by 40 by 2026-11-23 07:56:00 UTC" in v.summary
    # the fabric allows that much during a test (bandwidth.counters_max_rise): not said
    events = history_events(history, ["node4"], JOB_START.timestamp(), JOB_START.timestamp() + 3600,
                            allowed=lambda host: {"symbol_error": 40})
    assert events == []


def _copy(src: Path, dst: Path) -> Path:
    dst.mkdir(parents=True)
    for f in src.iterdir():
        if f.is_file():
            (dst / f.name).write_bytes(f.read_bytes())
    return dst


def test_hc_diagnose_logs_reads_the_configured_history(tmp_path):
    """Through the command: saved logs date the job (their stamped lines), the config names the
    history; a history that cannot be read is a note, and the diagnosis stands."""
    history = History(tmp_path / "history.sqlite")
    # kill-torchrun: rank 2 on node3 SIGKILLed at 07:56:01; a health check FAILed node3 a minute later
    _record(history, dt.datetime(2026, 11, 23, 7, 57, tzinfo=UTC), "node3", Status.FAIL, "gpu.E020")
    cfg = tmp_path / "hc.yaml"
    cfg.write_text(f"history: {{path: {tmp_path}/history.sqlite}}\n")
    logs = _copy(LIVE / "kill-torchrun", tmp_path / "logs")
    r = run_hc("diagnose", "logs", str(logs), "--config", str(cfg), "--format", "json")
    assert r.returncode == 0, r.stderr
    v = json.loads(r.stdout)
    assert v["class"] == "dead-rank" and [o["rank"] for o in v["odd_ranks"]] == [2]
    assert "node3 (rank 2) was FAILed by hc at 2026-11-23 07:57:00 UTC (gpu.E020)" in v["summary"]
    assert [(e["host"], e["id"]) for e in v["node_health"]] == [("node3", "gpu.E020")]

    (tmp_path / "bad.sqlite").write_bytes(b"not a database" * 100)
    cfg.write_text(f"history: {{path: {tmp_path}/bad.sqlite}}\n")
    r = run_hc("diagnose", "logs", str(logs), "--config", str(cfg), "--format", "json")
    assert r.returncode == 0 and b"Traceback" not in r.stderr, r.stderr
    v = json.loads(r.stdout)
    assert v["class"] == "dead-rank" and any("history could not be read" in n for n in v["notes"])
