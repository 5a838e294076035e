"""The hooks' exit contract with Slurm, whatever goes wrong: a prologue exits 2 only on
FAIL and 0 otherwise, an epilogue always 0, health by its documented codes. Slurm drains
a node on any other Prolog/Epilog exit, outside hc's guard (issue 8, A1-A4 and 18).

The real `hc` runs in a subprocess with sinfo/scontrol stand-ins; the same failures go
through the real wrappers on the rig's Slurm in tests/integration/test_slurm_contract.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from support import REPO, run_hc, write_stub
from test_hooks import setup


def _ok_line(stderr: bytes) -> None:
    assert b"Traceback" not in stderr
    text = stderr.decode()
    assert text.count("hc ") >= 1 and len([line for line in text.splitlines() if "error" in line]) <= 1, text


# A1 --------------------------------------------------------------- errors found after the config loaded


@pytest.mark.parametrize("case", ["fabric-type-error", "empty-main-config", "node-matches-no-pattern"])
def test_config_errors_after_loading_never_fail_a_job(tmp_path, case):
    bin_dir, log, env = setup(tmp_path)
    cfg = tmp_path / "hc.yaml"
    if case == "fabric-type-error":
        (tmp_path / "fabrics" / "t.yaml").write_text("net:\n  interfaces:\n    lo: {mtu: lots}\n")
    elif case == "empty-main-config":
        cfg.write_text("")
    else:
        cfg.write_text(f"nodes:\n  'gpu[1-4]': t\nfabric_dirs: [{tmp_path}/fabrics]\n")
    for kind in ("prologue", "epilogue"):
        r = run_hc(kind, env=env, timeout=30)
        assert r.returncode == 0, (kind, r.stderr)
        assert b"job not affected" in r.stderr
        _ok_line(r.stderr)
    r = run_hc("health", env=env, timeout=30)
    assert r.returncode == 4 and b"Traceback" not in r.stderr
    assert "update" not in (log.read_text() if log.exists() else "")  # nothing drained or resumed


# A2 --------------------------------------------------------------- internal errors


def test_an_unusable_state_dir_is_reported_and_the_verdict_still_stands(tmp_path):
    bin_dir, log, env = setup(tmp_path, mtu=1500)
    (tmp_path / "plain-file").write_text("x")
    cfg = tmp_path / "hc.yaml"
    cfg.write_text(cfg.read_text().replace(f"state_dir: {tmp_path}/state", f"state_dir: {tmp_path}/plain-file/state"))
    r = run_hc("prologue", "--format", "json", env=env, timeout=30)
    assert r.returncode == 2, r.stderr  # the node FAILed: the job stays off, hc drained it
    report = json.loads(r.stdout)
    assert "act.E005" in [f["id"] for f in report["run_findings"]]
    assert log.read_text().strip() == "update nodename=node1 state=drain reason=hc: net.E001"

    bin_dir, log, env = setup(tmp_path / "healthy")
    cfg = tmp_path / "healthy" / "hc.yaml"
    cfg.write_text(cfg.read_text().replace(f"state_dir: {tmp_path}/healthy/state",
                                           f"state_dir: {tmp_path}/plain-file/state"))
    for kind in ("prologue", "epilogue", "health"):
        assert run_hc(kind, env=env, timeout=30).returncode == 0, kind


def _hc_with(patch: str, *args: str, env: dict, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run the real CLI in a subprocess after `patch` (Python) has broken something."""
    code = textwrap.dedent(patch) + f"\nfrom healthcheck.cli import main\nmain({list(args)!r})\n"
    full = {k: v for k, v in os.environ.items() if not k.startswith(("HC_", "SLURM"))}
    full.update(env)
    full["PYTHONPATH"] = str(REPO)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, env=full, timeout=timeout)


@pytest.mark.parametrize("exc", ["RuntimeError('boom')", "MemoryError()", "RecursionError('deep')", "KeyError('x')"])
def test_an_unexpected_exception_exits_by_the_contract(tmp_path, exc):
    bin_dir, log, env = setup(tmp_path)
    patch = f"""
        import healthcheck.orchestrate.hooks as h
        def broken(*a, **k):
            raise {exc}
        h.run_hook = broken
    """
    codes = {kind: _hc_with(patch, kind, env=env) for kind in ("prologue", "epilogue", "health")}
    assert {k: r.returncode for k, r in codes.items()} == {"prologue": 0, "epilogue": 0, "health": 3}
    for r in codes.values():
        assert b"Traceback" not in r.stderr and b"internal error" in r.stderr


