"""Counter rates and trends over a node's recorded runs (analyses/over_time.py, fed by
orchestrate/over_time.py from a real History file).

Every history here is a SCENARIO: a real capture (perfquery -x on RHEL 7.5, tuning split of
tests/fixtures/field/issues) parsed and judged by ib.counters as a run would, with its counter
values changed from run to run to replay a link going bad, a reset, a first run. The values
are made up; the text they replace, the parser and the checks are real.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import msgspec
import pytest

from healthcheck.analyses.over_time import fit_line
from healthcheck.checks.ib import counters
from healthcheck.core.config.loader import EMBEDDED_DEFAULT, Config
from healthcheck.core.model import CheckResult, Finding, Metric, NodeResult, Report
from healthcheck.core.stamp import stamp
from healthcheck.core.status import Status, worst
from healthcheck.orchestrate.over_time import judge_over_time
from healthcheck.parsers.gpu_common import GpuProcess, RemapHistogram
from healthcheck.parsers.ib_common import IbCounters
from healthcheck.parsers.perfquery import parse_perfquery
from healthcheck.report.history import History

REPO = Path(__file__).resolve().parents[3]
CAPTURE = REPO / "tests/fixtures/field/issues/perfquery/x-extended-lid10-capmask2-rhel75.txt"
CFG = Config(EMBEDDED_DEFAULT)  # every node on the generic fabric: symbol_error WARN > 10, FAIL > 1000
T0 = dt.datetime(2026, 11, 1, 0, 0, tzinfo=dt.timezone.utc)
NODE = "gpu001"


def capture(**values: int) -> IbCounters:
    """The real perfquery capture, as mlx5_0 port 1, with these counters changed (a scenario)."""
    real = parse_perfquery(CAPTURE.read_text(), ca="mlx5_0")
    port = real.ports[0]
    return msgspec.structs.replace(real, ports=[msgspec.structs.replace(port, counters={**port.counters, **values})])


def checked(node: str = NODE, fabric: str = "generic", **values: int) -> NodeResult:
    """The node as ib.counters judges the scenario's counters (what a run records)."""
    out = list(counters(ib_counters=capture(**values), limits=CFG.fabric("generic")))
    findings = [stamp(f, check="ib.counters", node=node) for f in out if isinstance(f, Finding)]
    metrics = [m for m in out if isinstance(m, Metric)]
    return NodeResult(node=node, fabric=fabric, status=worst((f.status for f in findings), default=Status.PASS),
                      checks=[CheckResult(name="ib.counters", status=worst((f.status for f in findings),
                                                                            default=Status.PASS), duration_s=0.01)],
                      findings=findings, metrics=metrics)


def iso(at: dt.datetime) -> str:
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def record(history: History, at: dt.datetime, node: NodeResult) -> None:
    history.record(Report(run_id=at.strftime("%Y%m%dT%H%M%SZ") + "-000001", hc_version="0.1", command="sweep",
                          tier="quick", config_digest="sha256:" + "0" * 64, config_path="/x", started_at=iso(at),
                          finished_at=iso(at), duration_s=1.0, host="mgmt1", status=node.status, nodes=[node],
                          summary={}))


def judged(history: History, at: dt.datetime, node: NodeResult) -> NodeResult:
    over = judge_over_time(CFG, history, [node], at, "quick")
    assert not over.notes
    return over.nodes[0]


def new(node: NodeResult) -> list[tuple[str, str, str]]:
    return sorted((f.id, f.status.value, f.component) for f in node.findings if f.check != "ib.counters")


def test_symbol_errors_above_120_an_hour_fail_below_every_absolute_fail_limit(tmp_path):
    with History(tmp_path / "h.sqlite") as history:
        record(history, T0, checked(symbol_error=3))
        node = judged(history, T0 + dt.timedelta(hours=1), checked(symbol_error=503))
    # the absolute limits alone: 503 is above the WARN (10), below the FAIL (1000)
    assert [(f.id, f.status) for f in node.findings if f.check == "ib.counters"] == [("ib.E005", Status.WARN)]
    assert new(node) == [("ib.E006", "FAIL", "mlx5_0/1:symbol_error")]
    f = next(f for f in node.findings if f.id == "ib.E006")
    assert f.check == "ib.rates" and f.limit is not None and f.limit.key == "ib.rates.symbol_error.fail"
    assert node.status is Status.FAIL


