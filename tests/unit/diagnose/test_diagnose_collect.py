"""healthcheck.diagnose.collect on this machine: real processes found by job id and pid,
their environ, state and py-spy stacks; environ edge cases; py-spy missing and ptrace
refused as error facts naming the fix; NCCL RAS refused (absent), spoken to by a fake
server replaying a real 2.28.9 capture, and silent (bounded)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest
from support import free_port

from healthcheck.diagnose import collect as C
from healthcheck.diagnose.ras_client import query_ras

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
RAS_CAPTURE = FIXTURES / "h100-captures" / "nccl-ras-2.28.9-verbose-status-1rank.txt"
PY_SPY = Path(sys.executable).parent / "py-spy"
needs_py_spy = pytest.mark.skipif(not os.access(PY_SPY, os.X_OK) and shutil.which("py-spy") is None,
                                  reason="py-spy is not installed (hc[test])")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (ptrace of a non-child, setpriv)")

SLEEPER = textwrap.dedent("""
    import sys, time
    def stuck_in_named_function():
        print("ready", flush=True)
        time.sleep(120)
    stuck_in_named_function()
""")

AGENT = textwrap.dedent("""
    import os, subprocess, sys, time
    kids = [subprocess.Popen([sys.executable, "-c", sys.argv[1]], env={**os.environ, "RANK": str(r),
            "LOCAL_RANK": str(r), "WORLD_SIZE": "2"}, stdout=subprocess.DEVNULL) for r in range(2)]
    print(" ".join(str(k.pid) for k in kids), flush=True)
    time.sleep(120)
""")

WITH_WORKER = textwrap.dedent("""
    import os, subprocess, sys, time
    kid = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], stdout=subprocess.DEVNULL)
    print(kid.pid, flush=True)
    time.sleep(120)
