"""Live collections -> evidence -> verdict (healthcheck/diagnose/live.py), on the real
collections saved from hung gloo jobs on the rig (tests/fixtures/diagnose-live/), and
`hc diagnose job|pids` against a fake Slurm (scripts named in the config)."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import msgspec
import pytest
from support import FIXTURES, run_hc

from healthcheck.diagnose.collect import (
    CollectError,
    DebugFiles,
    NodeCollection,
    RankProcess,
    decode_collection,
)
from healthcheck.diagnose.live import (
    NodeAnswer,
    evidence_from_nodes,
    fetch_argv,
    local_fetcher,
    parse_fetched,
    parse_job,
    srun_collect_argv,
)
from healthcheck.diagnose.sources import read_one
from healthcheck.diagnose.verdict import build
from healthcheck.runners.local import run_command

LIVE = FIXTURES / "diagnose-live"

# scenario -> (class, odd ranks) from the collections alone
EXPECTED = {
    "skip-torchrun": ("collective-mismatch", [2]),
    "size-torchrun": ("dead-rank", [1]),  # the rank gloo aborted (SIGABRT) is gone; the text is in torchrun's stderr
    "kill-torchrun": ("dead-rank", [2]),
    "sleep-torchrun": ("stuck-rank", [1]),
    "stop-torchrun": ("stuck-rank", [3]),
    "sleep-srun": ("stuck-rank", [2]),
    "stop-srun": ("stuck-rank", [0]),
    "port-srun": ("init-failure", [0]),
}


def collections(name: str) -> list[NodeCollection]:
    return [decode_collection(f.read_bytes()) for f in sorted((LIVE / name).glob("collect-node*.json"))]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_collections_name_the_class_and_the_odd_rank(name):
    live = evidence_from_nodes(collections(name), job=name)
    v = build(live.collected)
    cls, odd = EXPECTED[name]
    assert (v.cls, [o.rank for o in v.odd_ranks]) == (cls, odd), (v.summary, v.notes)
    for o in v.odd_ranks:  # never a healthy rank; the odd one with its host
        assert o.host == f"node{o.rank + 1}" or o.rank in live.missing
    ev = live.collected.evidence
    for rank, r in ev.ranks.items():
        if rank not in live.missing:
            assert r.host == f"node{rank + 1}" and r.pid and r.world_size == 4 and r.alive and r.stack is not None


@pytest.mark.parametrize("name", ["kill-torchrun", "port-srun", "stop-torchrun", "sleep-srun"])
def test_collections_with_the_logs_saved_beside_them(name):
    """The live evidence plus the logs the job wrote (what a debug file read would add): same odd rank."""
    live = evidence_from_nodes(collections(name), job=name)
    col = live.collected
    for f in sorted((LIVE / name).glob("*.log")) + sorted((LIVE / name).glob("*-output.txt")):
        read_one(f, col, 2026)
    v = build(col)
    assert [o.rank for o in v.odd_ranks] == EXPECTED[name][1], v.summary
    assert v.cls == EXPECTED[name][0], v.summary


def test_stopped_rank_is_stuck_evidence():
    live = evidence_from_nodes(collections("stop-torchrun"), job="stop")
    r3 = live.collected.evidence.ranks[3]
    assert r3.state == "stopped" and r3.alive
    v = build(live.collected)
    assert v.confidence == "high" and "state T" in v.summary
    assert any("stopped (state T)" in e.text for f in v.findings for e in f.lines)
    assert next(row for row in v.ranks if row.rank == 3).state == "stopped"


def test_missing_rank_is_named_and_a_silent_node_is_not_a_death():
    cols = collections("sleep-torchrun")
    without = [c for c in cols if c.host != "node3"]  # rank 2 was on node3
    live = evidence_from_nodes(without, job="x")
    assert live.missing == [2]
    assert live.collected.evidence.ranks[2].state == "missing"
    v = build(live.collected)
    assert v.cls == "dead-rank" and [o.rank for o in v.odd_ranks] == [2]
    # node3 did not answer: rank 2 may be there, so it is not called dead
    silent = evidence_from_nodes([*without, NodeAnswer("node3", None, "no answer within 25 s")], job="x")
    assert silent.missing == []
    v = build(silent.collected)
    assert v.cls != "dead-rank" and 2 not in [o.rank for o in v.odd_ranks]
    assert any(u.source == "node3" and "did not answer" in u.why for u in v.unreadable)


def _rank(pid: int, rank: int, state: str = "S", **kw) -> RankProcess:
    return RankProcess(pid=pid, host="h1", state=state, state_name={"S": "sleeping", "T": "stopped"}[state],
                       rank=rank, local_rank=rank, world_size=2, **kw)


def test_py_spy_errors_are_reasons_with_the_fix():
    c = NodeCollection(host="h1", collected_at="2026-01-01T00:00:00Z",
                       ranks=(_rank(11, 0, cuda_visible_devices="0,1"), _rank(12, 1, cuda_visible_devices="0,1")),
                       errors=(CollectError("ptrace-denied", "py-spy was refused ptrace on pid 11",
                                            fix="run hc as root, or give it CAP_SYS_PTRACE", pid=11, rank=0),
                               CollectError("py-spy-timeout", "py-spy dump of pid 12 took more than 10 s",
                                            fix="retry with a longer --timeout", pid=12)),
                       py_spy="/usr/bin/py-spy")
    ev = evidence_from_nodes([c], job="x").collected.evidence
    assert "CAP_SYS_PTRACE" in ev.ranks[0].stack_error and "ptrace" in ev.ranks[0].stack_error
    assert "longer --timeout" in ev.ranks[1].stack_error
    assert ev.ranks[0].gpu.startswith("GPU 0") and ev.ranks[1].gpu.startswith("GPU 1")
    missing = NodeCollection(host="h2", collected_at="2026-01-01T00:00:00Z", ranks=(_rank(13, 0),),
                             errors=(CollectError("py-spy-missing", "py-spy not found", fix="pip install py-spy"),))
    live = evidence_from_nodes([missing], job="x")
    assert any("pip install py-spy" in u.why for u in live.collected.evidence.unreadable)
    assert "pip install py-spy" in live.collected.evidence.ranks[0].stack_error
    v = build(live.collected)  # no stacks at all: a verdict, never a traceback
    assert v.cls


def test_debug_files_are_read_bounded_and_parsed(tmp_path):
    nccl = FIXTURES / "diagnose"
    some_log = next((p for p in sorted(nccl.rglob("*")) if p.is_file() and p.suffix in (".log", ".txt")), None)
    err = tmp_path / "error.json"
    err.write_text(json.dumps({"message": {"message": "ValueError: bad batch", "extraInfo": {
        "py_callstack": "Traceback ...", "timestamp": "1760000000"}}}))
    c = NodeCollection(host="h1", collected_at="2026-01-01T00:00:00Z", ranks=(
        _rank(11, 0, debug_files=DebugFiles(elastic_error=str(err), flight_recorder=str(tmp_path / "fr_0"),
                                            nccl_debug=str(some_log) if some_log else None)),
        _rank(12, 1, debug_files=DebugFiles(nccl_debug=str(tmp_path / "absent.log")))))
    live = evidence_from_nodes([c], job="x", fetch=local_fetcher)
    ev = live.collected.evidence
    assert [e.message for e in ev.error_files] == ["ValueError: bad batch"] and ev.error_files[0].rank == 0
    assert ev.error_files[0].source == f"h1:{err}"
    # a path a rank was given but has not written is not a file left unread (issue 19, item 8)
    assert not any("absent.log" in u.source for u in ev.unreadable)
    assert not any("fr_0" in u.source for u in ev.unreadable)  # a Flight Recorder dump is written only on demand
    # not fetched at all: listed, not read
    ev2 = evidence_from_nodes([c], job="x").collected.evidence
    assert any("not fetched" in u.why for u in ev2.unreadable)
    # the file cap
    ev3 = evidence_from_nodes([c], job="x", fetch=local_fetcher, max_files=1).collected.evidence
    assert sum("more than 1 debug files" in u.why for u in ev3.unreadable) == (3 if some_log else 2)


def test_fetch_script_round_trip_binary_and_cap(tmp_path):
    blob = tmp_path / "fr_dump_0"
    blob.write_bytes(bytes(range(256)) * 40)
    text = tmp_path / "nccl.log"
    text.write_text("h:1:1 [0] NCCL INFO hello\n" * 3)
    paths = [str(blob), str(text), str(tmp_path / "nope"), str(tmp_path / "with space")]
    r = run_command(fetch_argv(paths, max_bytes=1000), timeout_s=10)
    got = parse_fetched(r.stdout, paths)
    assert got[str(blob)] == (bytes(range(256)) * 40)[:1000]
    assert got[str(text)] == text.read_bytes()
    assert "no such file" in str(got[str(tmp_path / "nope")])
    assert isinstance(got[str(tmp_path / "with space")], str)


def test_parse_job_and_srun_argv():
    line = ("JobId=42 JobName=train UserId=u(1) JobState=RUNNING Reason=None NodeList=node[1-4] NumNodes=4 "
            "NumTasks=4 StartTime=2026-11-23T07:00:00 EndTime=Unknown StdErr=/j/42.err StdIn=/dev/null "
            "StdOut=/j/42.out")
    j = parse_job(line, "42")
    assert j is not None and j.running and j.nodes == "node[1-4]" and j.num_tasks == 4
    assert j.output_files == ["/j/42.out", "/j/42.err"]
    assert parse_job(line, "43") is None
    done = parse_job(line.replace("RUNNING", "COMPLETED"), "42")
    assert done is not None and not done.running
    argv = srun_collect_argv("srun", "42", "node2", ["hc", "diagnose", "collect", "--job", "42"])
    assert "--overlap" in argv and "--jobid=42" in argv and "--nodelist=node2" in argv and "--gres=none" in argv
    assert argv[-5:] == ["hc", "diagnose", "collect", "--job", "42"]


# ------------------------------------------------------------------- hc diagnose job (fake Slurm)


def fake_slurm(tmp_path: Path, show: str, rc: int = 0, srun_body: str = "exit 1") -> Path:
    scontrol = tmp_path / "scontrol"
    scontrol.write_text(f"#!/bin/sh\ncat <<'EOF'\n{show}\nEOF\nexit {rc}\n")
    srun = tmp_path / "srun"
    srun.write_text("#!/bin/sh\n" + srun_body + "\n")
    for f in (scontrol, srun):
        f.chmod(0o755)
    cfg = tmp_path / "hc.yaml"
    cfg.write_text(f"slurm:\n  scontrol: {scontrol}\n  srun: {srun}\n  remote_hc: {sys.executable} -m healthcheck\n"
                   "  retries: 1\n")
    return cfg


def test_job_that_does_not_exist(tmp_path):
    cfg = fake_slurm(tmp_path, "slurm_load_jobs error: Invalid job id specified", rc=1)
    r = run_hc("diagnose", "job", "999999", "--config", str(cfg))
    assert r.returncode == 4, r.stderr
    out = r.stdout.decode()
    assert out.count("\n") == 1 and "no such job" in out and "hc diagnose logs" in out


def test_job_that_has_ended_points_at_logs(tmp_path):
    cfg = fake_slurm(tmp_path, "JobId=7 JobName=t JobState=FAILED Reason=NonZeroExitCode NodeList=node1 "
                               "EndTime=2026-11-23T08:00:00 StdErr=/j/7.err StdOut=/j/7.out")
    r = run_hc("diagnose", "job", "7", "--config", str(cfg))
    assert r.returncode == 3, r.stderr
    out = r.stdout.decode()
    assert out.count("\n") == 1 and "has ended (FAILED" in out and "hc diagnose logs /j/7.out /j/7.err" in out


def test_job_without_slurm(tmp_path):
    cfg = tmp_path / "hc.yaml"
    cfg.write_text(f"slurm:\n  scontrol: {tmp_path}/no-scontrol\n")
    r = run_hc("diagnose", "job", "5", "--config", str(cfg))
    assert r.returncode == 4 and b"not found" in r.stderr and b"Traceback" not in r.stderr


def _gone(pid: int) -> bool:
    """The process has ended (a zombie not yet reaped counts: it runs nothing)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_job_with_a_hung_scontrol_ends_within_its_timeout_and_leaves_nothing(tmp_path):
    """`--timeout` bounds the Slurm query too: with Slurm's defaults (15 s per call, 3
    attempts) a hung scontrol held `hc diagnose job --timeout 2` 47 s (issue 18, D.12)."""
    pids = tmp_path / "scontrol.pids"
    cfg = fake_slurm(tmp_path, "JobId=7 JobName=t JobState=FAILED NodeList=node1")
    cfg.write_text(cfg.read_text().replace("  retries: 1\n", ""))  # the defaults: 3 attempts of 15 s
    start = time.monotonic()
    assert run_hc("diagnose", "job", "7", "--config", str(cfg), "--timeout", "2").returncode == 3
    baseline = time.monotonic() - start  # hc's own start and a prompt answer
    scontrol = tmp_path / "scontrol"
    scontrol.write_text(f"#!/bin/sh\necho $$ >> {pids}\nexec sleep 1000\n")
    start = time.monotonic()
    r = run_hc("diagnose", "job", "7", "--config", str(cfg), "--timeout", "2", timeout=120)
    elapsed = time.monotonic() - start - baseline
    assert r.returncode == 3 and b"Traceback" not in r.stderr, r.stderr
    assert "Slurm did not answer" in r.stdout.decode() and "timed out" in r.stdout.decode()
    assert elapsed < 3 * 2, elapsed  # the retry budget would be 45 s and more
    started = [int(p) for p in pids.read_text().split()]
    assert started
    deadline = time.monotonic() + 10
    while not all(_gone(p) for p in started) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert all(_gone(p) for p in started), started


