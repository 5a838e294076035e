"""Live collection (`healthcheck.diagnose.collect`) of real hung gloo jobs across the rig's hosts.

tests/rig/jobs/hang_job.py runs 4 ranks, one per namespace host, started by torchrun (a
c10d rendezvous at node1, one torchrun inside every host) or by srun on the rig's real
Slurm. One rank misbehaves (see the job's docstring): (a) skips a collective, (b) sends
a tensor of another size, (c) is SIGKILLed by this test, (d) sleeps in a named function,
(e) is SIGSTOPped by this test, (f) the master port is taken. Where one job can show
several of these in turn (hang_job's --then: (d), then (e), then (c) under torchrun; (d),
then (e) under srun), one job does: starting four ranks (and, under torchrun, four agents),
each importing torch, is most of a test's time, and each phase has one odd rank, so each
collection is the one a job of that scenario alone gives. When the job is where it
hangs, this test runs the collector on every host through the rig's sshd (`python -m
healthcheck diagnose collect --job ID | --pids ...`, the venv's Python; the hosts share
this machine's pid namespace and files, so the collector's network-namespace filter is
what keeps each host to its own ranks), all hosts at once, and asserts what a diagnosis
needs: every rank found with its number and host, healthy ranks inside a c10d collective,
the odd one where it is (another collective, the named function, state T, absent),
the failure text in the logs; and that collecting a 4-rank job takes less than 30 s
(the issue's target; the time is printed). Then the same job is diagnosed end to end
(`hc diagnose hosts` / `hc diagnose job`): the verdict names the odd rank and the class,
also within 30 s; starting a job is most of a test's time, so one job serves both (the
other diagnose scenarios: test_diagnose_job_rig.py).

Every job is ended by this test, by pid (SIGCONT, then SIGKILL to the ranks it started;
the launchers then exit), and the test asserts no process of the job is left.

With HC_SAVE_LIVE_FIXTURES=1 each scenario's per-rank logs, the launcher's labelled
output, py-spy's own JSON per rank and the collections are written to
tests/fixtures/diagnose-live/<scenario>-<launcher>/ (see the README there).
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from support import run_hc

from healthcheck.diagnose.collect import NodeCollection, decode_collection
from healthcheck.parsers.py_spy import parse_py_spy
from healthcheck.runners.launch import Launch, LaunchResult, launch, srun_launch, torchrun_launch

pytestmark = pytest.mark.rig

NODES = ["node1", "node2", "node3", "node4"]
BIN = Path(sys.executable).parent
PYTHON = sys.executable
TORCHRUN = BIN / "torchrun"
JOB = Path(__file__).resolve().parents[1] / "rig" / "jobs" / "hang_job.py"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "diagnose-live"
LAUNCH_TIMEOUT_S = 180  # backstop: launch() kills every rank after this
HANG_WAIT_S = 90  # for every rank to reach the step where it hangs (4 torch imports on a small machine)
COLLECT_BOUND_S = 30.0  # the target for a 4-rank job
BOUND_S = 30.0  # the same target for `hc diagnose`, called to verdict
GLOO_ENV = {"GLOO_SOCKET_IFNAME": "eth0"}
_PORTS = itertools.count(random.randrange(32100, 32700, 50))


def clean_env() -> dict[str, str]:
    prefixes = ("SLURM_", "SBATCH_", "SALLOC_", "SRUN_", "OMPI_", "PMIX_", "PMI_", "TORCHELASTIC_")
    names = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    return {k: v for k, v in os.environ.items() if not k.startswith(prefixes) and k not in names}


@dataclass
class Job:
    scenario: str
    launcher: str
    out: Path
    odd: int
    results: dict[str, LaunchResult] = field(default_factory=dict)
    errors: dict[str, BaseException] = field(default_factory=dict)
    threads: list[threading.Thread] = field(default_factory=list)
    extra_pids: list[int] = field(default_factory=list)  # processes the test started beside the job

    def rank_info(self) -> dict[int, dict]:
        out = {}
        for f in self.out.glob("rank*.json"):
            try:
                d = json.loads(f.read_text())
            except (OSError, ValueError):
                continue
            out[d["rank"]] = d
        return out

    def log(self, rank: int) -> str:
        f = self.out / f"rank{rank}.log"
        return f.read_text(errors="replace") if f.exists() else ""

    def launcher_output(self) -> str:
        return "\n".join(f"===== {host}: rc {r.returncode} timed_out {r.timed_out}\n{r.stdout}\n{r.stderr}"
                         for host, r in sorted(self.results.items()))


def _start(job: Job, host: str, spec: Launch, env: dict[str, str], cwd: str | None = None) -> None:
    def one() -> None:
        try:
            job.results[host] = launch(spec, timeout_s=LAUNCH_TIMEOUT_S, env=env, cwd=cwd, grace_s=2.0)
        except BaseException as exc:  # reported by the test, not lost in the thread
            job.errors[host] = exc

    t = threading.Thread(target=one, daemon=True, name=f"{job.launcher}-{host}")
    t.start()
    job.threads.append(t)


def program(job: Job, *extra: str) -> list[str]:
    return [PYTHON, str(JOB), "--scenario", job.scenario, "--odd-rank", str(job.odd), "--out", str(job.out),
            "--at", "3", *extra]


def start_torchrun(net, tmp_path: Path, scenario: str, odd: int, *extra: str, port: int | None = None) -> Job:
    job = Job(scenario, "torchrun", tmp_path / f"{scenario}-torchrun-{uuid.uuid4().hex[:6]}", odd)
    job.out.mkdir()
    endpoint = f"{net.host('node1').addr}:{port or next(_PORTS)}"
    rdzv_id = f"hcdg-{uuid.uuid4().hex[:10]}"
    for host in NODES:
        spec = torchrun_launch(program(job, *extra), nproc_per_node=1, nnodes=len(NODES), rdzv_endpoint=endpoint,
                               rdzv_id=rdzv_id, torchrun=str(TORCHRUN), no_python=True,
                               log_dir=str(job.out / f"torchrun-{host}"), shutdown_timeout_s=3,
                               extra=["--rdzv-conf=join_timeout=60", "--max-restarts=0"], env=GLOO_ENV)
        _start(job, host, replace(spec, argv=(*net.nsenter_argv(host), *spec.argv)), clean_env())
    return job


def start_srun(slurm, net, tmp_path: Path, scenario: str, odd: int, port: int | None = None, *extra: str) -> Job:
    job = Job(scenario, "srun", tmp_path / f"{scenario}-srun-{uuid.uuid4().hex[:6]}", odd)
    job.out.mkdir()
    env = {**GLOO_ENV, "MASTER_ADDR": net.host("node1").addr, "MASTER_PORT": str(port or next(_PORTS))}
    spec = srun_launch(program(job, *extra), nodes=len(NODES), ntasks=len(NODES), ntasks_per_node=1,
                       job_name=f"hcdg-{scenario}", immediate_s=30, env=env)
    _start(job, "srun", spec, {**clean_env(), **slurm.env}, cwd=str(slurm.jobs_dir))
    return job


@contextlib.contextmanager
def hold_port(net, host: str, port: int) -> Iterator[subprocess.Popen]:
    """Another process listening on `port` on `host` (0.0.0.0) while the block runs; ended by pid."""
    holder = subprocess.Popen(
        [*net.nsenter_argv(host), PYTHON, "-c",
         "import socket,sys,time; s=socket.socket(); s.bind(('0.0.0.0', int(sys.argv[1]))); s.listen(64); "
         "print('held', flush=True); time.sleep(150)", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"held"
        yield holder
    finally:
        holder.kill()
        holder.wait(10)


def wait_until(what: str, check, timeout: float, job: Job) -> None:
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        if check():
            return
        if job.errors:
            raise AssertionError(f"launcher failed: {job.errors}")
        if job.threads and not any(t.is_alive() for t in job.threads):
            break
        time.sleep(0.25)
    raise AssertionError(f"{job.scenario}/{job.launcher}: {what} did not happen within {timeout:g} s\n"
                         + "\n".join(job.log(r) for r in range(len(NODES))) + job.launcher_output()[-4000:])


def wait_hung(job: Job, settle_s: float = 1.5, phase: int = 1) -> None:
    """Every rank in the step where the job's `phase` (hang_job's --then: 2, 3, ...) hangs."""
    marker = f"hung{phase if phase > 1 else ''}"
    wait_until(f"every rank reaching the hang step of phase {phase}",
               lambda: all((job.out / f"rank{r}.{marker}").exists() for r in range(len(NODES))), HANG_WAIT_S, job)
    time.sleep(settle_s)  # from the marker into the collective


def release(job: Job, phase: int) -> None:
    """End the job's `phase`: its odd rank leaves its wait and the job goes on to the next."""
    (job.out / f"release{phase}").touch()


