"""`hc baseline`: thresholds learned from sweep reports, written as a fabric file the real
config loader accepts and names as the source of what it sets; a node below a learned
floor then FAILs the bandwidth check with that file as the limit's source."""

from __future__ import annotations

import datetime as dt
import json
import random
from pathlib import Path

import msgspec
import pytest
import yaml
from support import run_hc, run_hc_inproc

from healthcheck.core.config.loader import Config, load_config
from healthcheck.core.config.schema import BaselineSettings
from healthcheck.core.errors import ConfigError, HcError
from healthcheck.core.facts import ProbeContext
from healthcheck.core.model import Finding, GroupResult, Metric, NodeResult, Report
from healthcheck.core.registry import select
from healthcheck.core.status import Status
from healthcheck.orchestrate.engine import run_checks
from healthcheck.report.baseline import learn, render
from healthcheck.report.build import make_report
from healthcheck.report.jsonio import encode
from healthcheck.runners.local import LocalRunner

STANDINS = Path(__file__).resolve().parents[2] / "standins" / "nccl-tests"
T0 = dt.datetime(2026, 11, 20, 2, 0, tzinfo=dt.timezone.utc)
FLOOR_KEY = "bandwidth.all_reduce.single_node.busbw_min_gbytes_per_s.8G"


# ------------------------------------------------------------------ helpers


def write_report(path: Path, nodes: list[NodeResult], k: int = 0, groups: list[GroupResult] = ()) -> Path:
    """A sweep report as hc writes it (report.build.make_report, jsonio.encode)."""
    start = T0 + dt.timedelta(hours=k)
    report = make_report(command="sweep", tier="deep", config_digest="sha256:" + "0" * 64,
                         config_path="/etc/hc/hc.yaml", started=start, finished=start + dt.timedelta(minutes=9),
                         nodes=nodes, groups=groups)
    path.write_bytes(encode(report))
    return path


def deep_node(name: str, metrics: list[Metric], status: Status = Status.PASS, fabric: str = "h100-ndr400",
              findings: tuple[Finding, ...] = ()) -> NodeResult:
    return NodeResult(node=name, fabric=fabric, status=status, checks=[], findings=list(findings), metrics=metrics)


def busbw(value: float, where: str = "all_reduce/single_node/16G") -> Metric:
    return Metric("busbw_gbytes_per_s", value, "GB/s", component=where)


def fleet(n: int, seed: int = 0, center: float = 470.0, sd: float = 2.0) -> list[NodeResult]:
    rng = random.Random(seed)
    return [deep_node(f"gpu{i:03d}", [busbw(rng.gauss(center, sd)), Metric("nccl_version", "2.21.5")])
            for i in range(n)]


def learned(tmp_path: Path, reports: list, fabric: str = "h100-ndr400", **settings: float) -> tuple:
    """learn() over reports (or lists of nodes) with the embedded config's fabric: the result,
    and its learned (or kept) and refused keys by dotted name."""
    cfg = load_config(None)
    reps = [r if isinstance(r, Report) else _report(r, k) for k, r in enumerate(reports)]
    base = cfg.fabric(fabric)
    result = learn(((f"r{k}.json", r) for k, r in enumerate(reps)), fabric, base,
                   BaselineSettings(**settings))
    return result, {item.target.dotted: item for item in result.learned}, {r.target.dotted: r for r in result.refused}


def _report(nodes: list[NodeResult], k: int, groups: list[GroupResult] = ()) -> Report:
    start = T0 + dt.timedelta(hours=k)
    return make_report(command="sweep", tier="deep", config_digest="sha256:" + "0" * 64, config_path="x",
                       started=start, finished=start, nodes=nodes, groups=groups)


SINGLE_16G = "bandwidth.all_reduce.single_node.busbw_min_gbytes_per_s.16G"


# ------------------------------------------------------------ the end to end path


def node_root(tmp_path: Path, gpus: int = 8) -> Path:
    root = tmp_path / "root"
    for i in range(gpus):
        (root / "proc/driver/nvidia/gpus" / f"0000:{i + 1:02x}:00.0").mkdir(parents=True, exist_ok=True)
    return root