def test_job_with_a_node_that_does_not_answer(tmp_path):
    """node1 answers with a real collection (stop-torchrun's), node2 hangs past the bound,
    node3's step fails: a verdict within the bound naming the silent nodes, never a hang."""
    good = LIVE / "stop-torchrun"
    body = textwrap.dedent(f"""\
        for a; do case "$a" in --nodelist=*) node="${{a#--nodelist=}}";; esac; done
        case "$node" in
          node1) cat {good}/collect-node1.json | tr -d '\\n'; echo;;
          node2) exec sleep 60;;
          node3) echo "srun: error: Unable to create step for job 9: Requested nodes are busy" >&2; exit 1;;
          node4) cat {good}/collect-node4.json | tr -d '\\n'; echo;;
        esac""")
    cfg = fake_slurm(tmp_path, "JobId=9 JobName=t JobState=RUNNING Reason=None NodeList=node[1-4] NumTasks=4",
                     srun_body=body)
    start = time.monotonic()
    r = run_hc("diagnose", "job", "9", "--config", str(cfg), "--timeout", "1", "--startup-timeout", "2",
               "--format", "json", timeout=60)
    elapsed = time.monotonic() - start
    v = json.loads(r.stdout)
    assert r.returncode in (0, 3), r.stderr
    assert elapsed < 15, elapsed
    why = {u["source"]: u["why"] for u in v["unreadable"]}
    assert "no answer within" in why["node2"] and "Requested nodes are busy" in why["node3"]
    # ranks 1 and 2 may be on the silent nodes: not called dead
    assert v["class"] != "dead-rank"
    assert 3 in [o["rank"] for o in v.get("odd_ranks", [])] or v["class"] == "unknown"


