"""What a prologue and a --local run of a few checks import (issue 22): neither the
modules of checks they cannot run nor the libraries only other commands need. Each is
measured start-up (python -X importtime) the hook paid for nothing."""

from __future__ import annotations

import json
import subprocess
import sys

from support import REPO, lean_hook_env

# hc's own and the libraries' modules a prologue on a healthy node never needs
NOT_IN_A_PROLOGUE = (
    "ClusterShell.NodeSet",  # a hostlist: the prologue names only its own node
    "tabulate", "importlib.metadata",  # a table the prologue does not print
    "secrets", "tempfile", "random",  # run ids and atomic writes need os.urandom only
    "healthcheck.checks.bw", "healthcheck.checks.dcgm", "healthcheck.parsers.perftest",
    "healthcheck.report.prometheus",  # no textfile configured
    "click",  # the hooks' command line is read without it (cli/lean.py)
    # a node that passes takes no action: neither the drain policy nor scontrol's client
    "healthcheck.actions.apply", "healthcheck.actions.policy", "healthcheck.actions.slurm",
    # dataclasses imports inspect (ast, dis, tokenize) and builds each class's methods from
    # source text: hc's records are msgspec Structs, a check's parameters read from its code
    "dataclasses", "inspect",
    # the syslog line is one datagram (report/syslog.py sends it through _socket): socket.py
    # makes four IntEnums of the socket constants at import, ~2.5 ms of a prologue's start
    "socket",
)
# msgspec imports typing_extensions where it is installed (a dev venv: mypy's), and that
# imports inspect; a regular install (bin/install) has none
_NOT_HCS = {"inspect": "typing_extensions"}
# and, once the config cache holds the files' parse, no YAML parser
NOT_IN_A_WARM_PROLOGUE = ("yaml", "healthcheck.core.config.yamlsrc")

RUN = """
import atexit, json, sys
out = sys.argv[1]
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
sys.argv = ["hc", *sys.argv[2:]]
from healthcheck.cli import main
main()
"""


def _unused(loaded: set[str], names) -> list[str]:
    """Which of `names` were loaded, less those a library hc uses loaded for itself."""
    return sorted(m for m in loaded & set(names) if _NOT_HCS.get(m) not in loaded)


def _modules(tmp_path, *args: str) -> set[str]:
    env = lean_hook_env(tmp_path, "sys:\n  mounts: [/]\n  disk_free_min_gib: {/tmp: 0.001}\nnet:\n  interfaces:\n    lo: {}\n")
    out = tmp_path / "modules.json"
    done = subprocess.run([sys.executable, "-c", RUN, str(out), *args], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=120)
    assert done.returncode in (0, 2), done.stderr[-2000:]
    return set(json.loads(out.read_text()))


def test_a_prologue_imports_nothing_it_does_not_use(tmp_path):
    loaded = _modules(tmp_path, "prologue")
    assert "healthcheck.checks.sys" in loaded  # it did run its checks
    assert _unused(loaded, NOT_IN_A_PROLOGUE) == []


def test_a_warm_prologue_parses_no_yaml(tmp_path):
    assert "yaml" in _modules(tmp_path, "prologue")  # the first parses the files and fills the cache
    loaded = _modules(tmp_path, "prologue")
    assert "healthcheck.checks.sys" in loaded
    assert _unused(loaded, NOT_IN_A_WARM_PROLOGUE + NOT_IN_A_PROLOGUE) == []


def test_a_local_run_of_two_families_imports_only_their_checks(tmp_path):
    loaded = _modules(tmp_path, "node", "--local", "--checks", "sys.mounts,net.mtu")  # its table too
    assert "healthcheck.checks.sys" in loaded and "healthcheck.checks.net" in loaded
    assert sorted(m for m in loaded if m.startswith("healthcheck.checks.")) == [
        "healthcheck.checks.net", "healthcheck.checks.sys"]
    assert "ClusterShell.NodeSet" not in loaded and "healthcheck.parsers.xid" not in loaded
    assert _unused(loaded, ("dataclasses", "inspect")) == []


def test_the_config_types_are_objects_not_text():
    """Every prologue converts its config into these types: a field's type kept as text
    (`from __future__ import annotations`) is compiled and evaluated by typing.ForwardRef
    at each conversion (~230 of them a prologue), an object is used as it is."""
    import msgspec

    from healthcheck.core.config import schema

    structs = [c for c in vars(schema).values() if isinstance(c, type) and issubclass(c, msgspec.Struct)]
    assert len(structs) > 20
    texts = sorted(f"{c.__name__}.{k}" for c in structs for k, t in c.__annotations__.items() if isinstance(t, str))
    assert texts == []