def test_link_downed_any_increase_fails_where_the_total_is_below_its_warn_limit(tmp_path):
    with History(tmp_path / "h.sqlite") as history:
        record(history, T0, checked(link_downed=0))
        node = judged(history, T0 + dt.timedelta(days=2), checked(link_downed=1))
    assert [f.id for f in node.findings if f.check == "ib.counters"] == []
    assert new(node) == [("ib.E006", "FAIL", "mlx5_0/1:link_downed")]


def test_carrier_changes_above_2_between_runs_warn_whatever_the_time_between(tmp_path):
    # NVSentinel's interface-level "delta" threshold: more than 2 carrier changes between
    # polls, non-fatal; here between recorded runs, a day apart (no rate would catch 3 a day)
    with History(tmp_path / "h.sqlite") as history:
        record(history, T0, checked(carrier_changes=4))
        two = judged(history, T0 + dt.timedelta(days=1), checked(carrier_changes=6))
        record(history, T0 + dt.timedelta(days=1), two)
        three = judged(history, T0 + dt.timedelta(days=2), checked(carrier_changes=9))
        record(history, T0 + dt.timedelta(days=2), three)
        # the netdev was made again (a driver reload): its count starts from 0, no rise taken
        reloaded = judged(history, T0 + dt.timedelta(days=3), checked(carrier_changes=1))
    assert new(reloaded) == [("ib.E007", "PASS", "")] and reloaded.status is Status.PASS
    assert new(two) == [] and two.status is Status.PASS
    assert new(three) == [("ib.E006", "WARN", "mlx5_0/1:carrier_changes")]
    f = next(f for f in three.findings if f.id == "ib.E006")
    assert f.limit is not None and f.limit.key == "ib.rates.carrier_changes.delta" and f.value == 3
    assert three.status is Status.WARN  # non-fatal: never drains on its own


def test_a_slow_rise_within_every_rate_judges_nothing_new(tmp_path):
    with History(tmp_path / "h.sqlite") as history:
        record(history, T0, checked(symbol_error=1, link_error_recovery=0))
        node = judged(history, T0 + dt.timedelta(days=1), checked(symbol_error=6, link_error_recovery=2))
    assert new(node) == [] and node.status is Status.PASS


def test_a_counter_that_went_down_was_cleared_no_negative_rate(tmp_path):
    with History(tmp_path / "h.sqlite") as history:
        record(history, T0, checked(symbol_error=400))
        node = judged(history, T0 + dt.timedelta(minutes=5), checked(symbol_error=3))
    assert new(node) == [("ib.E007", "PASS", "")]
    note = next(f for f in node.findings if f.id == "ib.E007")
    assert "went down" in note.message and "symbol_error 400 -> 3" in (note.evidence or "")
    assert node.status is Status.PASS


def test_first_run_judges_absolute_limits_only_and_says_so(tmp_path):
    with History(tmp_path / "h.sqlite") as history:
        alone = checked(symbol_error=503, link_downed=1)
        node = judged(history, T0, alone)
    assert [f for f in node.findings if f.check == "ib.counters"] == alone.findings  # unchanged
    assert new(node) == [("ib.E007", "PASS", "")]
    note = next(f for f in node.findings if f.id == "ib.E007")
    assert "absolute limits only" in note.message and "first run" in (note.evidence or "")
    assert node.status is alone.status


def test_unreadable_history_is_a_note_never_a_pass_or_a_fail(tmp_path):
    bad = tmp_path / "h.sqlite"
    bad.write_bytes(b"not a database" * 100)
    node = checked(symbol_error=503)
    over = judge_over_time(CFG, History(bad), [node], T0, "quick")
    assert over.nodes == [node]
    assert over.notes and "history not read" in over.notes[0]
    assert [(a.status, a.scope) for a in over.analyses] == [(Status.SKIP, "history")]


