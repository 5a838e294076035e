"""`hc bw allreduce`, the pure-PyTorch collective sweep: nccl-tests' formulas and size
conventions, rank discovery per launcher, and real multi-process torch.distributed runs on
gloo (CPU) under torchrun, Open MPI's mpirun and srun-style variables. No bandwidth or
time is asserted, only the shape and the exactness of what was measured."""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
import sys
import time

import msgspec
import pytest
from support import run_hc, torch_installed

from healthcheck.bandwidth.torch_sweep import (
    PORT_BASE,
    PORT_SPAN,
    SWEEP_COLLECTIVES,
    bandwidths,
    derived_port,
    discover_ranks,
    eager_init_ok,
    geometry,
    parse_sizes,
    pattern_period,
    reduced_pattern,
)
from healthcheck.core.errors import UsageError
from healthcheck.parsers.bandwidth_common import BandwidthSample, bus_factor

torch_missing = pytest.mark.skipif(not torch_installed(), reason="torch is not installed")
needs_mpirun = pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI's mpirun is not installed")

SMALL = ["--sizes", "4K,64K", "--iters", "2", "--warmup", "1"]
_LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCH_CPP_LOG_LEVEL")


# ------------------------------------------------------------------ nccl-tests' formulas and sizes

# nccl-tests (src/*.cu GetBw, collectives.md §1.6): with S = count x typesize (count: the
# count column) and n ranks, algbw = S/t or S*n/t and busbw = algbw x factor; the size
# column is max(send, recv) bytes.
NCCL_TESTS = {
    # collective: (algbw multiplier of S, factor(n), send bytes(S, n), recv bytes(S, n))
    "all_reduce": (lambda n: 1, lambda n: 2 * (n - 1) / n, lambda s, n: s, lambda s, n: s),
    "all_gather": (lambda n: n, lambda n: (n - 1) / n, lambda s, n: s, lambda s, n: s * n),
    "reduce_scatter": (lambda n: n, lambda n: (n - 1) / n, lambda s, n: s * n, lambda s, n: s),
    "alltoall": (lambda n: n, lambda n: (n - 1) / n, lambda s, n: s * n, lambda s, n: s * n),
    "broadcast": (lambda n: 1, lambda n: 1.0, lambda s, n: s, lambda s, n: s),
}


@pytest.mark.parametrize("collective", SWEEP_COLLECTIVES)
@pytest.mark.parametrize("ranks", [1, 2, 3, 8, 16])
@pytest.mark.parametrize("size", [4096, 1 << 20, 1 << 30])
def test_sizes_counts_and_bandwidths_follow_nccl_tests(collective, ranks, size):
    mult, factor, send, recv = NCCL_TESTS[collective]
    geo = geometry(collective, size, ranks)
    s = geo.count * 4  # nccl-tests' S: count column x sizeof(float)
    assert geo.size_bytes == max(send(s, ranks), recv(s, ranks))  # the size column
    assert geo.send_elems * 4 == send(s, ranks) and geo.recv_elems * 4 == recv(s, ranks)
    assert size - geo.size_bytes < 4 * ranks  # rounded down to whole elements per chunk
    t = 1.234e-3
    algbw, busbw = bandwidths(collective, geo.size_bytes, t, ranks)
    assert algbw == pytest.approx(s * mult(ranks) / t / 1e9, rel=1e-12)
    assert busbw == pytest.approx(algbw * factor(ranks), rel=1e-12)
    assert busbw == algbw * bus_factor(collective, ranks)


def test_all_gather_size_is_the_whole_gathered_buffer():
    geo = geometry("all_gather", 1 << 20, 8)  # nccl-tests -b 1M -g 8: size 1048576, count 32768
    assert (geo.size_bytes, geo.count, geo.send_elems, geo.recv_elems) == (1 << 20, 32768, 32768, 262144)
    assert geometry("all_gather", 1000, 3).size_bytes == 996  # 83 floats per rank
    assert geometry("alltoall", 8, 4).size_bytes == 16  # at least one element per chunk
    assert geometry("all_reduce", 10, 4).size_bytes == 8
    assert geometry("all_reduce", 1, 4).size_bytes == 4
    assert {geometry(c, 4096, 2).placement for c in ("all_reduce", "broadcast")} == {"in-place"}
    assert {geometry(c, 4096, 2).placement for c in ("all_gather", "reduce_scatter", "alltoall")} == {"out-of-place"}


