"""The lean entry (cli/lean.py): which command lines run without click, that those get
exactly the values click would give them, that everything else is click's to answer, and
that the lean path imports neither click nor what only other commands need (issue 22)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support import REPO, run_hc_inproc

import healthcheck.cli.hook_commands as hook_commands
import healthcheck.cli.hooks as hooks
import healthcheck.cli.localnode as localnode
import healthcheck.cli.node as node_command
from healthcheck.cli import LEAN_COMMANDS, cli, lean

# ---------------------------------------------------------------- which argv goes where

TAKEN = [
    ["prologue"], ["epilogue"], ["health"],
    ["prologue", "--dry-run"], ["epilogue", "--format", "json"], ["prologue", "--format=table"],
    ["prologue", "--config", "hc.yaml"], ["prologue", "--config=hc.yaml", "--dry-run", "--format", "json"],
    ["health", "--tier", "standard", "--no-resume"], ["health", "--resume", "--tier=deep"],
    ["node", "--local"], ["node", "--local", "--checks", "sys.memory,net.mtu"],
    ["node", "--checks=sys", "--local", "--tier", "deep", "--format", "json", "--fail-level", "warn"],
    ["node", "--local", "--since", "2026-01-01T00:00:00Z", "--mode", "agentless", "--config", "x.yaml"],
    ["node", "--local", "--checks="],
]

LEFT_TO_CLICK = [
    [], ["--help"], ["--version"], ["-h", "prologue"], ["checks", "list"], ["sweep", "gpu1"],
    ["prologue", "--help"], ["prologue", "-h"], ["prologue", "extra"], ["prologue", "--bogus"],
    ["prologue", "--format", "yaml"], ["prologue", "--format"], ["prologue", "--dry-run=1"],
    ["prologue", "--tier", "quick"],  # only health has --tier
    ["prologue", "--config", "--dry-run"],  # a value that is an option
    ["prologue", "--config", ""], ["prologue", "--dry-run", "--dry-run"],
    ["health", "--resume", "--no-resume"], ["health", "--tier", "QUICK"],
    ["node"], ["node", "gpu1"], ["node", "--local", "gpu1"], ["node", "--local", "--output", "r.json"],
    ["node", "--local", "-o", "r.json"], ["node", "--local", "--prometheus", "/tmp"],
    ["node", "--local", "--tier", "fast"], ["node", "--local", "--help"], ["node", "--local", "--", "x"],
]


@pytest.mark.parametrize("argv", TAKEN, ids=" ".join)
def test_the_hooks_and_a_local_node_run_without_click(argv):
    assert lean.plan(argv, {}) is not None
    assert argv[0] in LEAN_COMMANDS  # main() asks lean.py about these commands only


def test_main_asks_about_every_command_lean_takes():
    assert set(LEAN_COMMANDS) == {*lean.HOOKS, "node"}


@pytest.mark.parametrize("argv", LEFT_TO_CLICK, ids=lambda a: " ".join(a) or "nothing")
def test_everything_else_is_the_click_groups(argv):
    assert lean.plan(argv, {}) is None


@pytest.mark.parametrize(("env", "taken"), [
    ({"HC_DRY_RUN": "maybe"}, False), ({"HC_DRY_RUN": "2"}, False), ({"HC_DRY_RUN": " Yes "}, True),
    ({"HC_DRY_RUN": ""}, True), ({"HC_CONFIG": ""}, True),
])
def test_an_environment_click_would_refuse_is_the_click_groups(env, taken):
    assert (lean.plan(["prologue"], env) is not None) is taken


@pytest.mark.parametrize("env", [{"HC_TIER": "fast"}, {"HC_MODE": "ssh"}, {"HC_FORMAT": "yaml"},
                                 {"HC_FAIL_LEVEL": "error"}])
def test_a_node_variable_click_would_refuse_is_the_click_groups(env):
    assert lean.plan(["node", "--local"], env) is None
    assert lean.plan(["node", "--local", "--tier", "quick", "--mode", "auto", "--format", "table",
                      "--fail-level", "fail"], env) is not None  # the command line wins


def test_a_config_click_would_refuse_is_the_click_groups(tmp_path):
    (tmp_path / "dir.yaml").mkdir()
    assert lean.plan(["prologue", "--config", str(tmp_path / "dir.yaml")], {}) is None
    assert lean.plan(["prologue"], {"HC_CONFIG": str(tmp_path / "dir.yaml")}) is None
    assert lean.plan(["prologue", "--config", str(tmp_path / "absent.yaml")], {}) is not None


def test_a_bad_option_gets_clicks_message_and_exit_code():
    r = run_hc_inproc("prologue", "--bogus", env={"HC_SYSLOG_SOCKET": ""})
    assert r.returncode == 4
    assert b"Usage: hc prologue [OPTIONS]" in r.stderr and b"No such option '--bogus'" in r.stderr
    r = run_hc_inproc("prologue", "--help")
    assert r.returncode == 0 and b"Before a job" in r.stdout


# ---------------------------------------------------------------- the same values as click


def _record(monkeypatch, module: Any, name: str) -> list[tuple[tuple, dict]]:
    calls: list[tuple[tuple, dict]] = []

    def recorder(*args: Any, **kwargs: Any) -> int:
        calls.append((args, kwargs))
        return 0

    monkeypatch.setattr(module, name, recorder)
    return calls


def _normalised(call: tuple[tuple, dict]) -> dict[str, Any]:
    args, kwargs = call
    if args and hasattr(args[0], "config_path"):  # run_local(app, ...): the App's settings
        app, args = args[0], args[1:]
        kwargs = {**kwargs, "config_path": app.config_path, "format": app.format}
    return {**{f"arg{i}": a for i, a in enumerate(args)}, **kwargs}


ENVIRONMENTS = [
    {}, {"HC_DRY_RUN": "1"}, {"HC_DRY_RUN": "off"}, {"HC_DRY_RUN": " TRUE "}, {"HC_CONFIG": "env.yaml"},
    {"HC_TIER": "standard", "HC_FORMAT": "json", "HC_FAIL_LEVEL": "warn", "HC_MODE": "agent"},
    {"HC_TIER": "", "HC_FORMAT": ""},
]


@pytest.mark.parametrize("env", ENVIRONMENTS, ids=lambda e: ",".join(f"{k}={v}" for k, v in e.items()) or "none")
@pytest.mark.parametrize("argv", TAKEN, ids=" ".join)
def test_the_lean_run_gets_what_clicks_command_would(monkeypatch, tmp_path, argv, env):
    monkeypatch.chdir(tmp_path)
    for name in ("HC_DRY_RUN", "HC_CONFIG", "HC_TIER", "HC_FORMAT", "HC_FAIL_LEVEL", "HC_MODE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    is_node = argv[0] == "node"
    via_click = _record(monkeypatch, node_command if is_node else hook_commands, "run_local" if is_node else "run")
    via_lean = _record(monkeypatch, localnode if is_node else hooks, "run_local" if is_node else "run")
    cli.main(args=list(argv), prog_name="hc", standalone_mode=False)
    run = lean.plan(list(argv), os.environ)
    assert run is not None
    run()
    assert len(via_click) == len(via_lean) == 1
    assert _normalised(via_lean[0]) == _normalised(via_click[0])


# ---------------------------------------------------------------- what the lean path imports

NEVER_ON_THE_LEAN_PATH = ("click", "tabulate", "yaml", "yaml.dumper", "ClusterShell", "ClusterShell.NodeSet",
                          "shutil", "traceback", "difflib",  # the terminal's width; errors only
                          "healthcheck.cli.group", "healthcheck.cli.options", "healthcheck.cli.completion")

RUN = """
import atexit, json, sys
out = sys.argv[1]
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
sys.argv = ["hc", *sys.argv[2:]]
from healthcheck.cli import main
main()
"""


def _modules(tmp_path: Path, *args: str) -> set[str]:
    (tmp_path / "fabrics").mkdir(exist_ok=True)
    (tmp_path / "fabrics" / "t.yaml").write_text(
        "sys:\n  mounts: [/]\n  disk_free_min_gib: {/tmp: 0.001}\nnet:\n  interfaces:\n    lo: {}\n")
    cfg = tmp_path / "hc.yaml"
    cfg.write_text(f"default_fabric: t\nslurm:\n  state_dir: {tmp_path}/state\n  audit_log: {tmp_path}/audit.jsonl\n"
                   f"  report_dir: {tmp_path}/reports\nhistory: {{path: null}}\n")
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HC_", "SLURM"))}
    env.update({"HC_CONFIG": str(cfg), "HC_NODE_NAME": "node1", "SLURM_JOB_ID": "7", "HC_DRY_RUN": "1",
                "HC_SYSLOG_SOCKET": "", "HC_CACHE_DIR": str(cache)})
    out = tmp_path / "modules.json"
    for _ in range(2):  # the second run reads the config's parse from the cache, as a node's do
        done = subprocess.run([sys.executable, "-c", RUN, str(out), *args], capture_output=True, text=True,
                              cwd=REPO, env=env, timeout=120)
        assert done.returncode in (0, 2), done.stderr[-2000:]
    return set(json.loads(out.read_text()))


@pytest.mark.parametrize("argv", [("prologue",), ("node", "--local", "--checks", "sys.mounts,net.mtu"),
                                  ("health", "--no-resume")], ids=" ".join)
def test_the_lean_path_imports_no_click_and_nothing_only_other_commands_use(tmp_path, argv):
    loaded = _modules(tmp_path, *argv)
    assert "healthcheck.cli.lean" in loaded and "healthcheck.checks.sys" in loaded  # it ran its checks
    assert sorted(loaded & set(NEVER_ON_THE_LEAN_PATH)) == []


def test_the_click_commands_do_not_load_the_lean_path(tmp_path):
    loaded = _modules(tmp_path, "checks", "list", "--format", "json")
    assert "healthcheck.cli.group" in loaded and "healthcheck.cli.lean" not in loaded


def test_the_click_group_still_answers_what_the_lean_path_does_not(tmp_path):
    loaded = _modules(tmp_path, "node", "--local", "--checks", "sys.mounts", "--output", str(tmp_path / "r.json"))
    assert "click" in loaded and "healthcheck.cli.group" in loaded
    assert json.loads((tmp_path / "r.json").read_text())["status"] == "PASS"


# ---------------------------------------------------------------- how a run ends, as click ends it


@pytest.mark.parametrize("raised", [KeyboardInterrupt, EOFError])
def test_an_interrupted_lean_run_ends_as_the_click_command_does(monkeypatch, raised):
    def interrupted(*_args: Any, **_kwargs: Any) -> int:
        raise raised()

    monkeypatch.setattr(hooks, "run", interrupted)
    monkeypatch.setattr(hook_commands, "run", interrupted)
    env = {"HC_SYSLOG_SOCKET": ""}
    lean_run = run_hc_inproc("prologue", "--dry-run", env=env)
    click_run = run_hc_inproc("prologue", "--dry-run", "--dry-run", env=env)  # twice: lean leaves it to click
    assert (lean_run.returncode, lean_run.stderr) == (click_run.returncode, click_run.stderr) == (
        130, b"\nhc: interrupted\n")


def test_a_broken_pipe_escaping_a_lean_run_ends_as_the_click_command_does(monkeypatch):
    def broken(*_args: Any, **_kwargs: Any) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(localnode, "run_local", broken)
    monkeypatch.setattr(node_command, "run_local", broken)
    lean_run = run_hc_inproc("node", "--local")
    click_run = run_hc_inproc("node", "--local", "--checks", "sys", "--checks", "sys")  # twice: click's
    assert (lean_run.returncode, lean_run.stderr) == (click_run.returncode, click_run.stderr) == (1, b"")
