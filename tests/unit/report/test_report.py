"""Reports: schema, round trip, atomic writes, and folded tables."""

from __future__ import annotations

import datetime as dt
import json
import os

import msgspec
import pytest

from healthcheck.core.catalogue import CATALOGUE
from healthcheck.core.errors import HcError
from healthcheck.core.model import CheckResult, Finding, NodeResult
from healthcheck.core.status import Status, worst
from healthcheck.report.build import group_findings, make_report
from healthcheck.report.jsonio import decode, encode, read_report, write_atomic
from healthcheck.report.table import printable, render


def node_result(name, *findings, status=None):
    fs = [
        Finding(id=fid, status=st, message=msg, component=comp, node=name, check="ib.port_state",
                subject=f"{name}:{comp}", fingerprint="0123456789abcdef")
        for fid, st, comp, msg in findings
    ]
    return NodeResult(node=name, fabric="h100-ndr400", status=status or worst((f.status for f in fs), default=Status.PASS),
                      checks=[CheckResult("ib.port_state", status or Status.PASS, 0.01)], findings=fs)


def report(nodes):
    now = dt.datetime(2026, 11, 22, 13, 0, tzinfo=dt.timezone.utc)
    return make_report(command="node", tier="quick", config_digest="sha256:" + "0" * 64, config_path="/x",
                       started=now, finished=now + dt.timedelta(seconds=2), nodes=nodes)


DOWN = ("ib.E002", Status.FAIL, "mlx5_2/1", "mlx5_2/1 is Down/Polling (expected Active/LinkUp)")


def test_identical_findings_fold_into_one_hostlist():
    nodes = [node_result(n, DOWN) for n in ("gpu017", "gpu033", "gpu034", "gpu035")] + [node_result("gpu001")]
    groups = group_findings(nodes)
    assert groups == [{"status": "FAIL", "id": "ib.E002", "component": "mlx5_2/1", "message": DOWN[3],
                       "nodes": "gpu[017,033-035]", "count": 4}]
    text = render(report(nodes))
    line = next(row for row in text.splitlines() if "ib.E002" in row)
    assert line.split()[:4] == ["FAIL", "ib.E002", "gpu[017,033-035]", "mlx5_2/1"]
    assert text.splitlines()[-1].startswith("FAIL: 5 nodes (1 PASS, 4 FAIL)")


def test_worst_status_first_and_pass_findings_not_grouped():
    nodes = [node_result("a1", ("ib.E005", Status.WARN, "x", "w")), node_result("a2", DOWN)]
    assert [g["status"] for g in group_findings(nodes)] == ["FAIL", "WARN"]


def test_hostile_node_names_are_listed_not_folded():
    nodes = [node_result("gpu[1-2]", DOWN), node_result("n2", DOWN)]
    assert group_findings(nodes)[0]["nodes"] == "gpu[1-2],n2"


def test_report_round_trip_and_schema(validate_report):
    r = report([node_result("gpu017", DOWN)])
    data = encode(r)
    validate_report(data)
    assert decode(data) == r
    assert json.loads(data)["schema"] == "hc.report/2"


def test_decode_rejects_other_schemas_and_garbage():
    r = report([node_result("gpu017")])
    data = json.loads(encode(r))
    data["schema"] = "hc.report/3"
    with pytest.raises(HcError, match="unsupported report schema 'hc.report/3'"):
        decode(json.dumps(data).encode())
    data["nodes"] = "a newer shape"  # a newer version that does not fit the model: still named
    with pytest.raises(HcError, match="unsupported report schema 'hc.report/3'"):
        decode(json.dumps(data).encode())
    with pytest.raises(HcError, match="not a valid hc report"):
        decode(b"{not json")


def test_write_atomic_replaces_and_leaves_no_temp_files(tmp_path):
    path = tmp_path / "sub" / "r.json"
    write_atomic(path, b"one")
    write_atomic(path, b"two")
    assert path.read_bytes() == b"two"
    assert os.listdir(path.parent) == ["r.json"]


