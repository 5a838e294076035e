"""The report's JSON Schema: generated from the model, shipped current, one file per version."""

from __future__ import annotations

import json

import msgspec
import pytest

from healthcheck.core import model
from healthcheck.report import schema_gen
from healthcheck.report.jsonio import SCHEMA_FILE, SCHEMA_FILES


def test_the_shipped_schema_is_what_the_model_generates():
    # a model change without `python -m healthcheck.report.schema_gen` fails here
    assert SCHEMA_FILE == schema_gen.SCHEMA_PATH
    assert SCHEMA_FILE.read_text() == schema_gen.render(), \
        "stale hc.report-2.schema.json: run python -m healthcheck.report.schema_gen"
    assert schema_gen.main(["--check"]) == 0


def test_every_readable_version_ships_a_schema_naming_itself():
    assert set(SCHEMA_FILES) == {"hc.report/1", model.REPORT_SCHEMA}
    for name, path in SCHEMA_FILES.items():
        doc = json.loads(path.read_text())
        schema = doc["properties"]["schema"] if "properties" in doc else doc["$defs"]["Report"]["properties"]["schema"]
        assert schema["const"] == name


def test_every_model_field_is_in_the_schema_and_nothing_else():
    defs = schema_gen.generate()["$defs"]
    for name in ("Report", "NodeResult", "Finding", "Metric", "CheckResult", "Action", "ActionRecord", "Limit",
                 "GroupResult"):
        cls = getattr(model, name)
        fields = [f.encode_name for f in msgspec.structs.fields(cls)]
        assert list(defs[name]["properties"]) == fields, name
        assert defs[name]["additionalProperties"] is False


def test_structs_written_whole_require_every_key():
    defs = schema_gen.generate()["$defs"]
    # Finding promises every key in the JSON (ticketing relies on it); Metric omits defaults
    assert defs["Finding"]["required"] == [f.encode_name for f in msgspec.structs.fields(model.Finding)]
    assert defs["Metric"]["required"] == ["name", "value"]


def test_a_constraint_on_a_field_the_model_lacks_fails_generation(monkeypatch):
    monkeypatch.setitem(schema_gen.CONSTRAINTS, "Finding.no_such_field", {"minLength": 1})
    with pytest.raises(KeyError, match="Finding.no_such_field"):
        schema_gen.generate()


def test_the_generated_schema_is_a_valid_draft_2020_12_schema():
    import jsonschema

    jsonschema.Draft202012Validator.check_schema(schema_gen.generate())


def test_check_mode_reports_a_stale_file(tmp_path, monkeypatch, capsys):
    stale = tmp_path / "hc.report-2.schema.json"
    stale.write_text("{}\n")
    monkeypatch.setattr(schema_gen, "SCHEMA_PATH", stale)
    assert schema_gen.main(["--check"]) == 1
    assert "schema_gen" in capsys.readouterr().err
    assert schema_gen.main([]) == 0 and stale.read_text() == schema_gen.render()


def test_runs_do_not_import_the_generator_or_jsonschema():
    import subprocess
    import sys

    code = ("import sys, healthcheck.report.jsonio, healthcheck.report.build, healthcheck.report.table; "
            "print(any(m in sys.modules for m in ('jsonschema', 'healthcheck.report.schema_gen')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
