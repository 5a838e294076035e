"""`hc baseline` as a library: write_baseline, its JSON and its table, in-process."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import yaml

from healthcheck.core.errors import HcError
from healthcheck.core.model import Metric, NodeResult
from healthcheck.core.status import Status
from healthcheck.report.baseline import baseline_json, baseline_table, write_baseline
from healthcheck.report.build import make_report
from healthcheck.report.jsonio import encode

FABRIC = "h100-ndr400"
NO_OPTIONS: dict[str, float | int | None] = {"min_nodes": None, "margin": None}


def sweep(path: Path, n: int, seed: int = 0) -> Path:
    """A deep sweep report of n healthy nodes with a busbw metric each."""
    import datetime as dt

    rng = random.Random(seed)
    nodes = [NodeResult(node=f"gpu{i:03d}", fabric=FABRIC, status=Status.PASS, checks=[], findings=[],
                        metrics=[Metric("busbw_gbytes_per_s", rng.gauss(470.0, 2.0), "GB/s",
                                        component="all_reduce/single_node/16G")]) for i in range(n)]
    start = dt.datetime(2026, 11, 22, 3, 0, tzinfo=dt.timezone.utc)
    report = make_report(command="sweep", tier="deep", config_digest="sha256:" + "0" * 64,
                         config_path="/etc/hc/hc.yaml", started=start, finished=start + dt.timedelta(minutes=9),
                         nodes=nodes, groups=[])
    path.write_bytes(encode(report))
    return path


def test_a_baseline_is_written_and_summarised(tmp_path: Path) -> None:
    out = tmp_path / "learned.yaml"
    warnings: list[str] = []
    done = write_baseline([sweep(tmp_path / "r.json", 10)], FABRIC, out, None, NO_OPTIONS, warn=warnings.append)
    assert out.exists() and yaml.safe_load(out.read_text())["extends"] == FABRIC
    assert done.output == out and done.fabric == FABRIC and done.result.written
    doc = baseline_json(done)
    assert doc["output"] == str(out) and doc["nodes_used"] == 10
    assert any(k["status"] == "learned" for k in doc["keys"])
    assert all(line.startswith("hc: refused: ") for line in warnings)
    text = baseline_table(done)
    assert text.split()[:2] == ["KEY", "STATUS"]
    assert text.splitlines()[-1].startswith(f"wrote {out}: ")


def test_an_option_given_overrides_the_config(tmp_path: Path) -> None:
    out = tmp_path / "learned.yaml"
    warnings: list[str] = []
    with pytest.raises(HcError, match="nothing learned for fabric h100-ndr400") as caught:
        write_baseline([sweep(tmp_path / "r.json", 10)], FABRIC, out, None, {"min_nodes": 11},
                       warn=warnings.append)
    assert "not written" in str(caught.value) and not out.exists()
    assert any("fewer than baseline.min_nodes 11" in line for line in warnings), warnings


def test_the_output_name_is_checked_before_anything_is_read(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-report.json"
    with pytest.raises(HcError, match="the output must be NAME.yaml"):
        write_baseline([missing], FABRIC, tmp_path / "out.yml", tmp_path / "no-such-config.yaml", NO_OPTIONS,
                       warn=lambda line: None)