def test_a_failed_node_still_exits_2_when_hc_breaks_while_acting(tmp_path):
    bin_dir, log, env = setup(tmp_path, mtu=1500)
    patch = """
        import healthcheck.orchestrate.hooks as h
        def broken(*a, **k):
            raise RuntimeError("audit exploded")
        h.act = broken
    """
    assert _hc_with(patch, "prologue", env=env).returncode == 2  # FAIL: keep the job off
    assert _hc_with(patch, "epilogue", env=env).returncode == 0


# A3 --------------------------------------------------------------- concurrent runs on one node

WRITER = """
import sys
from healthcheck.actions.nodestate import NodeState
s = NodeState(sys.argv[1], "node1")
for i in range(400):
    s.set_kernel_log_cursor(1000.0 + i)
    s.record_run(i % 2 == 0, ["hc.E002"])
    s.mark_job_start(str(i % 3))
"""


def test_two_runs_writing_the_node_state_at_once_never_crash(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], stderr=subprocess.PIPE, env=env)
             for _ in range(3)]
    errs = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], errs[0][-2000:]
    leftovers = [p.name for p in (tmp_path / "node1").iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []


# A4 --------------------------------------------------------------- deadlines cover everything


def test_the_deadline_is_armed_before_the_config_is_read_and_children_die(tmp_path):
    bin_dir, log, env = setup(tmp_path)
    pidfile = tmp_path / "child.pid"
    patch = f"""
        import threading, time
        import healthcheck.cli.hooks as hooks
        import healthcheck.cli.app as app
        from healthcheck.runners.local import run_command
        hooks.HARD_MARGIN_S = -3.0  # the schema's default prologue deadline (5 s) - 3 s
        def hung_config(path=None):
            threading.Thread(target=run_command, daemon=True,
                             args=(["sh", "-c", "echo $$ > {pidfile}; exec sleep 300"],),
                             kwargs={{"timeout_s": 600}}).start()
            time.sleep(3600)  # a config on a dead NFS mount
        app.load_config = hung_config
    """
    start = time.monotonic()
    r = _hc_with(patch, "prologue", env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert time.monotonic() - start < 15
    assert b"hard deadline exceeded" in r.stderr and b"job not affected" in r.stderr
    child = int(pidfile.read_text())
    for _ in range(50):  # killed (a zombie until reaped, or gone)
        try:
            state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            break
        if state == "Z":
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the hook's child {child} outlived it")


def test_health_with_a_slow_controller_ends_by_its_deadline_and_leaves_a_report(tmp_path):
    bin_dir, log, env = setup(tmp_path, mtu=1500)
    write_stub(bin_dir, "sinfo", "exec sleep 60\n")  # slurmctld answering slowly
    cfg = tmp_path / "hc.yaml"
    cfg.write_text(cfg.read_text().replace("  prologue: {deadline_s: 1.5}",
                                           "  prologue: {deadline_s: 1.5}\n  health: {deadline_s: 2}\n"
                                           "  command_timeout_s: 30"))
    start = time.monotonic()
    r = run_hc("health", "--format", "json", env=env, timeout=60)
    took = time.monotonic() - start
    assert r.returncode == 2, r.stderr
    assert took < 2 + 3 + 3  # deadline_s + the hard margin + interpreter start
    report = json.loads(r.stdout)
    assert [f["id"] for f in report["run_findings"]] == ["act.E003"]
    assert (tmp_path / "reports" / "node1" / "health-latest.json").exists()
    assert not log.exists()


def _slow_health(tmp_path: Path, deadline_s: float, command_timeout_s: float) -> None:
    cfg = tmp_path / "hc.yaml"
    cfg.write_text(cfg.read_text().replace("  prologue: {deadline_s: 1.5}",
                                           f"  prologue: {{deadline_s: 1.5}}\n  health: {{deadline_s: {deadline_s}}}\n"
                                           f"  command_timeout_s: {command_timeout_s}"))


@pytest.mark.parametrize("stalled", ["sinfo", "ip"])  # a slow controller; a check whose command hangs
def test_health_cut_short_by_its_deadline_still_writes_its_report_and_history_row(tmp_path, stalled):
    """A health run its deadline cut short leaves both its report and its history row, the same run in each."""
    bin_dir, log, env = setup(tmp_path, mtu=1500)
    write_stub(bin_dir, stalled, "exec sleep 60\n")
    _slow_health(tmp_path, deadline_s=2, command_timeout_s=30)
    start = time.monotonic()
    r = run_hc("health", "--format", "json", env=env, timeout=60)
    assert time.monotonic() - start < 2 + 3 + 3  # deadline_s + the hard margin + interpreter start
    # the slow controller: net.E001 FAILs, act.E003; the hung `ip`: net.mtu could not run
    assert r.returncode == {"sinfo": 2, "ip": 3}[stalled], r.stderr
    report = json.loads(r.stdout)
    latest = json.loads((tmp_path / "reports" / "node1" / "health-latest.json").read_text())
    assert latest["run_id"] == report["run_id"]
    history = tmp_path / "history.sqlite"
    assert history.is_file(), "no history written"
    with contextlib.closing(sqlite3.connect(f"file:{history}?mode=ro", uri=True)) as db:
        runs = db.execute("SELECT run_id, command, status FROM runs").fetchall()
        nodes = db.execute("SELECT node, status FROM run_nodes").fetchall()
    assert runs == [(report["run_id"], "health", report["status"])]
    assert nodes == [("node1", report["nodes"][0]["status"])]


def _start_hc(*args: str, env: dict[str, str]) -> subprocess.Popen:
    """The real `hc`, started (not waited for) with run_hc's environment, to be signalled."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(("HC_", "SLURM"))}
    full.update(env)
    return subprocess.Popen([sys.executable, "-m", "healthcheck", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=full)


def _pid_from(path: Path, within: float) -> int:
    """The pid a stub wrote to `path` once it started."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError):
            return int(path.read_text())
        time.sleep(0.05)
    pytest.fail(f"no pid in {path} after {within}s: the stub never ran")


def _gone(pid: int, within: float) -> bool:
    """Whether process `pid` is gone (or a zombie waiting to be reaped) within `within` seconds."""
    deadline = time.monotonic() + within
    while True:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        except OSError:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def _end_stray(pid: int, program: bytes) -> None:
    """SIGKILL a stub this test started if it is still running `program` (a failed test's leftover)."""
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].endswith(program):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_the_commands_health_started_die_with_it_when_slurmd_kills_it(tmp_path, sig):
    """hc health killed (SIGKILL) or stopped (SIGTERM) while sinfo hangs leaves no sinfo behind to act later."""
    bin_dir, log, env = setup(tmp_path)
    pidfile = tmp_path / "sinfo.pid"
    write_stub(bin_dir, "sinfo", f"echo $$ > {pidfile}\nexec sleep 120\n")  # a controller that never answers
    _slow_health(tmp_path, deadline_s=60, command_timeout_s=60)  # hc itself would wait a minute
    hc = _start_hc("health", env=env)
    child = None
    try:
        child = _pid_from(pidfile, within=15)
        hc.send_signal(sig)
        _, err = hc.communicate(timeout=15)
        if sig == signal.SIGTERM:  # hc's handler: its children killed, exit by the contract
            assert hc.returncode == 3, err
            assert b"signal SIGTERM" in err and b"giving up (exit 3)" in err
        else:  # no handler runs: only PR_SET_PDEATHSIG takes the child with it
            assert hc.returncode == -signal.SIGKILL
        assert _gone(child, within=5), f"sinfo ({child}) outlived hc health ({sig.name})"
        assert not log.exists()  # nothing drained or resumed
    finally:
        if hc.poll() is None:
            hc.kill()
            hc.wait()
        if child is not None:
            _end_stray(child, b"sleep")


# 18 --------------------------------------------------------------- node names from the environment


@pytest.mark.parametrize("name", ["../../x", "/etc/passwd", "node1 node2", "node1\nnode2", "-rf", ""])
def test_hook_node_names_are_validated_before_they_become_paths(tmp_path, name):
    bin_dir, log, env = setup(tmp_path, mtu=1500)
    env = dict(env, HC_NODE_NAME=name, SLURMD_NODENAME=name) if name else dict(env, HC_NODE_NAME="",
                                                                            SLURMD_NODENAME="bad/name")
    for kind, want in (("prologue", 0), ("epilogue", 0), ("health", 4)):
        r = run_hc(kind, env=env, timeout=30)
        assert r.returncode == want, (kind, r.stderr)
        assert b"not a valid node name" in r.stderr and b"Traceback" not in r.stderr
    assert not log.exists()
    made = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")}
    assert not any(p.startswith(("x", "state/x")) or "passwd" in p for p in made), made
    assert not (tmp_path.parent / "x").exists()


# sethostname(2) in a private UTS namespace, then exec hc: the host's own name is untouched
_AS_HOST = """
import ctypes, os, sys
name = sys.argv[1].encode()
if ctypes.CDLL(None, use_errno=True).sethostname(name, len(name)) != 0:
    print("sethostname:", os.strerror(ctypes.get_errno()), file=sys.stderr)
    sys.exit(97)
os.execv(sys.executable, [sys.executable, "-m", "healthcheck", *sys.argv[2:]])
"""


def _hc_as_host(host_name: str, kind: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """`hc KIND` on a machine whose host name is `host_name`, with neither HC_NODE_NAME nor SLURMD_NODENAME."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(("HC_", "SLURM"))}
    full.update({k: v for k, v in env.items() if k not in ("HC_NODE_NAME", "SLURMD_NODENAME")})
    r = subprocess.run(["unshare", "--uts", sys.executable, "-c", _AS_HOST, host_name, kind], env=full,
                       capture_output=True, timeout=30)
    assert r.returncode != 97, r.stderr
    return r


@pytest.mark.parametrize("host_name", ["../../z", "bad host", "x/y"])
def test_the_host_name_fallback_is_validated_before_it_becomes_a_path(tmp_path, host_name):
    """With no HC_NODE_NAME or SLURMD_NODENAME, a bad host name is one line (prologue 0, health 4), never a path."""
    if shutil.which("unshare") is None or subprocess.run(["unshare", "--uts", "true"],
                                                         capture_output=True).returncode != 0:
        pytest.skip("cannot make a private UTS namespace here (unshare --uts needs root)")
    bin_dir, log, env = setup(tmp_path / "site", mtu=1500)
    # the fallback is really taken: a good host name becomes the node's state and report names
    assert _hc_as_host("node7", "health", env).returncode == 2
    assert (tmp_path / "site" / "state" / "node7").is_dir()
    assert (tmp_path / "site" / "reports" / "node7" / "health-latest.json").exists()
    assert log.read_text() == "update nodename=node7 state=drain reason=hc: net.E001\n"
    log.unlink()  # from here on nothing may be drained
    before = set(tmp_path.rglob("*"))
    for kind, want in (("prologue", 0), ("epilogue", 0), ("health", 4)):
        r = _hc_as_host(host_name, kind, env)
        assert r.returncode == want, (kind, r.stderr)
        assert b"Traceback" not in r.stderr
        (line,) = [x for x in r.stderr.decode().splitlines() if "not a valid node name" in x]
        short = host_name.split(".", 1)[0]  # the fallback takes the short name, and says both
        said = f"the host name {host_name!r}, short name {short!r}" if short != host_name \
            else f"the host name {host_name!r}"
        assert f"{said} is not a valid node name" in line, line
    assert not log.exists()
    made = sorted(p.relative_to(tmp_path).as_posix() for p in set(tmp_path.rglob("*")) - before)
    assert made == [], made
    assert not (tmp_path / "z").exists() and not (tmp_path.parent / "z").exists()


def test_a_full_state_dir_is_reported_and_the_job_runs(tmp_path):
    """A state_dir on a full file system (ENOSPC on every write): act.E005, exit by the contract."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    full = tmp_path / "full"
    full.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(full)]).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        (full / "state" / "node1").mkdir(parents=True)
        fd = os.open(full / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:
            pass  # full
        finally:
            os.close(fd)
        bin_dir, log, env = setup(tmp_path / "site")
        cfg = tmp_path / "site" / "hc.yaml"
        cfg.write_text(cfg.read_text().replace(f"state_dir: {tmp_path}/site/state", f"state_dir: {full}/state"))
        r = run_hc("health", "--format", "json", env=env, timeout=30)
        assert r.returncode == 0, r.stderr
        report = json.loads(r.stdout)
        assert "act.E005" in [f["id"] for f in report["run_findings"]]
        assert "No space left" in next(f for f in report["run_findings"] if f["id"] == "act.E005")["message"]
        assert run_hc("prologue", env=env, timeout=30).returncode == 0
    finally:
        subprocess.run(["umount", "-l", str(full)])


def test_a_prologue_fail_the_guard_refuses_to_drain_lets_the_job_run(tmp_path):
    """A non-zero exit would make Slurm drain the node anyway, outside the guard."""
    bin_dir, log, env = setup(tmp_path, mtu=1500)
    cfg = tmp_path / "hc.yaml"
    cfg.write_text(cfg.read_text().replace("slurm:\n", "slurm:\n  drain: {enabled: false}\n", 1))
    r = run_hc("prologue", "--format", "json", env=env, timeout=30)
    assert r.returncode == 0, r.stderr
    assert "act.E001" in [f["id"] for f in json.loads(r.stdout)["run_findings"]]
    assert b"exit 0" in r.stderr and not log.exists()
