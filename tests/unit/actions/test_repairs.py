"""Repairs on record: `hc node NODE --repaired TEXT` writes the history and the audit log,
and `hc report history --node NODE` lists repairs beside failures with the mean time
between failures."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from support import run_hc_inproc

from healthcheck.actions.repairs import record_repairs, repair_text
from healthcheck.core.config.loader import load_config
from healthcheck.core.errors import UsageError
from healthcheck.core.model import NodeResult
from healthcheck.core.status import Status
from healthcheck.report.build import make_report
from healthcheck.report.history import History, history_json, history_listing, history_table
from healthcheck.report.recurrence import failure_onsets, mtbf_line


def config(tmp_path):
    (tmp_path / "fabrics").mkdir(exist_ok=True)
    (tmp_path / "fabrics" / "t.yaml").write_text("net:\n  interfaces:\n    lo: {mtu: 65536}\n")
    cfg = tmp_path / "hc.yaml"
    cfg.write_text(f"default_fabric: t\nhistory:\n  path: {tmp_path}/state/history.sqlite\n"
                   f"slurm:\n  audit_log: {tmp_path}/audit.jsonl\n  state_dir: {tmp_path}/state\n")
    return cfg


def record(db, node: str, status: Status, day: float) -> None:
    at = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc) + dt.timedelta(days=day)
    with History(db) as h:
        h.record(make_report(command="node", tier="quick", config_digest="d", config_path="c", started=at,
                             finished=at, nodes=[NodeResult(node=node, fabric="t", status=status)]))


def test_a_repair_is_recorded_in_the_history_and_the_audit_log(tmp_path) -> None:
    main = load_config(config(tmp_path)).main
    (repair,) = record_repairs(main, ["gpu017"], "  reseated GPU 3 (ticket 4711)  ")
    assert repair.text == "reseated GPU 3 (ticket 4711)" and repair.node == "gpu017"
    with History(tmp_path / "state/history.sqlite") as h:
        assert h.repairs("gpu017", 10) == [repair] and h.repairs("gpu018", 10) == []
    (line,) = (tmp_path / "audit.jsonl").read_text().splitlines()
    audited = json.loads(line)
    assert audited["action"] == "repair" and audited["nodes"] == "gpu017" and audited["reason"] == repair.text


@pytest.mark.parametrize("text", ["", "   ", "x" * 501, "two\nlines"])
def test_a_repair_needs_one_printable_line(text) -> None:
    with pytest.raises(UsageError):
        repair_text(text)


def test_the_cli_refuses_a_repair_with_local_and_empty_words(tmp_path) -> None:
    cfg = config(tmp_path)
    r = run_hc_inproc("node", "--local", "--repaired", "x", "--config", str(cfg))
    assert r.returncode == 4 and b"--repaired names the nodes" in r.stderr
    r = run_hc_inproc("node", "gpu017", "--repaired", " ", "--config", str(cfg))
    assert r.returncode == 4 and b"--repaired needs words" in r.stderr
    assert not (tmp_path / "audit.jsonl").exists()


def test_history_shows_repairs_beside_failures_with_the_mtbf(tmp_path) -> None:
    cfg = config(tmp_path)
    db = tmp_path / "state/history.sqlite"
    for day, status in [(0, Status.PASS), (1, Status.FAIL), (1.5, Status.FAIL), (2, Status.PASS),
                        (4, Status.FAIL), (5, Status.PASS)]:
        record(db, "gpu017", status, day)
    main = load_config(cfg).main
    record_repairs(main, ["gpu017"], "replaced the baseboard")
    listing = history_listing(main.history, "gpu017", None, 20)
    text = history_table(listing)
    assert "REPAIR" in text and "replaced the baseboard" in text
    assert "mean time between failures: 3.0 days (2 failures" in text
    rows = history_json(listing)  # what `hc report history --node gpu017 --format json` prints
    assert rows[0]["status"] == "REPAIR" and rows[0]["text"] == "replaced the baseboard"
    assert [x["status"] for x in rows[1:]] == ["PASS", "FAIL", "PASS", "FAIL", "FAIL", "PASS"]


def test_mtbf_counts_failure_onsets_and_says_when_it_cannot() -> None:
    runs = [("2026-11-01T00:00:00.000Z", "FAIL"), ("2026-11-01T06:00:00.000Z", "FAIL"),
            ("2026-11-01T12:00:00.000Z", "ERROR"), ("2026-11-02T00:00:00.000Z", "FAIL")]
    assert failure_onsets(runs) == ["2026-11-01T00:00:00.000Z", "2026-11-02T00:00:00.000Z"]
    assert "1.0 days" in mtbf_line(runs)
    assert "not known (1 failure(s)" in mtbf_line(runs[:2])


def test_a_gpu_reset_is_recorded_in_the_history_and_the_audit_log(tmp_path) -> None:
    from healthcheck.actions.repairs import record_gpu_resets

    main = load_config(config(tmp_path)).main
    resets = record_gpu_resets(main, ["gpu017", "gpu018"], "3, GPU5,0000:19:00")
    assert [(r.node, r.gpu) for r in resets] == [(n, g) for n in ("gpu017", "gpu018")
                                                 for g in ("GPU3", "GPU5", "0000:19:00.0")]
    with History(tmp_path / "state/history.sqlite") as h:
        assert h.gpu_resets("gpu017") == resets[:3] and h.repairs("gpu017", 10) == []  # a reset is no repair
    audited = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert [(a["nodes"], a["action"], a["reason"]) for a in audited] == [
        ("gpu017", "gpu-reset", "GPU3, GPU5, 0000:19:00.0"), ("gpu018", "gpu-reset", "GPU3, GPU5, 0000:19:00.0")]
    (every,) = record_gpu_resets(main, ["gpu019"], "all")
    assert every.gpu == ""


@pytest.mark.parametrize("gpus", ["", " , ", "gpu", "GPU3x", "mlx5_0", "3;rm"])
def test_a_gpu_reset_names_gpus(gpus) -> None:
    from healthcheck.actions.repairs import reset_gpus

    with pytest.raises(UsageError):
        reset_gpus(gpus)


def test_the_cli_refuses_a_gpu_reset_with_local_and_no_gpu(tmp_path) -> None:
    cfg = config(tmp_path)
    r = run_hc_inproc("node", "--local", "--gpu-reset", "all", "--config", str(cfg))
    assert r.returncode == 4 and b"--gpu-reset puts a reset" in r.stderr
    r = run_hc_inproc("node", "gpu017", "--repaired", "reseated", "--gpu-reset", "nic0", "--config", str(cfg))
    assert r.returncode == 4 and b"is no GPU" in r.stderr
    assert not (tmp_path / "audit.jsonl").exists()  # nothing put on record: not even the repair