def site(tmp_path: Path, scenario: str) -> Path:
    """A site config: fabric `node` (nccl-tests through the stand-in replaying real captures,
    floors at 8G) in fabrics/, and site/ searched first for what `hc baseline` writes."""
    (tmp_path / "fabrics").mkdir(exist_ok=True)
    (tmp_path / "site").mkdir(exist_ok=True)
    (tmp_path / "fabrics" / "node.yaml").write_text(
        "extends: generic\nbandwidth:\n  sizes: [8G]\n  repeats: 2\n"
        "  all_reduce:\n    single_node: {busbw_min_gbytes_per_s: {8G: 200}}\n"
        "    ib_loopback: {busbw_min_gbytes_per_s: {8G: 18}}\n"
        f"  nccl_tests:\n    bin_dir: {STANDINS}\n    timeout_s: 30\n"
        f"    env: {{HC_STANDIN_SCENARIO: {scenario}, HC_STANDIN_STATE: {tmp_path}/state}}\n"
        "  torch: {enabled: false}\n")
    cfg = tmp_path / "hc.yaml"
    cfg.write_text("fabric_dirs: [site, fabrics]\nnodes:\n  'gpu[001-040]': node\n")
    return cfg


def check_node(cfg_path: Path, tmp_path: Path, node: str = "gpu001") -> NodeResult:
    cfg = load_config(cfg_path)
    ctx = ProbeContext(runner=LocalRunner(), root=node_root(tmp_path), timeout_s=120)
    result, _ = run_checks(cfg.for_node(node), select("deep", ["bw.nccl"]), ctx)
    return result


def test_learned_floor_fails_a_slow_node_and_names_the_baseline_file(tmp_path):
    cfg = site(tmp_path, "healthy")
    real = check_node(cfg, tmp_path)  # the real bw.nccl check on the stand-in's healthy capture
    assert real.status is Status.PASS, real.findings
    measured = {m.component: m.value for m in real.metrics if m.name == "busbw_gbytes_per_s"}
    assert measured["all_reduce/single_node/8G"] == 235.26
    reports = []
    for k in range(2):  # two sweeps of 12 nodes, each within 1% of the real figure
        nodes = []
        for i in range(12):
            jitter = 1 + ((i * 7 + k * 3) % 11 - 5) / 500
            metrics = [msgspec.structs.replace(m, value=round(m.value * jitter, 2))
                       if m.name == "busbw_gbytes_per_s" else m for m in real.metrics]
            nodes.append(msgspec.structs.replace(real, node=f"gpu{i + 1:03d}", metrics=metrics))
        reports.append(write_report(tmp_path / f"sweep{k}.json", nodes, k))
    out = tmp_path / "site" / "node.yaml"  # named after the fabric: it refines fabrics/node.yaml

    r = run_hc("baseline", *map(str, reports), "--fabric", "node", "--config", str(cfg), "-o", str(out))
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    assert "2 runs" in text and "Nodes learned from: 12;" in text and "24 pair" not in text
    floor = yaml.safe_load(text)["bandwidth"]["all_reduce"]["single_node"]["busbw_min_gbytes_per_s"]["8G"]
    assert 0.9 * 235.26 < floor < 235.26 * 0.99  # p5 less 5%: below every healthy node, far above a slow one

    r = run_hc("config", "validate", str(out), "--config", str(cfg))
    assert r.returncode == 0 and b"fabric node (extends node)" in r.stdout, r.stderr
    assert run_hc("config", "validate", str(cfg)).returncode == 0
    r = run_hc("config", "show", "gpu005", "--config", str(cfg), "--format", "json")
    limits = {row["key"]: row for row in json.loads(r.stdout)["limits"]}
    assert limits[FLOOR_KEY]["value"] == floor and limits[FLOOR_KEY]["source"].startswith(f"{out}:")
    assert limits["bandwidth.nccl_tests.timeout_s"]["source"].startswith(str(tmp_path / "fabrics" / "node.yaml"))

    site(tmp_path, "slow")  # the same fabric, now replaying the half-bandwidth capture
    slow = check_node(cfg, tmp_path)
    below = [f for f in slow.findings if f.id == "bw.E001" and f.component == "all_reduce/single_node/8G"]
    assert len(below) == 1 and below[0].status is Status.FAIL
    assert below[0].value == 117.63 and below[0].limit.value == floor
    assert below[0].limit.key == FLOOR_KEY and below[0].limit.source.startswith(f"{out}:")


