"""run_pairs with the tests between nodes replaced by a model: what a test that could not
run becomes (bw.E107, ERROR, no node judged), and that the fabric's localize keys and the
main config's rails reach the planning."""

from __future__ import annotations

from pathlib import Path

import pytest

from healthcheck.core.config.loader import load_config
from healthcheck.core.model import CheckResult, NodeResult
from healthcheck.core.status import Status
from healthcheck.orchestrate import pairs
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


def sample(busbw: float) -> list[BandwidthSample]:
    return [BandwidthSample(collective="all_reduce", size_bytes=1 << 20, busbw_gbytes_per_s=busbw,
                            algbw_gbytes_per_s=busbw, time_us=1.0, ranks=2)]


def test_a_test_that_could_not_run_is_bw_e107_on_its_result_and_judges_no_node(tmp_path, monkeypatch):
    def model(cfg, plan, members):
        if "n03" in members:
            return None, "n03: hc: command not found"
        return sample(10.0), ""

    monkeypatch.setattr(pairs, "run_test", model)
    run = pairs.run_pairs(config(tmp_path, 4), results(4))
    broken = [g for g in run.groups if g.status is Status.ERROR]
    assert broken and all("n03" in g.members for g in broken)
    for g in broken:
        (f,) = g.findings
        assert (f.id, f.status, f.check) == ("bw.E107", Status.ERROR, "bw.pairs")
        assert "command not found" in f.message
    assert all("n03" not in r.members for r in run.results)  # nothing judged from it
    nodes, _groups, _runs, _for_run = pairs.judge_pairs(results(4), run)
    assert all(n.status is Status.PASS for n in nodes)  # ERROR of a test is no evidence against n03


def test_bw_e107_is_in_the_catalogue_of_bw_pairs():
    from healthcheck.bandwidth.pairs_analysis import FINDINGS

    assert "bw.E107" in [f.id for f in FINDINGS]


def test_rails_make_every_screening_group_span_leaves(tmp_path, monkeypatch):
    seen: list[tuple[str, ...]] = []

    def model(cfg, plan, members):
        seen.append(tuple(members))
        return sample(10.0), ""

    monkeypatch.setattr(pairs, "run_test", model)
    # 16 nodes, 4 leaves of 4: groups of 4 drawn across leaves hold one node of each
    rails = "rails: {'n[01-04]': leaf1, 'n[05-08]': leaf2, 'n[09-12]': leaf3, 'n[13-16]': leaf4}\n"
    cfg = config(tmp_path, 16, rails=rails)
    assert (cfg.rail_of("n06"), cfg.rail_of("n99")) == ("leaf2", None)
    pairs.run_pairs(cfg, results(16))
    leaf = {f"n{i:02d}": (i - 1) // 4 for i in range(1, 17)}
    first_round = seen[:4]  # regrouping later avoids earlier partners first, then spreads what it can
    assert sorted(n for g in first_round for n in g) == sorted(leaf), seen
    assert all(len({leaf[n] for n in g}) == 4 for g in first_round), first_round


def test_localize_keys_from_the_fabric_reach_the_planning(tmp_path, monkeypatch):
    monkeypatch.setattr(pairs, "run_test", lambda cfg, plan, members: (sample(10.0), ""))
    run = pairs.run_pairs(config(tmp_path, 4, localize="{confirm_tests: 2, fabric_min_nodes: 6}"), results(4))
    assert (run.settings["confirm_tests"], run.settings["fabric_min_nodes"]) == (2, 6)


@pytest.mark.parametrize("bad", ["{confirm_tests: 0}", "{fabric_fraction: 1.5}", "{nonsense: 1}"])
def test_bad_localize_keys_are_config_errors_naming_the_key(tmp_path, bad):
    from healthcheck.core.errors import ConfigError

    cfg = config(tmp_path, 4, localize=bad)
    with pytest.raises(ConfigError) as err:
        cfg.for_node("n01")
    assert "bandwidth.pairs.localize" in str(err.value) and "f.yaml:" in str(err.value)