def collect(net, hosts_args: dict[str, list[str]]) -> tuple[dict[str, NodeCollection], float]:
    """Run the collector on each host over SSH, all at once; ({host: collection}, wall seconds)."""
    out: dict[str, NodeCollection] = {}
    failures: dict[str, str] = {}

    def one(host: str, args: list[str]) -> None:
        argv = [*net.ssh_argv(host), PYTHON, "-m", "healthcheck", "diagnose", "collect", "--raw", "--timeout", "20",
                *args]
        r = subprocess.run(argv, capture_output=True, timeout=45, check=False)
        try:
            out[host] = decode_collection(r.stdout)
        except Exception as exc:  # reported below
            failures[host] = f"rc {r.returncode}: {exc}\n{r.stdout[-2000:]!r}\n{r.stderr[-2000:]!r}"

    start = time.monotonic()
    threads = [threading.Thread(target=one, args=(h, a), daemon=True) for h, a in hosts_args.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    elapsed = time.monotonic() - start
    assert not failures, failures
    return out, elapsed


# ------------------------------------------------------------------------------ hc diagnose, on the same job
# Each hung job here is also diagnosed end to end (`hc diagnose job` for srun, `hc diagnose
# hosts` for torchrun: what an operator runs) once its collection is asserted: starting four
# torch ranks and waiting for the hang is most of a test's time, and the collector only reads
# the job (py-spy; a stopped rank stays stopped), so one job serves both. The verdict must
# name the odd rank and the class within BOUND_S of being called, as test_diagnose_job_rig's own.


def site_config(net, tmp_path: Path) -> Path:
    known = tmp_path / "known_hosts"
    shutil.copy(net.known_hosts, known)
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text("".join(line for line in net.ssh_config.read_text().splitlines(keepends=True)
                                  if "UserKnownHostsFile" not in line))
    helper = f"{PYTHON} -m healthcheck"
    cfg = tmp_path / "hc.yaml"
    cfg.write_text(f"ssh:\n  config_file: {ssh_config}\n  known_hosts: [{known}]\n  identity_files: [{net.client_key}]\n"
                   f"  use_agent: false\n  connect_timeout_s: 3\n  remote_hc: {helper}\n"
                   f"slurm:\n  remote_hc: {helper}\n")
    return cfg


def diagnose(*args: str, env: dict[str, str] | None = None) -> tuple[dict, float, int]:
    start = time.monotonic()
    r = run_hc("diagnose", *args, "--format", "json", env=env, timeout=90)
    elapsed = time.monotonic() - start
    assert r.stdout.strip().startswith(b"{"), (r.returncode, r.stdout[-2000:], r.stderr[-3000:])
    assert b"Traceback" not in r.stderr, r.stderr
    return json.loads(r.stdout), elapsed, r.returncode


def check(v: dict, elapsed: float, rc: int, classes: tuple[str, ...], odd: int, what: str) -> None:
    named = [o["rank"] for o in v.get("odd_ranks", [])]
    print(f"{what}: {v['class']} ({v['confidence']}) odd {named} in {elapsed:.1f} s: {v['summary'][:160]}")
    assert v["class"] in classes and named == [odd], (v["summary"], v.get("notes"), v.get("unreadable"))
    assert rc == 0
    assert elapsed < BOUND_S, elapsed


def job_id(job: Job) -> str:
    wait_until("rank 0 writing its info", lambda: 0 in job.rank_info(), 90, job)
    return str(job.rank_info()[0]["slurm_job_id"])


def hosts(net, tmp_path: Path) -> tuple[dict, float, int]:
    """`hc diagnose hosts node[1-4]`: the torchrun-launched job, found on its hosts over SSH."""
    return diagnose("hosts", "node[1-4]", "--config", str(site_config(net, tmp_path)))


def diagnose_job(slurm, net, tmp_path: Path, job: Job, *extra: str) -> tuple[dict, float, int]:
    """`hc diagnose job ID`: the srun-launched job, collected through Slurm."""
    return diagnose("job", job_id(job), *extra, "--config", str(site_config(net, tmp_path)), env=slurm.env)


def by_job(job_id: str) -> dict[str, list[str]]:
    return {h: ["--job", job_id] for h in NODES}


def by_pids(job: Job) -> dict[str, list[str]]:
    info = job.rank_info()
    hosts: dict[str, list[str]] = {}
    for d in info.values():
        hosts.setdefault(d["host"], []).append(str(d["pid"]))
    return {h: ["--pids", *pids] for h, pids in hosts.items()}


def ranks_of(cols: dict[str, NodeCollection]) -> dict[int, tuple[str, object]]:
    out: dict[int, tuple[str, object]] = {}
    for host, c in cols.items():
        for r in c.ranks:
            assert r.rank is not None and r.rank not in out, (r.rank, host, out)
            out[r.rank] = (host, r)
    return out


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2:stat.rfind(b")") + 3] not in (b"Z", b"X")


