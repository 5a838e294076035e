"""`hc node --local` judges its run against the node's recorded runs and records it, as `hc
node NODES` does; a run another hc started (agent mode, a sweep's srun task) does neither.

Scenario (labelled as such): the real Xid 79 capture tests/fixtures/corpus/xid-dmesg/
xid79-with-nvswitch-sxid-20034.txt is the node's kernel log now (this machine's boot id), and
the history already holds runs that saw it in two other boots (boot ids made up).
"""

from __future__ import annotations

import datetime as dt
import json

import msgspec
from support import CORPUS, run_hc_inproc

from healthcheck.checks import gpu as g
from healthcheck.core.config.loader import EMBEDDED_DEFAULT, Config
from healthcheck.core.model import CheckResult, Finding, Metric, NodeResult
from healthcheck.core.stamp import stamp
from healthcheck.core.status import Status, worst
from healthcheck.parsers.xid import parse_kernel_log
from healthcheck.report.build import make_report
from healthcheck.report.history import History

XID79 = CORPUS / "xid-dmesg" / "xid79-with-nvswitch-sxid-20034.txt"
H100 = Config(EMBEDDED_DEFAULT).fabric("h100-ndr400")


def earlier_run(history: History, boot: str, day: int) -> None:
    text = XID79.read_text()
    log = msgspec.structs.replace(parse_kernel_log(text), source="dmesg", source_lines=len(text.splitlines()),
                                  boot_id=boot)
    out = list(g.xid(kernel_gpu_log=log, gpus=None, limits=H100))
    findings = [stamp(f, check="gpu.xid", node="gpu017") for f in out if isinstance(f, Finding)]
    status = worst([Status.PASS, *(f.status for f in findings)])
    node = NodeResult(node="gpu017", fabric="t", status=status, findings=findings,
                      metrics=[m for m in out if isinstance(m, Metric)], checks=[CheckResult("gpu.xid", status, 0.1)])
    at = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc) + dt.timedelta(days=day)
    history.record(make_report(command="node", tier="quick", config_digest="d", config_path="c", started=at,
                               finished=at, nodes=[node]))


def setup(tmp_path):
    (tmp_path / "fabrics").mkdir()
    (tmp_path / "fabrics" / "t.yaml").write_text(f"gpu:\n  xid: {{source: file, file: {XID79}}}\n")
    cfg = tmp_path / "hc.yaml"
    cfg.write_text(f"default_fabric: t\nhistory: {{path: {tmp_path}/history.sqlite}}\n")
    with History(tmp_path / "history.sqlite") as history:
        for day, boot in enumerate(("0000000a-706b-4a39-af73-980b0a22eb84", "0000000b-706b-4a39-af73-980b0a22eb84")):
            earlier_run(history, boot, day)
    return cfg


def local_run(cfg, **env: str) -> tuple[int, dict]:
    r = run_hc_inproc("node", "--local", "--checks", "gpu.xid", "--config", str(cfg), "--format", "json",
                      env={"HC_NODE_NAME": "gpu017", **env})
    return r.returncode, json.loads(r.stdout)


def recurring(report: dict) -> list[dict]:
    return [f for n in report["nodes"] for f in n["findings"] if f["id"] == "gpu.E025"]


def commands(tmp_path) -> list[str]:
    with History(tmp_path / "history.sqlite") as h:
        return [run.command for run in h.runs(10)]


def test_a_local_run_escalates_a_third_boots_xid_and_is_recorded(tmp_path) -> None:
    cfg = setup(tmp_path)
    code, report = local_run(cfg)
    (f,) = recurring(report)
    assert code == 2 and f["status"] == "FAIL" and "3 boots" in f["message"]
    assert {c["name"]: c["status"] for c in report["nodes"][0]["checks"]}["gpu.xid"] == "FAIL"
    assert {a["name"] for a in report["analyses"]} >= {"ib.rates", "trend.counters"}  # judged over time too
    assert commands(tmp_path) == ["node --local", "node", "node"]
    code, again = local_run(cfg)  # the same boot again: the record adds no boot
    assert code == 2 and len(recurring(again)) == 1 and "3 boots" in recurring(again)[0]["message"]


def test_a_run_another_hc_started_neither_escalates_nor_records(tmp_path) -> None:
    cfg = setup(tmp_path)
    code, report = local_run(cfg, HC_AGENT="1")
    assert not recurring(report) and report["analyses"] == []
    assert commands(tmp_path) == ["node", "node"]
