"""The launchers: argv construction (srun, mpirun, torchrun), per-rank output parsing,
and real local runs of Open MPI's mpirun and torchrun on loopback, including a hung rank
killed at the timeout with no process left behind. srun itself runs on the rig."""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from healthcheck.runners import launch as L
from healthcheck.runners.launch import (
    Launch,
    launch,
    mpirun_launch,
    parse_mpirun,
    parse_srun,
    parse_torchrun,
    srun_launch,
    torchrun_launch,
)

TORCHRUN = Path(sys.executable).with_name("torchrun")
needs_mpirun = pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI's mpirun is not installed")
needs_torchrun = pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun is not installed in this venv")

# each rank writes its pid to <dir>/pid.<rank>, prints its rank and an env var, and
# rank 1 exits 3 (FAIL=1) or hangs (HANG=1)
RANK_SCRIPT = r"""
import os, sys, time
rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("RANK", "-1")))
with open(os.path.join(sys.argv[1], f"pid.{rank}"), "w") as f:
    f.write(str(os.getpid()))
print("rank", rank, os.environ.get("HC_TEST", "-"), flush=True)
print("to stderr", rank, file=sys.stderr, flush=True)
if rank == 1 and os.environ.get("FAIL"):
    sys.exit(3)
if rank == 1 and os.environ.get("HANG"):
    time.sleep(300)
"""


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "rank.py"
    path.write_text(RANK_SCRIPT)
    return path


