"""DCGM's diagnostic: the `dcgmi diag` parser on every captured and derived output (2.x to
4.x, JSON and table) and on garbage; gpu.dcgm and gpu.dcgm_deep through a stand-in dcgmi
that replays those outputs with dcgmi's exit codes (tests/standins/dcgm/dcgmi: dcgmi is
in NVIDIA's repository, not Debian's, and needs a GPU); dcgmi absent for real; the deep
level only on an idle node."""

from __future__ import annotations

import json
import os
from pathlib import Path

import msgspec
import pytest
from support import CORPUS, FIXTURES, run_hc, run_hc_inproc, write_stub

from healthcheck.core.config.loader import load_config
from healthcheck.core.errors import ParseError
from healthcheck.core.facts import ProbeContext
from healthcheck.core.model import Finding
from healthcheck.core.registry import select
from healthcheck.core.status import Status
from healthcheck.orchestrate.engine import run_checks
from healthcheck.parsers.dcgmi_diag import DcgmRun, parse_dcgmi_diag
from healthcheck.runners.local import LocalRunner

DERIVED = FIXTURES / "dcgmi-diag"
STANDIN = Path(__file__).resolve().parents[2] / "standins" / "dcgm" / "dcgmi"
H100_REPLAY = FIXTURES / "nvml" / "healthy-8xh100.json"


def parse(path: Path):
    return parse_dcgmi_diag(path.read_text())


def bad(diag) -> list[tuple[str, str, int | None, str]]:
    """(test, status, GPU, first message) of every result that is not a Pass."""
    return [(t.name, r.status, r.index, r.warnings[0].text if r.warnings else "")
            for t, r in diag.results() if r.status != "Pass"]


# ------------------------------------------------------------------ the parser, on every file


def test_corpus_2x_json_blacklist_era_all_pass():
    diag = parse(CORPUS / "dcgmi-diag/json-r1-deployment-all-pass.txt")
    assert (diag.format, diag.complete, diag.dcgm_version, diag.runtime_error) == ("json", True, None, None)
    assert [t.name for t in diag.tests] == ["Blacklist", "NVML Library", "CUDA Main Library",
                                            "Permissions and OS Blocks", "Persistence Mode", "Environment Variables",
                                            "Page Retirement/Row Remap", "Graphics Processes", "Inforom"]
    assert {t.category for t in diag.tests} == {"Deployment"}
    # a Deployment test runs once for the node: its one result names no GPU
    assert [(r.status, r.entity, r.index) for _, r in diag.results()] == [("Pass", None, None)] * 9


def test_corpus_fragment_r2_gpu_list_and_a_wrapped_warning():
    diag = parse(CORPUS / "dcgmi-diag/fragment-r2-gpu-memory-fail-thermal.txt")
    (test,) = diag.tests
    assert (test.name, test.category, test.status, diag.complete) == ("GPU Memory", None, None, False)
    assert [(r.status, r.index) for r in test.results] == [("Pass", g) for g in range(1, 8)] + [("Fail", 0)]
    (warning,) = test.warnings
    # seven 45-character pieces joined as dcgmi cut them ("second" + "s started", "GP" + "U 0")
    assert warning.text == ("GPU 0 Thermal violations totaling 13.3 seconds started at 9.7 seconds into the test "
                            "for GPU 0 Verify that the cooling on this machine is functional, including external, "
                            "thermal material interface, fans, and any other components.")
    assert warning.gpu == 0


def test_corpus_fragment_deployment_error_without_its_test_row():
    diag = parse(CORPUS / "dcgmi-diag/fragment-deployment-row-remap-pending.txt")
    (test,) = diag.tests
    assert (test.name, test.category, test.status, test.results) == ("", "Deployment", None, ())
    (error,) = test.warnings
    # the second piece starts with the space the first one did not hold
    assert (error.text, error.gpu) == ("GPU 3 has uncorrectable memory errors and row remappings are pending", 3)


def test_2x_json_gpu_ids_string_warnings_and_a_null_slot():
    diag = parse(DERIVED / "derived-2.4-json-r3-a100-pcie-replays-gpu2.txt")
    assert [t.category for t in diag.tests[8:]] == ["Deployment", "Integration", "Hardware", "Hardware"] + ["Stress"] * 4
    assert bad(diag)[0] == ("PCIe", "Fail", 2, "Detected more than 8 PCIe replays per minute for GPU 2 : 21 Reconnect "
                            "PCIe card. Run system side PCIE diagnostic utilities to verify hops off the GPU board. If "
                            "issue is on the board, run the field diagnostic.")
    assert [(n, s) for n, s, _, _ in bad(diag)[1:]] == [("Diagnostic", "Skip")] * 4
    power = next(t for t in diag.tests if t.name == "Targeted Power")
    assert [r.index for r in power.results] == [0, 2, 3]  # GPU 1's slot is null: it did not run
    message = diag.tests[9].results[2].warnings[0]
    assert (message.error_id, message.severity, message.gpu) == (None, None, 2)