def test_pids_of_this_machine(tmp_path):
    """Two real 'ranks' (RANK/WORLD_SIZE set) of a 3-rank world, one SIGSTOPped: rank 2 is
    missing (dead-rank), rank 1 stopped; by pid and by --local."""
    procs = []
    try:
        for rank in (0, 1):
            env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "3", "LOCAL_RANK": str(rank),
                   "HC_TEST_MARK": str(tmp_path)}
            procs.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], env=env))
        time.sleep(0.5)
        os.kill(procs[1].pid, signal.SIGSTOP)
        r = run_hc("diagnose", "pids", *(str(p.pid) for p in procs), "--format", "json", "--timeout", "10")
        assert r.returncode == 0, r.stderr
        v = json.loads(r.stdout)
        assert v["class"] == "dead-rank" and [o["rank"] for o in v["odd_ranks"]] == [2]
        states = {row["rank"]: row.get("state") for row in v["ranks"]}
        assert states[1] == "stopped" and states[2] == "missing"
        r = run_hc("diagnose", "pids", "--local", "--format", "json", "--timeout", "10")
        v = json.loads(r.stdout)
        assert r.returncode in (0, 3), r.stderr
        seen = {row["pid"] for row in v["ranks"] if row.get("pid")} | {
            int(u["source"].rsplit(" ", 1)[1]) for u in v.get("unreadable", []) if ": pid " in u["source"]}
        assert seen >= {p.pid for p in procs}  # (other rank processes on a shared machine claim ranks too)
        r = run_hc("diagnose", "pids", "--local", "1")
        assert r.returncode == 4 and b"not both" in r.stderr  # hc maps usage errors to 4
    finally:
        for p in procs:
            os.kill(p.pid, signal.SIGCONT)
            p.kill()
            p.wait(10)