def _alive(pid: int) -> bool:
    """A pid that is running (a zombie is dead: only its exit status is left)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2:stat.rfind(b")") + 3] not in (b"Z", b"X")


def _pids(tmp_path: Path) -> dict[int, int]:
    return {int(p.name.split(".")[1]): int(p.read_text()) for p in tmp_path.glob("pid.*") if p.read_text()}


def _none_alive(pids, within_s: float = 5.0) -> bool:
    until = time.monotonic() + within_s
    while any(_alive(p) for p in pids):
        if time.monotonic() > until:
            return False
        time.sleep(0.05)
    return True


# ------------------------------------------------------------------------------ argv


def test_srun_argv_is_one_labelled_task_per_node():
    spec = srun_launch(["hc", "node", "--local"], srun="/opt/slurm/bin/srun", nodelist="n[1-3]", nodes=3, ntasks=3,
                       job_name="hc-x", immediate_s=60, env={"HC_NODE_NAME": "x"})
    assert spec.argv == ("/opt/slurm/bin/srun", "--nodelist=n[1-3]", "--nodes=3", "--ntasks=3", "--ntasks-per-node=1",
                         "--label", "--kill-on-bad-exit=0", "--job-name=hc-x", "--immediate=60", "hc", "node", "--local")
    assert spec.kind == "srun" and spec.nranks == 3 and spec.env == {"HC_NODE_NAME": "x"}
    # inside an allocation: no nodelist, no bounded wait, one task per rank
    bare = srun_launch(["a.out"], ntasks=8, ntasks_per_node=None)
    assert bare.argv == ("srun", "--ntasks=8", "--label", "--kill-on-bad-exit=0", "a.out")


def test_mpirun_argv_exports_names_not_values():
    spec = mpirun_launch(["python3", "-c", "print(1)"], np=3, hosts=["a:2", "b"], oversubscribe=True,
                         allow_run_as_root=True, env={"NCCL_DEBUG": "INFO", "SECRET": "s3cr3t"})
    assert spec.argv == ("mpirun", "-np", "3", "--tag-output", "--host", "a:2,b", "--oversubscribe",
                         "--allow-run-as-root", "-x", "NCCL_DEBUG", "-x", "SECRET", "python3", "-c", "print(1)")
    assert "s3cr3t" not in " ".join(spec.argv) and spec.env["SECRET"] == "s3cr3t"
    assert mpirun_launch(["x"], np=2, hostfile="/h").argv == ("mpirun", "-np", "2", "--tag-output", "--hostfile", "/h",
                                                               "x")
    with pytest.raises(ValueError, match="not both"):
        mpirun_launch(["x"], np=2, hosts=["a"], hostfile="/h")


def test_torchrun_argv_standalone_or_c10d_rendezvous():
    spec = torchrun_launch(["train.py", "--x"], nproc_per_node=4)
    assert spec.argv == ("torchrun", "--nnodes=1", "--nproc-per-node=4", "--standalone", "--tee", "3", "train.py",
                         "--x")
    multi = torchrun_launch(["/bin/hostname"], nproc_per_node=8, nnodes=2, rdzv_endpoint="n1:29400", rdzv_id="hc1",
                            no_python=True, shutdown_timeout_s=2)
    assert multi.argv[:5] == ("torchrun", "--nnodes=2", "--nproc-per-node=8", "--rdzv-backend=c10d",
                              "--rdzv-endpoint=n1:29400")
    assert "--rdzv-id=hc1" in multi.argv and "--no-python" in multi.argv and "--shutdown-timeout=2" in multi.argv
    assert multi.nranks == 16
    with pytest.raises(ValueError, match="rendezvous"):
        torchrun_launch(["t.py"], nproc_per_node=1, nnodes=2)


@pytest.mark.parametrize("env", [{"A-B": "1"}, {"": "x"}, {"A": "a\0b"}, {"1A": "x"}])
def test_bad_environment_is_refused(env):
    with pytest.raises(ValueError):
        mpirun_launch(["x"], np=1, env=env)
    with pytest.raises(ValueError):
        srun_launch(["x"], env=env)


def test_empty_program_is_refused():
    with pytest.raises(ValueError):
        srun_launch([])


# ------------------------------------------------------------------------------ parsing


def test_parse_srun_labels_and_exit_codes():
    out = "0: {\n1: a\n 0: }\n10: ten\nnot labelled\n"
    err = ("1: oops\nsrun: error: n2: task 1: Exited with exit code 2\n"
           "srun: error: n4: tasks 3-4,6: Exited with exit code 1\n")
    ranks, errs, codes = parse_srun(out, err)
    assert ranks == {0: ["{", "}"], 1: ["a"], 10: ["ten"]}
    assert errs == {1: ["oops"]}
    assert codes == {1: 2, 3: 1, 4: 1, 6: 1}


def test_parse_mpirun_joins_chunks_split_mid_line():
    # Open MPI tags each chunk it reads, not each line (seen with Open MPI 4.1)
    out = "[1,2]<stdout>:rank[1,2]<stdout>: 2 bar\n[1,0]<stdout>:rank 0 bar\n[1,1]<stdout>:rank 1 [1,1]<stdout>:bar\n"
    err = ("[1,0]<stderr>:e0\n--------\nmpirun detected that one or more processes exited with non-zero status\n\n"
           "  Process name: [[5040,1],1]\n  Exit code:    3\n--------\n")
    ranks, errs, codes = parse_mpirun(out, err)
    assert ranks == {0: ["rank 0 bar"], 1: ["rank 1 bar"], 2: ["rank 2 bar"]}
    assert errs == {0: ["e0"]} and codes == {1: 3}


def test_parse_torchrun_prefixes_and_failure_summary():
    out = "[default0]:hello 0\n[default1]:hello 1\nW1123 noise\n"
    err = ("[default1]:err 1\nRoot Cause (first observed failure):\n[0]:\n  time      : 2026\n"
           "  host      : localhost\n  rank      : 1 (local_rank: 1)\n  exitcode  : 3 (pid: 32725)\n")
    assert parse_torchrun(out, err) == ({0: ["hello 0"], 1: ["hello 1"]}, {1: ["err 1"]}, {1: 3})
    assert parse_torchrun("[w0]:x\n[default0]:y\n", "", role="w")[0] == {0: ["x"]}


def test_launcher_labels_past_their_bounds_are_no_labels_never_a_crash():
    """The labels are core/launcher_labels.py's, the one grammar the parsers read too: a
    5,000-digit task id, rank or exit code is no launcher's (int() raised ValueError)."""
    huge = "9" * 5000
    assert parse_srun(f"{huge}: x\n0: y\n", "")[0] == {0: ["y"]}
    assert parse_mpirun(f"[1,{huge}]<stdout>:x\n[1,0]<stdout>:y\n", "")[0] == {0: ["y"]}
    assert parse_torchrun(f"[default{huge}]:x\n[default0]:y\n", "")[0] == {0: ["y"]}
    err = f"srun: error: n1: task {huge}: Exited with exit code 1\n  Process name: [[1,1],{huge}]\n  Exit code: 3\n"
    assert parse_srun("", err)[2] == {} and parse_mpirun("", err)[2] == {}