def job_processes(job: Job) -> list[int]:
    """Live processes whose command line names this job's output directory (ranks, agents, srun)."""
    marker = str(job.out).encode()
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if marker in cmd and _alive(int(entry)):
                pids.append(int(entry))
    return pids


def end_job(job: Job) -> None:
    """Stop the job: its ranks (by the pids they wrote), SIGCONT then SIGKILL; the launchers
    then exit. Assert nothing of it is left."""
    pids = [d["pid"] for d in job.rank_info().values()] + job.extra_pids
    for sig in (signal.SIGCONT, signal.SIGKILL):
        for pid in pids:
            if _alive(pid):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
    for t in job.threads:
        t.join(LAUNCH_TIMEOUT_S + 30)
    deadline = time.monotonic() + 15
    while job_processes(job) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = job_processes(job)
    assert not left, f"processes of {job.scenario}/{job.launcher} left behind: {left}"
    assert not [t.name for t in job.threads if t.is_alive()]


def save_fixture(job: Job, cols: dict[str, NodeCollection], elapsed: float, note: str,
                 phase: tuple[str, int] | None = None) -> None:
    """The collection as tests/fixtures/diagnose-live/<scenario>-<launcher> (`phase`: the
    scenario and odd rank of the job's phase, where it has several)."""
    scenario, odd = phase or (job.scenario, job.odd)
    if os.environ.get("HC_SAVE_LIVE_FIXTURES") != "1":
        return
    d = FIXTURES / f"{scenario}-{job.launcher}"
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    for f in sorted(job.out.glob("rank*.log")):
        shutil.copy(f, d / f.name)
    (d / f"{job.launcher}-output.txt").write_text(job.launcher_output())
    for host, c in sorted(cols.items()):
        for r in c.ranks:
            if r.py_spy_raw:
                (d / f"py-spy-rank{r.rank}.json").write_text(r.py_spy_raw)
        slim = replace_raw(c)
        (d / f"collect-{host}.json").write_text(json.dumps(json.loads(slim.to_json()), indent=1) + "\n")
    (d / "NOTE.txt").write_text(f"scenario {scenario}, launcher {job.launcher}, odd rank {odd}\n"
                                f"collection of 4 hosts over SSH: {elapsed:.2f} s\n{note}\n")