def test_a_baseline_named_otherwise_is_a_new_fabric_nodes_are_mapped_to(tmp_path):
    reports = [write_report(tmp_path / f"r{k}.json", fleet(20, k), k) for k in range(3)]
    (tmp_path / "fabrics").mkdir()
    out = tmp_path / "fabrics" / "site-h100.yaml"
    cfg = tmp_path / "hc.yaml"
    cfg.write_text("default_fabric: generic\n")
    r = run_hc_inproc("baseline", *map(str, reports), "--fabric", "h100-ndr400", "--config", str(cfg), "-o", str(out))
    assert r.returncode == 0, r.stderr
    cfg.write_text("nodes:\n  'gpu[000-019]': site-h100\ndefault_fabric: generic\n")  # then map nodes to it
    r = run_hc_inproc("baseline", *map(str, reports), "--fabric", "h100-ndr400", "--config", str(cfg), "-o", str(out))
    assert r.returncode == 0, r.stderr  # and learning again later replaces it
    assert yaml.safe_load(out.read_text())["extends"] == "h100-ndr400"
    assert run_hc_inproc("config", "validate", str(cfg)).returncode == 0
    nc = Config(cfg).for_node("gpu003")
    assert nc.fabric_name == "site-h100" and nc.source(SINGLE_16G).startswith(f"{out}:")
    assert nc.limits.ib.rate_gbps == 400  # the rest still from h100-ndr400
    # every run, its date and the NCCL version are in the comments
    text = out.read_text()
    for k in range(3):
        assert f"started {(T0 + dt.timedelta(hours=k)).isoformat(timespec='milliseconds')[:19]}" in text
        assert str(reports[k]) in text
    assert "NCCL versions: 2.21.5 (20 nodes)" in text


# ---------------------------------------------------------------- refusals


def test_a_baseline_from_two_nodes_is_refused_with_the_reason(tmp_path):
    reports = [write_report(tmp_path / "r.json", fleet(2))]
    out = tmp_path / "two.yaml"
    r = run_hc_inproc("baseline", str(reports[0]), "--fabric", "h100-ndr400", "-o", str(out))
    assert r.returncode == 4 and not out.exists()
    lines = r.stderr.decode().splitlines()
    assert f"hc: refused: {SINGLE_16G}: 2 nodes, fewer than baseline.min_nodes 8" in lines
    assert lines[-1].startswith("hc: error: nothing learned for fabric h100-ndr400") and "not written" in lines[-1]
    assert b"Traceback" not in r.stderr


def test_too_few_nodes_and_too_much_spread_refuse_the_key_and_the_rest_is_written(tmp_path):
    rng = random.Random(3)
    nodes = [deep_node(f"n{i}", [busbw(rng.gauss(470, 2)),
                                 busbw(rng.uniform(100, 400), "all_reduce/single_node/1G")]) for i in range(30)]
    pairs = [GroupResult(kind="pair", name=f"n{2 * k}-n{2 * k + 1}", members=[f"n{2 * k}", f"n{2 * k + 1}"],
                         status=Status.PASS, metrics=[Metric("busbw", rng.gauss(360, 2), "GB/s", component="16G")])
             for k in range(5)]
    result, got, refused = learned(tmp_path, [_report(nodes, 0, pairs)])
    assert SINGLE_16G in got and got[SINGLE_16G].value is not None
    assert "spread too wide" in refused["bandwidth.all_reduce.single_node.busbw_min_gbytes_per_s.1G"].reason
    assert refused["bandwidth.all_reduce.pair.busbw_min_gbytes_per_s.16G"].reason.startswith("5 pairs, fewer")
    text, data = render(result, name="x", extends="h100-ndr400", written_at="now", hc_version="t")
    assert "1G" not in data["bandwidth"]["all_reduce"]["single_node"]["busbw_min_gbytes_per_s"]
    assert "#   bandwidth.all_reduce.single_node.busbw_min_gbytes_per_s.1G: spread too wide" in text
    # the options move the bounds: with min_nodes 5 the 5 pair-scope nodes are enough
    _, got, _ = learned(tmp_path, [_report(nodes, 0, pairs)], min_nodes=5, max_spread=1.0)
    assert "bandwidth.all_reduce.pair.busbw_min_gbytes_per_s.16G" in got