def test_write_atomic_failure_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "r.json"
    write_atomic(path, b"old")

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(HcError, match="No space left on device"):
        write_atomic(path, b"new")
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["r.json"]


def test_read_report_missing_file(tmp_path):
    with pytest.raises(HcError, match="cannot read"):
        read_report(tmp_path / "nope.json")


def test_printable_escapes_control_characters_only():
    assert printable("ëth0") == "ëth0"
    assert printable("a\nb\x1b[31m") == "a\\nb\\x1b[31m"


def test_every_catalogued_id_appears_in_the_schema_pattern():
    import re

    from healthcheck.checks import load_all
    from healthcheck.report.jsonio import SCHEMA_FILES

    load_all()
    v1 = json.loads(SCHEMA_FILES["hc.report/1"].read_text())["$defs"]["finding_id"]["pattern"]
    v2 = json.loads(SCHEMA_FILES["hc.report/2"].read_text())["$defs"]["Finding"]["properties"]["id"]["pattern"]
    assert all(re.match(v1, fid) and re.match(v2, fid) for fid in CATALOGUE)


def test_node_result_error_field_round_trips():
    from healthcheck.orchestrate.engine import unreachable_result

    n = unreachable_result("gpu9", "generic", "connection refused", "agentless")
    assert n.status is Status.ERROR and n.findings[0].id == "hc.E006"
    assert msgspec.json.decode(msgspec.json.encode(n), type=NodeResult) == n


# ------------------------------------------- folding and order (issue 8, item 19)


def unreachable(name):
    return NodeResult(node=name, fabric="f1", status=Status.ERROR, error="no report", findings=[
        Finding(id="hc.E006", status=Status.ERROR, message=f"no report from srun for {name} (task exited 1)",
                node=name, check="hc.reach", subject=name, fingerprint="0123456789abcdef")])


def test_findings_whose_messages_name_their_node_fold_into_one_row():
    nodes = [unreachable(n) for n in ("gpu10", "gpu2", "gpu1", "gpu11")]
    (group,) = group_findings(nodes)
    assert group["nodes"] == "gpu[1-2,10-11]" and group["count"] == 4
    assert group["message"] == "no report from srun for <node> (task exited 1)"
    text = render(report(nodes))
    assert len([line for line in text.splitlines() if "hc.E006" in line]) == 1
    # one node: its own message, name and all
    assert group_findings([unreachable("gpu7")])[0]["message"] == "no report from srun for gpu7 (task exited 1)"


def test_only_whole_node_names_are_taken_out_of_messages():
    from healthcheck.report.build import without_node

    assert without_node("gpu1 sees gpu10 and mgpu1 at gpu1.", "gpu1") == "<node> sees gpu10 and mgpu1 at <node>."
    assert without_node("peer gpu1.ib is down", "gpu1") == "peer gpu1.ib is down"  # another host's name
    assert without_node("lid 0x11 down", "") == "lid 0x11 down"


def test_nodes_sort_naturally_in_the_report_and_the_table():
    names = ["gpu10", "gpu2", "gpu1", "gpu11", "login1"]
    r = report([node_result(n) for n in names])
    assert [n.node for n in r.nodes] == ["gpu1", "gpu2", "gpu10", "gpu11", "login1"]
    # names NodeSet must not fold are listed, naturally ordered too
    hostile = [node_result(n, DOWN) for n in ("x[10]", "x[9]", "gpu10", "gpu9")]
    assert group_findings(hostile)[0]["nodes"] == "gpu9,gpu10,x[9],x[10]"


def test_natural_key_orders_numbers_as_numbers():
    from healthcheck.report.build import sort_nodes

    assert sort_nodes(["n10", "n9", "n1", "n01", "a", "n1b", "n1a"]) == ["a", "n01", "n1", "n1a", "n1b", "n9", "n10"]