def test_torchrun_whose_rendezvous_port_is_taken(tmp_path):
    """A real torchrun (c10d rendezvous at 127.0.0.1:PORT) while another process holds
    PORT: no rank starts; `hc diagnose pids AGENT` reads the agent's stack (waiting in
    the store's creation) and names the holder. Runs where torchrun is installed."""
    torchrun = Path(sys.executable).parent / "torchrun"
    if not torchrun.exists():
        pytest.skip("torchrun not installed")
    import socket as _socket

    holder = _socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(8)
    port = holder.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    agent = subprocess.Popen([str(torchrun), "--nnodes=1", "--nproc-per-node=1", "--rdzv-backend=c10d",
                              f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=hc-test", "--max-restarts=0",
                              "-m", "json.tool", os.devnull], env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        v: dict = {}
        for _ in range(20):  # torch's import takes seconds before the agent reaches its rendezvous
            time.sleep(2)
            # the agent's pid, not --local: another test's job on this machine (an xdist worker
            # beside this one) would be a second world in the same answer
            r = run_hc("diagnose", "pids", str(agent.pid), "--format", "json", "--timeout", "15")
            v = json.loads(r.stdout)
            if "held by" in v.get("summary", ""):
                break
        assert v["class"] == "init-failure" and not v.get("odd_ranks"), v.get("summary")
        assert f"port {port} on " in v["summary"] and f"held by pid {os.getpid()}" in v["summary"], v["summary"]
        assert any(f"torchrun agent pid {agent.pid}" in e["text"] for f in v["findings"] for e in f["lines"])
    finally:
        agent.kill()
        agent.wait(10)
        holder.close()


def test_node_collection_json_is_what_job_reads():
    from healthcheck.diagnose.live import decode_node

    raw = (LIVE / "stop-srun" / "collect-node1.json").read_text()
    line = json.dumps(json.loads(raw))
    assert decode_node("node1", "srun: warning: noise\n" + line + "\n") == msgspec.json.decode(
        line, type=NodeCollection)
    assert decode_node("node1", "garbage\n{not json") is None


# ------------------------------------------------------------------------------ kernel events in the job's window


def _iso(t: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S,%f+00:00")


class KernelJob:
    """Two real 'ranks' of job JOB (SLURM_JOB_ID, RANK/WORLD_SIZE set) and a kernel log file
    the collector reads through its injectable source, as it reads /dev/kmsg."""

    def __init__(self, tmp_path: Path) -> None:
        self.job = str(800_000_000 + os.getpid() % 100_000)
        self.log = tmp_path / "kern.log"
        self.procs: list[subprocess.Popen] = []
        for rank in (0, 1):
            env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
                   "SLURM_JOB_ID": self.job}
            self.procs.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], env=env,
                                               start_new_session=True))
        time.sleep(0.3)
        self.pids = [p.pid for p in self.procs]

    def source(self) -> tuple[str, object]:
        return ("file " + str(self.log), lambda: (self.log.read_text(), ""))

    def collect(self, lines: list[str]) -> NodeCollection:
        from healthcheck.diagnose.collect import collect_node

        self.log.write_text("".join(line + "\n" for line in lines))
        return collect_node(job_id=self.job, py_spy=None, host="h1", timeout_s=10,
                            kernel_sources=[self.source()])  # type: ignore[list-item]

    def close(self) -> None:
        for p in self.procs:
            p.kill()
            p.wait(10)


