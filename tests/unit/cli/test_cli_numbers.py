"""Every numeric option and argument of every command: finite and in range (issue 18,
D.13). Click's FloatRange lets NaN through, `type=float` takes nan/inf/-1 and
`type=int` any integer; hc's commands use the types of cli/params.py, one rule for all."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest
from support import run_hc, run_hc_inproc

from healthcheck.cli import cli
from healthcheck.cli.params import Bounded
from healthcheck.core.bounds import PID_MAX, bounded

HOSTILE = ["nan", "NaN", "-nan", "inf", "-inf", "Infinity", "1e400", "-1", "1e18", "99999999999999999999",
           "9" * 5000, "", "1O", "0x10"]


def every_parameter():
    """(command path, command, parameter) for every parameter of every command."""
    ctx = click.Context(cli)
    found = []

    def visit(cmd: click.Command, path: list[str]) -> None:
        for param in cmd.params:
            found.append((" ".join(path), cmd, param))
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                assert sub is not None, name
                visit(sub, [*path, name])

    visit(cli, ["hc"])
    return found


def numeric_parameters():
    return [(path, cmd, p) for path, cmd, p in every_parameter()
            if isinstance(p.type, (click.types.IntParamType, click.types.FloatParamType))]


NUMERIC = numeric_parameters()


def test_the_walk_finds_the_numeric_options_it_must():
    names = {f"{path} {p.name}" for path, _, p in NUMERIC}
    for expected in ("hc run straggler_factor", "hc baseline percentile", "hc diagnose job timeout_s",
                     "hc diagnose job parallel", "hc diagnose pids pids", "hc report history limit"):
        assert expected in names, sorted(names)


@pytest.mark.parametrize("path,cmd,param", NUMERIC, ids=[f"{p}:{q.name}" for p, _, q in NUMERIC])
def test_every_numeric_parameter_uses_the_one_rule(path, cmd, param):
    assert isinstance(param.type, Bounded), f"{path} {param.name}: {param.type!r} is not a cli/params.py type"
    assert param.type.min is not None and param.type.max is not None  # type: ignore[attr-defined]


@pytest.mark.parametrize("path,cmd,param", NUMERIC, ids=[f"{p}:{q.name}" for p, _, q in NUMERIC])
def test_every_numeric_parameter_refuses_nan_inf_negative_and_huge_values(path, cmd, param):
    ctx = click.Context(cmd, info_name=path)
    for value in HOSTILE:
        given = (value,) if param.nargs == -1 else value
        with pytest.raises(click.BadParameter) as exc:
            param.process_value(ctx, given)
        assert "\n" not in exc.value.format_message(), (path, param.name, value)
    if param.default is not None:  # and its default passes the rule it is held to
        param.process_value(ctx, param.default)


@pytest.mark.parametrize("argv", [
    ["run", "--straggler-factor", "nan", "--", "true"],
    ["run", "--straggler-timeout", "inf", "--", "true"],
    ["diagnose", "pids", "--timeout", "nan", "1"],
    ["diagnose", "pids", "--timeout", "-1", "1"],
    ["diagnose", "pids", "--", "-5"],
    ["diagnose", "pids", "99999999999999999999"],
    ["diagnose", "pids", "0"],
    ["diagnose", "job", "--timeout", "nan", "7"],
    ["diagnose", "job", "--parallel", "0", "7"],
    ["diagnose", "job", "--startup-timeout", "-1", "7"],
    ["diagnose", "hosts", "--parallel", "-3", "n1"],
    ["bw", "serve", "--idle-timeout", "nan"],
    ["report", "history", "--limit", "99999999999999999999999"],
])
def test_hostile_numbers_on_the_command_line_are_one_line_and_exit_4(argv):
    # hc run (which execs the job) in a real process; the rest, the same error path, in this one
    r = (run_hc if argv[0] == "run" else run_hc_inproc)(*argv, timeout=60)
    assert r.returncode == 4, (argv, r.returncode, r.stderr)
    errors = [ln for ln in r.stderr.decode().splitlines() if ln.startswith("hc: error:")]
    assert len(errors) == 1 and "Traceback" not in r.stderr.decode() and "internal error" not in r.stderr.decode()


@pytest.mark.parametrize("option", ["--percentile", "--margin", "--temp-margin", "--max-spread", "--outlier-z"])
def test_baseline_options_refuse_nan_with_real_reports(tmp_path, option):
    # --percentile nan reached the percentile arithmetic: an internal error
    from test_baseline import fleet, write_report

    report = write_report(tmp_path / "r.json", fleet(10))
    out = tmp_path / "out.yaml"
    r = run_hc_inproc("baseline", str(report), "--fabric", "h100-ndr400", option, "nan", "-o", str(out))
    assert r.returncode == 4 and b"Traceback" not in r.stderr and b"internal error" not in r.stderr, r.stderr
    assert option.encode() in r.stderr and not out.exists()


@pytest.mark.parametrize("args", [["--timeout", "nan"], ["--per-rank-timeout", "inf"], ["--parallel", "0"],
                                  ["--ras-port", "70000"], ["--since", "nan"], ["--timeout", "-1"]])
def test_the_collect_helper_holds_its_numbers_to_the_same_rule(args):
    # a Click command as every other: a usage error exits 4 (argparse's 2 was the odd one out)
    r = subprocess.run([sys.executable, "-m", "healthcheck", "diagnose", "collect", "--pids", "1", *args],
                       capture_output=True, timeout=60)
    assert r.returncode == 4, r.stderr
    assert b"Traceback" not in r.stderr and args[0].encode() in r.stderr


# once each, not once per numeric option above: the same six commands, each a Python start
@pytest.mark.parametrize("bad", [["--pids", "-1"], ["--pids", "0"], ["--pids"], ["--job", "7", "--local"], ["12"],
                                 []])
def test_the_collect_helper_refuses_bad_targets_in_one_line_and_exit_4(bad):
    r = subprocess.run([sys.executable, "-m", "healthcheck", "diagnose", "collect", *bad],
                       capture_output=True, timeout=60)
    assert r.returncode == 4 and b"Traceback" not in r.stderr, (bad, r.stderr)
    assert len(r.stderr.decode().strip().splitlines()) <= 2, (bad, r.stderr)  # usage line + one error


def test_the_rule_itself():
    assert bounded("2.5", 1, 3) == 2.5 and bounded(" 7 ", 1, 10, integer=True) == 7
    assert bounded(str(PID_MAX), 1, PID_MAX, integer=True) == PID_MAX
    for value, kw in [("nan", {}), ("inf", {}), ("0", {"low_open": True}), ("1", {"high_open": True}),
                      ("1.5", {"integer": True}), (True, {}), ("1e400", {})]:
        with pytest.raises(ValueError):
            bounded(value, 0, 1, **kw)
