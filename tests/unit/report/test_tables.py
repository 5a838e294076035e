"""Tables a person reads (issue 21, 7): fitted to the terminal, a FAIL row carrying its
finding and a PASS row its evidence, each check its own time, an unreachable node in one
line, colour on a terminal only, the config named, every environment variable in --help.
Each check's own time is the engine's: tests/unit/orchestrate/test_engine.py."""

from __future__ import annotations

import ast
import datetime as dt
import inspect
import re
import sys
from pathlib import Path

import msgspec
import pytest
from click.testing import CliRunner
from support import Pipe, Tty

from healthcheck.cli import cli
from healthcheck.cli.app import output_width, use_colour
from healthcheck.core.config.loader import EMBEDDED_DEFAULT
from healthcheck.core.model import CheckResult, Finding, Metric, NodeResult
from healthcheck.core.registry import DEFAULT, Registry, using
from healthcheck.core.status import Status
from healthcheck.orchestrate.engine import unreachable_result
from healthcheck.report.build import make_report
from healthcheck.report.layout import fitted_widths, wrap_cell
from healthcheck.report.table import render, render_checks

PACKAGE = Path(__file__).resolve().parents[3] / "healthcheck"
ANSI = re.compile(r"\x1b\[")


def report_of(*nodes: NodeResult, config_path: str = "/etc/hc/site.yaml"):
    now = dt.datetime(2026, 11, 22, 13, 0, tzinfo=dt.timezone.utc)
    return make_report(command="node", tier="quick", config_digest="sha256:" + "0" * 64, config_path=config_path,
                       started=now, finished=now + dt.timedelta(seconds=2), nodes=list(nodes))


MTU_LOW = Finding(id="net.E003", status=Status.FAIL, message="ib0 MTU is 2044, expected 4092", component="ib0",
                  node="gpu017", check="net.mtu", subject="gpu017:ib0")


def a_node(*, status=Status.FAIL) -> NodeResult:
    """gpu017: net.mtu FAIL (its finding), sys.disk PASS (/tmp's free space), sys.memory SKIP."""
    return NodeResult(
        node="gpu017", fabric="h100-ndr400", status=status,
        checks=[CheckResult("net.mtu", Status.FAIL, 0.004), CheckResult("sys.disk", Status.PASS, 0.002),
                CheckResult("sys.memory", Status.SKIP, 0.0, "no memory figure configured")],
        findings=[MTU_LOW],
        metrics=[Metric("mtu", 2044, "bytes", component="ib0"), Metric("free_gib", 78.25, "GiB", component="/tmp")])


def row(text: str, check: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(check + " "))


# ---------------------------------------------------------------- the NOTE of each row


def test_a_fail_row_carries_its_finding_and_a_pass_row_its_evidence():
    text = "\n".join(render_checks(a_node()))
    assert "net.E003 ib0 MTU is 2044, expected 4092" in row(text, "net.mtu")
    assert "/tmp free_gib 78.25 GiB" in row(text, "sys.disk")  # from the metric, not invented
    assert "no memory figure configured" in row(text, "sys.memory")


def test_an_error_row_carries_its_hc_finding_and_the_worst_of_several_comes_first():
    error = Finding(id="hc.E002", status=Status.ERROR, message="sys.disk could not run: statvfs timed out",
                    node="gpu017", check="sys.disk")
    warn = msgspec.structs.replace(MTU_LOW, id="net.E004", status=Status.WARN, message="eth0 MTU is 1400")
    node = NodeResult(node="gpu017", fabric="f", status=Status.FAIL,
                      checks=[CheckResult("net.mtu", Status.FAIL, 0.0), CheckResult("sys.disk", Status.ERROR, 0.0,
                                                                                   "statvfs timed out")],
                      findings=[warn, MTU_LOW, error])
    text = "\n".join(render_checks(node))
    assert "net.E003 ib0 MTU is 2044, expected 4092 (+1 more)" in row(text, "net.mtu")
    assert "hc.E002 sys.disk could not run" in row(text, "sys.disk")