def test_a_report_of_another_schema_version_is_one_line_and_exit_4(tmp_path):
    path = write_report(tmp_path / "r.json", fleet(10))
    doc = json.loads(path.read_text())
    doc["schema"] = "hc.report/9"
    doc["nodes"][0]["surprise"] = {"new": "field"}
    path.write_text(json.dumps(doc))
    ok = write_report(tmp_path / "ok.json", fleet(10), 1)
    r = run_hc("baseline", str(ok), str(path), "--fabric", "h100-ndr400", "-o", str(tmp_path / "o.yaml"))
    assert r.returncode == 4 and r.stderr.count(b"\n") == 1, r.stderr
    assert b"unsupported report schema 'hc.report/9'" in r.stderr and not (tmp_path / "o.yaml").exists()


@pytest.mark.parametrize(("args", "message"), [
    (["--fabric", "nope"], b"unknown fabric 'nope'"),
    (["--fabric", "a100-hdr200"], b"no node of fabric a100-hdr200 in the reports (their nodes' fabrics: "
                                  b"h100-ndr400 (10))"),
    (["--fabric", "h100-ndr400", "--margin", "2"], b"--margin"),
    (["--fabric", "h100-ndr400", "-o", "{tmp}/out.yml"], b"the output must be NAME.yaml"),
    (["--fabric", "h100-ndr400", "-o", "{tmp}/bad name!.yaml"], b"the output must be NAME.yaml"),
    (["--fabric", "h100-ndr400", "-o", "{tmp}/r.json/x.yaml"], b"cannot write"),
])
def test_bad_input_is_one_line_and_exit_4(tmp_path, args, message):
    report = write_report(tmp_path / "r.json", fleet(10))
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    if "-o" not in args:
        args += ["-o", str(tmp_path / "out.yaml")]
    r = run_hc_inproc("baseline", str(report), *args)
    assert r.returncode == 4 and message in r.stderr and b"Traceback" not in r.stderr, r.stderr


def test_the_same_run_twice_is_refused(tmp_path):
    report = write_report(tmp_path / "r.json", fleet(10))
    r = run_hc_inproc("baseline", str(report), str(report), "--fabric", "h100-ndr400", "-o", str(tmp_path / "o.yaml"))
    assert r.returncode == 4 and b"is given twice" in r.stderr


def test_config_defaults_apply_and_options_override_them(tmp_path):
    report = write_report(tmp_path / "r.json", fleet(6))
    cfg = tmp_path / "hc.yaml"
    cfg.write_text("default_fabric: generic\nbaseline: {min_nodes: 5, margin: 0.5}\n")
    out = tmp_path / "o.yaml"
    r = run_hc_inproc("baseline", str(report), "--fabric", "h100-ndr400", "--config", str(cfg), "-o", str(out))
    assert r.returncode == 0, r.stderr
    half = yaml.safe_load(out.read_text())["bandwidth"]["all_reduce"]["single_node"]["busbw_min_gbytes_per_s"]["16G"]
    assert 230 < half < 236  # ~470 x (1 - 0.5)
    r = run_hc_inproc("baseline", str(report), "--fabric", "h100-ndr400", "--config", str(cfg), "--margin", "0.1",
               "--format", "json", "-o", str(out))
    rows = {row["key"]: row for row in json.loads(r.stdout)["keys"]}
    assert rows[SINGLE_16G]["status"] == "learned" and rows[SINGLE_16G]["count"] == 6
    assert 2 * half * 0.89 < rows[SINGLE_16G]["value"] < 2 * half * 0.91  # the option beats the config
    r = run_hc_inproc("baseline", str(report), "--fabric", "h100-ndr400", "--config", str(cfg), "--min-nodes", "7",
               "-o", str(out))
    assert r.returncode == 4 and b"6 nodes, fewer than baseline.min_nodes 7" in r.stderr
    cfg.write_text("default_fabric: generic\nbaseline: {min_nodes: 1}\n")
    r = run_hc_inproc("baseline", str(report), "--fabric", "h100-ndr400", "--config", str(cfg), "-o", str(out))
    assert r.returncode == 4 and b"baseline.min_nodes: expected int >= 2" in r.stderr


