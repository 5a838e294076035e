"""The command lines hc runs without importing click: the hooks (`hc prologue`, `hc
epilogue`, `hc health`) and `hc node --local`, which Slurm and NHC-style cron runs start
on every node, for every job (issue 22: click alone was a sixth of a prologue's start-up).

`plan` reads argv and the environment as the click commands would, for the options they
are run with, and returns the run (the same function the click command calls:
cli/hooks.py's `run`, cli/localnode.py's `run_local`) with the same arguments. Anything
else (--help, an option it does not take, a bad value, a value click would check against
the file system and refuse, a positional argument, an option given twice) is None: the
click group then parses it and answers as it always has, with its own message and exit
code. tests/unit/cli/test_lean.py holds both parsers to the same values.
"""

from __future__ import annotations

import importlib
import os
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from healthcheck.core.tiers import TIERS

HOOKS = ("prologue", "epilogue", "health")
# loaded by import path once the command line is known to be theirs
HOOK_RUNNER = "healthcheck.cli.hooks"
LOCAL_RUNNER = "healthcheck.cli.localnode"
APP = "healthcheck.cli.app"

# what click's BOOL type reads from a flag's environment variable (stripped, any case)
_TRUE = frozenset({"1", "true", "t", "yes", "y", "on"})
_FALSE = frozenset({"0", "false", "f", "no", "n", "off"})

# option -> its kind: ("value", choices or None) or ("flag", the value it sets)
_Spec = dict[str, tuple[str, Any]]
_FORMATS = ("table", "json")
_HOOK_OPTIONS: _Spec = {"--config": ("value", None), "--format": ("value", _FORMATS), "--dry-run": ("flag", True)}
_HEALTH_OPTIONS: _Spec = {**_HOOK_OPTIONS, "--tier": ("value", tuple(TIERS)),
                          "--resume": ("flag", True), "--no-resume": ("flag", False)}
_NODE_OPTIONS: _Spec = {"--local": ("flag", True), "--tier": ("value", tuple(TIERS)), "--checks": ("value", None),
                        "--since": ("value", None), "--mode": ("value", ("auto", "agent", "agentless")),
                        "--config": ("value", None), "--format": ("value", _FORMATS),
                        "--fail-level": ("value", ("warn", "fail"))}

Run = Callable[[], int]


def plan(args: list[str], environ: Mapping[str, str]) -> Run | None:
    """The run for this command line, or None where the click group must parse it."""
    if not args:
        return None
    command, rest = args[0], args[1:]
    if command in HOOKS:
        return _hook(command, rest, environ)
    if command == "node":
        return _local_node(rest, environ)
    return None


def _hook(kind: str, rest: list[str], environ: Mapping[str, str]) -> Run | None:
    given = options(rest, _HEALTH_OPTIONS if kind == "health" else _HOOK_OPTIONS)
    if given is None:
        return None
    config_path = config_value(given, environ)
    dry_run = given["--dry-run"] if "--dry-run" in given else env_flag(environ.get("HC_DRY_RUN"))
    if config_path is False or dry_run is None:
        return None
    fmt = given.get("--format")
    if kind != "health":
        return lambda: importlib.import_module(HOOK_RUNNER).run(kind, config_path, fmt, dry_run)
    resume = given["--resume"] if "--resume" in given else given.get("--no-resume", True)
    tier = given.get("--tier")
    return lambda: importlib.import_module(HOOK_RUNNER).run(kind, config_path, fmt, dry_run, tier=tier,
                                                            resume=resume)


def _local_node(rest: list[str], environ: Mapping[str, str]) -> Run | None:
    given = options(rest, _NODE_OPTIONS)
    if given is None or not given.get("--local"):
        return None
    config_path = config_value(given, environ)
    chosen = {name: choice_value(given, environ, name, envvar, default)
              for name, envvar, default in (("--tier", "HC_TIER", "quick"), ("--mode", "HC_MODE", "auto"),
                                            ("--format", "HC_FORMAT", "table"),
                                            ("--fail-level", "HC_FAIL_LEVEL", "fail"))}
    if config_path is False or None in chosen.values():
        return None
    checks = [s for s in given.get("--checks", "").split(",") if s]
    since = given.get("--since", "boot")

    def run() -> int:
        app = importlib.import_module(APP).App(config_path, chosen["--format"])
        return int(importlib.import_module(LOCAL_RUNNER).run_local(
            app, tier=chosen["--tier"], only=checks, since=since, output=None, prometheus_to=None,
            fail_level=chosen["--fail-level"]))

    return run


def options(rest: list[str], spec: _Spec) -> dict[str, Any] | None:
    """Each option of `spec` given in `rest` (`--name value`, `--name=value`, a flag
    alone) and its value; None for anything else, a value not among its choices, a value
    that looks like an option, or an option given twice."""
    given: dict[str, Any] = {}
    i = 0
    while i < len(rest):
        word = rest[i]
        name, eq, inline = word.partition("=")
        kind, arg = spec.get(name, (None, None))
        if kind is None or name in given or (kind == "flag" and eq):
            return None
        if kind == "flag":
            given[name] = arg
            i += 1
            continue
        if eq:
            value, i = inline, i + 1
        elif i + 1 < len(rest):
            value, i = rest[i + 1], i + 2
        else:
            return None
        if value.startswith("-") or (arg is not None and value not in arg):
            return None
        given[name] = value
    if "--resume" in given and "--no-resume" in given:
        return None
    return given


def env_flag(value: str | None) -> bool | None:
    """A flag's environment variable as click reads it: unset or empty False, a boolean
    word its value, anything else None (click refuses it)."""
    if not value:
        return False
    word = value.strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    return None


def choice_value(given: dict[str, Any], environ: Mapping[str, str], name: str, envvar: str,
                 default: str) -> str | None:
    """An option with choices: given, else its environment variable (where not empty),
    else its default; None for a variable's value not among the choices."""
    if name in given:
        return str(given[name])
    value = environ.get(envvar)
    if not value:
        return default
    return value if value in _NODE_OPTIONS[name][1] else None


def config_value(given: dict[str, Any], environ: Mapping[str, str]) -> Path | None | bool:
    """--config, else $HC_CONFIG where not empty, else None; False where click's
    Path(dir_okay=False) would refuse the name (a directory, a file it cannot read) or
    where the name is empty: the click group then says so."""
    value = given.get("--config") if "--config" in given else (environ.get("HC_CONFIG") or None)
    if value is None:
        return None
    if not value:
        return False
    try:
        st = os.stat(value)
    except ValueError:  # a NUL byte: click's to answer
        return False
    except OSError:
        return Path(value)  # not there (yet): the config loader's to report
    if stat.S_ISDIR(st.st_mode) or not os.access(value, os.R_OK):
        return False
    return Path(value)