def test_a_pass_row_shows_only_the_metrics_its_check_names_and_counts_the_rest():
    metrics = [Metric("mtu", m, "bytes", component=f"eth{i}") for i, m in enumerate((9000, 9000, 1500))]
    metrics.append(Metric("free_gib", 1.0, "GiB", component="/var"))  # sys.disk's, not net.mtu's
    node = NodeResult(node="n1", fabric="f", status=Status.PASS, checks=[CheckResult("net.mtu", Status.PASS, 0.0)],
                      metrics=metrics)
    line = row("\n".join(render_checks(node)), "net.mtu")
    assert "eth0 mtu 9000 bytes; eth1 mtu 9000 bytes (+1 more)" in line and "free_gib" not in line


def test_a_check_that_names_no_evidence_shows_none():
    reg = Registry(base=DEFAULT)
    reg.check("test.quiet", tier="quick", needs=(), findings=())(lambda limits: [])
    node = NodeResult(node="n1", fabric="f", status=Status.PASS, checks=[CheckResult("test.quiet", Status.PASS, 0.0)],
                      metrics=[Metric("mtu", 9000, "bytes", component="eth0")])
    with using(reg):
        assert row("\n".join(render_checks(node)), "test.quiet").split() == ["test.quiet", "PASS", "0.000"]


def test_every_evidence_metric_a_check_names_is_one_its_module_yields():
    """A misspelt name would silently show nothing: each must be a string its module writes."""
    for spec in DEFAULT.all_checks().values():
        source = inspect.getsource(sys.modules[spec.fn.__module__])
        literals = {n.value for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Constant)}
        missing = [m for m in spec.evidence_metrics if m not in literals]
        assert not missing, f"{spec.name} names evidence metrics its module never writes: {missing}"


def test_an_unreachable_node_is_one_line_saying_why_not_an_empty_table():
    node = unreachable_result("gpu017", "h100-ndr400", "ssh: connection refused", "agentless")
    text = render(report_of(node))
    assert "CHECK" not in text
    assert "gpu017: ERROR, not checked: ssh: connection refused" in text.splitlines()


# ---------------------------------------------------------------- width


def long_report():
    node = a_node()
    long = msgspec.structs.replace(MTU_LOW, message="ib0 MTU is 2044, expected 4092 " + "and more words " * 12,
                                   fingerprint="0123456789abcdef")
    return report_of(msgspec.structs.replace(node, findings=[long]), config_path="/etc/hc/" + "deep/" * 20 + "x.yaml")


def test_the_node_table_fits_80_columns_and_wraps_inside_its_columns():
    text = render(long_report(), width=80)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "and more words" in text and "net.E003" in row(text, "net.mtu")  # wrapped, not cut
    wide = render(long_report())  # no width: as wide as the text (a pipe)
    assert max(len(line) for line in wide.splitlines()) > 80


def test_narrow_columns_give_way_last_and_a_dotted_key_breaks_after_a_dot():
    caps = fitted_widths([["net.mtu", "PASS", "x " * 100]], ["CHECK", "STATUS", "NOTE"], 60)
    assert caps is not None and caps[:2] == [None, None] and caps[2] is not None
    assert wrap_cell("gpu.nvlink_errors_warn.crc_flit_errors", 25).split("\n") == ["gpu.nvlink_errors_warn.",
                                                                                   "crc_flit_errors"]


def invoke(args, monkeypatch=None, **env):
    """The CLI in-process; with `monkeypatch`, its stdout taken for a terminal (CliRunner's is
    none, and off a terminal nothing is wrapped)."""
    if monkeypatch is not None:
        from healthcheck.cli import app

        monkeypatch.setattr(app, "_is_terminal", lambda stdout: True)
    runner = CliRunner()
    return runner.invoke(cli, args, env={"COLUMNS": None, "NO_COLOR": "1", "HC_CONFIG": None, **env})