def test_2x_table_deployment_error_row_belongs_to_its_test():
    diag = parse(DERIVED / "derived-2.4-text-r1-row-remap-pending-gpu3.txt")
    assert (diag.format, diag.ran, diag.complete) == ("text", True, True)
    assert len(diag.tests) == 9 and all(not t.results for t in diag.tests)
    remap = next(t for t in diag.tests if t.status == "Fail")
    assert remap.name == "Page Retirement/Row Remap"
    assert [m.text for m in remap.warnings] == ["GPU 3 has uncorrectable memory errors and row remappings are pending"]
    assert {t.status for t in diag.tests if t is not remap} == {"Pass"}


def test_3x_json_top_level_versions_serials_and_error_lists():
    diag = parse(DERIVED / "derived-3.3-json-r2-h100-dbe-gpu5.txt")
    assert (diag.dcgm_version, diag.driver_version) == ("3.3.9", "550.90.07")
    assert [(g.index, g.serial, g.device_id) for g in diag.gpus[:2]] == [
        (0, "1652220004011", "2330"), (1, "1652220004012", "2330")]
    assert diag.tests[0].name == "Denylist" and len(diag.gpus) == 8
    (failed,) = [(t, r) for t, r in diag.results() if r.status != "Pass"]
    test, result = failed
    assert (test.name, test.category, result.gpu) == ("GPU Memory", "Hardware", 5)
    (m,) = result.warnings
    assert (m.error_id, m.category, m.severity, m.severity_name) == (4, 10, 2, "ISOLATE")
    assert m.text.startswith("Detected 2 volatile double-bit ECC error(s) in GPU 5.")


def test_3x_json_deployment_entry_names_its_gpu_and_spells_warnings():
    diag = parse(DERIVED / "derived-3.3-json-r1-persistence-mode-gpu2.txt")
    (row,) = [(t.name, r) for t, r in diag.results() if r.status != "Pass"]
    name, result = row
    assert (name, result.entity, result.index) == ("Persistence Mode", "GPU", 2)
    assert [(m.error_id, m.severity) for m in result.warnings] == [(29, 5)]


def test_3x_table_metadata_lists_and_all():
    diag = parse(DERIVED / "derived-3.3-text-r2-h100-dbe-gpu5.txt")
    assert (diag.dcgm_version, diag.driver_version, diag.device_ids) == ("3.3.9", "550.90.07", ("2330",) * 8)
    pcie = next(t for t in diag.tests if t.name == "PCIe")
    assert (pcie.status, [(r.status, r.every) for r in pcie.results]) == ("Pass", [("Pass", True)])
    memory = next(t for t in diag.tests if t.name == "GPU Memory")
    assert sorted((r.index, r.status) for r in memory.results) == sorted(
        [(g, "Pass") for g in (0, 1, 2, 3, 4, 6, 7)] + [(5, "Fail")])
    assert memory.warnings[0].text == ("Detected 2 volatile double-bit ECC error(s) in GPU 5. Drain the GPU and "
                                       "reset it or reboot the node.")


def test_4x_json_entities_summary_and_metadata():
    diag = parse(DERIVED / "derived-4.5-json-r3-h100-memory-gpu3-thermal-gpu6.txt")
    assert (diag.dcgm_version, diag.driver_version, len(diag.gpus)) == ("4.5.2", "580.95.05", 8)
    assert [t.name for t in diag.tests] == ["software", "pcie", "memory", "diagnostic", "targeted_stress",
                                            "targeted_power", "memory_bandwidth", "memtest"]
    assert [(t.name, t.status) for t in diag.tests if t.status != "Pass"] == [
        ("memory", "Fail"), ("targeted_stress", "Fail"), ("memtest", "Skip")]
    failures = [(n, s, g) for n, s, g, _ in bad(diag) if s == "Fail"]
    assert failures == [("memory", "Fail", 3), ("targeted_stress", "Fail", 6)]
    memory = diag.tests[2]
    assert memory.warnings == ()  # the summary's error is GPU 3's, not the test's own
    m = memory.results[3].warnings[0]
    assert (m.error_id, m.category, m.severity_name) == (52, 10, "ISOLATE")
    assert diag.tests[7].results[0].info == ("Test memtest was skipped.",)


def test_4x_json_config_severity_and_summary_info():
    diag = parse(DERIVED / "derived-4.2-json-r1-h100-persistence-mode-config.txt")
    (software,) = diag.tests
    assert (software.status, len(software.results), diag.dcgm_version) == ("Fail", 8, "4.2.3")
    assert {(r.status, r.warnings[0].error_id, r.warnings[0].severity) for r in software.results} == {("Fail", 29, 5)}
    assert software.info[0].startswith("Error getting the SRAM Threshold Count for GPU 0.")


