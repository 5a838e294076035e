"""`hc diagnose logs` on real per-rank log sets (tests/fixtures/diagnose, made by
make_scenarios.py with torch 2.13 + gloo, py-spy 0.4.3): the class and the odd rank,
and never a healthy rank."""

from __future__ import annotations

import json

import pytest
from support import FIXTURES, run_hc

from healthcheck.diagnose.sources import collect
from healthcheck.diagnose.verdict import build

SCEN = FIXTURES / "diagnose"

CASES = {
    # scenario: (class, odd ranks)
    "stuck": ("stuck-rank", [2]),
    "skip": ("collective-mismatch", [3]),
    "shape": ("shape-mismatch", [2]),
    "detail": ("shape-mismatch", [1]),
    "dead": ("dead-rank", [1]),
    "port-in-use": ("init-failure", [0]),
    "nccl-opcount": ("stuck-rank", [2]),  # derived: per-rank COLL lines, rank 2 one opCount behind
}


@pytest.mark.parametrize("scenario", sorted(CASES))
def test_scenario_class_and_odd_rank(scenario):
    cls, odd = CASES[scenario]
    v = build(collect([SCEN / scenario]))
    assert v.cls == cls, v.summary
    assert [o.rank for o in v.odd_ranks] == odd, v.summary  # exactly: no healthy rank named
    assert v.confidence in ("high", "medium")
    main = v.findings[0]
    assert main.lines and all(e.source for e in main.lines)
    assert set(main.ranks) == set(odd)


def test_stuck_rank_names_where_and_groups_stacks():
    v = build(collect([SCEN / "stuck"]))
    assert "load_batch (train.py:37)" in v.summary
    groups = {g.ranks: g for g in v.stack_groups}
    assert groups[(0, 1, 3)].collective == "all_reduce" and not groups[(0, 1, 3)].singleton
    assert groups[(2,)].singleton and groups[(2,)].collective is None
    assert groups[(0, 1, 3)].text.startswith("ranks 0-1,3 (3): all_reduce <- reduce_grads (train.py:47)")
    row = {r.rank: r for r in v.ranks}
    assert row[2].odd and not row[0].odd and row[2].last_completed == 6


def test_skip_names_divergence_point():
    v = build(collect([SCEN / "skip"]))
    assert "seq 10" in v.divergence and "train.py:57" in v.summary


def test_dead_rank_has_host_pid_and_signal_from_torchrun_block():
    v = build(collect([SCEN / "dead" / "torchrun.log"]))
    (odd,) = v.odd_ranks
    assert (odd.rank, odd.host) == (1, "localhost") and odd.pid
    assert "SIGKILL" in v.summary and "collateral" in v.summary
    assert v.first_failure is not None and v.first_failure.time


def test_cli_table_and_json_exit_0(tmp_path):
    out = tmp_path / "v.json"
    r = run_hc("diagnose", "logs", str(SCEN / "stuck"), "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert b"stuck-rank" in r.stdout and b"rank 2 (1): load_batch" in r.stdout
    doc = json.loads(out.read_bytes())
    assert doc["schema"] == "hc.diagnosis/2" and doc["class"] == "stuck-rank"
    r = run_hc("diagnose", "logs", str(SCEN / "shape"), "--format", "json")
    assert r.returncode == 0 and json.loads(r.stdout)["odd_ranks"][0]["rank"] == 2


def test_nccl_opcount_lag_and_op_mismatch(tmp_path):
    """NCCL COLL lines per communicator (commId): the rank whose last opCount is behind the
    others' is stuck; the same opCount running another operation is a collective mismatch;
    ranks all at one opCount with one operation are no evidence."""
    src = SCEN / "nccl-opcount"
    v = build(collect([src]))
    assert "never launched NCCL opCount 0x139e" in v.summary and v.divergence.startswith("NCCL opCount 0x139e")
    # rank 2 launches 139e too, but an AllGather
    for r in range(4):
        text = (src / f"nccl-rank{r}.log").read_text()
        if r == 2:
            text += text.splitlines()[-1].replace("opCount 139d", "opCount 139e").replace("AllReduce", "AllGather") + "\n"
        (tmp_path / f"nccl-rank{r}.log").write_text(text)
    v = build(collect([tmp_path]))
    assert (v.cls, [o.rank for o in v.odd_ranks]) == ("collective-mismatch", [2]), v.summary
    assert "AllGather" in v.summary
    # everyone at 139e with AllReduce: nothing to say from the opCounts
    (tmp_path / "nccl-rank2.log").write_text((src / "nccl-rank0.log").read_text().replace(":41000:", ":41002:")
                                             .replace("rank 0 nranks", "rank 2 nranks").replace("gpu001", "gpu002"))
    v = build(collect([tmp_path]))
    assert v.cls == "unknown", v.summary
