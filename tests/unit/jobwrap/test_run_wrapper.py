"""`hc run -- CMD`: the variables it sets (never over the user's), the log directory and the
manifest, the preflight's checks (each broken case: exit 2 and one line), the master port
against a socket really bound here, and exec semantics (argv, pid and exit code are the job's)."""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

import pytest
from support import free_port, run_hc

from healthcheck.core.errors import UsageError
from healthcheck.jobwrap import envset, preflight
from healthcheck.jobwrap.straggler import stragglers

PY = sys.executable
# every launcher variable a test must not inherit from the machine running the tests
LAUNCH = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK",
          "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE", "CUDA_VISIBLE_DEVICES", "NCCL_DEBUG",
          "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_FR_BUFFER_SIZE",
          "TORCH_NCCL_DUMP_ON_TIMEOUT", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "TORCH_FR_DUMP_TEMP_FILE",
          "TORCH_DISTRIBUTED_DEBUG", "TORCH_NCCL_DESYNC_DEBUG")


@pytest.fixture(autouse=True)
def _clean_launch_env(monkeypatch):
    for name in LAUNCH:
        monkeypatch.delenv(name, raising=False)
    for name in list(os.environ):
        if name.startswith(("OMPI_", "PMIX_")):
            monkeypatch.delenv(name, raising=False)


def hc_run(tmp_path: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 60):
    return run_hc("run", "--log-dir", str(tmp_path / "logs"), *args, env=env, timeout=timeout)


def stderr_lines(r) -> list[str]:
    return [ln for ln in r.stderr.decode().splitlines() if ln.strip()]


# ------------------------------------------------------------------ the variables


