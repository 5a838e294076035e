"""The Prometheus textfile export: its series read back with prometheus_client's own parser,
its text byte for byte what prometheus_client's writer gives, the atomic write into
node_exporter's directory, hostile label values, the bounds, and the hooks, whose exit
codes a failed export never changes. (The real node_exporter scrapes the file in
tests/integration/test_prometheus_node_exporter.py.)"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import stat
import time
from collections import Counter
from pathlib import Path

import msgspec
import pytest
from prometheus_client.parser import text_string_to_metric_families
from support import run_hc, run_hc_inproc, srun_stand_in
from synthetic import single_node_report, synthetic_node
from test_hook_contract import _hc_with
from test_hooks import setup

from healthcheck.core.atomic import WriteError
from healthcheck.core.config.schema import PrometheusSettings
from healthcheck.core.model import (
    AnalysisRun,
    CheckResult,
    Finding,
    GroupResult,
    Metric,
    NodeResult,
    Report,
    fingerprint,
)
from healthcheck.core.status import Status
from healthcheck.report import prometheus
from healthcheck.report.prometheus import export, label_value, render

HOSTILE_IFACE = 'ib0"} 7\nhc_forged{x="1\\'  # a quote, a brace, a newline, a backslash: a forged series if unescaped
UNICODE_IFACE = "ethü€\u202e\x01\udcff"  # unicode, a bidi override, a control, a lone surrogate (non-UTF-8 name)


def samples(text: bytes | str) -> dict[str, list]:
    """name -> [(labels, value)], through prometheus_client's parser (what Prometheus reads)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def types(text: bytes) -> dict[str, str]:
    return {line.split()[2]: line.split()[3] for line in text.decode().splitlines() if line.startswith("# TYPE ")}


def value(got: dict[str, list], name: str, **labels: str) -> float:
    found = [v for lab, v in got.get(name, []) if all(lab.get(k) == w for k, w in labels.items())]
    assert len(found) == 1, (name, labels, got.get(name))
    return found[0]


def finding(node: str, check: str, fid: str, status: Status, component: str, message: str) -> Finding:
    subject = f"{node}:{component}"
    return Finding(id=fid, status=status, message=message, component=component, node=node, check=check,
                   subject=subject, fingerprint=fingerprint(node, check, subject, fid))


def node_result(name: str = "gpu017", iface: str = "ib0") -> NodeResult:
    checks = [CheckResult("gpu.clocks", Status.PASS, 0.01), CheckResult("ib.counters", Status.FAIL, 0.02),
              CheckResult("bw.nccl", Status.WARN, 12.5), CheckResult("gpu.xid", Status.SKIP, 0.0, "no GPU"),
              CheckResult("sys.services", Status.ERROR, 1.0, "ps missing")]
    findings = [
        finding(name, "ib.counters", "ib.E003", Status.FAIL, "mlx5_2/1:symbol_error", 'symbol_error 9000 > 100 "free text"'),
        finding(name, "bw.nccl", "bw.E001", Status.WARN, "all_reduce/single_node/16G", "short"),
        finding(name, "sys.services", "hc.E001", Status.ERROR, "ps", "ps missing"),
    ]
    metrics = [
        Metric("temperature_c", 61.5, "C", component="GPU0"),
        Metric("ecc_volatile_corrected", 3, component="GPU0"),
        Metric("ecc_volatile_uncorrected", 0, component="GPU0"),
        Metric("model", "NVIDIA H100 80GB HBM3", component="GPU0"),
        Metric("driver_version", "550.54.15"),
        Metric("symbol_error", 9000, component="mlx5_2/1"),
        Metric("rate_gbps", 400.0, "Gb/s", component="mlx5_2/1"),
        Metric("fw_ver", "28.39.1002", component="mlx5_2/1"),
        Metric("busbw_gbytes_per_s", 361.25, "GB/s", component="all_reduce/single_node/16G"),
        Metric("busbw_gbytes_per_s", 100.0, "GB/s", component="all_reduce/ib_loopback/1M"),
        Metric("bw_gbps", 380.0, "Gb/s", component="mlx5_2/1"),
        Metric("counter_rise", 4, component="mlx5_2/1:symbol_error"),
        Metric("mtu", 4092, "bytes", component=iface),
        Metric("mem_total_gib", 2015.5, "GiB"),
        Metric("free_gib", 10.0, "GiB", component="/tmp"),
        Metric("kernel_log", "since boot"),  # text, not a label: never exported
        Metric("future_metric", 7, "widgets", component="x"),  # no series of its own: hc_metric
    ]
    return NodeResult(node=name, fabric="h100-ndr400", status=Status.FAIL, checks=checks, findings=findings,
                      metrics=metrics)


