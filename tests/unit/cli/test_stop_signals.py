"""SIGINT, SIGTERM and SIGHUP stop a sweep with one bounded cleanup (runners/stop.py): every
launcher hc started ends, every Slurm job it asked for is cancelled (a grant that raced the
cancel too), and hc exits 128 + the signal, wherever the signal lands. Stand-in srun,
scancel, squeue and sinfo here; the real Slurm is integration/test_slurm_contract.py's.

The signal is made to land in the windows where it was lost: between srun's fork and its
registration, and in a thread other than the one waiting on srun (the kernel picks any
thread that does not block it; a handler that ran just before the main thread blocked in
poll() is the same case)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import default_signals, write_stub
from test_hook_contract import _end_stray, _gone, _pid_from

# the srun of a sweep through Slurm: notes its argv and pid, starts a child of its own, pends
PENDING_SRUN = ('echo "$@" > {d}/srun.args\necho $$ > {d}/srun.pid\n'
                'sleep 120 &\necho $! > {d}/sleep.pid\nwait\n')

# hc's own CLI, with subprocess.Popen made to deliver a Ctrl-C to hc the moment srun's fork
# returns (after srun started its child): the window before hc registered srun to kill it
SIGNAL_AT_SRUN_FORK = """
import os, signal, subprocess, sys, time
real = subprocess.Popen
class Popen(real):
    def __init__(self, args, *a, **k):
        super().__init__(args, *a, **k)
        if os.path.basename(str(args[0])) == "srun":
            until = time.monotonic() + 20
            while not os.path.exists(os.environ["TEST_SLEEP_PID"]) and time.monotonic() < until:
                time.sleep(0.02)
            os.kill(os.getpid(), signal.SIGINT)
subprocess.Popen = Popen
from healthcheck.cli import main
main(sys.argv[1:])
"""

# hc's own CLI, with the signal taken by a thread other than the main one, which waits on srun
SIGNAL_IN_ANOTHER_THREAD = """
import os, signal, sys, threading, time
def other():
    until = time.monotonic() + 20
    while not os.path.exists(os.environ["TEST_SLEEP_PID"]) and time.monotonic() < until:
        time.sleep(0.02)
    time.sleep(0.5)  # the main thread waits on srun's output now
    signal.pthread_kill(threading.get_ident(), int(os.environ["TEST_SIGNAL"]))