@pytest.fixture
def kjob(tmp_path):
    j = KernelJob(tmp_path)
    yield j
    j.close()


def _old_lines(pid: int) -> list[str]:
    """An OOM kill naming the pid and an Xid, both an hour before the job started (pid reuse, an
    earlier job): never this job's evidence."""
    old = time.time() - 3600
    return [f"{_iso(old)} Out of memory: Killed process {pid} (python3) total-vm:1000kB, anon-rss:900kB",
            f"{_iso(old + 1)} NVRM: Xid (PCI:0000:19:00): 79, pid={pid}, name=python3, GPU has fallen off the bus."]


def test_an_oom_kill_of_a_rank_pid_in_the_window_is_a_dead_rank_naming_it(kjob):
    now = time.time()
    c = kjob.collect([*_old_lines(kjob.pids[0]),
                      f"{_iso(now - 30)} kernel: bridge: port 1(veth0) entered blocking state",
                      f"{_iso(now)} oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,"
                      f"oom_memcg=/slurm/uid_0/job_{kjob.job},task_memcg=/slurm/uid_0/job_{kjob.job}/step_0/task_1,"
                      f"task=python3,pid={kjob.pids[1]},uid=0",
                      f"{_iso(now)} Memory cgroup out of memory: Killed process {kjob.pids[1]} (python3) "
                      "total-vm:9000000kB, anon-rss:8000000kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:20kB "
                      "oom_score_adj:0"])
    k = c.kernel
    assert k is not None and k.source == f"file {kjob.log}" and k.since_from.startswith("process ")
    assert abs(k.since - now) < 30  # the ranks' start, from /proc/PID/stat
    assert [(e.kind, e.pid, e.job) for e in k.events] == [("oom-kill", kjob.pids[1], kjob.job)]
    assert k.dropped_before == 2  # the hour-old OOM and Xid
    live = evidence_from_nodes([c], job="kernel")
    (ke,) = live.collected.evidence.kernel
    assert ke.source == f"h1: file {kjob.log}" and ke.line == 5 and ke.host == "h1"
    v = build(live.collected)
    assert v.cls == "dead-rank" and [(o.rank, o.pid) for o in v.odd_ranks] == [(1, kjob.pids[1])], v.summary
    assert "OOM killer" in v.summary and v.confidence == "high"
    assert any("Killed process" in e.text and e.rank == 1 for f in v.findings for e in f.lines)