""")


class Procs:
    """Processes a test starts, each in a session of its own, killed (by pid) at the end."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen] = []
        self.extra: list[int] = []

    def start(self, code: str, env: dict[str, str], *args: str) -> tuple[subprocess.Popen, str]:
        p = subprocess.Popen([sys.executable, "-c", code, *args], env={**os.environ, **env},
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
        self.started.append(p)
        assert p.stdout is not None
        line = p.stdout.readline().decode().strip()
        return p, line

    def close(self) -> None:
        for pid in self.extra:
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        for p in self.started:
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.killpg(p.pid, sig)  # its own session: the group is what this test started
                except ProcessLookupError:
                    pass
            p.wait(10)


@pytest.fixture
def procs():
    ps = Procs()
    yield ps
    ps.close()


def job_env(job: str, **more: str) -> dict[str, str]:
    clean = {k: "" for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK")}
    env = {k: v for k, v in os.environ.items() if k not in clean}
    return {**env, "SLURM_JOB_ID": job, **more}


@pytest.fixture
def job_id() -> str:
    return str(900_000_000 + int(uuid.uuid4().int % 90_000_000))


# ------------------------------------------------------------------------------ discovery (real processes)


@needs_py_spy
def test_a_rank_found_by_job_id_with_its_environ_state_and_stack(procs, job_id, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    p, ready = procs.start(SLEEPER, job_env(job_id, RANK="3", LOCAL_RANK="1", WORLD_SIZE="4",
                                            CUDA_VISIBLE_DEVICES="2,3", NCCL_DEBUG_FILE="/tmp/nccl.%h.%p.log",
                                            TORCH_FR_DUMP_TEMP_FILE="/tmp/fr_", MASTER_PORT="29500",
                                            HF_TOKEN="s3cret", AWS_SECRET_ACCESS_KEY="s3cret"))
    assert ready == "ready"
    c = C.collect_node(job_id=job_id, timeout_s=20, raw=True, host="h1")
    assert [r.pid for r in c.ranks] == [p.pid], c
    r = c.ranks[0]
    assert (r.rank, r.local_rank, r.world_size, r.rank_source) == (3, 1, 4, "RANK")
    assert r.host == "h1" and r.found_by == "environ" and r.slurm_job_id == job_id
    assert r.state in ("S", "R") and r.cuda_visible_devices == "2,3" and r.master_port == 29500
    assert r.debug_files.nccl_debug == f"/tmp/nccl.h1.{p.pid}.log"
    assert r.debug_files.flight_recorder == "/tmp/fr_3" and r.debug_files.flight_recorder_prefix == "/tmp/fr_"
    assert "HF_TOKEN" not in r.env and "AWS_SECRET_ACCESS_KEY" not in r.env and "s3cret" not in c.to_json().decode()
    assert r.env["RANK"] == "3" and r.env["NCCL_DEBUG_FILE"] == "/tmp/nccl.%h.%p.log"
    assert r.py_spy_mode == "blocking" and r.user_frame.startswith("stuck_in_named_function (<string>:")
    assert r.collective is None and json.loads(r.py_spy_raw)[0]["pid"] == p.pid
    assert not c.errors or all(e.kind == "environ-unreadable" and e.pid is None for e in c.errors), c.errors
    # the same process by pid, and the JSON round trip
    by_pid = C.collect_node(pids=[p.pid], timeout_s=20)
    assert [(x.pid, x.rank, x.found_by) for x in by_pid.ranks] == [(p.pid, 3, "pid")]
    back = C.decode_collection(c.to_json())
    assert back == c and back.by_rank[3].stack.threads[0].frames[0].name == "stuck_in_named_function"


@needs_py_spy
def test_a_stopped_rank_is_state_T_and_its_stack_is_read_without_stopping_it(procs, job_id):
    p, _ = procs.start(SLEEPER, job_env(job_id, RANK="0", WORLD_SIZE="2"))
    os.kill(p.pid, signal.SIGSTOP)
    time.sleep(0.2)
    c = C.collect_node(pids=[p.pid], timeout_s=20)
    (r,) = c.ranks
    assert (r.state, r.state_name, r.py_spy_mode) == ("T", "stopped", "nonblocking")
    assert r.user_frame.startswith("stuck_in_named_function"), c
    assert Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"


def test_an_agent_pid_stands_for_its_ranks_and_is_not_one(procs):
    agent, kids = procs.start(AGENT, job_env("1"), SLEEPER)
    kid_pids = sorted(int(k) for k in kids.split())
    time.sleep(0.3)
    c = C.collect_node(pids=[agent.pid], py_spy=None)
    assert sorted(r.pid for r in c.ranks) == kid_pids and sorted(r.rank for r in c.ranks) == [0, 1]
    assert [(s.pid, s.reason) for s in c.skipped] == [(agent.pid, "agent")]


def test_under_a_job_id_an_agent_with_a_launcher_rank_is_not_a_rank(procs, job_id):
    """srun -> torchrun: the agent has SLURM_PROCID, its workers RANK; the workers are the ranks."""
    agent, kids = procs.start(AGENT, job_env(job_id, SLURM_PROCID="0"), SLEEPER)
    time.sleep(0.3)
    c = C.collect_node(job_id=job_id, py_spy=None)
    assert sorted(r.pid for r in c.ranks) == sorted(int(k) for k in kids.split()), c
    assert all(r.agent_pid == agent.pid and r.rank_source == "RANK" for r in c.ranks)
    assert (agent.pid, "agent") in [(s.pid, s.reason) for s in c.skipped]


def test_a_ranks_python_child_with_the_same_rank_is_a_helper(procs, job_id):
    p, kid = procs.start(WITH_WORKER, job_env(job_id, RANK="5", WORLD_SIZE="8"))
    time.sleep(0.3)
    c = C.collect_node(job_id=job_id, py_spy=None)
    assert [(r.pid, r.rank, r.helpers) for r in c.ranks] == [(p.pid, 5, (int(kid),))]
    assert (int(kid), "helper") in [(s.pid, s.reason) for s in c.skipped]


def test_non_python_and_rankless_processes_of_the_job_are_skipped_with_why(procs, job_id):
    sh = subprocess.Popen(["/bin/sh", "-c", "echo ready; sleep 120"], env=job_env(job_id, RANK="0"),
                          stdout=subprocess.PIPE, start_new_session=True)
    procs.started.append(sh)
    assert sh.stdout is not None and sh.stdout.readline().strip() == b"ready"
    p, _ = procs.start(SLEEPER, job_env(job_id))  # Python, the job's, but no rank variable
    c = C.collect_node(job_id=job_id, py_spy=None)
    assert c.ranks == ()
    reasons = {s.pid: s.reason for s in c.skipped}
    assert reasons.get(p.pid) == "no-rank" and "not-python" in reasons.values()
    assert [e.kind for e in c.errors if e.kind == "no-ranks"] == ["no-ranks"]


def test_a_pid_that_does_not_exist_is_an_error_fact():
    gone = subprocess.Popen(["true"])
    gone.wait()
    c = C.collect_node(pids=[gone.pid], py_spy=None)
    assert c.ranks == () and [(e.kind, e.pid) for e in c.errors] == [("process-gone", gone.pid)]


def test_arguments_are_checked():
    with pytest.raises(ValueError):
        C.collect_node()
    with pytest.raises(ValueError):
        C.collect_node(job_id="1", pids=[1])


# ------------------------------------------------------------------------------ environ and /proc edge cases


def test_parse_environ_edge_cases():
    data = b"A=1\0A=2\0NOEQUALS\0=empty\0B=x=y\0C=\xff\xfe\0D=\0"
    assert C.parse_environ(data) == {"A": "1", "B": "x=y", "C": "\ufffd\ufffd", "D": ""}
    assert C.parse_environ(b"") == {}


def fake_proc(root: Path, pid: int, *, ppid: int = 1, state: str = "S", cmd: str = "python3 train.py",
              environ: bytes | None = b"", cgroup: str = "0::/user.slice\n") -> None:
    d = root / str(pid)
    d.mkdir(parents=True)
    (d / "stat").write_text(f"{pid} (py thon) x) {state} {ppid} 1 1 0 -1\n")
    (d / "cmdline").write_bytes(cmd.replace(" ", "\0").encode() + b"\0")
    (d / "cgroup").write_text(cgroup)
    if environ is not None:
        (d / "environ").write_bytes(environ)


def test_a_missing_environ_is_recorded_not_raised(tmp_path):
    fake_proc(tmp_path, 10, environ=None)
    env, error, cut = C.read_environ(10, str(tmp_path))
    assert env is None and error == "process gone" and not cut
    (tmp_path / "10" / "environ").mkdir()  # unreadable for another reason
    env, error, cut = C.read_environ(10, str(tmp_path))
    assert env is None and error


def test_a_huge_environ_is_read_to_the_bound_and_the_cut_item_dropped(tmp_path):
    big = b"RANK=7\0" + b"".join(b"V%d=%s\0" % (i, b"x" * 1000) for i in range(3000)) + b"LAST=1\0"
    fake_proc(tmp_path, 11, environ=big)
    env, error, cut = C.read_environ(11, str(tmp_path), max_bytes=1 << 20)
    assert error is None and cut and env["RANK"] == "7" and "LAST" not in env
    assert all(len(v) == 1000 for k, v in env.items() if k.startswith("V"))  # no half value kept


@needs_root
def test_an_environ_of_another_user_is_unreadable_and_said_so(procs):
    """Run as nobody (setpriv), reading a root process's environ: a fact, never an exception."""
    p, _ = procs.start(SLEEPER, job_env("2", RANK="0"))
    code = (f"from healthcheck.diagnose.collect import read_environ, collect_node; "
            f"print(read_environ({p.pid})[1]); c = collect_node(pids=[{p.pid}], py_spy=None); "
            f"print([e.kind for e in c.errors])")
    r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c", code],
                       capture_output=True, text=True, timeout=60, cwd=str(Path(__file__).resolve().parents[3]))
    assert r.returncode == 0, r.stderr
    first, kinds = r.stdout.splitlines()
    assert first.startswith("permission denied") and "environ-unreadable" in kinds


def test_cgroup_paths_name_the_job():
    assert C.cgroup_job("0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0\n") == "4242"
    assert C.cgroup_job("12:freezer:/slurm/uid_0/job_17/step_batch\n4:memory:/slurm/uid_0/job_17\n") == "17"
    assert C.cgroup_job("0::/user.slice/user-0.slice/session-3.scope\n") is None
    assert C.cgroup_job("0::/job_12x/\n") is None


def test_ranks_found_by_cgroup_in_a_proc_tree(tmp_path):
    cg = "0::/system.slice/slurmstepd.scope/job_77/step_0/user/task_{}\n"
    fake_proc(tmp_path, 100, environ=b"SLURM_PROCID=0\0SLURM_NTASKS=2\0", cgroup=cg.format(0))
    fake_proc(tmp_path, 101, environ=b"SLURM_PROCID=1\0SLURM_NTASKS=2\0", cgroup=cg.format(1))
    fake_proc(tmp_path, 102, environ=b"SLURM_JOB_ID=77\0SLURM_PROCID=0\0",  # another job's cgroup wins
              cgroup="0::/system.slice/slurmstepd.scope/job_78/step_0\n")
    fake_proc(tmp_path, 103, environ=b"SLURM_PROCID=2\0", cgroup=cg.format(2), state="Z")
    fake_proc(tmp_path, 104, environ=b"SLURM_PROCID=3\0", cgroup=cg.format(3), cmd="/bin/bash run.sh")
    c = C.collect_node(job_id=77, py_spy=None, proc=str(tmp_path), host="n1")
    assert [(r.pid, r.rank, r.world_size, r.found_by, r.rank_source) for r in c.ranks] == [
        (100, 0, 2, "cgroup", "SLURM_PROCID"), (101, 1, 2, "cgroup", "SLURM_PROCID")]
    assert {s.pid: s.reason for s in c.skipped} == {103: "zombie", 104: "not-python"}


# ------------------------------------------------------------------------------ py-spy missing or refused


def test_py_spy_missing_is_an_error_fact_naming_the_fix(procs, job_id, tmp_path, monkeypatch):
    p, _ = procs.start(SLEEPER, job_env(job_id, RANK="0"))
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH without it
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python3"))  # and no venv beside hc
    assert C.resolve_py_spy("py-spy") is None
    c = C.collect_node(pids=[p.pid], py_spy="py-spy")
    (r,) = c.ranks
    assert r.rank == 0 and r.stack is None and c.py_spy is None
    (e,) = [e for e in c.errors if e.kind == "py-spy-missing"]
    assert "pip install py-spy" in e.fix
    c = C.collect_node(pids=[p.pid], py_spy="/nonexistent/py-spy")
    assert [e.kind for e in c.errors] == ["py-spy-missing"]


def test_py_spy_refused_ptrace_is_an_error_fact_naming_the_fix():
    text = ("Error: Failed to get process executable name. Check that the process is running.\n"
            "Reason: Permission denied (os error 13)\n"
            "Permission Denied: Try running again with elevated permissions by going 'sudo env \"PATH=$PATH\" !!'\n")
    e = C.py_spy_error(text, 4242, rank=3, returncode=1)
    assert (e.kind, e.pid, e.rank) == ("ptrace-denied", 4242, 3)
    assert "CAP_SYS_PTRACE" in e.fix and "ptrace_scope" in e.fix
    other = C.py_spy_error("something odd\n", 1, returncode=1)
    assert other.kind == "py-spy-failed" and "something odd" in other.message


@needs_root
@needs_py_spy
def test_py_spy_really_refused_ptrace_as_another_user(procs):
    """nobody dumping root's process: py-spy's real refusal becomes ptrace-denied, no traceback."""
    p, _ = procs.start(SLEEPER, job_env("3", RANK="0"))
    py_spy = str(PY_SPY) if os.access(PY_SPY, os.X_OK) else shutil.which("py-spy")
    code = (f"from healthcheck.diagnose.collect import collect_node; "
            f"c = collect_node(pids=[{p.pid}], py_spy={py_spy!r}, timeout_s=15); print(c.to_json().decode())")
    r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c", code],
                       capture_output=True, text=True, timeout=60, cwd=str(Path(__file__).resolve().parents[3]))
    assert r.returncode == 0, r.stderr
    c = C.decode_collection(r.stdout)
    kinds = {e.kind: e for e in c.errors}
    assert "ptrace-denied" in kinds, c.errors
    assert "CAP_SYS_PTRACE" in kinds["ptrace-denied"].fix and kinds["ptrace-denied"].pid == p.pid


# ------------------------------------------------------------------------------ NCCL RAS


def test_ras_refused_is_absent_evidence_not_an_error(procs, job_id):
    port = free_port()
    x = query_ras("127.0.0.1", port, timeout_s=2)
    assert x.outcome == "absent" and "connection refused" in x.reason
    p, _ = procs.start(SLEEPER, job_env(job_id, RANK="0"))
    c = C.collect_node(pids=[p.pid], py_spy=None, ras=True, ras_port=port)
    assert c.ras is not None and c.ras.outcome == "absent" and c.ras.status is None
    assert not [e for e in c.errors if e.kind == "ras-error"]


class FakeRas:
    """A RAS server on a free port that replays the server lines of a real capture."""

    def __init__(self, capture: Path, silent: bool = False) -> None:
        text = capture.read_text()
        self.body = text.split(">>> VERBOSE STATUS\n", 1)[1]
        self.silent = silent
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.port = self.sock.getsockname()[1]
        self.heard: list[str] = []
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        conn, _ = self.sock.accept()
        with conn:
            f = conn.makefile("rb")
            if self.silent:
                f.readline()
                time.sleep(3)
                return
            for line in f:
                cmd = line.decode().strip()
                self.heard.append(cmd)
                if cmd.startswith("CLIENT PROTOCOL"):
                    conn.sendall(b"SERVER PROTOCOL 2\n")
                elif cmd.startswith("TIMEOUT"):
                    conn.sendall(b"OK\n")
                elif cmd in ("STATUS", "VERBOSE STATUS"):
                    conn.sendall(self.body.encode())
                    return  # the server closes after the report
                else:
                    conn.sendall(b"ERROR: Unknown command\n")

    def close(self) -> None:
        self.sock.close()
        self.thread.join(5)


def test_a_ras_server_speaking_the_protocol_is_parsed(procs, job_id):
    ras = FakeRas(RAS_CAPTURE)
    try:
        ev = C.ask_ras("127.0.0.1", ras.port, timeout_s=5)
    finally:
        ras.close()
    assert ras.heard == ["CLIENT PROTOCOL 2", "TIMEOUT 4", "VERBOSE STATUS"]
    assert ev.outcome == "ok" and ev.status is not None, ev
    s = ev.status
    assert (s.nccl_version, s.protocol, s.verbose, s.complete) == ("2.28.9", 2, True, True)
    assert [(g.status, g.ok) for g in s.groups] == [("RUNNING", True)] and s.ok
    assert ev.transcript.startswith(">>> CLIENT PROTOCOL 2\nSERVER PROTOCOL 2\n>>> TIMEOUT 4\nOK\n")
    # through collect_node
    ras = FakeRas(RAS_CAPTURE)
    try:
        p, _ = procs.start(SLEEPER, job_env(job_id, RANK="0"))
        c = C.collect_node(pids=[p.pid], py_spy=None, ras=True, ras_port=ras.port)
    finally:
        ras.close()
    assert c.ras.outcome == "ok" and c.ras.status.nccl_version == "2.28.9" and not c.errors


def test_a_silent_ras_server_is_an_error_within_the_time_given():
    ras = FakeRas(RAS_CAPTURE, silent=True)
    try:
        start = time.monotonic()
        x = query_ras("127.0.0.1", ras.port, timeout_s=1.0)
        took = time.monotonic() - start
    finally:
        ras.close()
    assert x.outcome == "error" and "did not answer" in x.reason and took < 2.0


# ------------------------------------------------------------------------------ the command line


def _helper(*args: str) -> subprocess.CompletedProcess:
    """`hc diagnose collect ARGS` as the job's nodes run it (stdout: one JSON line)."""
    return subprocess.run([sys.executable, "-m", "healthcheck", "diagnose", "collect", *args], capture_output=True,
                          timeout=60)


def test_main_prints_the_collection_as_json(procs, job_id):
    p, _ = procs.start(SLEEPER, job_env(job_id, RANK="1", WORLD_SIZE="2"))
    r = _helper("--job", job_id, "--no-stacks")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert [(r["pid"], r["rank"]) for r in d["ranks"]] == [(p.pid, 1)] and d["job_id"] == job_id
    r = _helper("--job", str(int(job_id) + 1), "--no-stacks")
    assert r.returncode == 1  # nothing of that job here
    assert json.loads(r.stdout)["errors"][-1]["kind"] == "no-ranks"
    r = _helper("--pids", str(p.pid), str(p.pid), "--no-stacks", "--no-kernel")  # several pids, as argparse took
    assert r.returncode == 0 and [x["pid"] for x in json.loads(r.stdout)["ranks"]] == [p.pid], r.stderr


# ------------------------------------------------------------------------------ the kernel log in the job's window

KERNEL_LOG = """\
[  100.000000] Out of memory: Killed process 4000 (python3) total-vm:1kB, anon-rss:1kB
[ 5000.000000] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/slurm/uid_0/job_5,\
task_memcg=/slurm/uid_0/job_5/step_0/task_0,task=python3,pid=1234,uid=0
[ 5000.100000] Memory cgroup out of memory: Killed process 1234 (python3) total-vm:123kB, anon-rss:1kB
[ 5001.000000] NVRM: Xid (PCI:0000:19:00): 79, pid=1234, name=python3, GPU has fallen off the bus.
[ 5002.000000] mlx5_core 0000:17:00.0 enp23s0f0np0: Link down
[ 5002.500000] hctbr0: port 1(veth1) entered blocking state
[ 5003.000000] nvidia-nvswitch1: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 30 LTSSM Fault Up
[ 5003.000000] nvidia-nvswitch1: SXid (PCI:0000:05:00.0): 20034, Severity 5 Engine instance 30 Sub-engine instance 00
[ 5004.000000] mlx5_core 0000:17:00.0: Port module event: module 0, Cable unplugged
bare line: Out of memory: Killed process 4242 (python3)
"""


def test_kernel_events_oom_xid_sxid_link_in_the_window():
    boot = 1_700_000_000.0
    events, before, untimed, over = C.kernel_events(KERNEL_LOG, boot + 4000, boot=boot)
    assert [(e.kind, e.line, e.pid, e.xid) for e in events] == [
        ("oom-kill", 3, 1234, None), ("xid", 4, 1234, 79), ("link", 5, None, None), ("xid", 7, None, 20034),
        ("link", 9, None, None)]
    assert (before, untimed, over) == (1, 1, 0)  # the OOM at 100 s; the bare line with no time
    oom, xid, link, sxid, module = events
    assert (oom.job, oom.process, oom.time) == ("5", "python3", boot + 5000.1)
    assert oom.text.startswith("Memory cgroup out of memory: Killed process 1234")
    assert xid.pci_bus_id == "0000:19:00.0" and xid.text.startswith("NVRM: Xid")
    assert link.device == "0000:17:00.0 enp23s0f0np0" and link.text.endswith("Link down")
    assert sxid.device == "nvidia-nvswitch1" and module.device == "0000:17:00.0"
    # bounded: the first max_events kept, the rest counted
    events, _, _, over = C.kernel_events(KERNEL_LOG, boot, boot=boot, max_events=2)
    assert len(events) == 2 and over == 4
    # no boot time: raw [uptime] stamps cannot be placed, so nothing is taken
    assert C.kernel_events(KERNEL_LOG, boot, boot=None)[0] == []


def test_read_kernel_notes_what_it_cannot_do():
    from healthcheck.core.facts import ProbeError

    def refused() -> tuple[str, str]:
        raise ProbeError("unreadable", "/dev/kmsg: Operation not permitted")

    k = C.read_kernel(1.0e9, sources=[("/dev/kmsg", refused), ("dmesg", lambda: ("", "dmesg: read kernel buffer "
                                                                                       "failed"))])
    assert k.source is None and "Operation not permitted" in k.note and "CAP_SYSLOG" in k.note
    k = C.read_kernel(None, sources=[("x", lambda: ("[1.0] a\n", ""))])
    assert k.source is None and "--since" in k.note
    assert "not a usable time" in C.read_kernel(float("nan")).note
    k = C.read_kernel(1_700_004_000.0, sources=[("file k", lambda: (KERNEL_LOG, ""))], boot=1_700_000_000.0)
    assert k.source == "file k" and len(k.events) == 5 and k.dropped_before == 1 and "without a time" in k.note


def test_job_window_from_process_start_times_else_slurm(tmp_path):
    (tmp_path / "stat").write_text("cpu  1 2 3\nbtime 1700000000\n")
    fields = " ".join(["0"] * 17)
    for pid, ticks in ((10, 5000), (11, 3000)):
        d = tmp_path / str(pid)
        d.mkdir()
        # pid (comm) state ppid ... starttime (field 22)
        (d / "stat").write_text(f"{pid} (py (x)) S 1 {fields} {ticks} 0 0\n")
    tck = os.sysconf("SC_CLK_TCK")
    assert C.process_start(10, str(tmp_path)) == 1700000000 + 5000 / tck
    assert C.job_window([10, 11, 99], job_id="5", proc=str(tmp_path)) == (1700000000 + 3000 / tck, "process 11")
    env = {"SLURM_JOB_ID": "5", "SLURM_JOB_START_TIME": "1700000123"}
    assert C.job_window([99], job_id="5", proc=str(tmp_path), env=env) == (1700000123.0, "SLURM_JOB_START_TIME")
    assert C.job_window([99], job_id="6", proc=str(tmp_path), env=env) == (None, "")


def test_main_reads_the_kernel_log_unless_told_not_to(procs, job_id):
    p, _ = procs.start(SLEEPER, job_env(job_id, RANK="0"))
    r = _helper("--pids", str(p.pid), "--no-stacks", "--no-kernel")
    assert r.returncode == 0 and C.decode_collection(r.stdout).kernel is None
    r = _helper("--pids", str(p.pid), "--no-stacks", "--since", "1700000000")
    assert r.returncode == 0
    k = C.decode_collection(r.stdout).kernel
    assert k is not None and k.since == 1700000000 and k.since_from == "argument"
    assert k.source is not None or "kernel log unreadable" in (k.note or "")  # this machine's own log, or why not
