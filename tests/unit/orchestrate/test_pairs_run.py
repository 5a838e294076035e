"""run_pairs with the tests between nodes replaced by a model: what a test that could not
run becomes (bw.E107, ERROR, no node judged), and that the fabric's localize keys and the
main config's rails reach the planning."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from pair_fakes import torch_tests_by

from healthcheck.core.config.loader import load_config
from healthcheck.core.model import CheckResult, NodeResult
from healthcheck.core.status import Status
from healthcheck.orchestrate.pairsweep import choose, sweep
from healthcheck.parsers.bandwidth_common import BandwidthSample


def config(tmp_path: Path, n: int, *, rails: str = "", localize: str = "") -> object:
    fabrics = tmp_path / "fabrics"
    fabrics.mkdir(exist_ok=True)
    (fabrics / "f.yaml").write_text(
        "extends: generic\nbandwidth:\n  sizes: [1M]\n  repeats: 1\n"
        "  pairs: {circle_max: 4, group_size: 4" + (f", localize: {localize}" if localize else "") + "}\n")
    (tmp_path / "hc.yaml").write_text(f"fabric_dirs: [{fabrics}]\nnodes: {{'n[01-{n:02d}]': f}}\n" + rails)
    return load_config(tmp_path / "hc.yaml")


def results(n: int) -> list[NodeResult]:
    return [NodeResult(node=f"n{i:02d}", fabric="f", status=Status.PASS, mode="agent",
                       checks=[CheckResult("bw.torch", Status.PASS, 0.0)]) for i in range(1, n + 1)]


def sample(busbw: float, size: int = 1 << 20) -> list[BandwidthSample]:
    return [BandwidthSample(collective="all_reduce", size_bytes=size, busbw_gbytes_per_s=busbw,
                            algbw_gbytes_per_s=busbw, time_us=1.0, ranks=2)]


def test_a_test_that_could_not_run_is_bw_e107_on_its_result_and_judges_no_node(tmp_path, monkeypatch):
    def model(cfg, plan, members):
        if "n03" in members:
            return None, "n03: hc: command not found"
        return sample(10.0), ""

    monkeypatch.setattr(choose, "open_transport", torch_tests_by(model))
    run = sweep.run_pairs(config(tmp_path, 4), results(4))
    broken = [g for g in run.groups if g.status is Status.ERROR]
    assert broken and all("n03" in g.members for g in broken)
    for g in broken:
        (f,) = g.findings
        assert (f.id, f.status, f.check) == ("bw.E107", Status.ERROR, "bw.pairs")
        assert "command not found" in f.message
    assert all("n03" not in r.members for r in run.results)  # nothing judged from it
    nodes, _groups, _runs, _for_run = sweep.judge_pairs(results(4), run)
    assert all(n.status is Status.PASS for n in nodes)  # ERROR of a test is no evidence against n03


def test_bw_e107_is_in_the_catalogue_of_bw_pairs():
    from healthcheck.analyses.pairs import FINDINGS

    assert "bw.E107" in [f.id for f in FINDINGS]


def test_rails_make_every_screening_group_span_leaves(tmp_path, monkeypatch):
    seen: list[tuple[str, ...]] = []

    def model(cfg, plan, members):
        seen.append(tuple(members))
        return sample(10.0), ""

    monkeypatch.setattr(choose, "open_transport", torch_tests_by(model))
    # 16 nodes, 4 leaves of 4: groups of 4 drawn across leaves hold one node of each
    rails = "rails: {'n[01-04]': leaf1, 'n[05-08]': leaf2, 'n[09-12]': leaf3, 'n[13-16]': leaf4}\n"
    cfg = config(tmp_path, 16, rails=rails)
    assert (cfg.rail_of("n06"), cfg.rail_of("n99")) == ("leaf2", None)
    sweep.run_pairs(cfg, results(16))
    leaf = {f"n{i:02d}": (i - 1) // 4 for i in range(1, 17)}
    first_round = seen[:4]  # regrouping later avoids earlier partners first, then spreads what it can
    assert sorted(n for g in first_round for n in g) == sorted(leaf), seen
    assert all(len({leaf[n] for n in g}) == 4 for g in first_round), first_round


def test_localize_keys_from_the_fabric_reach_the_planning(tmp_path, monkeypatch):
    monkeypatch.setattr(choose, "open_transport", torch_tests_by(lambda cfg, plan, members: (sample(10.0), "")))
    run = sweep.run_pairs(config(tmp_path, 4, localize="{confirm_tests: 2, fabric_min_nodes: 6}"), results(4))
    assert (run.settings["confirm_tests"], run.settings["fabric_min_nodes"]) == (2, 6)


@pytest.mark.parametrize("bad", ["{confirm_tests: 0}", "{fabric_fraction: 1.5}", "{nonsense: 1}"])
def test_bad_localize_keys_are_config_errors_naming_the_key(tmp_path, bad):
    from healthcheck.core.errors import ConfigError

    cfg = config(tmp_path, 4, localize=bad)
    with pytest.raises(ConfigError) as err:
        cfg.for_node("n01")
    assert "bandwidth.pairs.localize" in str(err.value) and "f.yaml:" in str(err.value)


# ------------------------------------------------------------ several tools per test


def tools_config(tmp_path: Path, tests: str, n: int = 4) -> object:
    fabrics = tmp_path / "fabrics"
    fabrics.mkdir(exist_ok=True)
    (fabrics / "f.yaml").write_text(
        "extends: generic\ngpu: {count: 8}\nbandwidth:\n  sizes: [1G]\n  repeats: 2\n"
        "  all_reduce: {pair: {busbw_min_gbytes_per_s: {1G: 5}}}\n"
        f"  pairs: {{circle_max: 8, tests: {tests}}}\n")
    (tmp_path / "hc.yaml").write_text(f"fabric_dirs: [{fabrics}]\nnodes: {{'n[01-{n:02d}]': f}}\n")
    return load_config(tmp_path / "hc.yaml")


def measurement(tool, members, outcome, value=None, why="", threshold=5.0, hcas=()):
    from healthcheck.orchestrate.pairsweep.tools import PASSED, PairMeasurement

    samples = (BandwidthSample(collective="all_reduce", size_bytes=1 << 30, busbw_gbytes_per_s=value,
                               algbw_gbytes_per_s=value, time_us=1.0, ranks=16),) if value else ()
    return PairMeasurement(tool=tool, members=tuple(members), outcome=outcome, passed=PASSED[outcome], value=value,
                           unit="GB/s", threshold=threshold, kind="all_reduce 1G", samples=samples, why=why,
                           hcas=hcas, evidence="NCCL WARN ..." if outcome != "passed" else "")


def test_nccl_tests_hanging_with_every_partner_of_one_node_names_it(tmp_path, monkeypatch):
    from healthcheck.orchestrate.pairsweep import tools

    calls = []

    def nccl(cfg, members, *, collective, sizes, gpus, timeout_s):
        calls.append((tuple(members), gpus, collective))
        if "n03" in members:
            return measurement("nccl_tests", members, "hung", why=f"{','.join(members)}: hung at 256M")
        return measurement("nccl_tests", members, "passed", value=40.0)

    monkeypatch.setattr(choose, "open_transport", torch_tests_by(lambda cfg, plan, members: (sample(10.0, 1 << 30), "")))
    monkeypatch.setattr(tools, "nccl_tests_pair", nccl)
    run = sweep.run_pairs(tools_config(tmp_path, "[nccl_tests, torch]"), results(4))
    assert {c[1:] for c in calls} == {(8, "all_reduce")}  # one rank per GPU the fabric names
    with_n03 = [g for g in run.groups if "n03" in g.members]
    assert with_n03 and all(g.status is Status.WARN for g in with_n03)
    assert all([f.id for f in g.findings] == ["bw.E108"] and "hung" in g.findings[0].message for g in with_n03)
    # the lead tool (listed first) gives the pair matrix its figures; torch keeps its own name
    ok = [g for g in run.groups if "n03" not in g.members]
    assert all({m.name for m in g.metrics} == {"busbw", "torch_busbw"} for g in ok)
    assert all(m.value == 40.0 for g in ok for m in g.metrics if m.name == "busbw")
    nodes, _groups, _runs, _for_run = sweep.judge_pairs(results(4), run)
    verdict = {n.node: (n.status, [f.id for f in n.findings]) for n in nodes}
    assert verdict["n03"] == (Status.FAIL, ["bw.E101"])
    assert all(verdict[n] == (Status.PASS, []) for n in ("n01", "n02", "n04"))


def test_wrong_data_in_the_torch_pair_test_is_evidence_whatever_its_bandwidth(tmp_path, monkeypatch):
    """A pair whose torch sweep counted wrong elements is short (bw.E108), even at full busbw."""
    def model(cfg, plan, members):
        got = sample(10.0)
        if "n03" in members:
            got = [msgspec.structs.replace(s, wrong=7) for s in got]
        return got, ""

    monkeypatch.setattr(choose, "open_transport", torch_tests_by(model))
    run = sweep.run_pairs(config(tmp_path, 4), results(4))
    with_n03 = [g for g in run.groups if "n03" in g.members]
    assert with_n03 and all(g.status is Status.WARN for g in with_n03)
    for g in with_n03:
        (f,) = g.findings
        assert f.id == "bw.E108" and "7 wrong elements" in f.message and "all_reduce at 1M" in f.message
    assert all(g.status is Status.PASS for g in run.groups if "n03" not in g.members)
    nodes, *_ = sweep.judge_pairs(results(4), run)
    verdict = {n.node: (n.status, [f.id for f in n.findings]) for n in nodes}
    assert verdict["n03"] == (Status.FAIL, ["bw.E101"])
    assert all(verdict[n] == (Status.PASS, []) for n in ("n01", "n02", "n04"))


def test_a_tool_that_cannot_run_is_error_on_the_test_while_the_others_judge(tmp_path, monkeypatch):
    from healthcheck.orchestrate.pairsweep import tools

    monkeypatch.setattr(choose, "open_transport", torch_tests_by(lambda cfg, plan, members: (sample(10.0, 1 << 30), "")))
    monkeypatch.setattr(tools, "nccl_tests_pair", lambda cfg, members, **kw: measurement(
        "nccl_tests", members, "not-run", why=f"{members[0]}: mpirun not found on this machine"))
    run = sweep.run_pairs(tools_config(tmp_path, "[torch, nccl_tests]"), results(4))
    assert run.groups and all(g.status is Status.ERROR for g in run.groups)
    assert all([f.id for f in g.findings] == ["bw.E107"] and "nccl_tests: " in g.findings[0].message
               and "mpirun not found" in g.findings[0].message for g in run.groups)
    assert run.results and all(r.passed for r in run.results)  # torch judged every pair
    nodes, *_ = sweep.judge_pairs(results(4), run)
    assert all(n.status is Status.PASS for n in nodes)


def test_ib_write_bw_runs_on_pairs_and_a_short_hca_is_a_short_test(tmp_path, monkeypatch):
    from healthcheck.orchestrate.pairsweep import tools
    from healthcheck.orchestrate.pairsweep.tools import HcaSample

    def ib(cfg, members, *, timeout_s):
        slow = set(members) == {"n01", "n02"}  # one link: only this pair's mlx5_1 is slow
        hcas = (HcaSample("mlx5_0/1", 390.0, 380.0), HcaSample("mlx5_1/1", 120.0 if slow else 391.0, 380.0,
                                                                 outcome="short" if slow else "passed"))
        return measurement("ib_write_bw", members, "short" if slow else "passed", value=0.32 if slow else 1.02,
                           threshold=1.0, hcas=hcas, why="mlx5_1/1 at 120 Gb/s" if slow else "")

    monkeypatch.setattr(tools, "ib_write_bw_pair", ib)
    run = sweep.run_pairs(tools_config(tmp_path, "[ib_write_bw]"), results(4))
    slow = [g for g in run.groups if set(g.members) == {"n01", "n02"}]
    assert slow and slow[0].status is Status.WARN
    assert {(m.name, m.component, m.value) for m in slow[0].metrics} >= {("ib_write_bw_gbits", "mlx5_1/1", 120.0)}
    nodes, groups, *_ = sweep.judge_pairs(results(4), run)
    assert all(n.status is Status.PASS for n in nodes)  # a slow link drains nobody
    link = [f for g in groups for f in g.findings if f.id == "bw.E102"]
    assert link and set(link[0].members) == {"n01", "n02"}
