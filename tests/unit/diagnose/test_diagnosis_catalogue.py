"""A job's diagnosis in the catalogue (issue 19): each failure class is a finding ID
(diag.E0xx) with title, hint and action in `hc checks list`; the verdict's findings are
kernel findings (core.model.Finding), fingerprinted per job and culprit; and tickets, the
Prometheus export and the HTML report carry them as they carry a node's finding."""

from __future__ import annotations

import json
import typing
from html.parser import HTMLParser
from pathlib import Path

import jsonschema
import pytest
from support import FIXTURES, run_hc, run_hc_inproc

from healthcheck.core import catalogue
from healthcheck.core.model import Finding
from healthcheck.core.status import Status
from healthcheck.diagnose.findings import SPECS, FailureClass, JobFinding
from healthcheck.diagnose.sources import collect
from healthcheck.diagnose.verdict import SCHEMA_PATH, build, decode, encode, job_result

LIVE = FIXTURES / "diagnose-live"
SCEN = FIXTURES / "diagnose"
DIAG_IDS = {f"diag.E{n:03d}" for n in range(1, 12)}


def _copy(src: Path, dst: Path) -> Path:
    dst.mkdir(parents=True)
    for f in src.iterdir():
        if f.is_file():
            (dst / f.name).write_bytes(f.read_bytes())
    return dst


def test_every_failure_class_has_a_catalogued_id_with_hint_and_action():
    classes = set(typing.get_args(FailureClass))
    assert classes == set(SPECS), "a failure class without a diag.E0xx ID (or an ID for no class)"
    assert {s.id for s in SPECS.values()} == DIAG_IDS
    for cls, spec in SPECS.items():
        assert catalogue.CATALOGUE[spec.id] is spec, cls
        assert spec.title and spec.hint and spec.action in catalogue.SUGGESTED_ACTIONS, cls


def test_checks_list_names_every_diagnosis_id():
    table = run_hc_inproc("checks", "list")
    assert table.returncode == 0
    listed = {line.split()[0] for line in table.stdout.decode().splitlines() if line.strip()}
    assert DIAG_IDS <= listed
    data = json.loads(run_hc_inproc("checks", "list", "--format", "json").stdout)
    by_id = {f["id"]: f for f in data["findings"]}
    for fid in DIAG_IDS:
        assert by_id[fid]["title"] and by_id[fid]["hint"] and by_id[fid]["suggested_action"], fid
    assert by_id["diag.E001"]["suggested_action"] == "investigate"
    assert by_id["diag.E009"]["suggested_action"] == "reset-gpu"  # gpu-failure: the Xid names the GPU


def test_verdict_findings_are_stamped_kernel_findings():
    v = build(collect([LIVE / "kill-torchrun"]))
    assert v.cls == "dead-rank"
    main = v.findings[0]
    assert isinstance(main, Finding) and isinstance(main, JobFinding)
    assert (main.id, main.status, main.check, main.component) == ("diag.E001", Status.FAIL, "diagnose", "rank 2")
    assert main.members == ("node3",) and main.node == ""  # the culprit's host; a job finding has no node
    assert main.subject == f"{v.job}:rank 2"
    assert main.hint == catalogue.DIAG_DEAD_RANK.hint and main.suggested_action == "investigate"
    assert main.fingerprint and main.message == v.summary
    assert main.evidence and "exitcode -9 (SIGKILL)" in main.evidence  # the lines, as the kernel's text
    assert any("SIGKILL" in e.text and e.rank == 2 for e in main.lines)


def test_fingerprint_is_per_job_and_culprit(tmp_path):
    """The same job read again is the same ticket; another job, or another culprit, is another."""
    a = build(collect([LIVE / "kill-torchrun"])).findings[0]
    again = build(collect([LIVE / "kill-torchrun"])).findings[0]
    assert a.fingerprint == again.fingerprint
    other_job = build(collect([_copy(LIVE / "kill-torchrun", tmp_path / "job2")])).findings[0]
    assert other_job.id == a.id and other_job.component == a.component
    assert other_job.fingerprint != a.fingerprint
    other_rank = build(collect([LIVE / "stop-torchrun"])).findings[0]
    assert other_rank.component == "rank 3" and other_rank.fingerprint != a.fingerprint


def test_unknown_is_an_error_finding_never_a_clean_job(tmp_path):
    (tmp_path / "x.txt").write_text("nothing here\n")
    v = build(collect([tmp_path]))
    assert v.cls == "unknown"
    (f,) = v.findings
    assert (f.id, f.status) == ("diag.E010", Status.ERROR) and v.why_unknown in f.message
    assert job_result(v).status is Status.ERROR


