"""`hc run` records the real ranks and keeps their output where `hc diagnose logs` reads it,
under every launcher, for real: torchrun with hc inside it and around it, plain processes
(RANK/WORLD_SIZE by hand), Open MPI's mpirun, and srun's variables (the real srun: the rig's
test_run_wrapper_rig.py). The dying jobs under torchrun, the plain ranks and mpirun without
--log-dir are real gloo jobs (a rank's death is real: SIGKILL or an exception), their console
captured as a user would; the diagnosis of the log directory hc run names after the job is
compared with the diagnosis of that captured console. The tests of what hc run records under
torchrun, under srun's variables and under mpirun with --log-dir run ranks that only print who
they are (no torch: what they test is hc run's record of each rank, which a gloo job's tests
above check too).

Every process is started here, bounded by a timeout, and killed by its own pid if it overruns.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from diagnose_jobs.inprocess import run_diagnose
from support import free_port, torch_installed

from healthcheck.parsers.run_output import parse_run_output

if not torch_installed():
    pytest.skip("torch is not installed", allow_module_level=True)

PY = sys.executable
TORCHRUN = str(Path(PY).parent / "torchrun")
HC = [PY, "-m", "healthcheck"]
HOST = socket.gethostname()
# the job: whatever launcher started it, a gloo rendezvous, one all_reduce; then JOB_BAD dies
# (JOB_DEATH=kill: SIGKILL, else an exception) while the others wait in the next all_reduce
JOB = """
import json, os, signal, sys, time
from datetime import timedelta
import torch, torch.distributed as dist
env = os.environ
def first(*names):
    return next(int(env[n]) for n in names if n in env)
rank = first("RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID")
world = first("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS")
init = "env://" if "MASTER_ADDR" in env else "tcp://127.0.0.1:" + env["JOB_PORT"]
dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world, timeout=timedelta(seconds=20))
os.write(1, (json.dumps({"rank": rank, "pid": os.getpid()}) + chr(10)).encode())
t = torch.ones(2)
dist.all_reduce(t)
if rank == int(env.get("JOB_BAD", "-1")):
    time.sleep(1.0)
    if env.get("JOB_DEATH") == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    raise ValueError("bad batch on rank %d" % rank)