# ------------------------------------------------------------------ what is learned from


def test_outliers_and_failed_nodes_are_dropped_but_a_fleet_below_the_shipped_floor_is_learned(tmp_path):
    below = Finding(id="bw.E001", status=Status.FAIL, message="below 460", component="all_reduce/single_node/16G")
    port = Finding(id="ib.E002", status=Status.FAIL, message="port down", component="mlx5_0/1")
    rng = random.Random(1)
    # every node misses the shipped 460 (FAIL bw.E001): that is what a baseline re-learns
    nodes = [deep_node(f"gpu{i:03d}", [busbw(rng.gauss(420, 1.5))], Status.FAIL, findings=(below,))
             for i in range(30)]
    nodes.append(deep_node("slow", [busbw(210.0)], Status.FAIL, findings=(below,)))  # an outlier among peers
    nodes.append(deep_node("broken", [busbw(100.0)], Status.FAIL, findings=(below, port)))
    nodes.append(deep_node("gone", [], Status.ERROR))
    result, got, _ = learned(tmp_path, [nodes])
    stats = got[SINGLE_16G].parts[0]
    assert stats.count == 31 and stats.outliers == 1  # "broken" and "gone" never counted
    assert result.nodes_dropped == 2 and result.kept_below_floor == 31
    assert 395 < got[SINGLE_16G].value < 420 and got[SINGLE_16G].previous == 460
    # a node that FAILed in another run is dropped from every run
    again = [msgspec.structs.replace(n, status=Status.FAIL, findings=[port]) if n.node == "gpu000" else n
             for n in nodes]
    _, got, _ = learned(tmp_path, [nodes, again])
    assert got[SINGLE_16G].parts[0].count == 30


def test_pair_tests_ib_write_bw_per_hca_and_temperatures(tmp_path):
    rng = random.Random(2)
    nodes = []
    for i in range(24):
        metrics = [Metric("bw_gbps", rng.gauss(396, 0.5), "Gb/s", component=f"mlx5_{h}") for h in range(4)]
        metrics += [Metric("temperature_c", round(rng.gauss(82 + g, 1), 1), "C", component=f"GPU{g}")
                    for g in range(2)]
        nodes.append(deep_node(f"gpu{i:03d}", metrics))
    slow_link = Finding(id="bw.E102", status=Status.WARN, message="slow link", component="pair")
    pairs = [GroupResult(kind="pair", name=f"gpu{2 * k:03d}-gpu{2 * k + 1:03d}",
                         members=[f"gpu{2 * k:03d}", f"gpu{2 * k + 1:03d}"], status=Status.PASS,
                         metrics=[Metric("busbw", rng.gauss(365, 1), "GB/s", component="16G"),
                                  Metric("busbw", 999.0, "GB/s", component="64M")])  # a size nobody judges
             for k in range(12)]
    pairs.append(GroupResult(kind="pair", name="gpu000-gpu003", members=["gpu000", "gpu003"], status=Status.WARN,
                             findings=[slow_link], metrics=[Metric("busbw", 100.0, "GB/s", component="16G")]))
    pairs.append(GroupResult(kind="pair", name="gpu000-x", members=["gpu000", "elsewhere"], status=Status.PASS,
                             metrics=[Metric("busbw", 1.0, "GB/s", component="16G")]))  # not both of the fabric
    result, got, _ = learned(tmp_path, [_report(nodes, 0, pairs)])
    pair = got["bandwidth.all_reduce.pair.busbw_min_gbytes_per_s.16G"]
    assert pair.parts[0].count == 12 and 330 < pair.value < 365
    ib = got["bandwidth.ib_write_bw.per_hca_min_gbps"]
    assert [p.part for p in ib.parts] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert ib.value == min(p.bound for p in ib.parts) and ib.value < ib.extra[
        ("bandwidth", "ib_write_bw", "per_hca_typical_gbps")]
    temp = got["gpu.temp_max_c"]  # GPUs at 82-83 C against the fabric's 85: loosened to fit
    assert temp.value == max(p.bound for p in temp.parts) > 85 and temp.previous == 85
    assert result.skipped_sizes == ["all_reduce/pair/64M"]
    text, data = render(result, name="h", extends="h100-ndr400", written_at="now", hc_version="t")
    assert yaml.safe_load(text) == data and data["gpu"]["temp_max_c"] == temp.value

    # cool idle GPUs never tighten the fabric's ceiling
    cool = [msgspec.structs.replace(n, metrics=[msgspec.structs.replace(m, value=40.0 + (i % 3))
                                                if m.name == "temperature_c" else m for m in n.metrics])
            for i, n in enumerate(nodes)]
    _, got, _ = learned(tmp_path, [cool])
    assert got["gpu.temp_max_c"].value is None and "the fabric's 85 C stands" in got["gpu.temp_max_c"].note