def report_of(*nodes: NodeResult, command: str = "node --local", tier: str = "quick", **extra) -> Report:
    return Report(run_id="20261123T120000Z-abcdef", hc_version="0.1.0", command=command, tier=tier,
                  config_digest="sha256:" + "1" * 64, config_path="/etc/hc/hc.yaml",
                  started_at="2026-11-23T12:00:00.000Z", finished_at="2026-11-23T12:00:01.500Z", duration_s=1.5,
                  host="login1", status=Status.FAIL, nodes=list(nodes), **extra)


# ------------------------------------------------------------------ content


def test_the_series_read_back_with_their_labels_values_and_base_units():
    text = render(report_of(node_result()))
    got = samples(text)
    base = {"command": "node", "tier": "quick"}
    assert value(got, "hc_last_run_timestamp_seconds", **base) == dt.datetime(
        2026, 11, 23, 12, 0, 1, 500000, tzinfo=dt.timezone.utc).timestamp()
    assert value(got, "hc_run_duration_seconds", **base) == 1.5
    assert value(got, "hc_run_info", hc_version="0.1.0") == 1
    # statuses are one-hot: exactly one 1 per check, on its status
    for check, status in [("gpu.clocks", "PASS"), ("ib.counters", "FAIL"), ("bw.nccl", "WARN"), ("gpu.xid", "SKIP"),
                          ("sys.services", "ERROR")]:
        rows = {lab["status"]: v for lab, v in got["hc_check_status"] if lab["check"] == check}
        assert rows == {s: float(s == status) for s in ("PASS", "SKIP", "WARN", "ERROR", "FAIL")}, check
    assert value(got, "hc_node_status", node="gpu017", fabric="h100-ndr400", status="FAIL") == 1
    assert value(got, "hc_check_duration_seconds", node="gpu017", check="bw.nccl") == 12.5
    assert [(lab["id"], lab["subject"], lab["severity"], lab["check"]) for lab, v in got["hc_finding"]] == [
        ("ib.E003", "gpu017:mlx5_2/1:symbol_error", "FAIL", "ib.counters"),
        ("bw.E001", "gpu017:all_reduce/single_node/16G", "WARN", "bw.nccl"),
        ("hc.E001", "gpu017:ps", "ERROR", "sys.services")]
    assert {lab["severity"]: v for lab, v in got["hc_findings"]} == {"FAIL": 1, "ERROR": 1, "WARN": 1}
    # measurements, in base units
    assert value(got, "hc_gpu_temperature_celsius", gpu="GPU0") == 61.5
    assert value(got, "hc_gpu_ecc_volatile_errors_total", gpu="GPU0", type="corrected") == 3
    assert value(got, "hc_ib_port_errors_total", port="mlx5_2/1", counter="symbol_error") == 9000
    assert value(got, "hc_ib_port_rate_bytes_per_second", port="mlx5_2/1") == 50e9  # 400 Gb/s
    assert value(got, "hc_busbw_bytes_per_second", collective="all_reduce", scope="single_node", size="16G") == 361.25e9
    assert value(got, "hc_busbw_bytes_per_second", scope="ib_loopback", size="1M") == 100e9
    assert value(got, "hc_ib_write_bw_bytes_per_second", port="mlx5_2/1") == 47.5e9
    assert value(got, "hc_ib_write_bw_counter_rise", port="mlx5_2/1", counter="symbol_error") == 4
    assert value(got, "hc_network_mtu_bytes", interface="ib0") == 4092
    assert value(got, "hc_memory_total_bytes") == 2015.5 * 2**30
    assert value(got, "hc_filesystem_free_bytes", path="/tmp") == 10 * 2**30
    assert value(got, "hc_gpu_model_info", gpu="GPU0", model="NVIDIA H100 80GB HBM3") == 1
    assert value(got, "hc_software_info", software="driver", version="550.54.15") == 1
    assert value(got, "hc_ib_firmware_info", port="mlx5_2/1", version="28.39.1002") == 1
    assert value(got, "hc_metric", metric="future_metric", component="x", unit="widgets") == 7
    assert value(got, "hc_export_dropped_series") == 0
    # conventions: hc_ prefix, every series labelled with command and tier, counters only _total
    assert all(name.startswith("hc_") for name in got)
    assert all(lab["command"] == "node" and lab["tier"] == "quick" for rows in got.values() for lab, _ in rows)
    kinds = types(text)
    assert {n for n, t in kinds.items() if t == "counter"} == {"hc_gpu_ecc_volatile_errors_total",
                                                              "hc_ib_port_errors_total"}
    assert all(n.endswith("_total") == (t == "counter") for n, t in kinds.items())