def test_4x_table_test_row_says_warn_entity_rows_say_fail():
    diag = parse(DERIVED / "derived-4.5-text-r3-h100-memory-gpu3-thermal-gpu6.txt")
    assert (diag.dcgm_version, diag.device_ids[:1], diag.complete) == ("4.5.2", ("2330",), True)
    stress = next(t for t in diag.tests if t.name == "targeted_stress")
    assert stress.status == "Warn" and stress.results[6].status == "Fail"
    assert stress.results[6].warnings[0].text.startswith("Thermal violations totaling 13.3 seconds started at 9.7")
    assert stress.results[6].warnings[0].text.endswith("and any other components.")
    memory = next(t for t in diag.tests if t.name == "memory")
    assert [(r.index, r.status) for r in memory.results if r.status != "Pass"] == [(3, "Fail")]
    assert memory.results[3].warnings[0].text == "Found 12 faulty memory elements on GPU 3 Run a field diagnostic " \
                                                 "on the GPU."
    assert memory.results[4].warnings == ()  # GPU 4's row comes after GPU 3's warning, not inside it


def test_runtime_and_connection_errors_are_facts():
    diag = parse(DERIVED / "derived-4.5-json-runtime-error-in-use.txt")
    assert diag.tests == () and diag.dcgm_version == "4.5.2"
    assert diag.runtime_error == ("Error: Unable to complete diagnostic. Return: (-34) : The requested operation "
                                  "could not be completed because the affected resource is in use")
    diag = parse(DERIVED / "derived-connection-error-no-hostengine.txt")
    assert diag.runtime_error is None and diag.connection_error == (
        "Error: unable to establish a connection to the specified host: localhost; Error: Unable to connect to host "
        "engine. Host engine connection invalid/disconnected.")


def test_a_connection_error_before_an_embedded_runs_document_is_kept():
    text = ("Error: unable to establish a connection to the specified host: 10.0.0.9\n"
            + (DERIVED / "derived-4.5-json-r1-h100-all-pass.txt").read_text())
    diag = parse_dcgmi_diag(text)
    assert len(diag.tests[0].results) == 8 and diag.connection_error.endswith("10.0.0.9")


def test_iterations_and_a_cut_gpu_list():
    one = json.loads((DERIVED / "derived-4.5-json-r1-h100-all-pass.txt").read_text())
    diag = parse_dcgmi_diag(json.dumps({"iterations": [one, one], "Overall Result": "Pass"}))
    assert [t.iteration for t in diag.tests] == [0, 1] and diag.overall == "Pass"
    row = "| {:<25} | {:<46} |\n"
    cut = "Pass - GPUs: " + ", ".join(map(str, range(16)))
    text = row.format("GPU Memory", cut[:43] + "...")  # dcgmi's `...` when a list overflows the column
    (test,) = parse_dcgmi_diag(text).tests
    assert test.truncated and [r.index for r in test.results] == list(range(10))


@pytest.mark.parametrize("text, why", [
    ("hello\nworld\n", "no result table"),
    ('{"DCGM Diagnostic": {"test_categories": [{"category": "Deployment", "tests": [', "JSON"),
    ('{"nccl_version": "2.28.9"}', "neither"),
    ('{"DCGM Diagnostic": {"test_categories": "Deployment"}}', "JSON"),
    ('{"DCGM Diagnostic": {"test_categories": [{"tests": [{"results": [{"entity_id": "zero"}]}]}]}}', "JSON"),
    ("+----+----+\n| Diagnostic | Result |\n+====+====+\n", "no test"),
    ("[" * 100_000 + "{" + "]" * 100_000, "no result table"),
    ("{" + '"a":[' * 50_000 + "]" * 50_000 + "}", "JSON"),
])
def test_garbage_and_truncated_output_is_a_parse_error(text, why):
    with pytest.raises(ParseError, match=why):
        parse_dcgmi_diag(text)