dist.all_reduce(t)
dist.destroy_process_group()
"""
# a rank that only says who it is, for the tests of what hc run records under a launcher: no
# torch import, no rendezvous (the JOB above is the real gloo job, in the tests of the
# torchrun forms, of the plain ranks and of mpirun without --log-dir)
SAY_RANK = """
import json, os
env = os.environ
rank = next(int(env[n]) for n in ("RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID") if n in env)
os.write(1, (json.dumps({"rank": rank, "pid": os.getpid()}) + chr(10)).encode())
"""
# hc run's straggler test (a torch rendezvous and all-reduce in every rank before the job) is
# not what these tests look at, and it doubled each rank's torch import: it is off here, and
# test_run_wrapper_ranks.py tests it under torchrun and plain ranks
NO_STRAGGLER = "--no-straggler-test"
needs_mpirun = pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI's mpirun is not installed")


def clean_env(**extra: str) -> dict[str, str]:
    drop = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK",
            "TORCHELASTIC_RUN_ID", "CUDA_VISIBLE_DEVICES", "HC_FORMAT", "HC_RUN_LOG_DIR", "PYTHON_EXEC")
    env = {k: v for k, v in os.environ.items()
           if k not in drop and not k.startswith(("SLURM", "OMPI_", "PMIX_", "NCCL_", "TORCH_", "PET_"))}
    env.update(GLOO_SOCKET_IFNAME="lo", JOB_PORT=str(free_port()), **extra)
    return env


def run(argv: list[str], env: dict[str, str], cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    """The job as a user runs it: stdout and stderr in one console, captured."""
    return subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)


def diagnose(*paths: Path) -> dict:
    """`hc diagnose logs PATHS --format json`, in this process through hc's own entry point (the
    command's subprocess contract is test_diagnose_jobs.py's; here it is what hc run left)."""
    code, out, err = run_diagnose(["logs", *map(str, paths)], dict(os.environ), os.getcwd())
    assert code in (0, 3), err[-2000:]
    return json.loads(out)


def odd(report: dict) -> list[int]:
    return [o["rank"] for o in report.get("odd_ranks", [])]


def printed_log_dir(console: str) -> Path:
    """The directory of the next step hc run printed (`hc diagnose logs DIR`)."""
    (line,) = {ln for ln in console.splitlines() if re.match(r"hc run: if this job .{0,20}: hc diagnose logs ", ln)}
    return Path(line.split("hc diagnose logs ", 1)[1].split(";")[0])


def manifests(log_dir: Path) -> dict[int, dict]:
    found = [json.loads(p.read_text()) for p in log_dir.glob("hc-run.rank*.json")]
    by_rank = {m["rank"]: m for m in found}
    assert len(by_rank) == len(found), f"two manifests claim one rank: {found}"
    return by_rank


def outputs(log_dir: Path) -> dict[int | None, list]:
    """Every hc run output file, read back, by the rank its header names (None: a launcher's)."""
    out: dict[int | None, list] = {}
    for p in sorted(log_dir.glob("hc-run.*.log")):
        parsed = parse_run_output(p.read_text())
        assert parsed is not None, p
        out.setdefault(parsed.rank, []).append(parsed)
    return out


def job_lines(console: str) -> dict[int, dict]:
    docs = [json.loads(m.group(0)) for m in re.finditer(r'\{"rank": \d+, "pid": \d+\}', console)]
    return {d["rank"]: d for d in docs}


def torchrun_job(form: str, tmp_path: Path, n: int, job: str = JOB, **env: str) -> tuple[subprocess.CompletedProcess, str]:
    """`hc run -- torchrun ... JOB` (around) or `torchrun ... -m healthcheck run -- python JOB` (inside),
    without hc run's straggler test."""
    script = tmp_path / "job.py"
    script.write_text(job)
    logs = str(tmp_path / "logs")
    torchrun = [TORCHRUN, "--standalone", f"--nproc-per-node={n}", "--monitor-interval=0.1"]
    if form == "around":
        argv = [*HC, "run", "--log-dir", logs, "--no-node-check", NO_STRAGGLER, "--", *torchrun, str(script)]
    else:
        argv = [*torchrun, "-m", "healthcheck", "run", "--log-dir", logs, "--no-node-check", NO_STRAGGLER, "--", PY,
                str(script)]
    r = run(argv, clean_env(**env), tmp_path)
    return r, r.stdout.decode(errors="replace")


# ------------------------------------------------------------------ torchrun, around it and inside it


@pytest.mark.parametrize("form", ["around", "inside"])
def test_every_rank_torchrun_starts_is_recorded_with_its_real_rank_and_its_own_output(tmp_path, form):
    # two ranks: the smallest world in which a rank recorded as "rank 0 of 1" (the agent's
    # view) or under another rank's number shows. The ranks only say who they are (SAY_RANK):
    # what is recorded comes from torchrun's agent and hc run, not from torch in the rank, and
    # the real gloo job under both forms is the next test's (each rank's torch start costs CI)
    r, console = torchrun_job(form, tmp_path, 2, job=SAY_RANK)
    assert r.returncode == 0, console[-4000:]
    ran = job_lines(console)
    assert sorted(ran) == [0, 1], console[-3000:]  # the job's output still reaches the console
    log_dir = printed_log_dir(console)
    assert log_dir == tmp_path / "logs"
    # the agent assigns the ranks: each worker's own, never "rank 0 of 1" for the agent
    found = manifests(log_dir)
    assert sorted(found) == [0, 1], found
    for rank, m in found.items():
        assert (m["world_size"], m["local_rank"]) == (2, rank)
        assert m["host"] == HOST and m["pid"] == ran[rank]["pid"] and m["launcher"] == "torchrun"
    # each rank's output, labelled with its rank, with what that rank printed in it
    kept = outputs(log_dir)
    for rank in (0, 1):
        (mine,) = kept[rank]
        assert mine.pid == ran[rank]["pid"] and json.dumps(ran[rank]) in mine.text and mine.stamps
        assert mine.exit_code == 0 and found[rank]["local_world_size"] == 2
    if form == "around":
        (agent,) = kept[None]  # torchrun's own output, every rank's lines in it
        assert agent.launcher == "torchrun" and all(json.dumps(ran[k]) in agent.text for k in ran)
        assert "ranks: each rank torchrun starts runs under hc run" in console


@pytest.mark.parametrize("death", ["kill", "raise"])
@pytest.mark.parametrize("form", ["around", "inside"])
def test_the_printed_next_step_names_the_rank_the_captured_console_names(tmp_path, form, death):
    # two ranks, the second dies: the survivor's own error is in the console too, and the
    # diagnosis must name the dead rank over it (a third rank only repeated the survivor's)
    r, console = torchrun_job(form, tmp_path, 2, JOB_BAD="1", JOB_DEATH=death)
    assert r.returncode != 0, console[-3000:]
    captured = tmp_path / "console.txt"
    captured.write_text(console)
    live = diagnose(captured)
    if death == "kill":
        assert (live["class"], odd(live)) == ("dead-rank", [1]), live["summary"]  # the truth
    log_dir = printed_log_dir(console)
    logs = diagnose(log_dir)
    # whatever the rules make of an exception, the log directory says what the console says
    assert (logs["class"], odd(logs)) == (live["class"], odd(live)), logs["summary"]
    if form == "around":  # and once torchrun has failed, hc says it again, last
        assert console.rstrip().splitlines()[-1] == f"hc run: torchrun exited 1: hc diagnose logs {log_dir}"


# ------------------------------------------------------------------ plain processes


def plain_job(tmp_path: Path, n: int, **extra: str) -> list[subprocess.CompletedProcess]:
    script = tmp_path / "job.py"
    script.write_text(JOB)
    common = clean_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), **extra)
    procs = []
    for rank in range(n):
        env = {**common, "RANK": str(rank), "WORLD_SIZE": str(n), "LOCAL_RANK": str(rank),
               "LOCAL_WORLD_SIZE": str(n)}
        procs.append(subprocess.Popen([*HC, "run", "--log-dir", str(tmp_path / "logs"), "--no-node-check",
                                       NO_STRAGGLER, "--", PY, str(script)], env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE))
    return [_finish(p, procs) for p in procs]