def test_one_hca_with_too_few_nodes_refuses_the_per_hca_key(tmp_path):
    rng = random.Random(4)
    nodes = [deep_node(f"n{i}", [Metric("bw_gbps", rng.gauss(396, 0.5), "Gb/s", component=f"mlx5_{h}")
                                 for h in range(2 if i else 3)]) for i in range(10)]
    _, got, refused = learned(tmp_path, [nodes])
    reason = refused["bandwidth.ib_write_bw.per_hca_min_gbps"].reason
    assert reason.startswith("mlx5_2: 1 nodes, fewer than baseline.min_nodes 8") and "every HCA" in reason


def test_a_floor_the_fabric_spells_otherwise_is_replaced_not_doubled(tmp_path):
    (tmp_path / "fabrics").mkdir()
    (tmp_path / "fabrics" / "f.yaml").write_text(
        "extends: h100-ndr400\nbandwidth:\n  all_reduce:\n    single_node:\n"
        "      busbw_min_gbytes_per_s: {'16 GiB': 460, '16G': null}\n")
    cfg = tmp_path / "hc.yaml"
    cfg.write_text("default_fabric: f\n")
    report = write_report(tmp_path / "r.json", [msgspec.structs.replace(n, fabric="f") for n in fleet(12)])
    out = tmp_path / "fabrics" / "f2.yaml"
    r = run_hc_inproc("baseline", str(report), "--fabric", "f", "--config", str(cfg), "-o", str(out))
    assert r.returncode == 0, r.stderr
    cfg.write_text("default_fabric: f2\n")
    floors = Config(cfg).for_node("n").limits.bandwidth.all_reduce.single_node.busbw_min_gbytes_per_s
    assert list(floors) == ["16 GiB"] and floors["16 GiB"] < 470


# ------------------------------------------------------------------ hostile input


HOSTILE = ["gpu001\nextends: evil", "# not a comment", "gpu\u2028x", "'quoted\"", "a" * 5000, "gpu\x00nul",
           "ünïcödé", "key: value", "-rf"]


def test_hostile_node_and_hca_names_never_reach_the_yaml_as_keys(tmp_path):
    rng = random.Random(5)
    nodes = []
    for i in range(12):
        name = HOSTILE[i % len(HOSTILE)] + str(i)
        hca = "mlx5_0\nextends: evil\ngpu: {count: 0}" if i % 2 else "mlx5_0"
        nodes.append(NodeResult(node=name, fabric="h100-ndr400", status=Status.PASS, metrics=[
            busbw(rng.gauss(470, 1)), Metric("bw_gbps", rng.gauss(396, 0.4), "Gb/s", component=hca),
            Metric("bw_gbps", rng.gauss(396, 0.4), "Gb/s", component="mlx5_1\r# x"),
            Metric("nccl_version", "2.21.5\nextends: evil"),
            Metric("busbw_gbytes_per_s", 1e300, "GB/s", component="all_reduce/single_node/16G\n"),
            Metric("busbw_gbytes_per_s", float("nan"), "GB/s", component="all_reduce/pair/16G"),
            Metric("busbw_gbytes_per_s", True, "GB/s", component="all_reduce/pair/16G"),
            Metric("busbw_gbytes_per_s", "470", "GB/s", component="all_reduce/pair/16G"),
            Metric("busbw_gbytes_per_s", 470.0, "GB/s", component="all_reduce/nowhere/16G"),
            Metric("busbw_gbytes_per_s", 470.0, "GB/s", component="all_reduce/single_node/99999999T"),
        ]))
    report = tmp_path / "hostile\nname.json"
    write_report(report, nodes)
    out = tmp_path / "out.yaml"
    r = run_hc_inproc("baseline", str(report), "--fabric", "h100-ndr400", "-o", str(out))
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    data = yaml.safe_load(text)
    assert set(data) == {"description", "extends", "bandwidth"} and data["extends"] == "h100-ndr400"
    assert set(data["bandwidth"]) == {"all_reduce"}
    assert list(data["bandwidth"]["all_reduce"]) == ["single_node"]  # the HCA keys refused (too few nodes each)
    for line in text.splitlines():
        assert line.startswith(("#", "description:", "extends:", " ", "bandwidth:")), line
        assert line.isascii() and line.isprintable()
    assert "hostile\\nname.json" in text and "2.21.5\\nextends: evil (12 nodes)" in text
    assert run_hc_inproc("config", "validate", str(out)).returncode == 0