def test_an_xid_in_the_window_is_a_gpu_failure(kjob):
    now = time.time()
    c = kjob.collect([*_old_lines(kjob.pids[1]),
                      f"{_iso(now + 1)} NVRM: Xid (PCI:0000:3b:00): 48, pid={kjob.pids[0]}, name=python3, "
                      "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer."])
    assert c.kernel is not None and [(e.kind, e.xid, e.pid, e.pci_bus_id) for e in c.kernel.events] == [
        ("xid", 48, kjob.pids[0], "0000:3b:00.0")]
    v = build(evidence_from_nodes([c], job="kernel").collected)
    assert v.cls == "gpu-failure" and [o.rank for o in v.odd_ranks] == [0], v.summary
    assert "Xid" in v.summary and v.confidence == "high"
    assert v.first_failure is not None and "Xid" in v.first_failure.text


def test_kernel_events_before_the_jobs_start_are_ignored(kjob):
    c = kjob.collect(_old_lines(kjob.pids[0]) + _old_lines(kjob.pids[1]))
    assert c.kernel is not None and c.kernel.events == () and c.kernel.dropped_before == 4
    ev = evidence_from_nodes([c], job="kernel").collected.evidence
    assert ev.kernel == []
    v = build(evidence_from_nodes([c], job="kernel").collected)
    assert v.cls not in ("dead-rank", "gpu-failure")
    # the same lines with the window given earlier than they are: in it
    from healthcheck.diagnose.collect import collect_node

    c = collect_node(job_id=kjob.job, py_spy=None, host="h1", since=time.time() - 7200,
                     kernel_sources=[kjob.source()])  # type: ignore[list-item]
    assert c.kernel is not None and c.kernel.since_from == "argument" and len(c.kernel.events) == 4
    assert build(evidence_from_nodes([c], job="kernel").collected).cls == "gpu-failure"


def test_an_unreadable_kernel_log_is_noted_not_an_error(kjob):
    from healthcheck.core.facts import ProbeError
    from healthcheck.diagnose.collect import collect_node

    def refused() -> tuple[str, str]:
        raise ProbeError("unreadable", "/dev/kmsg: Operation not permitted")

    c = collect_node(job_id=kjob.job, py_spy=None, host="h1", kernel_sources=[("/dev/kmsg", refused)])
    assert c.kernel is not None and c.kernel.source is None and "CAP_SYSLOG" in c.kernel.note
    assert not any("kernel" in e.message for e in c.errors) and len(c.ranks) == 2
    ev = evidence_from_nodes([c], job="kernel").collected.evidence
    assert any(u.source == "h1: kernel log" and "Operation not permitted" in u.why for u in ev.unreadable)


def _node(host: str, ranks: tuple[RankProcess, ...], events: tuple, job: str = "55") -> NodeCollection:
    from healthcheck.diagnose.collect import KernelLog

    return NodeCollection(host=host, collected_at="2026-01-01T00:00:00Z", job_id=job, ranks=ranks,
                          kernel=KernelLog(since=1.0e9, source="/dev/kmsg", lines=100, events=events))