def test_free_text_is_never_a_label_and_no_series_appears_twice():
    text = render(report_of(node_result()))
    assert b"free text" not in text and b"since boot" not in text and b"ps missing" not in text
    lines = [line for line in text.decode().splitlines() if not line.startswith("#")]
    assert [line for line, n in Counter(line.rsplit(" ", 1)[0] for line in lines).items() if n > 1] == []


def test_a_duplicate_metric_keeps_one_series():
    # bw.nccl and bw.torch both report all_reduce/single_node busbw: one series, never a
    # file node_exporter refuses for a series collected twice
    n = node_result()
    n = msgspec.structs.replace(n, metrics=[*n.metrics, Metric("busbw_gbytes_per_s", 1.0, "GB/s",
                                                               component="all_reduce/single_node/16G")])
    got = samples(render(report_of(n)))
    assert value(got, "hc_busbw_bytes_per_second", scope="single_node", size="16G") == 361.25e9


def test_a_sweep_has_per_node_series_and_the_fleets():
    a, b = node_result("gpu001"), msgspec.structs.replace(node_result("gpu002"), status=Status.PASS)
    pair = GroupResult(kind="pair", name="gpu001-gpu002", members=["gpu001", "gpu002"], status=Status.WARN,
                       metrics=[Metric("busbw", 40.0, "GB/s", component="1G"),
                                Metric("ib_write_bw_gbits", 390.0, "Gb/s", component="mlx5_0"),
                                Metric("nccl_tests_busbw", 41.0, "GB/s", component="1G")])
    report = report_of(a, b, command="sweep", tier="deep", groups=[pair],
                       analyses=[AnalysisRun(name="fleet.drift", scope="fleet", status=Status.PASS),
                                 AnalysisRun(name="bw.pairs", scope="pairs", status=Status.FAIL)])
    got = samples(render(report))
    assert {lab["node"] for lab, _ in got["hc_node_status"]} == {"gpu001", "gpu002"}
    assert {lab["status"]: v for lab, v in got["hc_nodes"]} == {"PASS": 1, "FAIL": 1, "SKIP": 0, "WARN": 0, "ERROR": 0}
    assert value(got, "hc_analysis_status", analysis="bw.pairs", status="FAIL") == 1
    assert value(got, "hc_group_status", group="gpu001-gpu002", kind="pair", status="WARN") == 1
    assert value(got, "hc_group_busbw_bytes_per_second", group="gpu001-gpu002", metric="busbw", size="1G") == 40e9
    assert value(got, "hc_group_busbw_bytes_per_second", metric="nccl_tests_busbw", size="1G") == 41e9
    assert value(got, "hc_group_ib_write_bw_bytes_per_second", port="mlx5_0") == 48.75e9
    assert all(lab["command"] == "sweep" and lab["tier"] == "deep" for rows in got.values() for lab, _ in rows)


def test_an_epilogue_report_is_labelled_with_its_context():
    got = samples(render(report_of(node_result(), command="epilogue", tier="epilogue")))
    assert value(got, "hc_last_run_timestamp_seconds", command="epilogue", tier="epilogue") > 0