def test_config_show_fits_columns_80_and_a_pipe_without_columns_is_not_wrapped(monkeypatch):
    fitted = invoke(["config", "show", "gpu017"], monkeypatch, COLUMNS="80")
    assert fitted.exit_code == 0, fitted.output
    assert max(len(line) for line in fitted.output.splitlines()) <= 80
    monkeypatch.undo()
    piped = invoke(["config", "show", "gpu017"], COLUMNS="80")  # CliRunner's stdout is no terminal
    assert piped.exit_code == 0 and max(len(line) for line in piped.output.splitlines()) > 80


def test_node_local_fits_columns_80_on_a_terminal_and_has_no_colour_off_one(monkeypatch):
    result = invoke(["node", "--local", "--checks", "net,sys"], monkeypatch, COLUMNS="80")
    assert result.exit_code in (0, 1, 2, 3), result.output
    assert max(len(line) for line in result.output.splitlines()) <= 80
    monkeypatch.undo()
    plain = invoke(["node", "--local", "--checks", "net,sys"], NO_COLOR=None)
    assert plain.exit_code in (0, 1, 2, 3) and not ANSI.search(plain.output)


def test_width_comes_from_columns_else_the_terminal_else_none():
    assert output_width({"COLUMNS": "80"}, Tty()) == 80  # on a terminal: as wide as asked
    assert output_width({}, Pipe()) is None  # a script's pipe: never wrapped
    assert output_width({"COLUMNS": "80"}, Pipe()) is None  # not even where COLUMNS is exported
    assert isinstance(output_width({}, Tty()), int)
    assert isinstance(output_width({"COLUMNS": "wide"}, Tty()), int)  # not a number: the terminal's


# ---------------------------------------------------------------- colour


def test_colour_on_a_terminal_only_and_never_with_no_color():
    assert use_colour({}, Tty()) and not use_colour({}, Pipe())
    assert not use_colour({"NO_COLOR": "1"}, Tty())
    coloured_text = render(report_of(a_node()), colour=True)
    assert ANSI.search(row(coloured_text, "net.mtu"))
    assert not ANSI.search(render(report_of(a_node())))


# ---------------------------------------------------------------- the summary line


@pytest.mark.parametrize(("path", "named"), [(str(EMBEDDED_DEFAULT), "config embedded default"),
                                              ("/etc/hc/site.yaml", "config /etc/hc/site.yaml")])
def test_the_summary_names_the_config(path, named):
    summary = render(report_of(a_node(), config_path=path)).splitlines()[-1]
    assert summary.startswith("FAIL: 1 node") and named in summary


# ---------------------------------------------------------------- hc --help


_READS = re.compile(r"""(?:environ(?:\.get)?\s*[\[(]\s*|getenv\(\s*|envvar\s*=\s*)["']([A-Z][A-Z0-9_]*)["']""")
_HC_NAME = re.compile(r"""["'](HC_[A-Z0-9_]+)["']""")


def env_vars_read() -> set[str]:
    """Every variable the code reads by name (os.environ, getenv, a Click envvar) and every
    HC_ name it spells out (held in a constant, read through an env mapping)."""
    names: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        names.update(_READS.findall(text))
        names.update(_HC_NAME.findall(text))
    return names


def test_help_lists_every_environment_variable_the_code_reads():
    names = env_vars_read()
    assert {"HC_MODE", "HC_VIA", "HC_CONFIG", "NO_COLOR", "COLUMNS"} <= names  # the scan finds them
    result = invoke(["--help"])
    assert result.exit_code == 0
    missing = sorted(n for n in names if not re.search(rf"\b{n}\b", result.output))
    assert not missing, f"hc --help does not name {missing}: add each to EPILOG in healthcheck/cli/__init__.py"