def test_one_rank_reduces_nothing_over_the_bus():
    assert bandwidths("all_reduce", 1 << 20, 1e-3, 1)[1] == 0.0
    assert bandwidths("broadcast", 1 << 20, 1e-3, 1)[1] == bandwidths("broadcast", 1 << 20, 1e-3, 1)[0]
    assert bandwidths("all_reduce", 1 << 20, 0.0, 4) == (0.0, 0.0)


@pytest.mark.parametrize("ranks", [1, 2, 3, 7, 8, 100, 2048, 2049, 5000, 70000])
def test_check_values_stay_exact_in_float32(ranks):
    p = pattern_period(ranks)
    assert p >= 2 and ranks * p <= 1 << 24


@pytest.mark.parametrize("ranks, period", [(1, 8191), (2, 8191), (5, 7), (7, 7), (16, 7), (23, 5), (3, 2)])
def test_reduced_pattern_is_the_sum_over_ranks(ranks, period):
    brute = [sum((k + r) % period + 1 for r in range(ranks)) for k in range(period)]
    assert reduced_pattern(ranks, period) == brute


# ------------------------------------------------------------------ --sizes


def test_sizes_are_binary_sorted_and_distinct():
    assert parse_sizes("1M,16M,1G") == (1 << 20, 16 << 20, 1 << 30)
    assert parse_sizes("1G, 4k,4KiB, 4KB,512") == (512, 4096, 1 << 30)
    assert parse_sizes("1K:8K") == (1024, 2048, 4096, 8192)
    assert parse_sizes("1.5M") == (3 << 19,)
    assert parse_sizes("1T") == (1 << 40,)


@pytest.mark.parametrize("text", ["", "0", "12X", "1M,", ",1M", "-1", "1.3", "2T", "1M:1K", "1:1T,3:1T", "1MB/s", "M"])
def test_bad_sizes_are_refused(text):
    with pytest.raises(ValueError):
        parse_sizes(text)


@pytest.mark.parametrize("args, what", [
    (["--sizes", "12X"], b"--sizes"),
    (["--sizes", "0"], b"--sizes"),
    (["--sizes", ""], b"--sizes"),
    (["--collectives", "all_reduce,bogus"], b"bogus"),
    (["--iters", "0"], b"--iters"),
])
def test_bad_options_are_one_line_usage_errors(args, what):
    r = run_hc("bw", "allreduce", *args)
    err = r.stderr.decode()
    assert r.returncode == 4, err
    assert what.decode() in err and "Traceback" not in err
    assert [ln for ln in err.splitlines() if ln.startswith("hc: error:")] and r.stdout == b""
    if what == b"--sizes":
        assert err.strip().count("\n") == 0  # exactly one line


def test_mpirun_without_a_rendezvous_address_is_a_usage_error():
    r = run_hc("bw", "allreduce", env={"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2",
                                        **{v: "" for v in ("MASTER_ADDR", "MASTER_PORT")}})
    assert r.returncode == 4 and r.stderr.decode().strip().startswith("hc: error: under mpirun give --master-addr")
    assert r.stderr.decode().strip().count("\n") == 0


# ------------------------------------------------------------------ rank discovery


def test_torchrun_variables():
    env = {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "3", "MASTER_ADDR": "n1", "MASTER_PORT": "29500",
           "SLURM_PROCID": "0", "SLURM_NTASKS": "1", "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1"}
    info = discover_ranks(env)
    assert (info.launcher, info.rank, info.world_size, info.local_rank, info.master_addr, info.master_port) == \
        ("torchrun", 3, 8, 3, "n1", 29500)
    assert discover_ranks(env, "n9", 1234).master_addr == "n9"
    assert discover_ranks(env, "n9", 1234).master_port == 1234


def test_mpirun_variables_beat_the_allocations_slurm_ones():
    env = {"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "16", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
           "SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_NODELIST": "gpu[01-02]", "SLURM_JOB_ID": "9"}
    with pytest.raises(UsageError, match="--master-addr"):
        discover_ranks(env)
    info = discover_ranks(env, "gpu01", 29400)
    assert (info.launcher, info.rank, info.world_size, info.local_rank, info.master_addr, info.master_port) == \
        ("mpirun", 5, 16, 1, "gpu01", 29400)
    info = discover_ranks({**env, "MASTER_ADDR": "gpu02", "MASTER_PORT": "29401"})
    assert (info.master_addr, info.master_port) == ("gpu02", 29401)