def test_a_cut_json_document_from_a_killed_dcgmi_is_a_parse_error():
    doc = (DERIVED / "derived-4.5-json-r3-h100-memory-gpu3-thermal-gpu6.txt").read_text()
    with pytest.raises(ParseError, match="dcgmi diag JSON"):
        parse_dcgmi_diag(doc[: len(doc) // 2])


def test_hc_parse_reads_every_dcgmi_file_and_refuses_garbage(tmp_path):
    files = sorted((CORPUS / "dcgmi-diag").glob("*.txt")) + sorted(DERIVED.glob("derived-*.txt"))
    assert len(files) >= 14
    for k, path in enumerate(files):  # the first file in a real process, the matrix in this one
        r = (run_hc if k == 0 else run_hc_inproc)("parse", "dcgmi-diag", str(path))
        assert r.returncode == 0, (path, r.stderr)
        assert json.loads(r.stdout)["facts"]["format"] in ("json", "text")
    junk = tmp_path / "junk.txt"
    junk.write_text("Segmentation fault (core dumped)\n")
    r = run_hc("parse", "dcgmi-diag", str(junk))
    assert r.returncode == 4 and r.stderr.count(b"\n") == 1 and b"Traceback" not in r.stderr


# ------------------------------------------------------------------ the checks, through the stand-in


def config(tmp_path: Path, dcgm: str = "", fabric: str = "generic") -> Path:
    fabrics = tmp_path / "fabrics"
    fabrics.mkdir(exist_ok=True)
    (fabrics / "node.yaml").write_text(
        f"extends: {fabric}\ngpu:\n  dcgm: {{enabled: true, dcgmi: {STANDIN}{', ' + dcgm if dcgm else ''}}}\n")
    path = tmp_path / "hc.yaml"
    path.write_text(f"fabric_dirs: [{fabrics}]\ndefault_fabric: node\n")
    return path


@pytest.fixture
def standin(tmp_path, monkeypatch):
    """Set the stand-in's scenario; returns the argv of each dcgmi call it saw."""
    log = tmp_path / "dcgmi-calls.jsonl"
    monkeypatch.setenv("HC_STANDIN_LOG", str(log))
    monkeypatch.delenv("SLURM_JOB_GPUS", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    def use(scenario: str) -> Path:
        monkeypatch.setenv("HC_DCGMI_SCENARIO", scenario)
        return log

    return use


def calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def run(tmp_path: Path, tier: str, check: str, *, dcgm: str = "", env: dict | None = None, fabric: str = "generic"):
    cfg = load_config(config(tmp_path, dcgm, fabric))
    ctx = ProbeContext(runner=LocalRunner(), timeout_s=60, env={"HC_NVML_REPLAY": str(H100_REPLAY), **(env or {})})
    result, _ = run_checks(cfg.for_node("gpu001"), select(tier, check.split(",")), ctx)
    return result


def found(result, check: str) -> set[tuple[str, Status, str]]:
    return {(f.id, f.status, f.component) for f in result.findings if f.check == check}


def status(result, check: str) -> Status:
    return next(c.status for c in result.checks if c.name == check)


def test_healthy_standard_run_passes_with_level_1_json(tmp_path, standin):
    log = standin("pass-4x")
    result = run(tmp_path, "standard", "gpu.dcgm")
    assert (status(result, "gpu.dcgm"), result.findings) == (Status.PASS, [])
    assert calls(log) == [["diag", "-r", "1", "-j"]]


def test_2x_blacklist_era_output_passes(tmp_path, standin):
    standin("pass-2x")
    assert status(run(tmp_path, "standard", "gpu.dcgm"), "gpu.dcgm") == Status.PASS


@pytest.mark.parametrize("scenario, expected", [
    ("dbe-3x", {("gpu.E080", Status.FAIL, "GPU5:GPU Memory")}),
    ("pcie-2x", {("gpu.E080", Status.FAIL, "GPU2:PCIe")}),  # the skipped Diagnostic test is not evidence
])
def test_a_failed_test_fails_naming_the_test_and_gpu(tmp_path, standin, scenario, expected):
    standin(scenario)
    result = run(tmp_path, "standard", "gpu.dcgm", dcgm="level_standard: 2")
    assert found(result, "gpu.dcgm") == expected and status(result, "gpu.dcgm") == Status.FAIL
    (f,) = result.findings
    assert f.message.startswith("DCGM ") and "(dcgmi diag -r 2)" in f.message
    assert f.evidence.startswith(f"$ {STANDIN} diag -r 2 -j  (exit 205)")
    if scenario == "pcie-2x":  # a test skipped beside the judged ones is no evidence, but it is in the report
        skipped = {(m.component, m.value) for m in result.metrics if m.name == "dcgm_result"}
        assert skipped and {v for _, v in skipped} == {"Skip"}, result.metrics


def test_deep_run_fails_the_bad_gpu_warns_the_hot_one_and_skips_nothing_else(tmp_path, standin):
    log = standin("1=pass-4x,3=memory-fail-4x")
    result = run(tmp_path, "deep", "gpu.dcgm,gpu.dcgm_deep")
    assert found(result, "gpu.dcgm_deep") == {("gpu.E081", Status.FAIL, "GPU3:memory"),
                                              ("gpu.E082", Status.WARN, "GPU6:targeted_stress")}
    fail = next(f for f in result.findings if f.id == "gpu.E081")
    assert fail.value == 52 and "Found 12 faulty memory elements on GPU 3" in fail.message
    assert "(DCGM_FR error 52, severity ISOLATE, category 10)" in fail.evidence
    assert "GPU 3: serial 1652220004120, device id 2330" in fail.evidence
    warn = next(f for f in result.findings if f.id == "gpu.E082")
    assert "MONITOR" in warn.message
    assert status(result, "gpu.dcgm") == Status.PASS  # the standard level runs in the deep tier too
    assert sorted(c[:3] for c in calls(log)) == [["diag", "-r", "1"], ["diag", "-r", "3"]]


def test_persistence_mode_off_everywhere_warns_and_drains_nothing(tmp_path, standin):
    standin("persistence-4x")
    result = run(tmp_path, "standard", "gpu.dcgm")
    assert found(result, "gpu.dcgm") == {("gpu.E083", Status.WARN, f"GPU{g}:software") for g in range(8)}
    assert status(result, "gpu.dcgm") == Status.WARN


def test_a_4x_table_warning_stays_a_warning(tmp_path):
    """The check on the table dcgmi prints without -j: the test row's Warn wins over its
    GPU row's Fail, and a Fail without a severity stays a FAIL."""
    from healthcheck.checks.dcgm import FAILED_DEEP, _judge

    cfg = load_config(config(tmp_path))
    diag = parse(DERIVED / "derived-4.5-text-r3-h100-memory-gpu3-thermal-gpu6.txt")
    out = [f for f in _judge(DcgmRun(3, diag=diag), None, cfg.for_node("gpu001").limits, FAILED_DEEP)
           if isinstance(f, Finding)]
    assert {(f.id, f.status, f.component) for f in out} == {("gpu.E081", Status.FAIL, "GPU3:memory"),
                                                            ("gpu.E082", Status.WARN, "GPU6:targeted_stress")}


def test_nv_hostengine_not_running_is_error_naming_it(tmp_path, standin):
    standin("no-hostengine")
    result = run(tmp_path, "standard", "gpu.dcgm")
    assert found(result, "gpu.dcgm") == {("hc.E001", Status.ERROR, "dcgm")}
    (f,) = result.findings
    assert "nv-hostengine" in f.message and "Unable to connect to host engine" in f.message
    assert "(exit 235)" in f.evidence


@pytest.mark.parametrize("scenario, finding, words", [
    ("in-use", "hc.E003", "DCGM could not run its diagnostic: Error: Unable to complete diagnostic"),
    ("crash", "hc.E003", "exited 134: terminate called after throwing"),
])
def test_dcgm_that_cannot_run_is_error_never_fail(tmp_path, standin, scenario, finding, words):
    standin(scenario)
    result = run(tmp_path, "standard", "gpu.dcgm")
    assert found(result, "gpu.dcgm") == {(finding, Status.ERROR, "dcgm")}
    assert words in result.findings[0].message


def test_a_hung_dcgmi_is_stopped_and_error(tmp_path, standin):
    standin("hang")
    result = run(tmp_path, "standard", "gpu.dcgm", dcgm="timeout_standard_s: 1")
    assert status(result, "gpu.dcgm") == Status.ERROR
    assert [f.id for f in result.findings] == ["hc.E002"] and "did not finish within 1s" in result.findings[0].message


def test_inside_a_job_only_its_gpus_are_tested(tmp_path, standin):
    log = standin("pass-4x")
    assert status(run(tmp_path, "standard", "gpu.dcgm", env={"SLURM_JOB_GPUS": "2,3"}), "gpu.dcgm") == Status.PASS
    assert calls(log) == [["diag", "-r", "1", "-j", "-i", "2,3"]]


def test_off_by_default_and_skip_where_the_fabric_has_no_gpu(tmp_path, standin):
    log = standin("pass-4x")
    from healthcheck.core.config.loader import EMBEDDED_DEFAULT, Config

    cfg = load_config(config(tmp_path))
    ctx = ProbeContext(runner=LocalRunner(), timeout_s=60)
    result, _ = run_checks(Config(EMBEDDED_DEFAULT).for_node("gpu001"), select("standard", ["gpu.dcgm"]), ctx)
    assert status(result, "gpu.dcgm") == Status.SKIP
    assert "gpu.dcgm.enabled" in result.checks[0].reason
    assert calls(log) == []  # nothing run: the fabric did not ask
    assert cfg.for_node("gpu001").limits.gpu.dcgm.enabled


def test_a_node_without_gpus_skips_whatever_dcgmi_says(tmp_path, standin):
    standin("no-hostengine")
    cfg = load_config(config(tmp_path))
    # no NVML replay: this machine has no NVIDIA driver
    ctx = ProbeContext(runner=LocalRunner(), timeout_s=60, root=tmp_path / "empty-root")
    result, _ = run_checks(cfg.for_node("gpu001"), select("standard", ["gpu.dcgm"]), ctx)
    assert status(result, "gpu.dcgm") == Status.SKIP and result.findings == []
    assert result.checks[0].reason.startswith("no NVIDIA GPU here")


# ------------------------------------------------------------------ the real command


def hc_node(tmp_path: Path, cfg: Path, *args: str, env: dict | None = None, run=run_hc_inproc) -> tuple[int, dict]:
    """`hc node --local` with the recorded H100 NVML; in process but for the exit-3 contract."""
    r = run("node", "--local", "--config", str(cfg), "--format", "json", *args,
               env={"HC_NODE_NAME": "gpu001", "HC_NVML_REPLAY": str(H100_REPLAY), **(env or {})})
    assert r.returncode in (0, 1, 2, 3), r.stderr
    return r.returncode, json.loads(r.stdout)


def test_dcgmi_absent_for_real_is_error_exit_3(tmp_path, validate_report):
    fabrics = tmp_path / "fabrics"
    fabrics.mkdir()
    (fabrics / "node.yaml").write_text("extends: generic\ngpu:\n  dcgm: {enabled: true}\n")  # dcgmi from PATH
    cfg = tmp_path / "hc.yaml"
    cfg.write_text(f"fabric_dirs: [{fabrics}]\ndefault_fabric: node\n")
    code, report = hc_node(tmp_path, cfg, "--checks", "gpu.dcgm", "--tier", "standard",
                           env={"PATH": "/usr/bin:/bin"}, run=run_hc)
    validate_report(report)
    (f,) = report["nodes"][0]["findings"]
    assert (f["id"], f["status"], f["check"]) == ("hc.E001", "ERROR", "gpu.dcgm")
    assert f["message"].startswith("dcgmi not found: DCGM is not installed")
    assert code == 3  # could not judge: never 2 (FAIL)


def test_hostengine_down_through_the_command_is_exit_3(tmp_path):
    code, report = hc_node(tmp_path, config(tmp_path), "--checks", "gpu.dcgm", "--tier", "standard",
                           env={"HC_DCGMI_SCENARIO": "no-hostengine"})
    assert code == 3 and [f["id"] for f in report["nodes"][0]["findings"]] == ["hc.E001"]


def test_deep_level_does_not_run_on_a_busy_node(tmp_path, validate_report):
    """The deep tier on a node Slurm shows busy: gpu.dcgm_deep SKIPs as the bandwidth
    checks do, and dcgmi is asked for the standard level only."""
    log = tmp_path / "dcgmi-calls.jsonl"
    bin_dir = tmp_path / "bin"
    write_stub(bin_dir, "sinfo", "printf 'gpu001|mixed|Unknown|none\\n'\n")
    cfg = config(tmp_path)
    cfg.write_text(cfg.read_text() + f"slurm: {{sinfo: {bin_dir / 'sinfo'}, scontrol: /bin/false, retries: 1}}\n")
    code, report = hc_node(tmp_path, cfg, "--checks", "gpu.dcgm,gpu.dcgm_deep", "--tier", "deep",
                           env={"HC_DCGMI_SCENARIO": "1=pass-4x,3=memory-fail-4x", "HC_STANDIN_LOG": str(log)})
    validate_report(report)
    checks = {c["name"]: c for c in report["nodes"][0]["checks"]}
    assert checks["gpu.dcgm_deep"]["status"] == "SKIP" and checks["gpu.dcgm_deep"]["reason"].startswith("node busy")
    assert checks["gpu.dcgm"]["status"] == "PASS" and code == 0
    assert [c[:3] for c in calls(log)] == [["diag", "-r", "1"]]


def test_deep_level_on_an_idle_node_fails_the_bad_gpu_exit_2(tmp_path, validate_report):
    log = tmp_path / "dcgmi-calls.jsonl"
    bin_dir = tmp_path / "bin"
    write_stub(bin_dir, "sinfo", "printf 'gpu001|idle|Unknown|none\\n'\n")
    cfg = config(tmp_path)
    cfg.write_text(cfg.read_text() + f"slurm: {{sinfo: {bin_dir / 'sinfo'}, scontrol: /bin/false, retries: 1}}\n")
    code, report = hc_node(tmp_path, cfg, "--checks", "gpu.dcgm,gpu.dcgm_deep", "--tier", "deep",
                           env={"HC_DCGMI_SCENARIO": "1=pass-4x,3=memory-fail-4x", "HC_STANDIN_LOG": str(log)})
    validate_report(report)
    assert {(f["id"], f["status"], f["subject"]) for f in report["nodes"][0]["findings"]} == {
        ("gpu.E081", "FAIL", "gpu001:GPU3:memory"), ("gpu.E082", "WARN", "gpu001:GPU6:targeted_stress")}
    assert code == 2
    assert [c[:3] for c in calls(log)] == [["diag", "-r", "1"], ["diag", "-r", "3"]]  # the deep one last, alone


def test_on_an_idle_node_a_process_skips_the_deep_level_and_is_itself_the_finding(tmp_path, validate_report):
    """Slurm says idle, yet a python holds GPU 1: DCGM's level 3 would fail the GPU as busy,
    so it is not run; the process is what the report says (gpu.E070, FAIL, as after a job)."""
    log = tmp_path / "dcgmi-calls.jsonl"
    bin_dir = tmp_path / "bin"
    write_stub(bin_dir, "sinfo", "printf 'gpu001|idle|Unknown|none\\n'\n")
    cfg = config(tmp_path)
    cfg.write_text(cfg.read_text() + f"slurm: {{sinfo: {bin_dir / 'sinfo'}, scontrol: /bin/false, retries: 1}}\n")
    code, report = hc_node(tmp_path, cfg, "--checks", "gpu.dcgm_deep,gpu.processes", "--tier", "deep",
                           env={"HC_DCGMI_SCENARIO": "memory-fail-4x", "HC_STANDIN_LOG": str(log),
                                "HC_NVML_REPLAY": str(LEFTOVER_REPLAY)})
    validate_report(report)
    checks = {c["name"]: c for c in report["nodes"][0]["checks"]}
    assert checks["gpu.dcgm_deep"]["status"] == "SKIP" and "python3 4242" in checks["gpu.dcgm_deep"]["reason"]
    assert [(f["id"], f["status"], f["subject"]) for f in report["nodes"][0]["findings"]] == [
        ("gpu.E070", "FAIL", "gpu001:GPU1")]
    assert code == 2 and calls(log) == []


def test_on_a_busy_node_the_deep_tier_leaves_the_jobs_processes_alone(tmp_path, validate_report):
    bin_dir = tmp_path / "bin"
    write_stub(bin_dir, "sinfo", "printf 'gpu001|mixed|Unknown|none\\n'\n")
    cfg = config(tmp_path)
    cfg.write_text(cfg.read_text() + f"slurm: {{sinfo: {bin_dir / 'sinfo'}, scontrol: /bin/false, retries: 1}}\n")
    code, report = hc_node(tmp_path, cfg, "--checks", "gpu.processes,gpu.count", "--tier", "deep",
                           env={"HC_NVML_REPLAY": str(LEFTOVER_REPLAY)})
    validate_report(report)
    checks = {c["name"]: c for c in report["nodes"][0]["checks"]}
    assert checks["gpu.processes"]["status"] == "SKIP" and checks["gpu.processes"]["reason"].startswith("node busy")
    assert checks["gpu.count"]["status"] == "PASS" and report["nodes"][0]["findings"] == [] and code == 0


def test_the_deep_level_runs_alone_and_only_the_deep_check_resumes_its_drain():
    from healthcheck.actions.policy import checks_behind
    from healthcheck.core.facts import current_providers
    from healthcheck.core.plugins import load_checks
    from healthcheck.core.registry import REGISTRY, deep_only

    load_checks()  # a run loads only the checks it needs: this test may be its worker's first
    assert current_providers().get("dcgm_diag_deep", "local").exclusive
    assert current_providers().get("dcgm_diag_deep", "ssh").exclusive
    assert not current_providers().get("dcgm_diag", "local").exclusive
    assert deep_only(REGISTRY["gpu.dcgm_deep"]) and not deep_only(REGISTRY["gpu.dcgm"])
    # a level-1 pass must not resume a node a level-3 failure drained
    assert checks_behind(["gpu.E080", "gpu.E081"]) == {"gpu.E080": {"gpu.dcgm"}, "gpu.E081": {"gpu.dcgm_deep"}}


LEFTOVER_REPLAY = FIXTURES / "nvml" / "leftover-process.json"


def test_level_2_does_not_run_beside_a_process_on_the_gpus(tmp_path, standin):
    """Level 2's memory and PCIe tests fail beside a job's work ("busy or unavailable"):
    with a process on GPU 1, dcgmi is not run and the check SKIPs naming the process,
    never FAIL against a healthy node."""
    log = standin("dbe-3x")
    result = run(tmp_path, "standard", "gpu.dcgm", dcgm="level_standard: 2", env={"HC_NVML_REPLAY": str(LEFTOVER_REPLAY)})
    check = next(c for c in result.checks if c.name == "gpu.dcgm")
    assert (check.status, result.findings, calls(log)) == (Status.SKIP, [], [])
    assert "dcgmi diag -r 2 not run: compute processes run on the GPUs (GPU 1: python3 4242)" in check.reason


def test_level_2_runs_on_idle_gpus_and_level_1_beside_a_process(tmp_path, standin):
    log = standin("dbe-3x")
    result = run(tmp_path, "standard", "gpu.dcgm", dcgm="level_standard: 2")  # the healthy H100s: no process
    assert found(result, "gpu.dcgm") == {("gpu.E080", Status.FAIL, "GPU5:GPU Memory")}
    standin("pass-4x")
    result = run(tmp_path, "standard", "gpu.dcgm", env={"HC_NVML_REPLAY": str(LEFTOVER_REPLAY)})  # level 1 reads only
    assert status(result, "gpu.dcgm") == Status.PASS
    assert [c[:3] for c in calls(log)] == [["diag", "-r", "2"], ["diag", "-r", "1"]]


def test_inside_a_job_only_its_gpus_must_be_idle(tmp_path, standin):
    """The leftover process is on GPU 1: a job holding GPUs 2,3 tests them at level 2."""
    log = standin("pass-4x")
    env = {"HC_NVML_REPLAY": str(LEFTOVER_REPLAY), "SLURM_JOB_GPUS": "2,3"}
    assert status(run(tmp_path, "standard", "gpu.dcgm", dcgm="level_standard: 2", env=env), "gpu.dcgm") == Status.PASS
    assert calls(log) == [["diag", "-r", "2", "-j", "-i", "2,3"]]


def _level_2_on_changed_h100s(tmp_path, standin, change) -> str:
    """gpu.dcgm at level 2 on the healthy H100 recording as `change` alters it: asserts
    dcgmi was not run and the check SKIPped; returns why."""
    recording = json.loads(H100_REPLAY.read_text())
    change(recording["calls"])
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps(recording))
    log = standin("pass-4x")
    result = run(tmp_path, "standard", "gpu.dcgm", dcgm="level_standard: 2", env={"HC_NVML_REPLAY": str(changed)})
    check = next(c for c in result.checks if c.name == "gpu.dcgm")
    assert (check.status, calls(log)) == (Status.SKIP, [])
    return check.reason or ""


def test_level_2_does_not_run_where_the_processes_cannot_be_listed(tmp_path, standin):
    def unlisted(calls: dict) -> None:
        calls["nvmlDeviceGetComputeRunningProcesses(gpu4)"] = {"error": 3}  # NOT_SUPPORTED

    assert "cannot tell whether GPU 4 are idle" in _level_2_on_changed_h100s(tmp_path, standin, unlisted)


def test_level_2_does_not_run_where_memory_is_held_with_no_process_listed(tmp_path, standin):
    """A process in another PID namespace (hc in a container) is not listed, but holds memory."""
    def held(calls: dict) -> None:
        info = calls["nvmlDeviceGetMemoryInfo(gpu6)"]["ok"]["__struct__"]
        info["used"], info["free"] = 40 << 30, info["total"] - (40 << 30)

    assert "GPU memory is in use with no process listed (GPU 6: 40960 MiB" in \
        _level_2_on_changed_h100s(tmp_path, standin, held)


@pytest.mark.parametrize("capture, runs, named", [
    ("h100-1gpu-driver-590.48.01-load.txt", False, "memhog 11327"),
    ("h100-8gpu-driver-535.183.01.txt", False, "GPU 2: /usr/bin/python 1002127"),
    ("h100-8gpu-driver-535.161.08.txt", True, None)])
def test_over_ssh_nvidia_smi_says_whether_the_gpus_are_idle(tmp_path, standin, monkeypatch, capture, runs,
                                                           named):
    """A node reached without hc: `nvidia-smi -q` lists the processes (a memory hog under
    load, a python on one GPU of eight, `Processes: None` on every GPU)."""
    bin_dir = tmp_path / "bin"
    write_stub(bin_dir, "nvidia-smi", f"cat {CORPUS / 'nvidia-smi-q' / capture}\n")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    log = standin("pass-4x")
    cfg = load_config(config(tmp_path, "level_standard: 2"))
    ctx = ProbeContext(runner=LocalRunner(), transport="ssh", timeout_s=60, env={})
    result, _ = run_checks(cfg.for_node("gpu001"), select("standard", ["gpu.dcgm"]), ctx)
    assert (status(result, "gpu.dcgm"), len(calls(log))) == ((Status.PASS, 1) if runs else (Status.SKIP, 0))
    if named:
        assert named in next(c for c in result.checks if c.name == "gpu.dcgm").reason


def test_levels_3_and_4_are_refused_for_the_standard_tier(tmp_path):
    cfg = config(tmp_path, "level_standard: 3")
    r = run_hc_inproc("config", "validate", "--config", str(cfg))
    assert r.returncode == 4 and b"level_standard" in r.stderr and b"Traceback" not in r.stderr


def test_the_fact_encodes(tmp_path, standin):
    """The fact travels in agent mode's reports and `hc parse`: it must encode as JSON."""
    diag = parse(DERIVED / "derived-4.5-json-r3-h100-memory-gpu3-thermal-gpu6.txt")
    back = msgspec.json.decode(msgspec.json.encode(DcgmRun(3, diag=diag)), type=DcgmRun)
    assert back.diag == diag