threading.Thread(target=other, daemon=True).start()
from healthcheck.cli import main
main(sys.argv[1:])
"""


def _config(tmp_path: Path, extra: str = "") -> Path:
    (tmp_path / "fabrics").mkdir(exist_ok=True)
    (tmp_path / "fabrics" / "t.yaml").write_text("net:\n  interfaces:\n    lo: {mtu: 65536}\n")
    path = tmp_path / "hc.yaml"
    path.write_text(f"default_fabric: t\nhistory: {{path: {tmp_path}/h.sqlite}}\n{extra}")
    return path


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HC_", "SLURM"))}
    env.update(PATH=f"{tmp_path / 'bin'}:/usr/bin:/bin", TEST_SLEEP_PID=str(tmp_path / "sleep.pid"), **extra)
    return env


def _slurm_sweep(tmp_path: Path, script: str, env: dict[str, str]) -> subprocess.Popen:
    """`hc sweep --via slurm` of n1 through `script` (a wrapper around hc's CLI), in a session of its own."""
    bin_dir = tmp_path / "bin"
    write_stub(bin_dir, "srun", PENDING_SRUN.format(d=tmp_path))
    write_stub(bin_dir, "scancel", f'echo "$@" >> {tmp_path}/scancel.log\n')
    write_stub(bin_dir, "sinfo", "printf 'n1|idle|Unknown|none\\n'\n")
    # an empty queue: the real squeue, with no controller, asks DNS for one and may wait on it
    write_stub(bin_dir, "squeue", "exit 0\n")
    return subprocess.Popen([sys.executable, "-c", script, "sweep", "--via", "slurm", "--nodes", "n1",
                             "--tier", "quick", "--config", str(_config(tmp_path))],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True,
                            preexec_fn=default_signals)


def _ended(hc: subprocess.Popen, tmp_path: Path, within: float = 20) -> bytes:
    """hc's stderr once it exited (within a bound far past its cleanup's), srun and its child gone."""
    try:
        _, err = hc.communicate(timeout=within)
    except subprocess.TimeoutExpired:
        hc.kill()
        _, err = hc.communicate()
        pytest.fail(f"hc still ran {within}s after the signal: {err.decode(errors='replace')[-2000:]}")
    srun = _pid_from(tmp_path / "srun.pid", within=1)
    sleep = _pid_from(tmp_path / "sleep.pid", within=1)
    assert _gone(srun, within=5) and _gone(sleep, within=5), "srun or what it started outlived hc"
    return err


def _cleanup(hc: subprocess.Popen, tmp_path: Path) -> None:
    if hc.poll() is None:
        hc.kill()
        hc.wait()
    for name, program in (("srun.pid", b"sh"), ("sleep.pid", b"sleep")):
        try:
            _end_stray(int((tmp_path / name).read_text()), program)
        except (OSError, ValueError):
            pass


def _cancelled_by_name(tmp_path: Path) -> None:
    job = next(a for a in (tmp_path / "srun.args").read_text().split() if a.startswith("--job-name="))
    lines = (tmp_path / "scancel.log").read_text().splitlines()
    assert any({f"--name={job.split('=', 1)[1]}", f"--user={os.getuid()}"} <= set(line.split()) for line in lines), lines


def test_a_ctrl_c_landing_between_sruns_fork_and_its_registration_still_ends_srun_and_its_children(tmp_path):
    """The window between fork and registration: the stop waits until srun is registered,
    then ends it and what it started, and cancels its job."""
    hc = _slurm_sweep(tmp_path, SIGNAL_AT_SRUN_FORK, _env(tmp_path))
    try:
        err = _ended(hc, tmp_path)
        assert hc.returncode == 130, err
        assert b"hc: interrupted" in err and b"Traceback" not in err
        _cancelled_by_name(tmp_path)
    finally:
        _cleanup(hc, tmp_path)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_stop_signal_another_thread_took_still_ends_the_sweep_bounded(tmp_path, sig):
    """The main thread blocks on srun's output and never sees the signal's handler run:
    hc still ends srun and its job, and exits 128 + the signal."""
    hc = _slurm_sweep(tmp_path, SIGNAL_IN_ANOTHER_THREAD, _env(tmp_path, TEST_SIGNAL=str(int(sig))))
    try:
        err = _ended(hc, tmp_path)
        assert hc.returncode == 128 + sig, err
        said = b"hc: interrupted" if sig == signal.SIGINT else f"hc: stopped by {sig.name}".encode()
        assert said in err and b"Traceback" not in err, err
        _cancelled_by_name(tmp_path)
    finally:
        _cleanup(hc, tmp_path)


def test_sigterm_during_a_sweep_via_slurm_cancels_its_job_and_exits_143(tmp_path):
    """SIGTERM (what slurmd, systemd or an operator's kill send) is a stop like Ctrl-C: no handler
    before, so hc died where it stood and its job stayed."""
    hc = _slurm_sweep(tmp_path, "from healthcheck.cli import main\nimport sys\nmain(sys.argv[1:])\n", _env(tmp_path))
    try:
        _pid_from(tmp_path / "sleep.pid", within=15)
        os.kill(hc.pid, signal.SIGTERM)
        err = _ended(hc, tmp_path)
        assert hc.returncode == 143, err
        assert b"hc: stopped by SIGTERM" in err and b"Traceback" not in err
        _cancelled_by_name(tmp_path)
    finally:
        _cleanup(hc, tmp_path)


def test_a_signal_ignored_at_start_stays_ignored(tmp_path):
    """nohup's SIGHUP: hc keeps running through it."""
    env = _env(tmp_path)
    bin_dir = tmp_path / "bin"
    write_stub(bin_dir, "srun", PENDING_SRUN.format(d=tmp_path))
    write_stub(bin_dir, "scancel", f'echo "$@" >> {tmp_path}/scancel.log\n')
    write_stub(bin_dir, "sinfo", "printf 'n1|idle|Unknown|none\\n'\n")
    hc = subprocess.Popen(["nohup", sys.executable, "-m", "healthcheck", "sweep", "--via", "slurm", "--nodes", "n1",
                           "--tier", "quick", "--config", str(_config(tmp_path))],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True)
    try:
        _pid_from(tmp_path / "sleep.pid", within=15)
        os.kill(hc.pid, signal.SIGHUP)
        time.sleep(1.0)
        assert hc.poll() is None and not (tmp_path / "scancel.log").exists()
        os.kill(hc.pid, signal.SIGTERM)
        err = _ended(hc, tmp_path)
        assert hc.returncode == 143, err
    finally:
        _cleanup(hc, tmp_path)


# ------------------------------------------------------------ a deep sweep's srun workers

# hc's own CLI, with every node's own checks passing without SSH, so the deep sweep goes
# straight to its pair tests
NODES_PASS = """
import sys
from healthcheck.core.model import NodeResult
from healthcheck.core.status import Status
from healthcheck.orchestrate import remote
remote.check_over_ssh = lambda config, nodes, **kw: [
    NodeResult(node=n, fabric=config.fabric_of(n), status=Status.PASS, mode="agentless") for n in nodes]
from healthcheck.cli import main
main(sys.argv[1:])
"""

# srun asking for a worker's allocation: notes its argv and pid, then pends
WORKER_SRUN = """#!{python}
import json, os, sys, time
with open({log!r}, "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
open(os.path.join({d!r}, "srun-%d.pid" % os.getpid()), "w").write(str(os.getpid()))
time.sleep(120)
"""

# squeue as Slurm answers while a grant races the cancel: a job of each name cancelled by
# name shows up (granted just after) until it is cancelled by its id
RACING_SQUEUE = """#!{python}
import os, sys
args = sys.argv[1:]
open({d!r} + "/squeue.log", "a").write(" ".join(args) + "\\n")
try:
    lines = open({d!r} + "/scancel.log").read().split("\\n")
except OSError:
    lines = []
names = [w.split("=", 1)[1] for line in lines for w in line.split() if w.startswith("--name=")]
killed = {{w for line in lines for w in line.split() if w.isdigit()}}
wanted = next((a.split("=", 1)[1] for a in args if a.startswith("--name=")), None)
for i, name in enumerate(names):
    job = str(7700 + i)
    if job not in killed and wanted in (None, name):
        print(job + "|" + name + "|RUNNING")
"""


def _deep_site(tmp_path: Path, max_time: str = "infinite") -> tuple[Path, dict[str, str]]:
    bin_dir = tmp_path / "bin"
    write_stub(bin_dir, "srun", "")
    (bin_dir / "srun").write_text(WORKER_SRUN.format(python=sys.executable, log=str(tmp_path / "srun.log"),
                                                     d=str(tmp_path)))
    write_stub(bin_dir, "squeue", "")
    (bin_dir / "squeue").write_text(RACING_SQUEUE.format(python=sys.executable, d=str(tmp_path)))
    write_stub(bin_dir, "scancel", f'echo "$@" >> {tmp_path}/scancel.log\n')
    write_stub(bin_dir, "sinfo", f'case "$*" in *%P*) echo "debug*|{max_time}" ;; '
                                 "*) printf 'n1|idle|Unknown|none\\nn2|idle|Unknown|none\\n' ;; esac\n")
    fabrics = tmp_path / "fabrics"
    fabrics.mkdir()
    (fabrics / "f.yaml").write_text(
        "extends: generic\nbandwidth:\n  sizes: [64K]\n  repeats: 1\n"
        "  torch: {backend: gloo, iters: 2, warmup: 1}\n"
        "  pairs: {launcher: srun, timeout_s: 60}\n")
    cfg = tmp_path / "hc.yaml"
    cfg.write_text(f"fabric_dirs: [{fabrics}]\nnodes: {{'n[1-2]': f}}\nhistory: {{path: {tmp_path}/h.sqlite}}\n"
                   f"slurm: {{srun: {bin_dir / 'srun'}, scontrol: {bin_dir / 'scontrol'}, sinfo: {bin_dir / 'sinfo'},"
                   f" audit_log: {tmp_path}/audit.jsonl}}\n")
    return cfg, _env(tmp_path)


def _srun_pids(tmp_path: Path) -> list[int]:
    return [int(p.read_text()) for p in tmp_path.glob("srun-*.pid") if p.read_text().strip()]


def test_sigterm_to_a_deep_sweep_cancels_every_worker_allocation_even_one_granted_during_the_cancel(tmp_path):
    """SIGTERM a moment after the deep sweep asked srun for its workers' one-node allocations:
    srun ends, each job is cancelled by its name, and a grant that raced the cancel (squeue
    shows the job after it) is cancelled by its id; exit 143."""
    cfg, env = _deep_site(tmp_path)
    hc = subprocess.Popen([sys.executable, "-c", NODES_PASS, "sweep", "--nodes", "n[1-2]", "--tier", "deep",
                           "--config", str(cfg)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                          start_new_session=True)
    pids: list[int] = []
    try:
        until = time.monotonic() + 30
        while len(_srun_pids(tmp_path)) < 2 and time.monotonic() < until and hc.poll() is None:
            time.sleep(0.05)
        pids = _srun_pids(tmp_path)
        assert len(pids) == 2, hc.stderr.read().decode() if hc.poll() is not None else "srun never asked twice"
        os.kill(hc.pid, signal.SIGTERM)
        try:
            _, err = hc.communicate(timeout=40)
        except subprocess.TimeoutExpired:
            pytest.fail("hc still ran 40s after SIGTERM")
        assert hc.returncode == 143, err
        assert b"hc: stopped by SIGTERM" in err and b"Traceback" not in err, err
        assert all(_gone(p, within=5) for p in pids), "an srun outlived hc"
        argvs = [json.loads(line) for line in (tmp_path / "srun.log").read_text().splitlines()]
        names = sorted(a.split("=", 1)[1] for argv in argvs for a in argv if a.startswith("--job-name="))
        assert len(names) == 2 and all(n.startswith("hc-pair-") for n in names), argvs
        cancels = (tmp_path / "scancel.log").read_text().splitlines()
        by_name = sorted(w.split("=", 1)[1] for line in cancels for w in line.split() if w.startswith("--name="))
        by_id = sorted(w for line in cancels for w in line.split() if w.isdigit())
        assert by_name == names, cancels
        assert by_id == ["7700", "7701"], (cancels, err.decode())
        assert by_id == ["7700", "7701"], cancels  # each job granted as it was cancelled: cancelled by its id
        assert all(f"--user={os.getuid()}" in line.split() for line in cancels)
        assert b"granted as it was cancelled" in err  # said on stderr (no report on a stop)
    finally:
        if hc.poll() is None:
            hc.kill()
            hc.wait()
        for pid in pids:
            _end_stray(pid, b"python")


# ------------------------------------------------------------ the hooks keep their own contract


def test_the_hooks_never_load_the_stop_machinery(tmp_path):
    """A prologue runs before every job: it imports nothing it does not use. Only `hc sweep`
    and `hc node` handle stop signals; run_command defers a stop only once they installed it."""
    from test_hooks import setup

    _bin, _log, env = setup(tmp_path)
    code = ("import atexit, sys\n"
            "atexit.register(lambda: print('LOADED' if 'healthcheck.runners.stop' in sys.modules else 'NOT LOADED',"
            " file=sys.stderr))\n"
            "from healthcheck.cli import main\nmain(['prologue'])\n")
    full = {k: v for k, v in os.environ.items() if not k.startswith(("HC_", "SLURM"))}
    full.update(env)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, env=full, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stderr.decode().splitlines()[-1] == "NOT LOADED", r.stderr
    installed = subprocess.run(
        [sys.executable, "-c", "from healthcheck.runners import local, stop\n"
                               "assert local.stop_deferral is not stop.deferred\n"
                               "stop.install()\nassert local.stop_deferral is stop.deferred\n"],
        capture_output=True, timeout=60)
    assert installed.returncode == 0, installed.stderr