def replace_raw(c: NodeCollection) -> NodeCollection:
    import msgspec

    return msgspec.structs.replace(c, ranks=tuple(msgspec.structs.replace(r, py_spy_raw=None) for r in c.ranks))


@pytest.fixture
def net(fresh_netns_rig):
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed in this environment (hc[bandwidth])")
    if not TORCHRUN.exists():
        pytest.skip(f"no torchrun next to {sys.executable}")
    if shutil.which("py-spy", path=str(BIN)) is None:
        pytest.skip("py-spy is not installed in the venv (hc[test])")
    return fresh_netns_rig


@pytest.fixture
def jobs():
    started: list[Job] = []
    yield started
    problems = []
    for job in started:
        try:
            end_job(job)
        except AssertionError as exc:
            problems.append(str(exc))
    assert not problems, problems


def assert_in_collective(r, name: str | None = "all_reduce") -> None:
    assert r.stack is not None and r.stack.threads, r
    assert r.collective == name if name else r.collective is not None, (r.rank, r.collective, r.user_frame)


def assert_found(cols: dict[str, NodeCollection], ranks: list[int]) -> dict:
    got = ranks_of(cols)
    assert sorted(got) == ranks, {h: [(r.rank, r.pid) for r in c.ranks] for h, c in cols.items()}
    for rank, (host, r) in got.items():
        assert r.host == host == NODES[rank], (rank, host, r.host)  # one rank per host, rank i on node i+1
        assert r.world_size == len(NODES)
        assert r.py_spy_raw and parse_py_spy(r.py_spy_raw).threads  # py-spy's own JSON parses
    return got