# ------------------------------------------------------------------ the loader


def test_a_site_fabric_extending_its_own_name_refines_the_next_one(tmp_path):
    (tmp_path / "fabrics").mkdir()
    (tmp_path / "fabrics" / "h100-ndr400.yaml").write_text("extends: h100-ndr400\nib: {hca_count: 4}\n")
    cfg = tmp_path / "hc.yaml"
    cfg.write_text("default_fabric: h100-ndr400\n")
    nc = Config(cfg).for_node("n1")
    assert nc.limits.ib.hca_count == 4 and nc.limits.ib.rate_gbps == 400  # the rest from hc's own
    assert nc.source("ib.hca_count").startswith(str(tmp_path / "fabrics" / "h100-ndr400.yaml"))
    Config(cfg).validate()


def test_a_fabric_extending_its_own_name_with_nothing_below_is_an_error(tmp_path):
    (tmp_path / "fabrics").mkdir()
    (tmp_path / "fabrics" / "lonely.yaml").write_text("extends: lonely\n")
    cfg = tmp_path / "hc.yaml"
    cfg.write_text("default_fabric: lonely\n")
    with pytest.raises(ConfigError, match=r"lonely.yaml:1: extends: no fabric 'lonely' after .* to refine"):
        Config(cfg).for_node("n1")


@pytest.mark.parametrize(("fabric", "output", "chain"), [
    ("h100-ndr400", "generic.yaml", "generic -> h100-ndr400 -> generic"),  # h100-ndr400 extends generic
    ("h200-ndr400", "h100-ndr400.yaml", "h100-ndr400 -> h200-ndr400 -> h100-ndr400"),
    ("h100-roce400", "generic.yaml", "generic -> h100-roce400 -> h100-ndr400 -> generic"),
])
@pytest.mark.parametrize("where", ["outside", "site"])
def test_a_baseline_that_would_be_an_extends_cycle_is_not_written(tmp_path, fabric, output, chain, where):
    """Installed in fabric_dirs, `<name>.yaml` IS fabric <name>: a baseline of a fabric that
    extends <name> (directly or not), written as <name>.yaml, would make every node of them
    unresolvable. Refused before anything is written, wherever the output goes now."""
    (tmp_path / "site").mkdir()
    cfg = tmp_path / "hc.yaml"
    cfg.write_text("fabric_dirs: [site]\ndefault_fabric: generic\n")
    nodes = [deep_node(n.node, n.metrics, fabric=fabric) for n in fleet(10)]
    report = write_report(tmp_path / "r.json", nodes)
    out = (tmp_path / "site" if where == "site" else tmp_path) / output
    r = run_hc_inproc("baseline", str(report), "--fabric", fabric, "-o", str(out), "--config", str(cfg))
    err = r.stderr.decode()
    assert r.returncode == 4 and err.count("\n") == 1 and f"extends cycle ({chain})" in err, err
    assert f"name it {fabric}.yaml" in err and not out.exists()
    assert run_hc_inproc("config", "validate", "--config", str(cfg)).returncode == 0  # the site still loads