def test_diagnosis_2_validates_and_round_trips(tmp_path):
    schema = json.loads(SCHEMA_PATH.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    data = encode(build(collect([LIVE / "kill-torchrun"])))
    doc = json.loads(data)
    jsonschema.Draft202012Validator(schema).validate(doc)
    assert doc["schema"] == "hc.diagnosis/2"
    f = doc["findings"][0]
    assert set(Finding.__struct_fields__) <= set(JobFinding.__struct_fields__)
    assert {"id", "status", "message", "fingerprint", "members", "class", "lines"} <= set(f)
    assert decode(data).findings[0] == build(collect([LIVE / "kill-torchrun"])).findings[0]
    # the version before is kept as the record of what hc wrote, and refused as input in one line
    old = SCHEMA_PATH.with_name("hc.diagnosis-1.schema.json")
    assert json.loads(old.read_text())["title"] == "hc.diagnosis/1"
    v1 = tmp_path / "v1.json"
    v1.write_text(json.dumps({"schema": "hc.diagnosis/1", "class": "dead-rank", "confidence": "high",
                              "summary": "x", "next_step": "y",
                              "findings": [{"class": "dead-rank", "summary": "x", "confidence": "high"}]}))
    r = run_hc("report", "tickets", str(v1), "--no-webhook")
    assert r.returncode == 4 and b"hc.diagnosis/1" in r.stderr and b"Traceback" not in r.stderr


@pytest.fixture
def diagnosis(tmp_path) -> Path:
    out = tmp_path / "diag.json"
    r = run_hc("diagnose", "logs", str(LIVE / "kill-torchrun"), "-o", str(out), "--format", "json")
    assert r.returncode == 0, r.stderr
    return out


def test_report_tickets_read_a_diagnosis(diagnosis):
    r = run_hc_inproc("report", "tickets", str(diagnosis), "--format", "jsonl", "--no-webhook")
    assert r.returncode == 0, r.stderr
    (t,) = [json.loads(line) for line in r.stdout.splitlines()]
    doc = json.loads(diagnosis.read_bytes())
    assert (t["state"], t["id"], t["status"], t["nodes"], t["component"]) == ("new", "diag.E001", "FAIL", "node3",
                                                                               "rank 2")
    assert t["fingerprint"] == doc["findings"][0]["fingerprint"] and t["key"].startswith(t["fingerprint"] + ":new:")
    assert t["title"] == catalogue.DIAG_DEAD_RANK.title and t["hint"] == catalogue.DIAG_DEAD_RANK.hint
    assert "SIGKILL" in t["evidence"] and t["command"] == "diagnose"
    # the same document read again is the same record (the webhook's idempotency key)
    again = run_hc_inproc("report", "tickets", str(diagnosis), "--format", "jsonl", "--no-webhook")
    assert json.loads(again.stdout)["key"] == t["key"]


def test_report_html_and_show_read_a_diagnosis(diagnosis, tmp_path):
    page = tmp_path / "d.html"
    r = run_hc_inproc("report", "html", str(diagnosis), "-o", str(page))
    assert r.returncode == 0, r.stderr
    text = page.read_text()
    HTMLParser().feed(text)
    assert "diag.E001" in text and "rank 2 died" in text and "node3" in text and "Jobs diagnosed" in text
    shown = run_hc_inproc("report", "show", str(diagnosis), "--format", "json")
    assert shown.returncode == 0, shown.stderr
    report = json.loads(shown.stdout)
    (group,) = report["groups"]
    assert group["kind"] == "job" and group["status"] == "FAIL" and report["status"] == "FAIL"
    assert group["findings"][0]["id"] == "diag.E001" and "class" not in group["findings"][0]


def test_diagnose_exports_prometheus(tmp_path):
    prom = tmp_path / "prom"
    prom.mkdir()
    r = run_hc_inproc("diagnose", "logs", str(LIVE / "kill-torchrun"), "--prometheus", str(prom))
    assert r.returncode == 0, r.stderr
    text = (prom / "hc-diagnose.prom").read_text()
    (line,) = [x for x in text.splitlines() if x.startswith("hc_finding{")]
    assert 'id="diag.E001"' in line and 'check="diagnose"' in line and 'severity="FAIL"' in line
    assert 'node="node3"' in line  # the culprit's host, as a node's finding names its node
    assert ':rank 2"' in line and line.endswith(" 1.0")
    assert 'hc_group_status{command="diagnose"' in text and 'kind="job",status="FAIL"' in text
    # or where the config says so, for the command diagnose
    (prom / "hc-diagnose.prom").unlink()
    cfg = tmp_path / "hc.yaml"
    cfg.write_text(f"prometheus: {{textfile_dir: {prom}, commands: [diagnose]}}\n")
    r = run_hc_inproc("diagnose", "logs", str(LIVE / "kill-torchrun"), "--config", str(cfg))
    assert r.returncode == 0, r.stderr
    assert 'id="diag.E001"' in (prom / "hc-diagnose.prom").read_text()
    # a directory that cannot be written is refused before the diagnosis, as for hc node
    bad = run_hc_inproc("diagnose", "logs", str(LIVE / "kill-torchrun"), "--prometheus", str(tmp_path / "missing"))
    assert bad.returncode == 4 and b"Traceback" not in bad.stderr


def test_a_broken_diagnosis_document_is_one_line(tmp_path):
    """A document that claims hc.diagnosis/2 but is not one (hand-edited, cut short, another
    version's) is refused in one line, exit 4, by every reader of reports."""
    cases = {"cut": b'{"schema": "hc.diagnosis/2", "class": "dead-rank", "findings": [{"id": "diag.E0',
             "fields": json.dumps({"schema": "hc.diagnosis/2", "class": "dead-rank"}).encode(),
             "newer": json.dumps({"schema": "hc.diagnosis/3", "class": "x", "confidence": "high", "summary": "s",
                                  "next_step": "n"}).encode()}
    for name, data in cases.items():
        path = tmp_path / f"{name}.json"
        path.write_bytes(data)
        for cmd in (["report", "tickets", str(path), "--no-webhook"], ["report", "show", str(path)],
                    ["report", "html", str(path), "-o", str(tmp_path / "x.html")]):
            r = run_hc_inproc(*cmd)
            assert r.returncode == 4, (name, cmd, r.stderr)
            assert b"Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, (name, r.stderr)