# ------------------------------------------------------------------------------ torchrun


def test_skip_torchrun(net, jobs, tmp_path):
    """(a) rank 2 skips an all_reduce and waits in the next collective (broadcast); `hc diagnose
    hosts` says collective-mismatch and names rank 2."""
    job = start_torchrun(net, tmp_path, "skip", 2)
    jobs.append(job)
    wait_hung(job)
    cols, elapsed = collect(net, by_pids(job))
    got = assert_found(cols, [0, 1, 2, 3])
    for rank, (_, r) in got.items():
        if rank == 2:
            assert_in_collective(r, "broadcast")
            assert r.user_frame.startswith("sync_params (hang_job.py:"), r.user_frame
        else:
            assert_in_collective(r, "all_reduce")
            assert r.user_frame.startswith("train_step (hang_job.py:"), r.user_frame
        assert r.agent_pid is not None and r.state in ("S", "R")
    assert elapsed < COLLECT_BOUND_S, elapsed
    save_fixture(job, cols, elapsed, "rank 2 skipped step 3's all_reduce; it waits in broadcast, 0,1,3 in all_reduce")
    print(f"skip/torchrun: collected 4 hosts in {elapsed:.2f} s")
    check(*hosts(net, tmp_path), ("collective-mismatch",), 2, "hosts skip/torchrun")


def test_sleep_then_stop_then_kill_torchrun(net, jobs, tmp_path):
    """One torchrun job in three phases (hang_job --then), each collected and diagnosed as a
    job of that scenario alone would be: (d) rank 1 sleeps, (e) rank 3 is SIGSTOPped, (c)
    rank 2 is SIGKILLed."""
    job = start_torchrun(net, tmp_path, "sleep", 1, "--linger", "120", "--then", "stop:3", "--then", "kill:2")
    jobs.append(job)
    wait_hung(job)
    sleeping_by_agent_pid(net, tmp_path, job, 1)
    release(job, 1)
    wait_hung(job, phase=2)
    stopped(net, tmp_path, job, 3)
    release(job, 2)
    os.kill(job.rank_info()[3]["pid"], signal.SIGCONT)
    wait_hung(job, phase=3)
    killed(net, tmp_path, job, 2)