def test_rates_across_an_hc_restart_read_the_same_history(tmp_path):
    path = tmp_path / "h.sqlite"
    with History(path) as history:
        record(history, T0, checked(symbol_error=3))
    # a fresh process: nothing of this one's state, only the history file
    script = textwrap.dedent(f"""
        import datetime as dt, json, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_over_time import checked, CFG, T0
        from healthcheck.orchestrate.over_time import judge_over_time
        from healthcheck.report.history import History
        with History({str(path)!r}) as h:
            node = judge_over_time(CFG, h, [checked(symbol_error=503)], T0 + dt.timedelta(hours=1)).nodes[0]
        print(json.dumps([[f.id, f.status.value] for f in node.findings if f.check == "ib.rates"]))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=REPO,
                         check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [["ib.E006", "FAIL"]]


def replay(tmp_path: Path, values: list[int], every: dt.timedelta) -> list[tuple[dt.datetime, NodeResult]]:
    """Each run judged against the history so far, then recorded: what hc sweep does run after run."""
    out = []
    with History(tmp_path / "h.sqlite") as history:
        for i, value in enumerate(values):
            at = T0 + i * every
            node = judged(history, at, checked(symbol_error=value))
            out.append((at, node))
            record(history, at, node)
    return out


def test_a_steady_rise_warns_at_least_a_day_before_the_fail_it_later_produces(tmp_path):
    # 30 symbol errors a day, a run every 6 hours: far below 120/hour, so only the absolute
    # FAIL (1000) ends it, on day ~33; the trend sees it coming
    every = dt.timedelta(hours=6)
    runs = replay(tmp_path, [int(7.5 * i) for i in range(150)], every)
    warned = [at for at, node in runs if any(f.id == "trend.W001" for f in node.findings)]
    failed = [at for at, node in runs if node.status is Status.FAIL]
    assert warned and failed
    assert failed[0] - warned[0] >= dt.timedelta(days=1)
    trend = next(f for _, node in runs for f in node.findings if f.id == "trend.W001")
    assert trend.status is Status.WARN and "days" in trend.message and trend.component == "mlx5_0/1:symbol_error"
    # a trend never FAILs, and never rates a FAIL on its own
    assert all(f.status is Status.WARN for _, node in runs for f in node.findings if f.id == "trend.W001")
    assert not any(f.id == "ib.E006" for _, node in runs for f in node.findings)


def test_a_flat_noisy_counter_near_its_limit_never_warns(tmp_path):
    rng = random.Random(23)
    values, value = [], 960
    for _ in range(120):  # a month of runs: an error now and then, no trend
        value += 1 if rng.random() < 0.03 else 0
        values.append(value)
    runs = replay(tmp_path, values, dt.timedelta(hours=6))
    assert not any(f.id == "trend.W001" for _, node in runs for f in node.findings)


def test_a_reset_starts_the_trend_again(tmp_path):
    # rising fast towards the limit, then cleared (perfquery -R): the old slope is not the new one
    values = [100 * i for i in range(8)] + [0, 0, 0, 0, 0]
    runs = replay(tmp_path, values, dt.timedelta(hours=6))
    assert not any(f.id == "trend.W001" for _, node in runs[8:] for f in node.findings)


def test_a_flat_line_explains_nothing():
    noisy = [(i * 3600.0, 950.0 + (3 if i % 2 else -3)) for i in range(20)]
    line = fit_line(noisy)
    assert line is not None and line.fit < 0.1


def test_unknown_counter_in_rates_is_a_config_error(tmp_path):
    from healthcheck.core.config.loader import load_config
    from healthcheck.core.errors import HcError

    (tmp_path / "fabrics").mkdir()
    (tmp_path / "fabrics" / "f.yaml").write_text("ib:\n  rates:\n    symbol_eror: {any_increase: FAIL}\n")
    (tmp_path / "hc.yaml").write_text("default_fabric: f\n")
    with pytest.raises(HcError, match="symbol_eror"):
        cfg = load_config(tmp_path / "hc.yaml")
        cfg.validate()
        cfg.fabric("f")


SMI_Q = REPO / "tests/fixtures/corpus/nvidia-smi-q/h100-8gpu-driver-535.183.01.txt"


def gpu_checked(node: str, config: Config, corrected: int) -> NodeResult:
    """gpu.ecc on a real 8-GPU H100 capture, GPU3's corrected ECC count changed (a scenario)."""
    from healthcheck.checks.gpu import ecc
    from healthcheck.parsers.nvidia_smi import parse_nvidia_smi_q

    real = parse_nvidia_smi_q(SMI_Q.read_text())
    gpus = [msgspec.structs.replace(g, ecc_volatile_corrected=corrected) if g.index == 3 else g for g in real.gpus]
    out = list(ecc(gpus=msgspec.structs.replace(real, gpus=gpus), limits=config.fabric("h100-ndr400")))
    findings = [stamp(f, check="gpu.ecc", node=node) for f in out if isinstance(f, Finding)]
    status = worst((f.status for f in findings), default=Status.PASS)
    return NodeResult(node=node, fabric="h100-ndr400", status=status, findings=findings,
                      metrics=[m for m in out if isinstance(m, Metric)],
                      checks=[CheckResult(name="gpu.ecc", status=status, duration_s=0.01)])


def test_corrected_ecc_rising_40_a_day_warns_days_before_its_limit(tmp_path):
    (tmp_path / "hc.yaml").write_text("default_fabric: h100-ndr400\n")
    from healthcheck.core.config.loader import load_config

    config = load_config(tmp_path / "hc.yaml")  # ecc_volatile_corrected_max: 1000
    first_trend = first_limit = None
    with History(tmp_path / "h.sqlite") as history:
        for i in range(100):  # a run every 6 hours, 10 corrected errors each: 40 a day from 300
            at = T0 + i * dt.timedelta(hours=6)
            node = judge_over_time(config, history, [gpu_checked(NODE, config, 300 + 10 * i)], at).nodes[0]
            ids = {f.id for f in node.findings}
            if "trend.W001" in ids and first_trend is None:
                first_trend = (at, next(f for f in node.findings if f.id == "trend.W001"))
            if "gpu.E011" in ids and first_limit is None:
                first_limit = at
            record(history, at, node)
    assert first_trend is not None and first_limit is not None
    assert first_limit - first_trend[0] >= dt.timedelta(days=1)
    assert first_trend[1].component == "GPU3:ecc_volatile_corrected" and "40/day" in first_trend[1].message


def test_gpu_rates_judge_what_the_fabric_sets_and_a_reset_is_said(tmp_path):
    from healthcheck.core.config.loader import load_config

    (tmp_path / "fabrics").mkdir()
    (tmp_path / "fabrics" / "g.yaml").write_text(
        "extends: h100-ndr400\ngpu:\n  rates:\n    ecc_volatile_corrected: {fail: {count: 100, per: hour}}\n")
    (tmp_path / "hc.yaml").write_text("default_fabric: g\n")
    config = load_config(tmp_path / "hc.yaml")
    with History(tmp_path / "h.sqlite") as history:
        first = judge_over_time(config, history, [gpu_checked(NODE, config, 10)], T0).nodes[0]
        record(history, T0, first)
        fast = judge_over_time(config, history, [gpu_checked(NODE, config, 510)], T0 + dt.timedelta(hours=2)).nodes[0]
        record(history, T0 + dt.timedelta(hours=2), fast)
        reset = judge_over_time(config, history, [gpu_checked(NODE, config, 0)], T0 + dt.timedelta(hours=3)).nodes[0]
    assert [(f.id, f.status.value) for f in first.findings if f.check == "gpu.rates"] == [("gpu.E016", "PASS")]
    assert [(f.id, f.status.value, f.component) for f in fast.findings if f.check == "gpu.rates"] == [
        ("gpu.E015", "FAIL", "GPU3:ecc_volatile_corrected")]
    assert fast.status is Status.FAIL
    assert [(f.id, f.status.value) for f in reset.findings if f.check == "gpu.rates"] == [("gpu.E016", "PASS")]
    assert "GPU3 ecc_volatile_corrected 510 -> 0" in (next(f for f in reset.findings if f.id == "gpu.E016").evidence
                                                       or "")
    assert config.fabric("h100-ndr400").gpu.rates == {}  # the shipped fabrics set no GPU rate


def test_unknown_gpu_counter_in_rates_is_a_config_error(tmp_path):
    from healthcheck.core.config.loader import load_config
    from healthcheck.core.errors import HcError

    (tmp_path / "fabrics").mkdir()
    (tmp_path / "fabrics" / "f.yaml").write_text("gpu:\n  rates:\n    ecc_corected: {any_increase: WARN}\n")
    (tmp_path / "hc.yaml").write_text("default_fabric: f\n")
    with pytest.raises(HcError, match="ecc_corected"):
        cfg = load_config(tmp_path / "hc.yaml")
        cfg.validate()
        cfg.fabric("f")


def test_a_node_whose_counters_were_not_read_is_never_said_to_pass_the_rates(tmp_path):
    read = checked(node="n1", symbol_error=3)
    unread = NodeResult(node="n2", fabric="generic", status=Status.ERROR)  # ib.counters could not read it
    with History(tmp_path / "h.sqlite") as history:
        record(history, T0, read)
        over = judge_over_time(CFG, history, [read, unread], T0 + dt.timedelta(hours=1), "quick")
        runs = {a.name: a for a in over.analyses}
        assert runs["ib.rates"].status is Status.PASS and runs["ib.rates"].nodes == "n1"
        alone = judge_over_time(CFG, history, [unread], T0 + dt.timedelta(hours=1), "quick")
    assert {a.name: a.status for a in alone.analyses} == {"ib.rates": Status.SKIP, "gpu.rates": Status.SKIP,
                                                          "trend.counters": Status.SKIP}
    assert alone.nodes == [unread]


# ------------------------------------------------------------ issue 23 section 2: GPU series
#
# Each replay is a real capture parsed as a run parses it (the 8-GPU H100 `nvidia-smi -q`, the
# Tesla P100 `nvidia-smi -q -x` for pre-Ampere page retirement) and judged by gpu.ecc and
# gpu.clocks, with one GPU's values changed run by run (the scenario); every run is judged
# against the history so far, then recorded.

P100_XML = REPO / "tests/fixtures/nvidia-smi-q-xml/tesla-p100.xml"
EVERY = dt.timedelta(hours=6)


def fabric_config(tmp_path: Path, extra: str = "") -> Config:
    from healthcheck.core.config.loader import load_config

    (tmp_path / "fabrics").mkdir(parents=True, exist_ok=True)
    (tmp_path / "fabrics" / "g.yaml").write_text("extends: h100-ndr400\n" + extra)
    (tmp_path / "hc.yaml").write_text(f"fabric_dirs: [{tmp_path / 'fabrics'}]\ndefault_fabric: g\n")
    return load_config(tmp_path / "hc.yaml")


def gpu_run(config: Config, capture: Path, gpu: int, **values) -> NodeResult:
    """gpu.ecc and gpu.clocks on the real capture, GPU `gpu`'s fields changed (a scenario)."""
    from healthcheck.checks.gpu import clocks, ecc
    from healthcheck.parsers.nvidia_smi import parse_nvidia_smi_q

    real = parse_nvidia_smi_q(capture.read_text())
    gpus = [msgspec.structs.replace(g, **values) if g.index == gpu else g for g in real.gpus]
    facts, limits = msgspec.structs.replace(real, gpus=gpus), config.fabric("g")
    findings, metrics, checks = [], [], []
    for name, fn in (("gpu.ecc", ecc), ("gpu.clocks", clocks)):
        out = list(fn(gpus=facts, limits=limits))
        own = [stamp(f, check=name, node=NODE) for f in out if isinstance(f, Finding)]
        findings += own
        metrics += [m for m in out if isinstance(m, Metric)]
        checks.append(CheckResult(name=name, status=worst((f.status for f in own), default=Status.PASS),
                                  duration_s=0.01))
    return NodeResult(node=NODE, fabric="g", status=worst((f.status for f in findings), default=Status.PASS),
                      findings=findings, metrics=metrics, checks=checks)


def gpu_replay(tmp_path: Path, config: Config, runs: list[NodeResult]) -> list[tuple[dt.datetime, NodeResult]]:
    out = []
    with History(tmp_path / "h.sqlite") as history:
        for i, node in enumerate(runs):
            at = T0 + i * EVERY
            over = judge_over_time(config, history, [node], at)
            assert not over.notes
            out.append((at, over.nodes[0]))
            record(history, at, over.nodes[0])
    return out


def first(runs: list[tuple[dt.datetime, NodeResult]], finding_id: str,
          status: Status | None = None) -> tuple[dt.datetime, Finding] | None:
    return next(((at, f) for at, node in runs for f in node.findings
                 if f.id == finding_id and (status is None or f.status is status)), None)


def trends_of(runs: list[tuple[dt.datetime, NodeResult]]) -> list[Finding]:
    return [f for _, node in runs for f in node.findings if f.id == "trend.W001"]


def test_retired_pages_rising_warn_a_day_before_the_limit_fails(tmp_path):
    # a P100 retiring ~2 pages a day (SBE pairs) from 20: DCGM's 63 is passed on day ~22
    config = fabric_config(tmp_path)
    assert config.fabric("g").gpu.retired_pages_max == 63
    runs = gpu_replay(tmp_path, config, [gpu_run(config, P100_XML, 0, retired_pages_sbe=20 + i // 2,
                                                 retired_pages_dbe=0) for i in range(100)])
    warned, failed = first(runs, "trend.W001"), first(runs, "gpu.E017", Status.FAIL)
    assert warned is not None and failed is not None
    assert failed[0] - warned[0] >= dt.timedelta(days=1)
    assert warned[1].component == "GPU0:retired_pages" and "gpu.retired_pages_max (63)" in warned[1].message
    assert all(f.status is Status.WARN for f in trends_of(runs))


def test_retired_pages_flat_near_the_limit_with_a_page_now_and_then_never_warn(tmp_path):
    rng = random.Random(23)
    config = fabric_config(tmp_path)
    values, value = [], 55
    for _ in range(120):  # a month of runs, a page retired now and then, no trend
        value += 1 if rng.random() < 0.03 else 0
        values.append(value)
    runs = gpu_replay(tmp_path, config, [gpu_run(config, P100_XML, 0, retired_pages_sbe=v, retired_pages_dbe=0)
                                         for v in values])
    assert not trends_of(runs) and not first(runs, "gpu.E017")


def test_a_replaced_board_starts_the_retired_pages_trend_again(tmp_path):
    config = fabric_config(tmp_path)
    values = [30 + 3 * i for i in range(8)] + [0] * 8  # climbing fast, then a new board
    runs = gpu_replay(tmp_path, config, [gpu_run(config, P100_XML, 0, retired_pages_sbe=v, retired_pages_dbe=0)
                                         for v in values])
    assert any(f.id == "trend.W001" for f in runs[7][1].findings)
    assert not any(f.id == "trend.W001" for _, node in runs[8:] for f in node.findings)


def banks(low_or_none: int) -> RemapHistogram:
    return RemapHistogram(max=2560 - low_or_none, high=0, partial=0, low=low_or_none - low_or_none // 3,
                          none=low_or_none // 3)


def test_row_remap_spares_running_out_warn_days_before_the_remap_fails(tmp_path):
    # GPU3 of the H100 capture: a bank every ~18 hours drops to low or no spare rows; past 8
    # the fabric warns (gpu.E018), and a remap fails once a bank with none left needs one
    config = fabric_config(tmp_path, "gpu:\n  remap_banks_low_max: 8\n")
    runs = gpu_replay(tmp_path, config, [
        gpu_run(config, SMI_Q, 3, remap_histogram=banks(i // 3), remapped_rows_correctable=i,
                remapped_rows_failure=i >= 30) for i in range(40)])
    warned, over, failed = first(runs, "trend.W001"), first(runs, "gpu.E018"), first(runs, "gpu.E014", Status.FAIL)
    assert warned is not None and over is not None and failed is not None
    assert over[0] - warned[0] >= dt.timedelta(days=1) and failed[0] - warned[0] >= dt.timedelta(days=1)
    assert warned[1].component == "GPU3:remap_banks_low" and "left to gpu.remap_banks_low_max (8)" in warned[1].message
    assert {f.component for f in trends_of(runs)} == {"GPU3:remap_banks_low"}  # the other GPUs stay at Max


def test_row_remap_spares_flat_never_warn_and_no_limit_takes_no_trend(tmp_path):
    config = fabric_config(tmp_path, "gpu:\n  remap_banks_low_max: 8\n")
    flat = gpu_replay(tmp_path, config, [gpu_run(config, SMI_Q, 3, remap_histogram=banks(6)) for _ in range(40)])
    assert not trends_of(flat)
    # the shipped fabrics set no limit: the same rising history takes no spares trend
    unset = fabric_config(tmp_path / "unset")
    assert unset.fabric("g").gpu.remap_banks_low_max is None
    rising = gpu_replay(tmp_path / "unset", unset, [gpu_run(unset, SMI_Q, 3, remap_histogram=banks(i // 3))
                                                    for i in range(40)])
    assert not trends_of(rising)


def test_a_gpu_without_a_remap_histogram_is_said_once_never_an_error(tmp_path):
    # the P100 (pre-Ampere) gives no histogram: one PASS note on the first run, not every run
    config = fabric_config(tmp_path, "gpu:\n  remap_banks_low_max: 8\n")
    runs = gpu_replay(tmp_path, config, [gpu_run(config, P100_XML, 0) for _ in range(5)])
    notes = [(i, f) for i, (_, node) in enumerate(runs) for f in node.findings if f.id == "trend.E002"]
    assert [(i, f.status) for i, f in notes] == [(0, Status.PASS)] and "GPU0" in notes[0][1].message
    assert all(node.status is not Status.ERROR for _, node in runs)


def test_idle_temperature_creeping_up_warns_a_day_before_the_gpu_is_too_hot(tmp_path):
    # GPU5 idle (no process, 0% utilization, as captured) warming 1.6 C a day from 36 C (a
    # failing fan or a clogged filter): h100-ndr400's temp_max_c 85 is passed on day ~31
    rng = random.Random(23)
    config = fabric_config(tmp_path)
    runs = gpu_replay(tmp_path, config, [
        gpu_run(config, SMI_Q, 5, temperature_c=round(36 + 0.4 * i + rng.uniform(-0.5, 0.5), 1))
        for i in range(130)])
    warned, hot = first(runs, "trend.W001"), first(runs, "gpu.E031", Status.FAIL)
    assert warned is not None and hot is not None
    assert hot[0] - warned[0] >= dt.timedelta(days=1)
    assert warned[1].component == "GPU5:temperature_idle_c" and "gpu.temp_max_c (85)" in warned[1].message


def test_busy_readings_are_no_idle_points_and_a_flat_noisy_idle_temperature_never_warns(tmp_path):
    # every other run finds GPU5 busy at 60-84 C (a job): those readings are not idle ones; the
    # idle ones wander 33-39 C for a month with no trend
    rng = random.Random(7)
    config = fabric_config(tmp_path)
    busy = {"utilization_gpu_pct": 97.0, "processes": [GpuProcess(pid=4242, name="python3", type="C")]}
    runs = gpu_replay(tmp_path, config, [
        gpu_run(config, SMI_Q, 5, temperature_c=60 + i % 25, **busy) if i % 2 else
        gpu_run(config, SMI_Q, 5, temperature_c=round(36 + rng.uniform(-3, 3), 1))
        for i in range(120)])
    assert not trends_of(runs)
    busy_gpu5 = [m for _, node in runs[1::2] for m in node.metrics if m.component == "GPU5"]
    assert [m.name for m in busy_gpu5].count("temperature_c") == 60
    assert not [m for m in busy_gpu5 if m.name == "temperature_idle_c"]


# ------------------------------------------------- issue 23 section 4: a repair on record
#
# `hc node NODE --repaired TEXT` puts a repair in the history (report/recurrence.py's repairs
# table); the readings before it are of the part replaced or reseated. An HCA port's counters do
# not start again when its cable is replaced: only the repair on record says where they do.


def repair(history: History, at: dt.datetime, node: str = NODE) -> None:
    from healthcheck.report.recurrence import Repair

    history.record_repair(Repair(node, iso(at), "replaced the cable of mlx5_0 port 1", "ops"))


def test_a_trend_starts_again_at_a_repair_on_record(tmp_path):
    # symbol_error climbing 100 every 6 hours toward 1000 (a trend WARN), then the cable is
    # replaced: the port's count stays at 700 and stops rising. The old cable's climb is no
    # slope of the new one's: no trend after the repair.
    values = [100 * i for i in range(8)] + [700] * 6
    runs = []
    with History(tmp_path / "h.sqlite") as history:
        for i, value in enumerate(values):
            at = T0 + i * EVERY
            if i == 8:
                repair(history, at - dt.timedelta(minutes=30))
            node = judged(history, at, checked(symbol_error=value))
            runs.append((at, node))
            record(history, at, node)
    assert any(f.id == "trend.W001" for f in runs[7][1].findings)
    assert trends_of(runs[8:]) == []
    assert not any(f.id == "ib.E006" for _, node in runs for f in node.findings)


def test_a_trend_after_a_repair_is_of_the_readings_since_it(tmp_path):
    # the new cable is bad too: it climbs again, and its own readings (not the old one's) warn
    values = [100 * i for i in range(8)] + [700 + 40 * i for i in range(8)]
    runs = []
    with History(tmp_path / "h.sqlite") as history:
        for i, value in enumerate(values):
            at = T0 + i * EVERY
            if i == 8:
                repair(history, at - dt.timedelta(minutes=30))
            node = judged(history, at, checked(symbol_error=value))
            runs.append((at, node))
            record(history, at, node)
    warned = trends_of(runs[8:])
    assert warned and all(f.status is Status.WARN for f in warned)
    assert f"over {len(values) - 8} runs" in warned[-1].message  # only the runs since the repair
    assert "over 4 runs" in warned[0].message  # trends.min_runs of the new readings, none of the old


def test_no_rate_is_taken_across_a_repair_on_record(tmp_path):
    with History(tmp_path / "h.sqlite") as history:
        record(history, T0, checked(symbol_error=3))
        repair(history, T0 + dt.timedelta(minutes=30))
        repair(history, T0 + dt.timedelta(minutes=40), node="gpu002")  # another node's: not this one's
        node = judged(history, T0 + dt.timedelta(hours=1), checked(symbol_error=503))
        record(history, T0 + dt.timedelta(hours=1), node)
        repair(history, T0 + dt.timedelta(hours=3))  # after the next run started: not yet on record for it
        again = judged(history, T0 + dt.timedelta(hours=2), checked(symbol_error=1003))
    # 500 in an hour is above 120/hour, but 3 was the replaced cable's count: a note, no rate
    assert new(node) == [("ib.E007", "PASS", "")]
    note = next(f for f in node.findings if f.id == "ib.E007")
    assert "repair of gpu001 was put on record since its previous reading" in note.message
    assert "2026-11-01T00:30:00" in (note.evidence or "")
    assert node.status is not Status.FAIL
    # the next run's rate is taken from the reading after the repair
    assert new(again) == [("ib.E006", "FAIL", "mlx5_0/1:symbol_error")]


def test_a_gpu_rate_across_a_repair_is_a_note(tmp_path):
    config = fabric_config(tmp_path, "gpu:\n  rates:\n    ecc_volatile_corrected: {any_increase: WARN}\n")
    with History(tmp_path / "h.sqlite") as history:
        record(history, T0, gpu_run(config, SMI_Q, 3, ecc_volatile_corrected=5))
        repair(history, T0 + dt.timedelta(hours=1))
        over = judge_over_time(config, history, [gpu_run(config, SMI_Q, 3, ecc_volatile_corrected=9)],
                               T0 + dt.timedelta(hours=2))
    rated = [(f.id, f.status) for f in over.nodes[0].findings if f.check == "gpu.rates"]
    assert rated == [("gpu.E016", Status.PASS)]