def test_srun_variables_step_nodelist_and_derived_port():
    env = {"SLURM_PROCID": "9", "SLURM_NTASKS": "16", "SLURM_LOCALID": "1", "SLURM_JOB_ID": "123456",
           "SLURM_STEP_ID": "2", "SLURM_JOB_NODELIST": "gpu[001-008]", "SLURM_STEP_NODELIST": "gpu[003-004,010]"}
    info = discover_ranks(env)
    assert (info.launcher, info.rank, info.world_size, info.local_rank, info.master_addr) == \
        ("srun", 9, 16, 1, "gpu003")
    assert info.master_port == derived_port("123456", "2")
    assert discover_ranks({k: v for k, v in env.items() if k != "SLURM_STEP_NODELIST"}).master_addr == "gpu001"
    given = discover_ranks(env, "login1", 4000)
    assert (given.master_addr, given.master_port) == ("login1", 4000)
    assert discover_ranks({**env, "MASTER_ADDR": "x1", "MASTER_PORT": "29555"}).master_addr == "x1"
    with pytest.raises(UsageError, match="--master-port"):
        discover_ranks({k: v for k, v in env.items() if k != "SLURM_JOB_ID"})
    with pytest.raises(UsageError, match="--master-addr"):
        discover_ranks({k: v for k, v in env.items() if "NODELIST" not in k})


def test_derived_ports_agree_differ_and_avoid_the_ephemeral_range():
    ports = {derived_port(str(job), str(step)) for job in range(1000, 1100) for step in range(3)}
    assert len(ports) == 300 and all(PORT_BASE <= p < PORT_BASE + PORT_SPAN for p in ports)
    assert derived_port("123_4", "batch") == derived_port("123_4", "batch")
    assert PORT_BASE <= derived_port("123_4", "batch") < PORT_BASE + PORT_SPAN


def test_no_launcher_is_one_rank_on_loopback():
    info = discover_ranks({})
    assert (info.launcher, info.rank, info.world_size, info.master_addr) == ("none", 0, 1, "127.0.0.1")
    assert 0 < info.master_port < 65536


@pytest.mark.parametrize("env, match", [
    ({"RANK": "2", "WORLD_SIZE": "2", "MASTER_ADDR": "a", "MASTER_PORT": "1"}, "not within"),
    ({"RANK": "x", "WORLD_SIZE": "2", "MASTER_ADDR": "a", "MASTER_PORT": "1"}, r"\$RANK"),
    ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "a", "MASTER_PORT": "99999"}, "MASTER_PORT"),
    ({"RANK": "0", "WORLD_SIZE": "2"}, "MASTER_ADDR"),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "a[1-"}, "hostlist"),
])
def test_broken_launcher_variables_are_usage_errors(env, match):
    with pytest.raises(UsageError, match=match):
        discover_ranks(env)


@pytest.mark.parametrize("version, ok", [("2.1.2", True), ("2.6.0+cu124", True), ("2.6.1", False),
                                         ("2.7.0+cu128", False), ("2.7.0a0+git1234", False), ("2.7.1", True),
                                         ("2.13.0+cpu", True)])
def test_eager_nccl_init_skipped_where_it_hangs(version, ok):
    assert eager_init_ok(version) is ok  # pytorch#153960