def test_a_task_range_of_a_billion_ids_is_read_bounded():
    err = "srun: error: n1: tasks 0-999999999: Exited with exit code 1\n"
    codes = parse_srun("", err)[2]
    assert len(codes) == 65_536 and codes[0] == 1


# ------------------------------------------------------------------------------ running


def test_a_missing_launcher_or_directory_is_a_result():
    r = launch(Launch("srun", ("/nonexistent/srun", "x")), timeout_s=5)
    assert r.not_found and not r.ok and r.returncode is None and r.ranks == {}
    r = launch(Launch("srun", ("true",)), timeout_s=5, cwd="/nonexistent/dir")
    assert r.error and "/nonexistent/dir" in r.error and not r.not_found


def test_srun_stand_in_output_comes_back_per_rank(tmp_path: Path):
    # a shell stand-in for srun --label: the launcher's own argv and parsing, no Slurm
    srun = tmp_path / "srun"
    srun.write_text('#!/bin/sh\necho "0: a $HC_TEST"\necho "1: b"\necho "1: e" >&2\n'
                    'echo "srun: error: n2: task 1: Exited with exit code 4" >&2\nexit 1\n')
    srun.chmod(0o755)
    r = launch(srun_launch(["hc"], srun=str(srun), ntasks=2, env={"HC_TEST": "v w"}), timeout_s=10, cwd=str(tmp_path))
    assert r.ranks == {0: ["a v w"], 1: ["b"]} and r.rank_stderr == {1: ["e"]}
    assert r.exit_codes == {1: 4} and r.returncode == 1 and not r.timed_out
    assert "Exited with exit code 4" in r.stderr_tail


@needs_mpirun
def test_mpirun_three_local_ranks(tmp_path: Path, script: Path):
    spec = mpirun_launch([sys.executable, str(script), str(tmp_path)], np=3, hosts=["localhost:3"],
                         oversubscribe=True, allow_run_as_root=True, env={"HC_TEST": "a b"})
    r = launch(spec, timeout_s=60)
    assert r.ok, r.stderr_tail
    assert r.ranks == {0: ["rank 0 a b"], 1: ["rank 1 a b"], 2: ["rank 2 a b"]}
    assert r.rank_stderr == {i: [f"to stderr {i}"] for i in range(3)}
    assert r.exit_codes == {0: 0, 1: 0, 2: 0}