def prometheus_client_text(series: prometheus.Series) -> bytes:
    """The same families through prometheus_client's own writer (generate_latest)."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily
    from prometheus_client.registry import Collector

    families = []
    for name, fam in series.families.items():
        out = (CounterMetricFamily if fam.kind == "counter" else GaugeMetricFamily)(name, fam.help, labels=fam.labels)
        for key, v in fam.samples.items():
            out.add_metric(list(key), v)
        families.append(out)

    class Families(Collector):
        def collect(self):
            return families

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Families())
    return generate_latest(registry)


def test_the_text_is_byte_for_byte_what_prometheus_client_writes():
    odd = [math.nan, math.inf, -math.inf, 1e300, -1e300, 1234567.0, 12345678.0, 5e10, 0.1, 1e-300, -0.0, 2**62]
    n = node_result(iface=HOSTILE_IFACE)
    n = msgspec.structs.replace(n, metrics=[*n.metrics, *(Metric("future", v, component=f"c{i}") for i, v in enumerate(odd))])
    reports = [report_of(n), report_of(node_result(iface=UNICODE_IFACE), command="sweep", tier="deep"),
               report_of(node_result(iface="\n\\\""), command="epilogue", tier="epilogue"),
               *(single_node_report(synthetic_node(i)) for i in range(20))]
    for report in reports:
        series = prometheus.build(report)
        assert prometheus.to_text(series) == prometheus_client_text(series)


def test_the_export_does_not_import_prometheus_client():
    # its package imports http.server, urllib and ssl: 20-40 ms of a prologue's budget
    import subprocess
    import sys

    code = ("import sys, tempfile\nsys.path.insert(0, 'tests')\nfrom synthetic import single_node_report, synthetic_node\n"
            "from healthcheck.report.prometheus import export\n"
            "export(single_node_report(synthetic_node(1)), tempfile.mkdtemp())\n"
            "print(sorted(m for m in sys.modules if m.startswith(('prometheus_client', 'http.server', 'ssl'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).resolve().parents[3])
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# ------------------------------------------------------------------ hostile label values


@pytest.mark.parametrize("name", [HOSTILE_IFACE, UNICODE_IFACE, 'a\\"b\\\\c', "\n", "€" * 40])
def test_hostile_label_values_are_escaped_and_read_back(name):
    text = render(report_of(node_result(iface=name)))
    text.decode("utf-8")  # whatever the name, the file is UTF-8 (node_exporter rejects a file that is not)
    got = samples(text)
    assert value(got, "hc_network_mtu_bytes", interface=label_value(name)) == 4092
    assert "hc_forged" not in got  # nothing in a name starts a series of its own
    assert all(line.startswith(("#", "hc_")) for line in text.decode().splitlines())


def test_label_value_keeps_printable_text_and_writes_the_rest_as_escapes():
    assert label_value('ib0"x\\y\nz') == 'ib0"x\\y\nz'  # the format escapes these three itself
    assert label_value("ethü€") == "ethü€"
    assert label_value("a\x01b\u202ec\udcff") == "a\\x01b\\u202ec\\udcff"


def test_long_label_values_are_cut_and_stay_distinct():
    one, two = "x" * 300 + "1", "x" * 300 + "2"
    assert len(label_value(one)) == 128 and label_value(one) != label_value(two)
    report = report_of(msgspec.structs.replace(node_result(), metrics=[Metric("mtu", 1, component=one),
                                                                        Metric("mtu", 2, component=two)]))
    got = samples(render(report, PrometheusSettings(label_max_chars=64)))
    assert sorted(v for _, v in got["hc_network_mtu_bytes"]) == [1, 2]
    assert all(len(lab["interface"]) == 64 for lab, _ in got["hc_network_mtu_bytes"])


# ------------------------------------------------------------------ bounds


def test_the_series_bound_keeps_the_most_important_and_counts_the_rest():
    nodes = [synthetic_node(i) for i in range(40)]  # ~330 series each
    report = report_of(*nodes, command="sweep", tier="standard")
    got = samples(render(report, PrometheusSettings(max_series=1000)))
    series = sum(len(rows) for rows in got.values())
    dropped = value(got, "hc_export_dropped_series")
    assert dropped > 0 and series <= 1000 + 20  # the run's own series are never dropped
    # every node's status made it; the measurements are what gave way
    assert {lab["node"] for lab, v in got["hc_node_status"]} == {n.node for n in nodes}
    full = samples(render(report))
    assert sum(len(rows) for rows in full.values()) - 1 == series - 1 + dropped


def test_findings_per_node_are_bounded():
    n = node_result()
    many = [finding("gpu017", "gpu.xid", "gpu.E020", Status.FAIL, f"GPU{i}:xid{i}", "x") for i in range(500)]
    n = msgspec.structs.replace(n, findings=many)
    got = samples(render(report_of(n), PrometheusSettings(max_findings_per_node=10)))
    assert len(got["hc_finding"]) == 10
    assert value(got, "hc_export_dropped_series") == 490
    assert value(got, "hc_findings", severity="FAIL") == 500  # the count is whole


# ------------------------------------------------------------------ the file


def test_export_writes_the_file_atomically_and_leaves_no_temporary(tmp_path, monkeypatch):
    renamed = []
    real = os.replace

    def spy(src, dst):
        renamed.append((Path(src), Path(dst)))
        return real(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    report = single_node_report(synthetic_node(1))
    path = export(report, tmp_path)
    assert path == tmp_path / "hc-node.prom"
    (src, dst), = renamed
    # the temporary is in the same directory (rename is atomic there) and never a *.prom
    assert src.parent == tmp_path and dst == path and not src.name.endswith(".prom")
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert os.listdir(tmp_path) == ["hc-node.prom"]
    assert samples(path.read_bytes())["hc_node_status"]
    export(report, tmp_path, command="prologue")
    assert sorted(os.listdir(tmp_path)) == ["hc-node.prom", "hc-prologue.prom"]


def test_a_failed_rename_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    report = single_node_report(synthetic_node(1))
    path = export(report, tmp_path)
    before = path.read_bytes()

    def broken(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(WriteError, match="No space left on device"):
        export(report_of(node_result()), tmp_path)
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["hc-node.prom"]


def test_what_is_not_a_regular_file_at_the_path_is_refused_and_untouched(tmp_path):
    report = single_node_report(synthetic_node(1))
    target = tmp_path / "hc-node.prom"
    target.mkdir()
    with pytest.raises(WriteError, match="directory"):
        export(report, tmp_path)
    assert target.is_dir()
    target.rmdir()
    victim = tmp_path / "victim"
    victim.write_text("keep")
    target.symlink_to(victim)
    with pytest.raises(WriteError, match="symbolic link"):
        export(report, tmp_path)
    assert target.is_symlink() and victim.read_text() == "keep"
    target.unlink()
    os.mkfifo(target)  # no reader: refused at once, never a hang
    with pytest.raises(WriteError, match="FIFO"):
        export(report, tmp_path)
    assert stat.S_ISFIFO(os.lstat(target).st_mode)


def test_the_directory_must_exist_and_be_one(tmp_path):
    report = single_node_report(synthetic_node(1))
    with pytest.raises(WriteError, match="does not exist"):
        export(report, tmp_path / "missing")
    assert not (tmp_path / "missing").exists()
    (tmp_path / "file").write_text("")
    with pytest.raises(WriteError, match="not a directory"):
        export(report, tmp_path / "file")
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")  # a textfile directory that is a link is fine
    export(report, tmp_path / "link")
    assert (tmp_path / "real" / "hc-node.prom").is_file()


def test_a_temporary_left_by_a_killed_run_is_removed_a_fresh_one_kept(tmp_path):
    old, fresh = tmp_path / ".hc-node.prom.abc123.tmp", tmp_path / ".hc-node.prom.def456.tmp"
    other = tmp_path / ".node_exporter_other.tmp"
    for p in (old, fresh, other):
        p.write_text("half")
    os.utime(old, (1, 1))
    os.utime(other, (1, 1))
    export(single_node_report(synthetic_node(1)), tmp_path)
    assert not old.exists() and fresh.exists() and other.exists()


# ------------------------------------------------------------------ the commands


def test_hc_node_local_writes_the_textfile(tmp_path):
    out = tmp_path / "textfile"
    out.mkdir()
    r = run_hc_inproc("node", "--local", "--tier", "quick", "--prometheus", str(out), "--format", "json",
               env={"HC_NODE_NAME": "node7"})
    assert r.returncode in (0, 3), r.stderr  # PASS, or ERROR where this machine lacks a tool
    report = json.loads(r.stdout)
    got = samples((out / "hc-node.prom").read_bytes())
    assert value(got, "hc_node_status", node="node7", status=report["status"]) == 1
    for check in report["nodes"][0]["checks"]:
        assert value(got, "hc_check_status", node="node7", check=check["name"], status=check["status"]) == 1
    assert os.listdir(out) == ["hc-node.prom"]


def test_hc_node_with_an_unusable_textfile_directory_is_one_line_and_exit_4_or_a_warning_after_the_run(tmp_path):
    r = run_hc("node", "--local", "--prometheus", str(tmp_path / "missing"))
    assert r.returncode == 4 and r.stderr.decode().count("\n") == 1 and b"does not exist" in r.stderr
    assert r.stdout == b""  # refused before any check ran
    (tmp_path / "hc-node.prom").symlink_to(tmp_path / "elsewhere")
    r = run_hc("node", "--local", "--prometheus", str(tmp_path), "--format", "json")
    # the checks ran and their report is shown; the lost export is a warning and hc.E008,
    # so the run never exits 0 (ERROR, 3) and a FAIL keeps its 2 (issue 18, B.7: it was 4)
    report = json.loads(r.stdout)
    assert r.returncode == 3 and report["nodes"] and b"symbolic link" in r.stderr
    assert [f["id"] for f in report["run_findings"]] == ["hc.E008"] and b"--prometheus" in r.stderr
    assert b"Traceback" not in r.stderr and b"hc: error" not in r.stderr and not (tmp_path / "elsewhere").exists()
    (tmp_path / "fabrics").mkdir()
    (tmp_path / "fabrics" / "t.yaml").write_text("net:\n  interfaces:\n    lo: {mtu: 1500}\n")  # lo FAILs
    (tmp_path / "hc.yaml").write_text("default_fabric: t\n")
    r = run_hc("node", "--local", "--config", str(tmp_path / "hc.yaml"), "--prometheus", str(tmp_path),
               env={"HC_NODE_NAME": "gpu017"})
    assert r.returncode == 2 and b"symbolic link" in r.stderr and b"hc.E008" in r.stdout


def test_sweep_exports_from_the_config(tmp_path):
    out = tmp_path / "textfile"
    out.mkdir()
    (tmp_path / "fabrics").mkdir()
    (tmp_path / "fabrics" / "t.yaml").write_text("net:\n  interfaces:\n    lo: {mtu: 65536}\n")
    cfg = tmp_path / "hc.yaml"
    cfg.write_text(f"default_fabric: t\nhistory: {{path: {tmp_path}/h.sqlite}}\nprometheus:\n  textfile_dir: {out}\n")
    bin_dir = srun_stand_in(tmp_path)
    r = run_hc_inproc("sweep", "--via", "slurm", "--nodes", "n[1-3]", "--tier", "quick", "--config", str(cfg),
               env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    # the nodes' own `hc node --local` runs do not export: "node" is not in prometheus.commands
    assert os.listdir(out) == ["hc-sweep.prom"]
    got = samples((out / "hc-sweep.prom").read_bytes())
    assert {lab["node"] for lab, v in got["hc_node_status"] if v == 1 and lab["status"] == "PASS"} == {"n1", "n2", "n3"}
    assert value(got, "hc_nodes", status="PASS", command="sweep") == 3
    # the config's directory missing on this host: a warning, and the sweep runs as it would
    out.rename(tmp_path / "gone")
    r = run_hc_inproc("sweep", "--via", "slurm", "--nodes", "n[1-3]", "--tier", "quick", "--config", str(cfg),
               env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    assert r.returncode == 0 and b"warning: prometheus.textfile_dir" in r.stderr, r.stderr
    assert b"Traceback" not in r.stderr and not out.exists()


@pytest.mark.parametrize("text, message", [
    ("prometheus:\n  textfile_dir: relative/dir\n", "an absolute path"),
    ("prometheus:\n  commands: [prologue, bogus]\n", "prometheus.commands"),
    ("prometheus:\n  max_series: 0\n", "prometheus.max_series"),
    ("prometheus:\n  textfile: /x\n", "textfile"),
])
def test_the_config_section_is_strict(tmp_path, text, message):
    cfg = tmp_path / "hc.yaml"
    cfg.write_text("default_fabric: generic\n" + text)
    r = run_hc_inproc("config", "validate", str(cfg))
    assert r.returncode == 4 and message in r.stderr.decode() and b"hc.yaml:" in r.stderr, r.stderr


# ------------------------------------------------------------------ the hooks


def with_textfile(tmp_path: Path, env: dict, directory: Path) -> None:
    cfg = Path(env["HC_CONFIG"])
    cfg.write_text(cfg.read_text() + f"prometheus:\n  textfile_dir: {directory}\n")


def test_hooks_write_their_own_textfile(tmp_path):
    bin_dir, log, env = setup(tmp_path, mtu=1500)
    out = tmp_path / "textfile"
    out.mkdir()
    with_textfile(tmp_path, env, out)
    assert run_hc("prologue", env=env, timeout=30).returncode == 2
    assert run_hc("epilogue", env=env, timeout=30).returncode == 0
    assert run_hc("health", env=env, timeout=30).returncode == 2
    assert sorted(os.listdir(out)) == ["hc-epilogue.prom", "hc-health.prom", "hc-prologue.prom"]
    got = samples((out / "hc-prologue.prom").read_bytes())
    assert value(got, "hc_check_status", node="node1", check="net.mtu", status="FAIL", command="prologue",
                 tier="quick") == 1
    (row,) = [lab for lab, _ in got["hc_finding"] if lab["id"] == "net.E001"]
    assert row["node"] == "node1" and row["severity"] == "FAIL"
    assert samples((out / "hc-epilogue.prom").read_bytes())["hc_run_status"][0][0]["tier"] == "epilogue"


@pytest.mark.parametrize("mtu, codes", [(1500, {"prologue": 2, "epilogue": 0, "health": 2}),
                                        (65536, {"prologue": 0, "epilogue": 0, "health": 0})])
def test_a_failed_export_never_changes_a_hooks_exit_code(tmp_path, mtu, codes):
    bin_dir, log, env = setup(tmp_path, mtu=mtu)
    with_textfile(tmp_path, env, tmp_path / "no-such-dir")
    for kind, code in codes.items():
        r = run_hc(kind, env=env, timeout=30)
        assert r.returncode == code, (kind, r.stderr)
        assert b"prometheus textfile not written" in r.stdout + r.stderr and b"Traceback" not in r.stderr
    assert not (tmp_path / "no-such-dir").exists()


def test_an_exporter_that_breaks_never_changes_a_hooks_exit_code(tmp_path):
    bin_dir, log, env = setup(tmp_path, mtu=1500)
    out = tmp_path / "textfile"
    out.mkdir()
    with_textfile(tmp_path, env, out)
    patch = """
        import healthcheck.report.prometheus as p
        def broken(*a, **k):
            raise MemoryError("exporter broke")
        p.render = broken
    """
    for kind, code in {"prologue": 2, "epilogue": 0, "health": 2}.items():
        r = _hc_with(patch, kind, env=env)
        assert r.returncode == code, (kind, r.stderr)
        assert b"exporter broke" in r.stdout + r.stderr
    assert os.listdir(out) == []


def test_an_export_that_hangs_keeps_the_hooks_exit_code(tmp_path):
    """A textfile directory that does not answer (a stale NFS mount) is waited for a
    bounded time only: the health hook still exits 2 on FAIL, well before its deadline."""
    bin_dir, log, env = setup(tmp_path, mtu=1500)
    out = tmp_path / "textfile"
    out.mkdir()
    with_textfile(tmp_path, env, out)
    patch = """
        import time
        import healthcheck.report.prometheus as p
        def hung(*a, **k):
            time.sleep(60)
        p.render = hung
    """
    start = time.monotonic()
    r = _hc_with(patch, "health", env=env)
    assert r.returncode == 2, r.stderr
    assert b"did not answer within" in r.stdout + r.stderr
    assert time.monotonic() - start < 30


def test_a_hook_report_still_reaches_slurm_and_report_dir_when_the_export_fails(tmp_path):
    bin_dir, log, env = setup(tmp_path, mtu=1500)
    with_textfile(tmp_path, env, tmp_path / "no-such-dir")
    assert run_hc("prologue", env=env, timeout=30).returncode == 2
    assert log.read_text().strip() == "update nodename=node1 state=drain reason=hc: net.E001"
    assert (tmp_path / "reports" / "node1" / "prologue-latest.json").is_file()


def test_the_module_is_not_imported_by_hc_help():
    r = run_hc("--help")
    assert r.returncode == 0
    code = "import sys\nfrom healthcheck.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n" \
           "print('prometheus_client' in sys.modules, 'healthcheck.report.prometheus' in sys.modules, file=sys.stderr)"
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert out.stderr.decode().strip().splitlines()[-1] == "False False"


def test_metric_maps_name_valid_families():
    import re

    names = {m.family for m in prometheus.METRICS.values()} | {f for f, *_ in prometheus.INFO.values()}
    assert all(re.fullmatch(r"hc_[a-z0-9_]+", n) for n in names)
    assert all(m.family.endswith("_total") == (m.kind == "counter") for m in prometheus.METRICS.values())