def test_validate_finds_the_extends_cycle_a_fabric_file_would_make_once_installed(tmp_path):
    loop = tmp_path / "generic.yaml"
    loop.write_text("extends: h100-ndr400\nib: {hca_count: 4}\n")
    r = run_hc_inproc("config", "validate", str(loop))
    err = r.stderr.decode()
    assert r.returncode == 4 and "extends: cycle generic -> h100-ndr400 -> generic" in err, err
    refine = tmp_path / "h100-ndr400.yaml"  # extending its own name refines hc's own: no cycle
    refine.write_text("extends: h100-ndr400\nib: {hca_count: 4}\n")
    assert run_hc_inproc("config", "validate", str(refine)).returncode == 0
    (tmp_path / "fabrics").mkdir()  # and installed, the main config's validate names the chain
    loop.rename(tmp_path / "fabrics" / "generic.yaml")
    cfg = tmp_path / "hc.yaml"
    cfg.write_text("fabric_dirs: [fabrics]\ndefault_fabric: generic\n")
    r = run_hc_inproc("config", "validate", "--config", str(cfg))
    assert r.returncode == 4 and b"extends: cycle" in r.stderr and b"-> generic" in r.stderr, r.stderr


def test_validate_a_fabric_file_names_file_line_and_key(tmp_path):
    bad = tmp_path / "site-h100.yaml"
    bad.write_text("extends: h100-ndr400\nbandwidth:\n  ib_write_bw:\n    per_hca_min_gbps: -3\n")
    r = run_hc_inproc("config", "validate", str(bad))
    assert r.returncode == 4
    assert f"{bad}:4: bandwidth.ib_write_bw.per_hca_min_gbps: expected float > 0".encode() in r.stderr, r.stderr
    bad.write_text("extends: nope\ngpu: {count: 8}\n")
    r = run_hc_inproc("config", "validate", str(bad))
    assert r.returncode == 4 and b"unknown fabric 'nope'" in r.stderr
    with pytest.raises(HcError):
        Config(bad)  # as a main config it is still refused (unknown key)


# ------------------------------------------------------------ sweeps through run_many


def test_deep_sweeps_through_run_many_culprit_slow_link_and_slow_node_are_not_learned_from(tmp_path):
    """Two `hc sweep --tier deep` runs made by hc's own code paths (tests/sweep_reports.py: the
    real bw.torch check, pair tests planned, run and judged by bw.pairs, make_report): the
    culprit (bw.E101) is dropped, the slow link's pair tests too, the node at 78% is an outlier."""
    import sweep_reports as sr

    names = [f"node{i:02d}" for i in range(1, 13)]
    cfg = sr.write_config(tmp_path, "node[01-12]", history=False)
    paths = []
    for run in range(2):
        report = sr.sweep(cfg, names, run=run, slow={"node02": 0.78}, culprit="node04",
                          slow_link=("node05", "node06"))
        assert any(f.id == "bw.E101" and f.node == "node04" for n in report.nodes for f in n.findings)
        paths.append(tmp_path / f"sweep{run}.json")
        paths[-1].write_bytes(encode(report))
    out = tmp_path / "fabrics" / "sim-site.yaml"
    r = run_hc_inproc("baseline", *map(str, paths), "--fabric", sr.FABRIC, "--config", str(cfg), "-o", str(out))
    assert r.returncode == 0, r.stderr
    data = yaml.safe_load(out.read_text())["bandwidth"]["all_reduce"]
    node_floor = data["single_node"]["busbw_min_gbytes_per_s"]["16G"]
    pair_floor = data["pair"]["busbw_min_gbytes_per_s"]["16G"]
    assert 0.9 * sr.NODE_PEAK < node_floor < sr.NODE_PEAK and 0.85 * sr.PAIR_PEAK < pair_floor < sr.PAIR_PEAK
    text = out.read_text()
    assert "dropped (FAIL or ERROR in a run): 1" in text  # node04, the culprit
    # node02 FAILed bw.E001 only (a floor learned again): kept, then cut as an outlier among 11
    assert "kept although below a threshold learned here: 1" in text
    assert "11 nodes, 1 outliers dropped" in text
    # pair tests run between the 11 nodes whose own test passed (node02's did not): 55 pairs,
    # less the culprit's 10 and the slow link
    assert "; 44 pairs;" in text
    assert run_hc_inproc("config", "validate", str(out), "--config", str(cfg)).returncode == 0