@needs_mpirun
def test_mpirun_names_the_failed_rank_and_its_code(tmp_path: Path, script: Path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("localhost slots=3\n")
    spec = mpirun_launch([sys.executable, str(script), str(tmp_path)], np=3, hostfile=str(hostfile),
                         oversubscribe=True, allow_run_as_root=True, env={"FAIL": "1"})
    r = launch(spec, timeout_s=60)
    assert not r.ok and r.returncode == 3 and not r.timed_out
    assert r.exit_codes.get(1) == 3
    assert r.ranks[1] == ["rank 1 -"]


@needs_mpirun
def test_mpirun_hung_rank_is_killed_at_the_timeout_with_nothing_left(tmp_path: Path, script: Path):
    spec = mpirun_launch([sys.executable, str(script), str(tmp_path)], np=3, hosts=["localhost:3"],
                         oversubscribe=True, allow_run_as_root=True, env={"HANG": "1"})
    r = launch(spec, timeout_s=5, grace_s=1.0)
    assert r.timed_out and r.returncode is None and not r.ok
    assert r.ranks.get(1) == ["rank 1 -"]  # what it printed before the kill came back
    pids = _pids(tmp_path)
    assert set(pids) == {0, 1, 2}
    assert _none_alive(pids.values()), {r: p for r, p in pids.items() if _alive(p)}


@needs_torchrun
def test_torchrun_standalone_two_ranks(tmp_path: Path, script: Path):
    spec = torchrun_launch([str(script), str(tmp_path)], nproc_per_node=2, torchrun=str(TORCHRUN),
                           log_dir=str(tmp_path / "logs"), env={"HC_TEST": "t"})
    r = launch(spec, timeout_s=120, cwd=str(tmp_path))
    assert r.ok, r.stderr_tail
    assert r.ranks == {0: ["rank 0 t"], 1: ["rank 1 t"]}
    assert r.rank_stderr == {0: ["to stderr 0"], 1: ["to stderr 1"]}
    assert r.exit_codes == {0: 0, 1: 0}


@needs_torchrun
def test_torchrun_hung_worker_is_killed_with_nothing_left(tmp_path: Path, script: Path):
    # the workers run in sessions of their own: only the process-tree kill reaches them
    spec = torchrun_launch([str(script), str(tmp_path)], nproc_per_node=2, torchrun=str(TORCHRUN),
                           log_dir=str(tmp_path / "logs"), env={"HANG": "1"})
    deadline = time.monotonic() + 120
    r = launch(spec, timeout_s=15, grace_s=1.0)
    assert time.monotonic() < deadline
    assert r.timed_out
    pids = _pids(tmp_path)
    assert 1 in pids, r.stderr_tail  # the hung worker had started
    assert _none_alive(pids.values())


def test_kill_children_reaches_a_running_launch(tmp_path: Path):
    # the hooks' hard deadline calls runners.local.kill_children(): a launch must be in its registry
    import threading

    from healthcheck.runners.local import kill_children

    pidfile = tmp_path / "pid"
    prog = tmp_path / "fake-srun"
    prog.write_text(f"#!/bin/sh\necho $$ > {pidfile}\nexec sleep 60\n")
    prog.chmod(0o755)
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("r", launch(Launch("srun", (str(prog),)), timeout_s=30)))
    t.start()
    until = time.monotonic() + 10
    while not (pidfile.exists() and pidfile.read_text().strip()) and time.monotonic() < until:
        time.sleep(0.02)
    kill_children()
    t.join(timeout=10)
    assert not t.is_alive() and box["r"].returncode == -9 and not box["r"].timed_out
    assert not _alive(int(pidfile.read_text()))


def test_kill_children_between_the_fork_and_its_registration_still_kills(monkeypatch, tmp_path: Path):
    # CI caught it: the child ran (wrote its pid) before the launching thread registered its
    # group, the deadline's kill_children() found nothing, and the launch lived 30 s more
    from healthcheck.runners.local import kill_children

    real = L._popen

    def fork_then_deadline(*args, **kwargs):
        proc = real(*args, **kwargs)
        kill_children()  # the hook's deadline, in the window before registration
        return proc

    monkeypatch.setattr(L, "_popen", fork_then_deadline)
    prog = tmp_path / "fake-srun"
    prog.write_text("#!/bin/sh\nexec sleep 60\n")
    prog.chmod(0o755)
    started = time.monotonic()
    r = launch(Launch("srun", (str(prog),)), timeout_s=30)
    assert r.returncode == -9 and not r.timed_out
    assert time.monotonic() - started < 10


def test_kill_children_is_not_a_latch_for_later_commands():
    # a process that called kill_children() (a test, a sweep's stop that was refused) still runs commands
    from healthcheck.runners.local import kill_children, run_command

    kill_children()
    r = run_command(("sh", "-c", "echo ok"), timeout_s=10)
    assert r.returncode == 0 and r.stdout.strip() == "ok"


def test_descendants_come_from_proc():
    from healthcheck.runners.proctree import children_by_parent, descendants

    assert os.getpid() in descendants(os.getppid(), children_by_parent()) or not Path("/proc").exists()