def _finish(p: subprocess.Popen, every: list[subprocess.Popen]) -> subprocess.CompletedProcess:
    try:
        out, err = p.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        for q in every:  # only what this test started, by pid
            if q.poll() is None:
                q.kill()
        out, err = p.communicate()
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def test_plain_ranks_are_recorded_and_the_dead_one_is_named_from_the_log_directory(tmp_path):
    results = plain_job(tmp_path, 3, JOB_BAD="1", JOB_DEATH="kill")
    assert results[1].returncode == -9, results[1].stderr.decode()[-2000:]
    found = manifests(tmp_path / "logs")
    assert sorted(found) == [0, 1, 2] and all(m["world_size"] == 3 and m["launcher"] == "env"
                                              for m in found.values())
    kept = outputs(tmp_path / "logs")
    assert kept[1][0].exit_code == -9 and sorted(k for k in kept if k is not None) == [0, 1, 2]
    logs = diagnose(tmp_path / "logs")
    assert (logs["class"], odd(logs)) == ("dead-rank", [1]), logs["summary"]


def test_srun_tasks_are_recorded_by_their_slurm_rank(tmp_path):
    # srun's variables as slurmstepd sets them for each task (the real srun: the rig's test)
    script = tmp_path / "job.py"
    script.write_text(SAY_RANK)
    common = clean_env(SLURM_JOB_ID="4711", SLURM_SUBMIT_DIR=str(tmp_path), SLURM_NTASKS="2", SLURM_NNODES="1",
                       SLURM_STEP_NUM_NODES="1", SLURM_STEP_ID="0")
    procs = [subprocess.Popen([*HC, "run", "--no-node-check", "--no-straggler-test", "--", PY, str(script)],
                              env={**common, "SLURM_PROCID": str(t), "SLURM_LOCALID": str(t)}, cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for t in range(2)]
    results = [_finish(p, procs) for p in procs]
    assert [r.returncode for r in results] == [0, 0], results[0].stderr.decode()[-3000:]
    log_dir = tmp_path / "hc-job-4711"
    found = manifests(log_dir)
    assert {r: (m["world_size"], m["local_rank"], m["launcher"]) for r, m in found.items()} == {
        0: (2, 0, "srun"), 1: (2, 1, "srun")}
    kept = outputs(log_dir)
    assert sorted(kept) == [0, 1] and all(f'"rank": {r}' in kept[r][0].text for r in (0, 1))


# ------------------------------------------------------------------ mpirun


def mpirun(n: int) -> list[str]:
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    return [shutil.which("mpirun") or "mpirun", *root, "--oversubscribe", "-np", str(n)]


@needs_mpirun
def test_inside_mpirun_every_rank_is_recorded_with_its_output(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(SAY_RANK)  # the real gloo job under mpirun: the test without --log-dir below
    argv = [*mpirun(2), "-x", "JOB_PORT", "-x", "GLOO_SOCKET_IFNAME", *HC, "run", "--log-dir",
            str(tmp_path / "logs"), "--no-node-check", "--no-straggler-test", "--", PY, str(script)]
    r = run(argv, clean_env(), tmp_path)
    console = r.stdout.decode(errors="replace")
    assert r.returncode == 0, console[-3000:]
    ran = job_lines(console)
    found = manifests(tmp_path / "logs")
    assert {k: (m["world_size"], m["launcher"], m["pid"]) for k, m in found.items()} == {
        k: (2, "mpirun", ran[k]["pid"]) for k in (0, 1)}
    kept = outputs(tmp_path / "logs")
    assert all(json.dumps(ran[k]) in kept[k][0].text for k in (0, 1))


@needs_mpirun
def test_around_mpirun_no_rank_is_claimed_and_hc_says_how_to_record_them(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(SAY_RANK)
    argv = [*HC, "run", "--log-dir", str(tmp_path / "logs"), "--no-node-check", "--", *mpirun(2), "-x", "JOB_PORT",
            "-x", "GLOO_SOCKET_IFNAME", PY, str(script)]
    r = run(argv, clean_env(), tmp_path)
    console = r.stdout.decode(errors="replace")
    assert r.returncode == 0, console[-3000:]
    assert manifests(tmp_path / "logs") == {}  # hc ran mpirun, not a rank: "rank 0 of 1" would be false
    (warning,) = [ln for ln in console.splitlines() if "ranks not recorded" in ln]
    assert "mpirun ... hc run -- " in warning
    (launcher_out,) = outputs(tmp_path / "logs")[None]
    assert launcher_out.launcher == "mpirun" and all(f'"rank": {k}' in launcher_out.text for k in (0, 1))


@pytest.fixture
def short_tmpdir():
    """A TMPDIR of this test's own, short: hc run's default log directory is under it, and Open
    MPI's session directory too (its PMIx socket's path must stay under the 108-byte limit)."""
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="hcmpi-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@needs_mpirun
@pytest.mark.parametrize("world", [2, 3])
def test_inside_mpirun_without_log_dir_every_rank_logs_where_the_next_step_points(tmp_path, short_tmpdir, world):
    # `mpirun -np N hc run -- python job.py` with no --log-dir, and a job that meets at its own
    # tcp:// address (no MASTER_PORT): every rank must pick the same default log directory,
    # the one rank 0 prints, or `hc diagnose logs DIR` sees rank 0 alone
    script = tmp_path / "job.py"
    script.write_text(JOB)
    bad = world - 1  # rank 2 of 3 (rank 1 of 2) raises while the others wait in all_reduce
    argv = [*mpirun(world), "-x", "JOB_PORT", "-x", "GLOO_SOCKET_IFNAME", "-x", "JOB_BAD", "-x", "TMPDIR", *HC, "run",
            "--no-node-check", "--no-straggler-test", "--", PY, str(script)]
    r = run(argv, clean_env(JOB_BAD=str(bad), TMPDIR=str(short_tmpdir)), tmp_path)
    console = r.stdout.decode(errors="replace")
    assert r.returncode != 0, console[-3000:]
    ran = job_lines(console)
    assert sorted(ran) == list(range(world)), console[-3000:]
    log_dir = printed_log_dir(console)
    assert log_dir.is_relative_to(short_tmpdir), log_dir
    found = manifests(log_dir)
    assert {k: (m["world_size"], m["launcher"], m["pid"]) for k, m in found.items()} == {
        k: (world, "mpirun", ran[k]["pid"]) for k in range(world)}, console[-3000:]
    kept = outputs(log_dir)
    assert sorted(k for k in kept if k is not None) == list(range(world))
    assert all(json.dumps(ran[k]) in kept[k][0].text for k in range(world))
    assert "ValueError" in kept[bad][0].text
    logs = diagnose(log_dir)
    assert (logs["class"], odd(logs)) == ("dead-rank", [bad]), logs["summary"]


@needs_mpirun
def test_a_pmix_rank_without_open_mpis_variables_is_recorded_by_its_real_rank(tmp_path, short_tmpdir):
    # a PMIx launcher that sets no OMPI_COMM_WORLD_*: the real mpirun's PMIX_RANK and namespace,
    # Open MPI's own variables taken away (each rank claimed to be rank 0 of a world of 1)
    drop = [arg for name in ("RANK", "SIZE", "LOCAL_RANK", "LOCAL_SIZE") for arg in ("-u", f"OMPI_COMM_WORLD_{name}")]
    prog = "import json, os; print(json.dumps({'rank': int(os.environ['PMIX_RANK']), 'pid': os.getpid()}))"
    argv = [*mpirun(2), "-x", "TMPDIR", "env", *drop, *HC, "run", "--no-node-check", "--", PY, "-c", prog]
    r = run(argv, clean_env(TMPDIR=str(short_tmpdir)), tmp_path)
    console = r.stdout.decode(errors="replace")
    assert r.returncode == 0, console[-3000:]
    ran = job_lines(console)
    found = manifests(printed_log_dir(console))
    assert {k: (m["pid"], m["launcher"]) for k, m in found.items()} == {k: (ran[k]["pid"], "mpirun") for k in (0, 1)}