def test_every_debug_variable_is_set_on_an_empty_environment_under_the_names_torch_reads_without_a_warning(
        tmp_path):
    got = envset.debug_env({}, tmp_path, release=(2, 13))
    assert got["NCCL_DEBUG"] == "INFO" and got["NCCL_DEBUG_SUBSYS"] == envset.DEFAULT_SUBSYS
    assert got["NCCL_DEBUG_FILE"] == f"{tmp_path}/nccl.%h.%p.log"
    # torch >= 2.8 warns on every rank when the old name is set at all, even beside the new one
    assert got["TORCH_FR_BUFFER_SIZE"] == "2000" and "TORCH_NCCL_TRACE_BUFFER_SIZE" not in got
    assert got["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
    assert got["TORCH_FR_DUMP_TEMP_FILE"] == f"{tmp_path}/fr/nccl_trace_rank_"
    assert "TORCH_NCCL_DEBUG_INFO_TEMP_FILE" not in got
    assert envset.debug_env({}, tmp_path) == got  # torch unknown: the current names
    old = envset.debug_env({}, tmp_path, release=(2, 7))  # which knows only the old names
    assert old["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "2000" and "TORCH_FR_BUFFER_SIZE" not in old
    assert old["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] == f"{tmp_path}/fr/nccl_trace_rank_"
    assert "TORCH_DISTRIBUTED_DEBUG" not in got and "TORCH_NCCL_DESYNC_DEBUG" not in got
    desync = envset.debug_env({}, tmp_path, desync=True, nccl_debug="WARN", subsys="INIT,COLL")
    assert desync["TORCH_DISTRIBUTED_DEBUG"] == "DETAIL" and desync["TORCH_NCCL_DESYNC_DEBUG"] == "1"
    assert desync["NCCL_DEBUG"] == "WARN" and desync["NCCL_DEBUG_SUBSYS"] == "INIT,COLL"


def test_on_a_real_nccl_timeout_torch_warns_about_the_old_names_only_never_those_hc_sets(tmp_path):
    # captured on an H100 (tests/fixtures/h100-captures/fr-env-names): torch 2.11, NCCL, a collective timed out
    here = Path(__file__).parents[2] / "fixtures" / "h100-captures" / "fr-env-names"
    old = (here / "torch-2.11-nccl-timeout-old-names.txt").read_text()
    new = (here / "torch-2.11-nccl-timeout-new-names.txt").read_text()
    names = {n for pair in (*envset.PAIRS_FR, *envset.PAIRS_FR_FILE) for n in pair}
    warned = {n for n in names for ln in old.splitlines() if n in ln and "deprecated" in ln.lower()
              and ln.lower().index(n.lower()) < ln.lower().index("deprecated")}
    assert warned == {"TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"}
    hc_sets = set(envset.debug_env({}, tmp_path, release=(2, 11)))
    assert hc_sets & names and not hc_sets & warned
    assert "deprecated" not in new.lower() and "Watchdog caught collective operation timeout" in new


def test_what_the_user_set_is_never_overridden_and_a_pair_is_left_alone_when_either_name_is_set(tmp_path):
    user = {"NCCL_DEBUG": "WARN", "NCCL_DEBUG_FILE": "/scratch/n.%h.log", "TORCH_FR_BUFFER_SIZE": "0",
            "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "/scratch/fr_", "TORCH_DISTRIBUTED_DEBUG": "INFO"}
    got = envset.debug_env(user, tmp_path, desync=True)
    assert not set(got) & set(user)
    # setting the other name would override the user's value on the torch releases that read it first
    assert "TORCH_NCCL_TRACE_BUFFER_SIZE" not in got and "TORCH_FR_DUMP_TEMP_FILE" not in got
    assert got["NCCL_DEBUG_SUBSYS"] == envset.DEFAULT_SUBSYS and got["TORCH_NCCL_DESYNC_DEBUG"] == "1"
    assert envset.kept_env(user, desync=True) == user


def test_the_command_sees_the_variables_and_the_users_values_win(tmp_path):
    show = "import os, json; print(json.dumps({k: v for k, v in os.environ.items() if k.startswith(('NCCL_', 'TORCH_'))}))"
    r = hc_run(tmp_path, "--no-preflight", "--", PY, "-c", show, env={"NCCL_DEBUG": "TRACE"})
    assert r.returncode == 0, r.stderr
    seen = json.loads(r.stdout)
    logs = tmp_path / "logs"
    assert seen["NCCL_DEBUG"] == "TRACE" and seen["NCCL_DEBUG_FILE"] == f"{logs}/nccl.%h.%p.log"
    assert seen["TORCH_FR_BUFFER_SIZE"] == "2000" and "TORCH_NCCL_TRACE_BUFFER_SIZE" not in seen
    assert seen["TORCH_FR_DUMP_TEMP_FILE"] == f"{logs}/fr/nccl_trace_rank_"
    # hc says everything on stderr: the job's stdout is the job's
    assert r.stdout.decode().count("\n") == 1
    assert any(f"hc diagnose logs {logs}" in ln for ln in stderr_lines(r))


# ------------------------------------------------------------------ log directory and manifest


def test_default_log_dir_per_job_bounded_and_shared_by_the_ranks_of_one_run(tmp_path):
    slurm = envset.default_log_dir({"SLURM_JOB_ID": "4711", "SLURM_SUBMIT_DIR": "/home/u/exp"})
    assert slurm == Path("/home/u/exp/hc-job-4711")
    odd = envset.default_log_dir({"SLURM_JOB_ID": "../" + "x" * 300, "SLURM_SUBMIT_DIR": "/s"})
    assert odd.parent == Path("/s") and "/" not in odd.name and len(odd.name) <= len("hc-job-") + envset.MAX_KEY
    a = envset.default_log_dir({"TORCHELASTIC_RUN_ID": "abc"})
    assert a.name == "torchrun-abc" and a.parent.name == f"hc-run-{os.getuid()}"
    assert envset.default_log_dir({"MASTER_ADDR": "n1", "MASTER_PORT": "29500"}).name == "n1-29500"


def test_the_ranks_of_one_mpi_job_name_the_same_default_log_dir_and_another_job_another(tmp_path):
    # mpirun's ranks had no variable in common that hc read: each logged to pid<its pid>, and
    # the directory rank 0 printed held rank 0 alone (Open MPI 4: PMIX_NAMESPACE=583008257)
    ranks = [{"OMPI_COMM_WORLD_RANK": str(r), "OMPI_COMM_WORLD_SIZE": "3", "PMIX_RANK": str(r),
              "PMIX_NAMESPACE": "583008257", "OMPI_MCA_ess_base_jobid": "583008257"} for r in range(3)]
    dirs = {envset.default_log_dir(env) for env in ranks}
    assert len(dirs) == 1 and dirs.pop().name == "mpi-583008257"
    # Open MPI 5 (PRRTE) names its jobs with characters no directory name gets
    five = envset.default_log_dir({"PMIX_NAMESPACE": "prterun-n1/x-1234@1"})
    assert five.name == "mpi-prterun-n1_x-1234_1"
    # two jobs in a row on one MASTER_PORT are two jobs, not one directory
    first, second = ({"MASTER_ADDR": "n1", "MASTER_PORT": "29500", "PMIX_NAMESPACE": ns} for ns in ("11", "12"))
    assert envset.default_log_dir(first) != envset.default_log_dir(second)
    assert envset.job_key({"OMPI_MCA_ess_base_jobid": "7"}) == "mpi-7" and envset.job_key({}) is None


def test_hydras_and_pmixs_ranks_are_who_they_are_not_rank_0_of_1():
    # MPICH's, Intel MPI's and MVAPICH's Hydra; a PMIx launcher with no OMPI_COMM_WORLD_*
    hydra = envset.who({"PMI_RANK": "5", "PMI_SIZE": "8", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "4"})
    assert hydra == envset.Who("mpirun", 5, 8, 1, 4)
    assert envset.who({"PMIX_RANK": "3", "PMIX_NAMESPACE": "prterun-n1-9@1"}) == envset.Who("mpirun", 3, None, None,
                                                                                            None)
    # Open MPI's own variables and srun's come first; nothing at all is one process
    both = {"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4", "PMIX_RANK": "2"}
    assert envset.who(both).world_size == 4 and envset.who({"PMIX_RANK": "x"}) == envset.Who("none", 0, 1, 0, 1)


def test_rank_0_says_when_the_default_log_dir_cannot_hold_every_rank(tmp_path):
    def warnings(**env: str) -> list[str]:
        r = run_hc("run", "--no-preflight", "--", "true", env={"TMPDIR": str(tmp_path), **env})
        assert r.returncode == 0, r.stderr
        return [ln for ln in stderr_lines(r) if "warning" in ln]

    # ranks that meet at their own tcp:// address: nothing they share names the job
    (alone,) = warnings(RANK="0", WORLD_SIZE="2")
    assert "each rank logs in a directory of its own" in alone and "--log-dir" in alone
    assert warnings(RANK="1", WORLD_SIZE="2") == []  # rank 0 says it, once for the job
    # mpirun across two nodes: each node's temp dir holds its own ranks
    (nodes,) = warnings(OMPI_COMM_WORLD_RANK="0", OMPI_COMM_WORLD_SIZE="4", OMPI_COMM_WORLD_LOCAL_SIZE="2",
                        PMIX_NAMESPACE="99")
    assert "on each node" in nodes and "shared file system" in nodes
    # one node, one job id: nothing to say
    assert warnings(OMPI_COMM_WORLD_RANK="0", OMPI_COMM_WORLD_SIZE="2", OMPI_COMM_WORLD_LOCAL_SIZE="2",
                    PMIX_NAMESPACE="99") == []
    assert warnings() == []  # one process


def test_log_dir_is_created_private_and_a_link_is_refused(tmp_path):
    made = envset.make_log_dir(tmp_path / "a" / "logs")
    assert (made / "fr").is_dir() and oct(made.stat().st_mode & 0o777) == "0o750"
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / "link").symlink_to(target)
    with pytest.raises(UsageError, match="symbolic link"):
        envset.make_log_dir(tmp_path / "link")
    with pytest.raises(UsageError, match="characters long"):
        envset.make_log_dir(tmp_path / ("d" * 200) / ("e" * 200) / ("f" * 4000))
    r = run_hc("run", "--log-dir", str(tmp_path / "link"), "--", "true")
    assert r.returncode == 4 and len(stderr_lines(r)) == 1 and "symbolic link" in r.stderr.decode()


@pytest.mark.parametrize("value", ["", "   "])
def test_an_empty_log_dir_is_a_usage_error_and_nothing_is_written_here(tmp_path, value):
    # Path("") is ".": --log-dir '' wrote the NCCL files and manifests into the current directory
    marker = tmp_path / "ran"
    here = tmp_path / "cwd"
    here.mkdir()
    r = run_hc("run", "--log-dir", value, "--no-preflight", "--", "touch", str(marker), cwd=str(here))
    assert r.returncode == 4, r.stderr
    errors = [ln for ln in stderr_lines(r) if ln.startswith("hc: error:")]
    assert len(errors) == 1 and "--log-dir" in errors[0] and "Traceback" not in r.stderr.decode()
    assert not marker.exists() and list(here.iterdir()) == []


def test_the_manifest_records_rank_host_pid_command_and_what_was_set(tmp_path):
    prog = "import os; print(os.getpid())"
    r = hc_run(tmp_path, "--no-preflight", "--", PY, "-c", prog, "x y",
               env={"NCCL_DEBUG": "WARN", "SLURM_JOB_ID": "77", "SLURM_STEP_ID": "3"})
    assert r.returncode == 0, r.stderr
    pid = int(r.stdout.decode().split()[0])
    (path,) = (tmp_path / "logs").glob("hc-run.rank*.json")
    assert path.name == f"hc-run.rank0.{envset.safe_key(socket.gethostname())}.{pid}.json"
    doc = json.loads(path.read_text())
    assert doc["schema"] == "hc.run/1" and doc["pid"] == pid and doc["rank"] == 0 and doc["world_size"] == 1
    assert doc["command"] == [PY, "-c", prog, "x y"] and doc["host"] == socket.gethostname()
    assert doc["job_id"] == "77" and doc["step_id"] == "3" and doc["started_at"].endswith("Z")
    assert doc["env_kept"] == {"NCCL_DEBUG": "WARN"} and "NCCL_DEBUG" not in doc["env_set"]
    assert doc["env_set"]["TORCH_FR_BUFFER_SIZE"] == "2000"
    assert oct(path.stat().st_mode & 0o777) == "0o640"


# ------------------------------------------------------------------ launcher variables


TORCHRUN = {"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "n1",
            "MASTER_PORT": "29500", "GROUP_RANK": "0", "TORCHELASTIC_RUN_ID": "r"}


def fails(env: dict[str, str]) -> list[str]:
    return [p.message for p in preflight.check_launcher_env(env) if p.status == "FAIL"]


def test_coherent_launcher_variables_pass():
    assert preflight.check_launcher_env(TORCHRUN) == []
    assert preflight.check_launcher_env({}) == []
    assert preflight.check_launcher_env({"SLURM_PROCID": "3", "SLURM_NTASKS": "8"}) == []
    assert fails({"RANK": "0", "WORLD_SIZE": "1"}) == []  # one process: no store needed
    same = {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "MASTER_ADDR": "a", "MASTER_PORT": "1",
            "SLURM_PROCID": "3", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1"}
    assert fails(same) == []


BROKEN = [
    ({"RANK": "0"}, "$RANK is set but $WORLD_SIZE is not"),
    ({"WORLD_SIZE": "2", "MASTER_ADDR": "a", "MASTER_PORT": "1"}, "$WORLD_SIZE is set but $RANK is not"),
    ({**TORCHRUN, "RANK": "4"}, "$RANK=4 is not below $WORLD_SIZE=4"),
    ({**TORCHRUN, "RANK": "one"}, "$RANK='one' is not a non-negative integer"),
    ({**TORCHRUN, "WORLD_SIZE": "0", "RANK": "0"}, "$WORLD_SIZE=0"),
    ({k: v for k, v in TORCHRUN.items() if k != "MASTER_ADDR"}, "$MASTER_ADDR is not set (4 ranks)"),
    ({**TORCHRUN, "MASTER_PORT": "70000"}, "$MASTER_PORT=70000 is not a TCP port"),
    ({**TORCHRUN, "LOCAL_RANK": "2"}, "$LOCAL_RANK=2 is not below $LOCAL_WORLD_SIZE=2"),
    ({**TORCHRUN, "LOCAL_WORLD_SIZE": "8", "LOCAL_RANK": "0"}, "$LOCAL_WORLD_SIZE=8 is above $WORLD_SIZE=4"),
    ({"RANK": "2", "WORLD_SIZE": "4", "MASTER_ADDR": "a", "MASTER_PORT": "1", "SLURM_PROCID": "3",
      "SLURM_NTASKS": "4"}, "$RANK=2 but SLURM says $SLURM_PROCID=3"),
    ({"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "a", "MASTER_PORT": "1", "OMPI_COMM_WORLD_RANK": "1",
      "OMPI_COMM_WORLD_SIZE": "4"}, "$WORLD_SIZE=2 but Open MPI says $OMPI_COMM_WORLD_SIZE=4"),
    # srun or mpirun alone, with no torch variable: a rank outside its world is the same
    # FAIL as RANK >= WORLD_SIZE (it only warned, through the straggler test; issue 18, D.16)
    ({"SLURM_PROCID": "5", "SLURM_NTASKS": "2"}, "$SLURM_PROCID=5 is not below $SLURM_NTASKS=2"),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "0"}, "$SLURM_NTASKS=0"),
    ({"SLURM_PROCID": "2", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "9"}, "$SLURM_PROCID=2 is not below $SLURM_NTASKS=2"),
    ({"OMPI_COMM_WORLD_RANK": "4", "OMPI_COMM_WORLD_SIZE": "4"},
     "$OMPI_COMM_WORLD_RANK=4 is not below $OMPI_COMM_WORLD_SIZE=4"),
    ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "3",
      "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}, "$OMPI_COMM_WORLD_LOCAL_RANK=3 is not below $OMPI_COMM_WORLD_LOCAL_SIZE=2"),
    ({**TORCHRUN, "SLURM_PROCID": "3", "SLURM_NTASKS": "2", "SLURM_NNODES": "2"},
     "$SLURM_PROCID=3 is not below $SLURM_NTASKS=2"),
]


@pytest.mark.parametrize("env,expected", BROKEN, ids=[b[1][:40] for b in BROKEN])
def test_each_broken_launcher_environment_is_named(env, expected):
    assert any(expected in m for m in fails(env)), fails(env)


@pytest.mark.parametrize("env,expected", [BROKEN[0], BROKEN[2], BROKEN[5], BROKEN[7], BROKEN[9], BROKEN[11],
                                          BROKEN[14]],
                         ids=["rank-alone", "rank-too-big", "no-master-addr", "local-rank", "slurm-disagrees",
                              "slurm-rank-too-big", "ompi-rank-too-big"])
def test_a_broken_launcher_environment_stops_the_job_with_exit_2_and_one_line(tmp_path, env, expected):
    marker = tmp_path / "ran"
    r = hc_run(tmp_path, "--", "touch", str(marker), env=env)
    assert r.returncode == 2, r.stderr
    errors = [ln for ln in stderr_lines(r) if ln.startswith("hc: error:")]
    assert len(errors) == 1 and expected in errors[0] and "preflight" in errors[0]
    assert not marker.exists()


def test_torchrun_under_srun_with_a_torchrun_per_task_is_a_warning():
    env = {**TORCHRUN, "SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_STEP_NUM_NODES": "2"}
    (p,) = preflight.check_launcher_env(env)
    assert p.status == "WARN" and "8 tasks on 2 nodes" in p.message
    env = {**TORCHRUN, "SLURM_PROCID": "0", "SLURM_NTASKS": "3", "SLURM_STEP_NUM_NODES": "3"}
    (p,) = preflight.check_launcher_env(env)
    assert p.status == "WARN" and "$WORLD_SIZE=4 but the Slurm step has 3 nodes x $LOCAL_WORLD_SIZE=2" in p.message
    assert preflight.check_launcher_env({**env, "WORLD_SIZE": "6"}) == []


# ------------------------------------------------------------------ CUDA_VISIBLE_DEVICES


def test_one_gpu_for_every_local_rank_under_torchrun_fails_on_a_gpu_node_and_warns_on_a_cpu_node():
    env = {**TORCHRUN, "CUDA_VISIBLE_DEVICES": "3"}
    (p,) = preflight.check_cuda_mapping(env, has_gpus=True)
    assert p.status == "FAIL" and "every local rank sees the same single GPU" in p.message
    (p,) = preflight.check_cuda_mapping(env, has_gpus=False)
    assert p.status == "WARN"


def test_other_gpu_mappings():
    (p,) = preflight.check_cuda_mapping({**TORCHRUN, "CUDA_VISIBLE_DEVICES": "1,1"}, has_gpus=True)
    assert "lists 1 twice" in p.message
    four = {**TORCHRUN, "LOCAL_WORLD_SIZE": "4", "LOCAL_RANK": "3", "CUDA_VISIBLE_DEVICES": "0,1"}
    (p,) = preflight.check_cuda_mapping(four, has_gpus=True)
    assert "local rank 3 has no GPU of its own" in p.message
    assert preflight.check_cuda_mapping({**four, "LOCAL_RANK": "1"}, has_gpus=True) == []
    assert preflight.check_cuda_mapping({**TORCHRUN, "CUDA_VISIBLE_DEVICES": "0,1"}, has_gpus=True) == []
    # srun gives each task its own GPU: one device per task is right there
    srun = {"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "CUDA_VISIBLE_DEVICES": "1", "LOCAL_WORLD_SIZE": "2"}
    assert preflight.check_cuda_mapping(srun, has_gpus=True) == []


def test_the_gpu_mapping_stops_the_job_through_the_cli_where_the_node_has_gpus(tmp_path):
    env = {**TORCHRUN, "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "192.0.2.1",
           "CUDA_VISIBLE_DEVICES": "0"}
    r = hc_run(tmp_path, "--no-straggler-test", "--no-node-check", "--", "true", env=env)
    if preflight.node_has_nvidia_gpus():
        assert r.returncode == 2 and "same single GPU" in r.stderr.decode()
    else:
        assert r.returncode == 0, r.stderr  # a CPU node: gloo does not care, a warning says it
        assert "hc run: warning: preflight: CUDA_VISIBLE_DEVICES=0" in r.stderr.decode()


# ------------------------------------------------------------------ the master port


@pytest.fixture
def bound_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        yield s.getsockname()[1]


def test_a_master_port_already_listened_on_here_fails(bound_port):
    problems, _ = preflight.check_master_port({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(bound_port)})
    (p,) = problems
    assert p.status == "FAIL" and f"MASTER_PORT {bound_port} on 127.0.0.1 (this host) is already in use" in p.message
    problems, note = preflight.check_master_port({"MASTER_ADDR": "localhost", "MASTER_PORT": str(free_port())})
    assert problems == [] and "is free" in note


def test_the_port_is_not_judged_off_the_master_host_or_under_torchruns_agent_store(bound_port):
    env = {"MASTER_ADDR": "192.0.2.1", "MASTER_PORT": str(bound_port)}  # TEST-NET-1: never this host
    assert preflight.check_master_port(env) == ([], "MASTER_ADDR 192.0.2.1 is not this host")
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(bound_port), "TORCHELASTIC_USE_AGENT_STORE": "True"}
    problems, note = preflight.check_master_port(env)
    assert problems == [] and "agent store" in note


def test_a_bound_master_port_stops_rank_0_with_exit_2(tmp_path, bound_port):
    env = {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(bound_port)}
    r = hc_run(tmp_path, "--no-node-check", "--", "true", env=env)
    assert r.returncode == 2
    (line,) = [ln for ln in stderr_lines(r) if ln.startswith("hc: error:")]
    assert f"MASTER_PORT {bound_port}" in line and "already in use" in line


# ------------------------------------------------------------------ the node's quick tier


def test_a_failing_quick_tier_stops_the_job_with_its_finding(tmp_path):
    (tmp_path / "fabrics").mkdir()
    (tmp_path / "fabrics" / "t.yaml").write_text("net:\n  interfaces:\n    lo: {mtu: 1500}\n")
    (tmp_path / "hc.yaml").write_text("default_fabric: t\n")
    r = hc_run(tmp_path, "--", "true", env={"HC_CONFIG": str(tmp_path / "hc.yaml")})
    assert r.returncode == 2
    (line,) = [ln for ln in stderr_lines(r) if ln.startswith("hc: error:")]
    assert "quick tier FAILED: net.E001" in line and "expected 1500" in line


def test_a_quick_tier_error_or_timeout_only_warns(monkeypatch):
    from healthcheck.runners.base import CommandResult

    report = {"status": "ERROR", "nodes": [{"findings": [{"id": "hc.E002", "status": "ERROR", "message": "x"}]}]}
    monkeypatch.setattr(preflight, "run_command",
                        lambda argv, **kw: CommandResult(tuple(argv), 3, json.dumps(report), "", 0.1))
    p = preflight.quick_tier({})
    assert p is not None and p.status == "WARN" and "hc.E002 x" in p.message
    monkeypatch.setattr(preflight, "run_command",
                        lambda argv, **kw: CommandResult(tuple(argv), None, "", "", 5.0, timed_out=True))
    p = preflight.quick_tier({}, timeout_s=5)
    assert p is not None and p.status == "WARN" and "within 5 s" in p.message
    monkeypatch.setattr(preflight, "run_command",
                        lambda argv, **kw: CommandResult(tuple(argv), 0, '{"status": "PASS", "nodes": []}', "", 0.1))
    assert preflight.quick_tier({}) is None


# ------------------------------------------------------------------ exec semantics


def test_the_commands_exit_code_passes_through_without_preflight(tmp_path):
    assert hc_run(tmp_path, "--no-preflight", "--", "sh", "-c", "exit 7").returncode == 7


def test_the_commands_exit_code_passes_through_after_a_preflight_on_one_local_rank(tmp_path):
    r = hc_run(tmp_path, "--", "sh", "-c", "exit 7")
    assert r.returncode == 7, r.stderr
    r = hc_run(tmp_path, "--", "sh", "-c", "kill -TERM $$")
    assert r.returncode == -15  # a signal is the job's too: hc is no longer there to translate it


def test_argv_and_pid_pass_through_unchanged(tmp_path):
    args = ["a b", "--lr", "", "$HOME", "--no-preflight", "-h", "--", "ü"]
    prog = "import sys, os, json; print(json.dumps([os.getpid(), sys.argv[1:]]))"
    r = hc_run(tmp_path, "--", PY, "-c", prog, *args)
    assert r.returncode == 0, r.stderr
    pid, argv = json.loads(r.stdout)
    assert argv == args
    (manifest,) = (tmp_path / "logs").glob("hc-run.*.json")
    assert json.loads(manifest.read_text())["pid"] == pid  # exec: NCCL's %p is the manifest's pid
    # without `--` too: the first word that is not an option starts the command
    r = run_hc("run", "--no-preflight", "--log-dir", str(tmp_path / "l2"), PY, "-c", prog, "--help")
    assert json.loads(r.stdout)[1] == ["--help"]


def test_sigpipe_is_the_default_again_in_the_command(tmp_path):
    r = hc_run(tmp_path, "--no-preflight", "--", "sh", "-c", "grep SigIgn /proc/$$/status")
    ignored = int(r.stdout.decode().split()[1], 16)
    assert not ignored & (1 << (13 - 1))  # SIGPIPE


def test_a_command_that_cannot_start(tmp_path):
    r = hc_run(tmp_path, "--", "no-such-command-hc")
    assert r.returncode == 127 and stderr_lines(r) == ["hc: error: no-such-command-hc: command not found"]
    script = tmp_path / "script"
    script.write_text("#!/bin/sh\n")
    r = hc_run(tmp_path, "--no-preflight", "--", str(script))
    assert r.returncode == 126 and "cannot execute" in r.stderr.decode()
    r = run_hc("run")
    assert r.returncode == 4


def test_stragglers_against_the_median():
    assert stragglers([0.01, 0.011, 0.3, 0.012], 3.0, 0.05) == [2]
    assert stragglers([0.001, 0.004, 0.001], 3.0, 0.05) == []  # 4x, but 3 ms: noise, not a straggler
    assert stragglers([0.5], 3.0, 0.05) == []