def test_help_and_the_module_import_no_torch():
    code = ("import sys\nimport healthcheck.bandwidth.torch_sweep\nfrom healthcheck.cli import main\n"
            "try:\n    main(['bw', 'allreduce', '--help'])\nexcept SystemExit:\n    pass\n"
            "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert r.stdout.decode().strip().endswith("NO-TORCH"), r.stderr.decode()
    assert b"Exit codes" in r.stdout and b"HC_BW_TEST_CORRUPT_RANK" in r.stdout


def test_a_collective_the_backend_lacks_is_reported_not_run():
    """Feature detection: 'does not support' from the backend on the first call marks the
    collective unsupported; any other failure stays an error."""
    torch = pytest.importorskip("torch")
    from healthcheck.bandwidth.torch_sweep import RankInfo, SweepOptions, _Session

    class Dist:
        def all_to_all_single(self, out, inp):
            raise RuntimeError("ProcessGroupGloo does not support alltoall\nException raised from ...")

        def all_reduce(self, t):
            raise RuntimeError("Connection reset by peer")

        def broadcast(self, t, src):
            t.fill_(1.0)

    session = _Session(torch, Dist(), RankInfo("none", 0, 2, 0, "127.0.0.1", 1), "gloo", torch.device("cpu"),
                       SweepOptions(), None)
    why = session._probe("alltoall")
    assert why is not None and "gloo in torch" in why and why.endswith("does not support alltoall")
    assert session._probe("broadcast") is None
    with pytest.raises(RuntimeError, match="reset"):
        session._probe("all_reduce")


# ------------------------------------------------------------------ real runs on gloo


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HC_", "SLURM", "OMPI_", "PMIX", "TORCHELASTIC")) and k not in _LAUNCHER_VARS}
    env.update(OMP_NUM_THREADS="1", PYTHONFAULTHANDLER="1", **extra)
    if os.path.exists("/sys/class/net/lo"):  # gloo on loopback, whatever the host name resolves to
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


HC = [sys.executable, "-m", "healthcheck", "bw", "allreduce"]


def _assert_sweep(doc: dict, ranks: int, collectives, sizes, launcher: str) -> None:
    assert doc["ranks"] == ranks and doc["launcher"] == launcher and doc["backend"] == "gloo"
    assert len(doc["hosts"]) == ranks and len(doc["devices"]) == ranks and doc["torch_version"]
    assert doc["wrong"] == 0 and doc["unsupported"] == {} and doc["check"] is True
    got = [(s["collective"], s["size_bytes"]) for s in doc["samples"]]
    assert got == [(c, s) for c in collectives for s in sizes]
    for s in msgspec.convert(doc["samples"], list[BandwidthSample]):  # the shared fact type, defaults and all
        assert s.wrong == 0 and s.ranks == ranks and s.dtype == "float"
        assert len(s.rank_times_us) == ranks and s.time_us == max(s.rank_times_us)
        assert s.busbw_gbytes_per_s == pytest.approx(s.algbw_gbytes_per_s * bus_factor(s.collective, ranks))
        assert s.algbw_gbytes_per_s == pytest.approx(s.size_bytes / s.time_us / 1e3)
        assert s.placement == ("in-place" if s.collective in ("all_reduce", "broadcast") else "out-of-place")
        assert s.redop == ("sum" if s.collective in ("all_reduce", "reduce_scatter") else None)


def _srun_style(nranks: int, args: list[str], job_id: str | None = None, **extra: str) -> list[subprocess.Popen]:
    if job_id is None:  # a job whose derived port is free here
        job_id = next(j for j in (str(random.randrange(10**6, 10**7)) for _ in range(1000))
                      if _port_free(derived_port(j, "0")))
    procs = []
    for rank in range(nranks):
        env = _env(SLURM_PROCID=str(rank), SLURM_NTASKS=str(nranks), SLURM_LOCALID=str(rank),
                   SLURM_JOB_NODELIST="localhost", SLURM_JOB_ID=job_id, SLURM_STEP_ID="0", **extra)
        procs.append(subprocess.Popen([*HC, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    return procs


def _collect(procs: list[subprocess.Popen], timeout: float = 120) -> list[tuple[int, bytes, bytes]]:
    out = []
    try:
        for p in procs:
            stdout, stderr = p.communicate(timeout=timeout)
            out.append((p.returncode, stdout, stderr))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return out


@pytest.mark.slow
@torch_missing
@pytest.mark.parametrize("nproc", [2, 4])
def test_torchrun_sweeps_every_collective_and_size(nproc):
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
                        "-m", "healthcheck", "bw", "allreduce", "--collectives", "all", "--format", "json", *SMALL],
                       capture_output=True, env=_env(), timeout=180)
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    doc = json.loads(r.stdout)  # the whole stdout: rank 0's document, nothing from the others
    _assert_sweep(doc, nproc, SWEEP_COLLECTIVES, [4096, 65536], "torchrun")


@pytest.mark.slow
@torch_missing
@needs_mpirun
def test_mpirun_with_master_addr_and_port():
    r = subprocess.run([shutil.which("mpirun"), "--allow-run-as-root", "--oversubscribe", "-np", "2", *HC,
                        "--master-addr", "127.0.0.1", "--master-port", str(_free_port()),
                        "--collectives", "all_reduce,all_gather", "--format", "json", *SMALL],
                       capture_output=True, env=_env(), timeout=180)
    assert r.returncode == 0, (r.stdout + r.stderr).decode()[-3000:]
    _assert_sweep(json.loads(r.stdout), 2, ["all_reduce", "all_gather"], [4096, 65536], "mpirun")


@pytest.mark.slow
@torch_missing
def test_srun_style_variables_rendezvous_on_the_first_node_and_derived_port():
    results = _collect(_srun_style(2, ["--collectives", "reduce_scatter,broadcast,alltoall", "--format", "json",
                                       *SMALL]))
    (rc0, out0, err0), (rc1, out1, err1) = results
    assert rc0 == 0 and rc1 == 0, (err0 + err1).decode()[-3000:]
    assert out1 == b"" and b"hc: error" not in err1
    _assert_sweep(json.loads(out0), 2, ["reduce_scatter", "broadcast", "alltoall"], [4096, 65536], "srun")


@pytest.mark.slow
@torch_missing
def test_one_rank_alone_prints_nccl_tests_table():
    r = subprocess.run([*HC, "--collectives", "all_reduce,broadcast", *SMALL], capture_output=True, env=_env(),
                       timeout=120)
    assert r.returncode == 0, r.stderr.decode()
    text = r.stdout.decode()
    assert "1 ranks (none)" in text and "# Collective all_reduce (in-place)" in text
    assert "# Collective broadcast (in-place)" in text and text.count("# Out of bounds values : 0 OK") == 2
    rows = [ln.split() for ln in text.splitlines() if ln and not ln.startswith("#")]
    assert [(row[0], row[1], row[2], row[3], row[8]) for row in rows] == [
        ("4096", "1024", "float", "sum", "0"), ("65536", "16384", "float", "sum", "0"),
        ("4096", "1024", "float", "none", "0"), ("65536", "16384", "float", "none", "0")]


@pytest.mark.slow
@torch_missing
def test_a_corrupted_rank_is_counted_wrong_and_exits_2():
    args = ["--collectives", "all_reduce,all_gather,alltoall", "--sizes", "4K", "--iters", "1", "--warmup", "0",
            "--format", "json"]
    (rc0, out0, err0), (rc1, out1, err1) = _collect(_srun_style(2, args, HC_BW_TEST_CORRUPT_RANK="1"))
    assert (rc0, rc1) == (2, 2), (err0 + err1).decode()[-3000:]
    doc = json.loads(out0)
    wrong = {s["collective"]: s["wrong"] for s in doc["samples"]}
    # rank 1's first element: in every rank's sum, in every rank's gather, in rank 0's alltoall chunk
    assert wrong == {"all_reduce": 2, "all_gather": 2, "alltoall": 1} and doc["wrong"] == 5
    lines = err0.decode().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hc: error: 5 wrong elements")
    assert out1 == b"" and b"hc: error" not in err1


@pytest.mark.slow
@torch_missing
@pytest.mark.parametrize("rank", ["0", "1"])
def test_a_dead_master_fails_within_the_timeout_in_one_line(rank):
    """Rank 1 finds nobody listening; rank 0 waits for a peer that never comes: exit 3, one line."""
    port = _free_port()
    env = _env(SLURM_PROCID=rank, SLURM_NTASKS="2", SLURM_LOCALID=rank, SLURM_JOB_NODELIST="localhost",
               SLURM_JOB_ID="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    start = time.monotonic()
    r = subprocess.run([*HC, "--timeout", "3", *SMALL], capture_output=True, env=env, timeout=120)
    took = time.monotonic() - start
    err = r.stderr.decode()
    assert r.returncode == 3, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "rendezvous at 127.0.0.1" in lines[0] and "Traceback" not in err, err
    assert lines[0].startswith("hc: error: rank 1: " if rank == "1" else "hc: error: rendezvous")
    assert r.stdout == b""
    assert took < 3 + 2 + 20  # --timeout, the watchdog's grace, and starting python and torch
