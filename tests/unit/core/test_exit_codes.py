"""Exit codes that must not lie (issue 8, items 9 and 16, and groups invoked alone):
checking nothing is not healthy, a lost stdout is an error, and a reader that went away
does not change the verdict."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import run_hc, run_hc_inproc, write_stub


def config(tmp_path: Path, fabric: str = "net:\n  interfaces:\n    lo: {mtu: 65536}\n") -> Path:
    (tmp_path / "fabrics").mkdir(exist_ok=True)
    (tmp_path / "fabrics" / "t.yaml").write_text(fabric)
    path = tmp_path / "hc.yaml"
    path.write_text("default_fabric: t\nhistory: {path: null}\n")
    return path


FAILING = "net:\n  interfaces:\n    lo: {mtu: 1500}\n"  # lo is 65536 on every Linux box


def hc_shell(shell_redirects: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The real entry point with stdout redirected by a shell (closed, a full device, a
    pipe whose reader left): what run_hc cannot set up. stdout of the shell itself is
    captured, so what hc writes past the redirection is seen."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("HC_", "SLURM"))}
    full_env.update(env or {"HC_NODE_NAME": "gpu017"})
    quoted = " ".join(f"'{a}'" for a in (sys.executable, "-m", "healthcheck", *args))
    return subprocess.run(["bash", "-c", f"{quoted} {shell_redirects}"], capture_output=True, env=full_env,
                          timeout=60, check=False)


def one_error_line(stderr: bytes) -> str:
    text = stderr.decode()
    lines = [line for line in text.splitlines() if line.startswith("hc: error:")]
    assert len(lines) == 1 and "Traceback" not in text and "internal error" not in text, text
    return lines[0]


# ------------------------------------------------------------- empty node sets


@pytest.mark.parametrize("args", [
    ["node", ""],
    ["node", " "],
    ["sweep", "--nodes", ""],
    ["sweep", "--nodes", " "],
    ["sweep", "--partition", ""],
])
def test_an_empty_node_set_is_a_usage_error(tmp_path, args):
    r = run_hc_inproc(*args, "--config", str(config(tmp_path)))
    assert r.returncode == 4, (r.returncode, r.stdout, r.stderr)
    assert "no node" in one_error_line(r.stderr) or "empty" in one_error_line(r.stderr)
    assert b"SKIP" not in r.stdout


@pytest.mark.parametrize("args", [
    ["node", "n1&n2"],
    ["node", "n[1-3]!n[1-3]"],
    ["sweep", "--nodes", "n[1-2]^n[1-2]"],
    ["sweep", "--nodes", "n1&n2"],
])
def test_a_node_pattern_that_matches_nothing_is_a_usage_error(tmp_path, args):
    """A pattern whose set operations leave no node checks nothing: exit 4, one line, never "SKIP: 0 nodes"."""
    r = run_hc_inproc(*args, "--config", str(config(tmp_path)))
    assert r.returncode == 4, (r.returncode, r.stdout, r.stderr)
    line = one_error_line(r.stderr)
    assert "no node to check" in line and f"{args[-1]!r} names no node" in line, line
    assert r.stdout == b""


def test_a_partition_with_no_node_in_sinfo_is_a_usage_error(tmp_path):
    """--partition of a partition sinfo lists no node for (absent, or empty) is exit 4 naming it, not an empty PASS."""
    bin_dir = tmp_path / "bin"
    write_stub(bin_dir, "sinfo", f'echo "$@" >> {tmp_path}/sinfo.log\n')  # what sinfo -p nosuch prints: nothing
    r = run_hc_inproc("sweep", "--partition", "nosuch", "--config", str(config(tmp_path)),
               env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    assert r.returncode == 4, (r.returncode, r.stdout, r.stderr)
    assert "partition 'nosuch' has no nodes" in one_error_line(r.stderr)
    assert r.stdout == b""
    assert "-p nosuch" in (tmp_path / "sinfo.log").read_text()  # Slurm was asked, not guessed


def test_a_hostfile_with_no_node_is_a_usage_error(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("# nothing here\n\n")
    r = run_hc("sweep", "--hostfile", str(hosts), "--config", str(config(tmp_path)))
    assert r.returncode == 4 and b"SKIP" not in r.stdout
    one_error_line(r.stderr)


def test_run_many_refuses_an_empty_node_list(tmp_path):
    from healthcheck.core.config import load_config
    from healthcheck.core.errors import UsageError
    from healthcheck.orchestrate.multirun import RunRequest, partition_nodes, run_many

    cfg = load_config(config(tmp_path))
    with pytest.raises(UsageError, match="no node to check"):
        run_many(cfg, RunRequest([], command="sweep"))
    with pytest.raises(UsageError, match="names no partition"):
        partition_nodes(cfg, "")  # sinfo without -p would list the whole cluster


# ------------------------------------------------------------- nothing checked


def test_a_run_where_every_check_skipped_is_error_not_healthy(tmp_path, validate_report):
    # the gpu family on a machine without NVIDIA GPUs: every check SKIPs
    r = run_hc("node", "--local", "--checks", "gpu", "--config", str(config(tmp_path)), "--format", "json",
               env={"HC_NODE_NAME": "gpu017"})
    assert r.returncode == 3, r.stderr
    report = validate_report(r.stdout)
    assert report["status"] == "ERROR"
    assert {c["status"] for c in report["nodes"][0]["checks"]} == {"SKIP"}
    (finding,) = report["run_findings"]
    assert finding["id"] == "hc.E007" and finding["status"] == "ERROR" and "nothing was checked" in finding["message"]
    assert any(g["id"] == "hc.E007" for g in report["findings_summary"])
    table = run_hc("node", "--local", "--checks", "gpu", "--config", str(config(tmp_path)),
                   env={"HC_NODE_NAME": "gpu017"})
    assert table.returncode == 3
    assert b"hc.E007" in table.stdout
    assert table.stdout.decode().splitlines()[-1].startswith("ERROR (nothing was checked): 1 node (1 SKIP)")


def test_the_embedded_default_config_on_a_plain_machine_still_passes():
    # net and sys checks run everywhere: a plain machine is checked, not "nothing checked"
    if Path("/etc/hc/hc.yaml").exists():
        pytest.skip("this machine has its own /etc/hc/hc.yaml: the embedded default is not used")
    r = run_hc("node", "--local", env={"HC_NODE_NAME": "plain1"})
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert b"hc.E007" not in r.stdout and b"PASS: 1 node" in r.stdout


def test_make_report_rule_for_nothing_checked():
    import datetime as dt

    from healthcheck.core.model import CheckResult, NodeResult
    from healthcheck.core.status import Status
    from healthcheck.report.build import make_report

    now = dt.datetime(2026, 11, 22, tzinfo=dt.timezone.utc)

    def build(*nodes):
        return make_report(command="sweep", tier="quick", config_digest="d", config_path="/x", started=now,
                           finished=now, nodes=list(nodes))

    skipped = NodeResult(node="n1", fabric="f", status=Status.SKIP, checks=[CheckResult("gpu.ecc", Status.SKIP, 0.0, "no GPU")])
    none_selected = NodeResult(node="n2", fabric="f", status=Status.SKIP, checks=[])
    passed = NodeResult(node="n3", fabric="f", status=Status.PASS, checks=[CheckResult("net.mtu", Status.PASS, 0.0)])
    unreachable = NodeResult(node="n4", fabric="f", status=Status.ERROR, error="ssh: refused")
    assert build(skipped).status is Status.ERROR and build(skipped).run_findings[0].id == "hc.E007"
    assert "no check of tier quick was selected" in build(none_selected).run_findings[0].message
    assert build(skipped, passed).status is Status.PASS and build(skipped, passed).run_findings == []
    assert build(unreachable).run_findings == []  # looked at, and could not: hc.E006 says so


# ------------------------------------------------------------------- stdout


def test_a_full_stdout_is_one_line_and_exit_4(tmp_path):
    # /dev/full is only read here by the shell's redirection, never written to by a rename
    r = hc_shell("> /dev/full", "node", "--local", "--config", str(config(tmp_path)))
    assert r.returncode == 4, r.stderr
    assert "standard output" in one_error_line(r.stderr) and "No space left on device" in r.stderr.decode()


def test_a_closed_stdout_is_reported_and_not_exit_0(tmp_path):
    r = hc_shell(">&-", "node", "--local", "--config", str(config(tmp_path)))
    assert r.returncode == 4, r.stderr
    assert "standard output is closed" in one_error_line(r.stderr)


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_a_reader_that_went_away_keeps_the_verdict(tmp_path, fmt):
    # `| true` exits before reading; `head -c1` after one byte: either way hc gets EPIPE
    for reader in ("true", "head -c1 >/dev/null"):
        r = hc_shell(f"--format {fmt} | {reader}; exit ${{PIPESTATUS[0]}}", "node", "--local", "--config",
                     str(config(tmp_path, FAILING)))
        assert r.returncode == 2, (reader, r.returncode, r.stderr)
        assert b"Traceback" not in r.stderr and b"Exception ignored" not in r.stderr and b"error" not in r.stderr


def test_a_reader_that_went_away_on_a_big_report_keeps_the_verdict(tmp_path):
    # many findings: the output is larger than a pipe's buffer, so the write itself fails
    fabric = "net:\n  interfaces:\n" + "".join(f"    ib{i}: {{mtu: 4092}}\n" for i in range(3000))
    r = hc_shell("--format json | head -c1 >/dev/null; exit ${PIPESTATUS[0]}", "node", "--local", "--config",
                 str(config(tmp_path, fabric)))
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert b"Traceback" not in r.stderr and b"Exception ignored" not in r.stderr


# ------------------------------------------------------------ groups alone


@pytest.mark.parametrize("args", [[], ["report"], ["config"], ["gpu"]])
def test_a_group_alone_prints_its_help_and_exits_0(args):
    r = (run_hc_inproc if args else run_hc)(*args)  # `hc` alone in a real process, the groups in this one
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(b"Usage: hc") and b"Commands:" in r.stdout
    assert b"error" not in r.stderr


def test_report_json_is_unchanged_by_the_stdout_guard(tmp_path, validate_report):
    r = run_hc("node", "--local", "--config", str(config(tmp_path)), "--format", "json",
               env={"HC_NODE_NAME": "gpu017"})
    assert r.returncode == 0 and validate_report(r.stdout)["status"] == "PASS"
    assert json.loads(r.stdout)["nodes"][0]["node"] == "gpu017"