def test_an_oom_killed_rank_that_is_gone_is_named_from_the_kill():
    """A rank the OOM killer took has no process left, so no live pid to match: the kill (this
    job's cgroup, or a Python process) is given to the one rank missing from the job."""
    from healthcheck.diagnose.collect import KernelLine

    def r(pid: int, rank: int, host: str) -> RankProcess:
        return RankProcess(pid=pid, host=host, state="S", state_name="sleeping", rank=rank, world_size=4)

    other_job = KernelLine("oom-kill", "Memory cgroup out of memory: Killed process 700 (python3)", 3, 1.1e9,
                           pid=700, process="python3", job="99")
    ours = KernelLine("oom-kill", "Out of memory: Killed process 931 (pt_main_thread)", 9, 1.1e9, pid=931,
                      process="pt_main_thread")
    nodes = [_node("n1", (r(101, 0, "n1"), r(102, 1, "n1")), ()),
             _node("n2", (r(201, 3, "n2"),), (other_job, ours))]
    live = evidence_from_nodes(nodes, job="slurm job 55")
    assert live.missing == [2]
    ev = live.collected.evidence
    assert [k.pid for k in ev.kernel] == [931]  # another job's kill is not this job's evidence
    v = build(live.collected)
    assert v.cls == "dead-rank" and [(o.rank, o.host, o.pid) for o in v.odd_ranks] == [(2, "n2", 931)], v.summary
    assert "OOM killer" in v.summary and v.confidence == "high"
    # nothing missing: an unknown process's OOM kill is no evidence of this job
    stray = KernelLine("oom-kill", "Out of memory: Killed process 932 (java)", 4, 1.1e9, pid=932, process="java")
    full = [_node("n1", (r(101, 0, "n1"), r(102, 1, "n1")), (stray,)), _node("n2", (r(201, 2, "n2"), r(202, 3, "n2")), ())]
    live = evidence_from_nodes(full, job="slurm job 55")
    assert live.collected.evidence.kernel == [] and build(live.collected).cls != "dead-rank"


def test_collect_args_pass_the_window():
    from healthcheck.diagnose.live import collect_args

    assert collect_args("7", timeout_s=15) == ["diagnose", "collect", "--job", "7", "--timeout", "15"]
    assert collect_args("7", timeout_s=15, since=1700000000.5)[-2:] == ["--since", "1700000000.500"]


def test_the_jobs_start_sets_every_nodes_kernel_log_window():
    """scontrol's StartTime (local time, no zone) becomes --since on every node's helper, a
    minute early for clocks that disagree; no StartTime, no --since (each node dates its own)."""
    import datetime

    from healthcheck.diagnose.live import SlurmJob, collect_args

    job = SlurmJob(job_id="7", state="RUNNING", nodes="n[1-2]", start="2026-11-23T08:07:23")
    expected = datetime.datetime(2026, 11, 23, 8, 7, 23).timestamp() - 60
    assert job.start_epoch == expected
    args = collect_args("7", timeout_s=20, since=job.start_epoch)
    assert args[args.index("--since") + 1] == f"{expected:.3f}"
    for start in ("", "Unknown", "None", "2026-13-40T99:00:00"):
        assert SlurmJob(job_id="7", start=start).start_epoch is None
    assert "--since" not in collect_args("7", timeout_s=20, since=None)


# ------------------------------------------------------------------- a batch job's own output


def test_job_output_read_live_turns_gloo_aborts_into_the_size_mismatch():
    """Live, the rank gloo's size check aborted is only 'gone'; the job's output (read at
    its end on the batch host) says why: the verdict is the mismatch. One gloo size report
    names two ranks (the reporter and the ring neighbour it receives from) and no majority,
    so the two are said and neither is named the culprit (diagnose/ringsize.py)."""
    out = LIVE / "size-torchrun" / "torchrun-output.txt"
    alone = build(evidence_from_nodes(collections("size-torchrun"), job="x").collected)
    assert (alone.cls, [o.rank for o in alone.odd_ranks]) == ("dead-rank", [1])
    live = evidence_from_nodes(collections("size-torchrun"), job="x", outputs=[("node1", str(out))],
                               output_fetch=functools.partial(local_fetcher, tail=True))
    v = build(live.collected)
    assert (v.cls, [o.rank for o in v.odd_ranks]) == ("shape-mismatch", []), v.summary
    assert "ranks 0 and 1 disagree" in v.summary
    assert any(e.source.startswith(f"node1:{out}") for f in v.findings for e in f.lines)
    # unreachable output is listed, never fatal
    gone = evidence_from_nodes(collections("size-torchrun"), job="x", outputs=[("node1", "/nonexistent/job.out")],
                               output_fetch=functools.partial(local_fetcher, tail=True)).collected.evidence
    assert any(u.source == "node1:/nonexistent/job.out" and "job output" in u.why for u in gone.unreadable)
    unfetched = evidence_from_nodes(collections("size-torchrun"), job="x",
                                    outputs=[("node1", str(out))]).collected.evidence
    assert any("not fetched" in u.why for u in unfetched.unreadable)