def sleeping_by_agent_pid(net, tmp_path: Path, job: Job, odd: int) -> None:
    """(d) rank `odd` sleeps in load_batch_slowly; collected through each host's torchrun agent
    pid; `hc diagnose hosts` says stuck-rank and names it."""
    agents = {}
    for d in job.rank_info().values():
        ppid = int(Path(f"/proc/{d['pid']}/stat").read_text().rsplit(")", 1)[1].split()[1])
        agents[d["host"]] = ["--pids", str(ppid)]  # the agent stands for its ranks
    cols, elapsed = collect(net, agents)
    got = assert_found(cols, [0, 1, 2, 3])
    for rank, (_, r) in got.items():
        if rank == odd:
            assert r.collective is None and r.user_frame.startswith("load_batch_slowly (hang_job.py:"), r
        else:
            assert_in_collective(r)
        assert r.pid == job.rank_info()[rank]["pid"]
    assert all(s.reason == "agent" for c in cols.values() for s in c.skipped), [c.skipped for c in cols.values()]
    assert elapsed < COLLECT_BOUND_S, elapsed
    save_fixture(job, cols, elapsed, f"rank {odd} sleeps in load_batch_slowly at step 3; the others wait in "
                                     "all_reduce", ("sleep", odd))
    print(f"sleep/torchrun: collected 4 hosts in {elapsed:.2f} s")
    check(*hosts(net, tmp_path), ("stuck-rank",), odd, "hosts sleep/torchrun")


def stopped(net, tmp_path: Path, job: Job, odd: int) -> None:
    """(e) rank `odd` is SIGSTOPped in wait_to_be_stopped: state T, its stack read without
    ptrace-stopping it; `hc diagnose hosts` says stuck-rank and names it. It stays stopped."""
    pid = job.rank_info()[odd]["pid"]
    os.kill(pid, signal.SIGSTOP)
    cols, elapsed = collect(net, by_pids(job))
    got = assert_found(cols, [0, 1, 2, 3])
    rank = got[odd][1]
    assert rank.state == "T" and rank.state_name == "stopped" and rank.py_spy_mode == "nonblocking", rank
    assert rank.user_frame.startswith("wait_to_be_stopped (hang_job.py:"), rank.user_frame
    for other in sorted(set(got) - {odd}):
        assert_in_collective(got[other][1])
        assert got[other][1].py_spy_mode == "blocking"
    assert Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"  # still stopped
    assert elapsed < COLLECT_BOUND_S, elapsed
    save_fixture(job, cols, elapsed, f"rank {odd} SIGSTOPped while in wait_to_be_stopped; the others in "
                                     "all_reduce", ("stop", odd))
    print(f"stop/torchrun: collected 4 hosts in {elapsed:.2f} s")
    check(*hosts(net, tmp_path), ("stuck-rank",), odd, "hosts stop/torchrun")


def killed(net, tmp_path: Path, job: Job, odd: int) -> None:
    """(c) rank `odd` is SIGKILLed in wait_to_be_killed: absent from the collection (its host
    says process-gone); a survivor's log shows the peer loss; `hc diagnose hosts` says
    dead-rank and names it."""
    pid = job.rank_info()[odd]["pid"]
    os.kill(pid, signal.SIGKILL)
    lost = re.compile(r"Connection closed by peer|Connection reset by peer|Broken pipe")
    survivors = [r for r in range(len(NODES)) if r != odd]
    wait_until("a survivor logging the peer loss", lambda: any(lost.search(job.log(r)) for r in survivors), 30, job)
    time.sleep(1.0)
    cols, elapsed = collect(net, by_pids(job))
    assert odd not in ranks_of(cols)
    host = NODES[odd]
    assert any(e.kind == "process-gone" and e.pid == pid for e in cols[host].errors), cols[host].errors
    got = assert_found({h: c for h, c in cols.items() if h != host}, survivors)
    for _, r in got.values():  # each survivor either saw the loss (after_failure) or still waits in all_reduce
        assert r.user_frame.startswith(("after_failure (hang_job.py:", "train_step (hang_job.py:")), r.user_frame
    assert elapsed < COLLECT_BOUND_S, elapsed
    save_fixture(job, cols, elapsed, f"rank {odd} SIGKILLed by the test; survivors log the peer loss and "
                                     "linger in after_failure (or still wait in all_reduce)", ("kill", odd))
    print(f"kill/torchrun: collected in {elapsed:.2f} s; survivors: "
          + ", ".join(f"{k}: {r.user_frame}" for k, (_, r) in got.items()))
    check(*hosts(net, tmp_path), ("dead-rank",), odd, "hosts kill/torchrun")


