"""Real component: Debian's prometheus-node-exporter scrapes the textfile `hc node --local
--prometheus DIR` wrote, and its /metrics shows hc's series with their labels and values,
hostile names (quotes, a backslash, unicode, a newline) escaped. Needs no rig: the
exporter runs as this user on 127.0.0.1 with only its textfile collector."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support import free_port, run_hc

from healthcheck.core.model import CheckResult, Metric, NodeResult, Report
from healthcheck.core.status import Status
from healthcheck.report.prometheus import export, label_value

EXPORTER = os.environ.get("HC_TEST_NODE_EXPORTER", "/usr/bin/prometheus-node-exporter")
# touches no rig (tests/conftest.py): runs beside the rig's tests, in any worker
USES_RIG = False
# a real directory the sys.disk check measures: its path becomes the `path` label
HOSTILE_DIR = 'we"ird \\ dir ü€ ☃'
# an interface name no kernel would accept, as a corrupted tool output could still give it
HOSTILE_IFACE = 'ib0"} 9\nhc_forged 1\n\\ü\u202e'


def scrape(url: str, proc: subprocess.Popen, deadline_s: float = 20.0) -> str:
    """GET /metrics, retried until the exporter listens (bounded)."""
    end = time.monotonic() + deadline_s
    last: Exception | None = None
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise AssertionError(f"node_exporter exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                return resp.read().decode("utf-8")
        except OSError as exc:
            last = exc
            time.sleep(0.1)
    raise AssertionError(f"node_exporter did not answer on {url} within {deadline_s}s: {last}")


def samples(text: str) -> dict[str, list]:
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def one(got: dict[str, list], name: str, **labels: str) -> float:
    found = [v for lab, v in got.get(name, []) if all(lab.get(k) == w for k, w in labels.items())]
    assert len(found) == 1, (name, labels, got.get(name))
    return found[0]


@pytest.fixture
def exporter(tmp_path):
    """node_exporter on a free loopback port reading tmp_path/textfile; killed by pid at the end."""
    if not Path(EXPORTER).is_file() or not os.access(EXPORTER, os.X_OK):
        pytest.skip(f"{EXPORTER} is not installed (Debian: apt-get install prometheus-node-exporter)")
    textfile = tmp_path / "textfile"
    textfile.mkdir()
    port = free_port()
    log = (tmp_path / "node_exporter.log").open("wb")
    proc = subprocess.Popen(
        [EXPORTER, f"--web.listen-address=127.0.0.1:{port}", "--collector.disable-defaults",
         "--collector.textfile", f"--collector.textfile.directory={textfile}", "--web.disable-exporter-metrics"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield textfile, f"http://127.0.0.1:{port}/metrics", proc, tmp_path / "node_exporter.log"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


def config(tmp_path: Path) -> Path:
    hostile = tmp_path / HOSTILE_DIR
    hostile.mkdir()
    (tmp_path / "fabrics").mkdir()
    # JSON strings are YAML double-quoted scalars: the quote and backslash arrive intact
    (tmp_path / "fabrics" / "t.yaml").write_text(
        f"sys:\n  disk_free_min_gib:\n    {json.dumps(str(hostile))}: 0.000001\n")
    cfg = tmp_path / "hc.yaml"
    cfg.write_text(f"default_fabric: t\nfabric_dirs: [{tmp_path}/fabrics]\n")
    return cfg


def test_node_exporter_scrapes_what_hc_node_wrote(exporter, tmp_path):
    textfile, url, proc, log = exporter
    before = time.time()
    r = run_hc("node", "--local", "--tier", "quick", "--checks", "sys.disk", "--config", str(config(tmp_path)),
               "--prometheus", str(textfile), "--format", "json", env={"HC_NODE_NAME": "node7"})
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    # a second file from the exporter itself: a name only a corrupted tool output could give
    node = NodeResult(node="node7", fabric="t", status=Status.PASS, checks=[CheckResult("net.mtu", Status.PASS, 0.1)],
                      metrics=[Metric("mtu", 4092, "bytes", component=HOSTILE_IFACE)])
    export(Report(run_id="x", hc_version="0", command="health", tier="quick", config_digest="", config_path="",
                  started_at="2026-11-23T12:00:00Z", finished_at="2026-11-23T12:00:00Z", duration_s=0.1, host="h",
                  status=Status.PASS, nodes=[node]), textfile)

    got = samples(scrape(url, proc))
    assert one(got, "node_textfile_scrape_error") == 0
    assert {lab["file"].rsplit("/", 1)[-1] for lab, _ in got["node_textfile_mtime_seconds"]} == {
        "hc-node.prom", "hc-health.prom"}
    base = {"command": "node", "tier": "quick"}
    assert one(got, "hc_node_status", node="node7", status="PASS", fabric="t", **base) == 1
    assert one(got, "hc_node_status", node="node7", status="FAIL", **base) == 0
    assert one(got, "hc_check_status", node="node7", check="sys.disk", status="PASS", **base) == 1
    assert before - 1 <= one(got, "hc_last_run_timestamp_seconds", **base) <= time.time() + 1
    assert one(got, "hc_run_duration_seconds", **base) == report["duration_s"]
    (free,) = [m["value"] for m in report["nodes"][0]["metrics"] if m["name"] == "free_gib"]
    path = str(tmp_path / HOSTILE_DIR)
    assert one(got, "hc_filesystem_free_bytes", node="node7", path=path, **base) == free * 2**30
    # the hostile interface name: escaped in the file, the same text after the scrape
    assert one(got, "hc_network_mtu_bytes", node="node7", interface=label_value(HOSTILE_IFACE), command="health") == 4092
    assert "hc_forged" not in got
    # hc's two files share families and never a series: node_exporter collected them all
    text = log.read_text(errors="replace")
    assert "collected before" not in text and "level=error" not in text, text


def test_a_rewritten_file_replaces_the_series(exporter, tmp_path):
    textfile, url, proc, log = exporter
    cfg = config(tmp_path)
    env = {"HC_NODE_NAME": "node7"}
    assert run_hc("node", "--local", "--tier", "quick", "--checks", "sys.disk", "--config", str(cfg),
                  "--prometheus", str(textfile), env=env).returncode == 0
    first = one(samples(scrape(url, proc)), "hc_last_run_timestamp_seconds", command="node")
    shutil.rmtree(tmp_path / HOSTILE_DIR)  # the path is gone: sys.disk now FAILs
    r = run_hc("node", "--local", "--tier", "quick", "--checks", "sys.disk", "--config", str(cfg),
               "--prometheus", str(textfile), env=env)
    assert r.returncode == 2, r.stderr
    got = samples(scrape(url, proc))
    assert one(got, "node_textfile_scrape_error") == 0
    assert one(got, "hc_last_run_timestamp_seconds", command="node") >= first
    assert one(got, "hc_check_status", node="node7", check="sys.disk", status="FAIL") == 1
    assert one(got, "hc_check_status", node="node7", check="sys.disk", status="PASS") == 0
    assert [lab["severity"] for lab, _ in got["hc_finding"]] == ["FAIL"]
    assert os.listdir(textfile) == ["hc-node.prom"]