def test_output_fetch_keeps_the_end(tmp_path):
    f = tmp_path / "slurm-7.out"
    f.write_bytes(b"".join(b"line %d\n" % i for i in range(5000)))
    data = f.read_bytes()
    got = local_fetcher("h", [str(f)], max_bytes=100, tail=True)[str(f)]
    assert got == data[-100:]
    r = run_command(fetch_argv([str(f)], max_bytes=100, tail=True), timeout_s=10)
    assert parse_fetched(r.stdout, [str(f)])[str(f)] == data[-100:]
    assert local_fetcher("h", [str(f)], max_bytes=100)[str(f)] == data[:100]


def test_parse_job_batch_host():
    line = ("JobId=42 JobName=train JobState=RUNNING NodeList=node[1-4] BatchFlag=1 BatchHost=node1 "
            "StartTime=2026-11-23T07:00:00 StdErr=/j/42.out StdOut=/j/42.out")
    j = parse_job(line, "42")
    assert j is not None and j.batch_host == "node1" and j.output_files == ["/j/42.out"]
    interactive = parse_job("JobId=43 JobState=RUNNING NodeList=node1 BatchFlag=0", "43")
    assert interactive is not None and interactive.batch_host == "" and interactive.output_files == []


# ------------------------------------------------------------------- launchers whose ranks never started


def test_launcher_endpoint_from_torchrun_argv():
    from healthcheck.diagnose.collect import launcher_endpoint

    assert launcher_endpoint(["python", "torchrun", "--rdzv-endpoint=10.0.0.1:29400", "x.py"]) == ("10.0.0.1:29400",
                                                                                                    29400)
    assert launcher_endpoint(["torchrun", "--rdzv_endpoint", "node1:1234"]) == ("node1:1234", 1234)
    assert launcher_endpoint(["torchrun", "--master-addr", "n1", "--master_port=29500"]) == ("n1:29500", 29500)
    assert launcher_endpoint(["torchrun", "--rdzv-endpoint=node1"]) == ("node1", None)  # torch's default port
    assert launcher_endpoint(["torchrun", "x.py"]) == ("", None)


def test_the_listener_of_a_port_and_its_process():
    import socket as _socket

    from healthcheck.diagnose.collect import listening_inodes, socket_owner

    s = _socket.socket()
    try:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        inodes = listening_inodes(port)
        assert inodes and socket_owner(inodes) == os.getpid()
    finally:
        s.close()
    assert listening_inodes(port) == set() and socket_owner(set()) is None


def _launcher_collection(**holder) -> NodeCollection:
    from healthcheck.diagnose.collect import LauncherProcess, PortHolder

    return NodeCollection(host="node1", collected_at="2026-01-01T00:00:00Z", launchers=(LauncherProcess(
        pid=500, host="node1", state="S", command="python torchrun --rdzv-endpoint=10.0.0.1:29400 train.py",
        endpoint="10.0.0.1:29400", port=29400, waiting_in="_create_tcp_store (c10d_rendezvous_backend.py:156)",
        port_holder=PortHolder(port=29400, **holder) if holder else None),),
        errors=(CollectError("no-ranks", "no Python rank process on node1"),))


def test_agents_without_ranks_and_a_foreign_port_holder_are_an_init_failure():
    taken = build(evidence_from_nodes([_launcher_collection(pid=77, command="nc -l 29400")], job="x").collected)
    assert (taken.cls, taken.confidence, taken.odd_ranks) == ("init-failure", "high", [])
    assert "port 29400 on node1 is held by pid 77 (nc -l 29400)" in taken.summary
    # the agent hosting its own store is as it should be: the agents wait in the rendezvous
    own = build(evidence_from_nodes([_launcher_collection(pid=500, command="torchrun", is_launcher=True)],
                                    job="x").collected)
    assert own.cls == "init-failure" and "held by" not in own.summary and "wait in the rendezvous" in own.summary
    assert own.confidence == "medium"
    # an answering rank elsewhere means the launchers are not the story
    alive = NodeCollection(host="node2", collected_at="2026-01-01T00:00:00Z", ranks=(_rank(11, 0),))
    v = build(evidence_from_nodes([_launcher_collection(pid=77, command="nc"), alive], job="x").collected)
    assert "held by" not in v.summary