# ------------------------------------------------------------------------------ srun


@pytest.fixture
def slurm(fresh_slurm_rig, net):
    return fresh_slurm_rig


def test_sleep_then_stop_srun_by_job_id(slurm, net, jobs, tmp_path):
    """One srun job in two phases (hang_job --then), each found by the Slurm job id alone:
    (d) rank 2 sleeps, `hc diagnose job` says stuck-rank and names rank 2 on node3, through
    Slurm and over SSH (`--via ssh`); (e) rank 0 is SIGSTOPped, state T, `hc diagnose job`
    says stuck-rank, names rank 0 and says it is in state T."""
    job = start_srun(slurm, net, tmp_path, "sleep", 2, None, "--then", "stop:0")
    jobs.append(job)
    wait_hung(job)
    job_id = job.rank_info()[0]["slurm_job_id"]
    assert job_id
    cols, elapsed = collect(net, by_job(job_id))
    got = assert_found(cols, [0, 1, 2, 3])
    for rank, (_, r) in got.items():
        assert r.slurm_job_id == job_id and r.found_by in ("environ", "cgroup") and r.rank_source == "SLURM_PROCID"
        if rank == 2:
            assert r.user_frame.startswith("load_batch_slowly (hang_job.py:") and r.collective is None
        else:
            assert_in_collective(r)
    assert elapsed < COLLECT_BOUND_S, elapsed
    save_fixture(job, cols, elapsed, f"Slurm job {job_id}; rank 2 sleeps in load_batch_slowly at step 3", ("sleep", 2))
    print(f"sleep/srun: collected 4 hosts by job id in {elapsed:.2f} s")
    v, elapsed, rc = diagnose_job(slurm, net, tmp_path, job)
    check(v, elapsed, rc, ("stuck-rank",), 2, "job sleep/srun")
    assert next(o for o in v["odd_ranks"])["host"] == "node3"
    # the same hang reached over SSH (`--via ssh`: ssh.remote_hc on every node of the job, no
    # srun step): the sleeping rank, on its host; the nodes' kernel logs read in the job's
    # window (the rig's hosts share this machine's kernel) and nothing in them taken for this
    # job's failure
    v, elapsed, rc = diagnose_job(slurm, net, tmp_path, job, "--via", "ssh")
    check(v, elapsed, rc, ("stuck-rank",), 2, "job sleep/srun via ssh")
    odd = v["odd_ranks"][0]
    assert odd["host"] == "node3" and odd["pid"] == job.rank_info()[2]["pid"]
    assert sorted(row["rank"] for row in v["ranks"]) == [0, 1, 2, 3]
    assert not any(u["source"].endswith("did not answer") for u in v.get("unreadable", []))

    release(job, 1)
    wait_hung(job, phase=2)
    os.kill(job.rank_info()[0]["pid"], signal.SIGSTOP)
    cols, elapsed = collect(net, by_job(job_id))
    got = assert_found(cols, [0, 1, 2, 3])
    assert got[0][1].state == "T" and got[0][1].user_frame.startswith("wait_to_be_stopped (hang_job.py:")
    for rank in (1, 2, 3):
        assert_in_collective(got[rank][1])
    assert elapsed < COLLECT_BOUND_S, elapsed
    save_fixture(job, cols, elapsed, f"Slurm job {job_id}; rank 0 SIGSTOPped in wait_to_be_stopped", ("stop", 0))
    print(f"stop/srun: collected 4 hosts by job id in {elapsed:.2f} s")
    v, elapsed, rc = diagnose_job(slurm, net, tmp_path, job)
    check(v, elapsed, rc, ("stuck-rank",), 0, "job stop/srun")
    assert "state T" in v["summary"]


def test_size_srun_by_job_id(slurm, net, jobs, tmp_path):
    """(b) rank 1's tensor has another size: gloo's receiver aborts and the text names the
    mismatch. Under srun (--kill-on-bad-exit=0) the survivors stay to be collected; under
    torchrun its agents tear them down within seconds (the fixture size-torchrun is such a
    run, taken while they lived), a race no test should run. `hc diagnose job` names as dead
    exactly the ranks that are gone."""
    job = start_srun(slurm, net, tmp_path, "size", 1, None, "--linger", "120")
    jobs.append(job)
    text = re.compile(r"Received data size doesn't match|op.preamble.length <= op.nbytes|Connection closed by peer"
                      r"|Connection reset by peer")
    wait_until("the size mismatch being reported", lambda: text.search("".join(job.log(r) for r in range(4))), 90, job)
    wait_until("every rank's info", lambda: len(job.rank_info()) == len(NODES), 60, job)
    time.sleep(1.5)
    cols, elapsed = collect(net, by_job(job.rank_info()[0]["slurm_job_id"]))
    got = ranks_of(cols)
    assert got and len(got) < len(NODES), sorted(got)  # the aborted rank is gone, the others stay
    for _, r in got.values():
        assert r.stack is not None
    assert elapsed < COLLECT_BOUND_S, elapsed
    print(f"size/srun: alive {sorted(got)}")
    v, elapsed, rc = diagnose_job(slurm, net, tmp_path, job)
    # live, every rank gloo's mismatch aborted is gone: the receiver of the longer buffer
    # always, the odd one itself only in some runs (a CI run saw rank 0 alone go). They are
    # named as dead, which they are, and no survivor is; which of them had the other size is
    # seen only offline, in their output (the enforce message is only in their stderr)
    named = [o["rank"] for o in v.get("odd_ranks", [])]
    gone = sorted(set(range(len(NODES))) - {row["rank"] for row in v["ranks"] if row.get("state") not in
                                             ("missing", "", None)})
    print(f"job size/srun: {v['class']} odd {named}, gone {gone}: {v['summary'][:160]}")
    assert (v["class"], rc) == ("dead-rank", 0) and gone and sorted(named) == gone, v["summary"]
    assert elapsed < BOUND_S


def test_port_taken_srun(slurm, net, jobs, tmp_path):
    """(f) the master port is held on node1: rank 0's store cannot listen (EADDRINUSE); the
    other ranks wait in init_process_group. `hc diagnose job` says init-failure naming rank 0."""
    port = next(_PORTS)
    with hold_port(net, "node1", port):
        job = start_srun(slurm, net, tmp_path, "port", 0, port, "--linger", "120", "--timeout", "120")
        jobs.append(job)
        taken = re.compile(r"EADDRINUSE|address already in use", re.I)
        wait_until("rank 0 failing to listen", lambda: taken.search(job.log(0)), HANG_WAIT_S, job)
        time.sleep(1.5)
        job_id = job.rank_info()[0]["slurm_job_id"]
        cols, elapsed = collect(net, by_job(job_id))
        got = assert_found(cols, [0, 1, 2, 3])
        assert got[0][1].user_frame.startswith("after_failure (hang_job.py:"), got[0][1].user_frame
        for rank in (1, 2, 3):  # clients of the held port: inside init_process_group, no collective yet
            r = got[rank][1]
            frames = [f.name for t in r.stack.threads for f in t.frames]
            assert "init_process_group" in " ".join(frames), (rank, frames)
            assert not (job.out / f"rank{rank}.hung").exists()
        assert "DistNetworkError" in job.log(0)
        assert elapsed < COLLECT_BOUND_S, elapsed
        save_fixture(job, cols, elapsed, f"Slurm job {job_id}; port {port} on node1 held by another process: "
                                         "rank 0 cannot listen, ranks 1-3 wait in init_process_group")
        print(f"port/srun: collected 4 hosts by job id in {elapsed:.2f} s")
        wait_until("every rank's info", lambda: len(job.rank_info()) == len(NODES), 60, job)
        v, elapsed, rc = diagnose_job(slurm, net, tmp_path, job)
        check(v, elapsed, rc, ("init-failure",), 0, "job port/srun")
