"""A deep sweep's persistent torch workers started by srun or mpirun (pairsweep/workers.py with
`bandwidth.pairs.launcher: srun | mpirun`), here through stand-in launchers that note
their argv and run the task on this machine: real `hc bw serve` processes on gloo over
loopback, driven through the launcher's stdin and stdout. What a stand-in cannot show
(Slurm's allocation, Open MPI's daemons) the rig's real srun and mpirun do
(integration/test_pair_launchers_rig.py); this is what hc asks of them and how it reads
them back, kills them and cancels what srun asked for.

Also the carrier itself, runners/process_stream.ProcessStream, on plain processes."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
from support import write_stub
from test_torch_sweep import _free_port

from healthcheck.core.config.loader import load_config
from healthcheck.orchestrate.pairsweep.transport import TorchOutcome
from healthcheck.runners.launch import Launch
from healthcheck.runners.process_stream import ProcessStream

# srun's and mpirun's options hc gives, as the stand-in must skip them to find the program
LAUNCHER = """#!{python}
import json, os, sys
args = sys.argv[1:]
with open({log!r}, "a") as f:
    f.write(json.dumps([os.path.basename(sys.argv[0])] + args) + "\\n")
takes_value = {{"-np", "--host", "-x", "--bind-to", "--map-by"}}
i = 0
while i < len(args) and args[i].startswith("-"):
    i += 3 if args[i] == "--mca" else 2 if args[i] in takes_value else 1
{tail}
"""
RUN = "os.execvp(args[i], args[i:])\n"
# a launcher that outlives its task (as a wedged srun would): close() must kill it
LINGER = "import subprocess, time\nsubprocess.call(args[i:])\ntime.sleep(600)\n"


def site(tmp_path: Path, launcher: str, tail: str = RUN) -> tuple[object, Path]:
    bin_dir = tmp_path / "bin"
    log = tmp_path / "launcher.log"
    for name in ("srun", "mpirun"):
        path = write_stub(bin_dir, name, "")
        path.write_text(LAUNCHER.format(python=sys.executable, log=str(log), tail=tail))
    write_stub(bin_dir, "scancel", f"echo scancel \"$@\" >> {tmp_path / 'scancel.log'}\n")
    write_stub(bin_dir, "hc", f'exec {sys.executable} -m healthcheck "$@"\n')
    fabrics = tmp_path / "fabrics"
    fabrics.mkdir()
    (fabrics / "f.yaml").write_text(
        "extends: generic\nbandwidth:\n  sizes: [64K]\n  repeats: 1\n"
        "  torch: {backend: gloo, iters: 2, warmup: 1, env: {GLOO_SOCKET_IFNAME: lo, OMP_NUM_THREADS: '1'}}\n"
        f"  pairs: {{launcher: {launcher}, timeout_s: 60, port: {_free_port()}}}\n")
    (tmp_path / "hc.yaml").write_text(
        f"fabric_dirs: [{fabrics}]\nnodes: {{'n[1-2]': f}}\n"
        f"slurm: {{srun: {bin_dir / 'srun'}, scontrol: {bin_dir / 'scontrol'}, remote_hc: {bin_dir / 'hc'}}}\n"
        f"ssh: {{remote_hc: {bin_dir / 'hc'}}}\n")
    return load_config(tmp_path / "hc.yaml"), log


def pool(config):
    from healthcheck.orchestrate.pairsweep.plan import PairPlan
    from healthcheck.orchestrate.pairsweep.workers import WorkerPool

    return WorkerPool(config, PairPlan.from_config(config, "n1"), 2)


def transport(config, workers, per_test=None):
    """The sweep's transport over `workers`; `per_test` (members -> outcome) in place of the
    launcher's per-test start where a member has no `bw serve`."""
    from healthcheck.orchestrate.pairsweep.choose import per_test_transport
    from healthcheck.orchestrate.pairsweep.workers import WorkerTransport

    fallback = per_test_transport(config, workers.plan)
    if per_test is not None:
        fallback.run = per_test
    return WorkerTransport(config, workers.plan, workers, fallback)


def launches(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:  # gone (or reaped between two looks)
        return False
    return stat[stat.rfind(b")") + 2:stat.rfind(b")") + 3] not in (b"Z", b"X")


def gone(pids, limit_s: float = 15) -> bool:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if not any(_running(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    pytest.importorskip("torch")
    for name in list(os.environ):
        if name.startswith(("SLURM", "OMPI_", "PMIX", "HC_")) or name in ("RANK", "WORLD_SIZE", "MASTER_ADDR"):
            monkeypatch.delenv(name)


def test_srun_workers_serve_every_test_each_on_its_own_node_and_end_with_the_sweep(tmp_path):
    config, log = site(tmp_path, "srun")
    workers = pool(config)
    try:
        for members in (["n1", "n2"], ["n2", "n1"], ["n1", "n2"]):
            got = workers.run_test(members, "127.0.0.1")
            samples, why = got.samples, got.why
            assert samples and why == "", why
            assert {(s.collective, s.ranks, s.wrong) for s in samples} == {("all_reduce", 2, 0)}
        assert workers.starts() == {"n1": 1, "n2": 1}  # one start per node for three tests
        pids = [w.stream.proc.pid for w in workers._workers.values()]
    finally:
        workers.close()
    assert gone(pids)
    argvs = launches(log)
    assert sorted(a for argv in argvs for a in argv if a.startswith("--nodelist=")) == ["--nodelist=n1", "--nodelist=n2"]
    for argv in argvs:
        # a one-node allocation of its own, whole, a bounded wait, a name to cancel it by,
        # and output as it comes (no --label: the protocol's lines are read unprefixed)
        assert {"--nodes=1", "--ntasks=1", "--exclusive"} <= set(argv) and "--label" not in argv, argv
        assert any(a.startswith("--immediate=") for a in argv) and any(a.startswith("--job-name=hc-pair-")
                                                                      for a in argv), argv
        assert argv[-7:] == [str(tmp_path / "bin" / "hc"), "bw", "serve", "--backend", "gloo", "--idle-timeout",
                             "600"], argv
    assert not (tmp_path / "scancel.log").exists()  # each ended at the end of its input: nothing to cancel


class _NotGoneOnce:
    """A retired worker's stream (workers._Worker.leftover) whose command was still
    there after SIGKILL the first time it was asked, gone the next."""

    def __init__(self) -> None:
        self.asked = 0

    def still_running(self) -> str:
        self.asked += 1
        return "process group 4242 still there 5 s after SIGKILL" if self.asked == 1 else ""


def test_a_retired_worker_not_known_gone_keeps_its_nodes_next_test_from_starting(tmp_path):
    """Retiring ends a worker and waits (bounded) until it is gone; one that is not may still
    hold the node's pair port. It is checked (and killed) again before its node's next test,
    which is ERROR saying why instead of starting beside it; once it is gone, tests start."""
    config, log = site(tmp_path, "srun")
    workers = pool(config)
    try:
        w = workers._worker("n1")
        w.pid, w.leftover = 4241, _NotGoneOnce()
        got = workers.run_test(["n1", "n2"], "127.0.0.1")
        samples, why = got.samples, got.why
        assert samples is None, why
        assert ("n1: its worker retired from an earlier test (pid 4241) is still there: process group 4242 "
                "still there 5 s after SIGKILL") in why, why
        assert [a for argv in launches(log) for a in argv if a.startswith("--nodelist=")] == ["--nodelist=n2"]
        got = workers.run_test(["n1", "n2"], "127.0.0.1")  # it is gone now: n1's worker starts
        samples, why = got.samples, got.why
        assert samples and why == "", why
        assert w.leftover is None and workers.starts() == {"n1": 1, "n2": 1}
    finally:
        workers.close()


def test_inside_an_allocation_srun_workers_are_steps_of_it(tmp_path, monkeypatch):
    config, log = site(tmp_path, "srun")
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    workers = pool(config)
    try:
        got = workers.run_test(["n1", "n2"], "127.0.0.1")
        samples, why = got.samples, got.why
        assert samples and why == "", why
    finally:
        workers.close()
    for argv in launches(log):
        assert {"--jobid=4242", "--overlap"} <= set(argv), argv
        assert "--exclusive" not in argv and not any(a.startswith("--job-name") for a in argv), argv


def test_mpirun_workers_run_one_rank_on_their_node_untagged(tmp_path, monkeypatch):
    config, log = site(tmp_path, "mpirun")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")  # hc runs `mpirun` from PATH
    workers = pool(config)
    try:
        for members in (["n1", "n2"], ["n2", "n1"]):
            got = workers.run_test(members, "127.0.0.1")
            samples, why = got.samples, got.why
            assert samples and why == "", why
        assert workers.starts() == {"n1": 1, "n2": 1}
    finally:
        workers.close()
    argvs = launches(log)
    assert sorted(a[a.index("--host") + 1] for a in argvs) == ["n1", "n2"]
    for argv in argvs:
        assert argv[1:3] == ["-np", "1"] and "--tag-output" not in argv, argv
        assert ["-x", "GLOO_SOCKET_IFNAME"] == argv[argv.index("-x"):argv.index("-x") + 2], argv  # names, not values


def test_a_launcher_that_outlives_its_worker_is_killed_and_its_allocation_cancelled(tmp_path):
    config, log = site(tmp_path, "srun", tail=LINGER)
    workers = pool(config)
    try:
        got = workers.run_test(["n1", "n2"], "127.0.0.1")
        samples, why = got.samples, got.why
        assert samples and why == "", why
        pids = [w.stream.proc.pid for w in workers._workers.values()]
    finally:
        workers.close()
    assert gone(pids)
    names = sorted(next(a.split("=", 1)[1] for a in argv if a.startswith("--job-name=")) for argv in launches(log))
    cancelled = sorted(line.split()[1].split("=", 1)[1] for line in (tmp_path / "scancel.log").read_text().splitlines())
    assert cancelled == names  # by its own unique name: never anyone else's job
    job_of = {next(a[len("--nodelist="):] for a in argv if a.startswith("--nodelist=")):
              next(a[len("--job-name="):] for a in argv if a.startswith("--job-name=")) for argv in launches(log)}
    assert sorted(workers.notes) == [f"{node}: cancelled the allocation srun asked for, job {job_of[node]}"
                                     for node in ("n1", "n2")]  # for the run's notes


def one_test(config):
    workers = pool(config)
    try:
        return workers.run_test(["n1", "n2"], "127.0.0.1")
    finally:
        workers.close()


def test_a_launcher_that_is_not_installed_is_the_tests_error_naming_it(tmp_path):
    config, _ = site(tmp_path, "srun")
    (tmp_path / "bin" / "srun").unlink()
    got = one_test(config)
    samples, why = got.samples, got.why
    assert samples is None
    assert f"n1: {tmp_path / 'bin' / 'srun'} not found (bandwidth.pairs.launcher: srun)" in why, why


def test_a_node_whose_worker_cannot_start_names_the_node_and_what_the_launcher_said(tmp_path):
    config, _ = site(tmp_path, "srun", tail="sys.stderr.write('srun: error: Unable to allocate resources: "
                                              "Requested nodes are busy\\n')\nsys.exit(1)\n")
    got = one_test(config)
    samples, why = got.samples, got.why
    assert samples is None
    assert "n1: `" in why and "bw serve` did not start: srun: error: Unable to allocate resources: Requested nodes " \
        "are busy" in why, why


def test_an_mpirun_that_cannot_start_a_worker_keeps_open_mpis_whole_message(tmp_path, monkeypatch):
    """Issue 18 D.18, with persistent workers: the line says the cause (ssh's), the
    evidence holds both of Open MPI's banners, not only their last line."""
    from support import FIXTURES

    banner = FIXTURES / "mpirun" / "unreachable-hosts.stderr"
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")  # hc runs `mpirun` from PATH
    config, _ = site(tmp_path, "mpirun", tail=f"sys.stderr.write(open({str(banner)!r}).read().replace('n01', "
                                              "args[args.index('--host') + 1]))\nsys.exit(255)\n")
    got = one_test(config)
    samples, why = got.samples, got.why
    assert samples is None
    assert "n1: `" in why and "bw serve` did not start: ssh: Could not resolve hostname n1" in why, why
    evidence = got.evidence
    assert "ORTE was unable to reliably start one or more daemons" in evidence
    assert "ORTE does not know how to route a message" in evidence
    assert "$ mpirun -np 1 " in evidence  # the command line each worker was started with


# ------------------------------------------------------------ the carrier


def stream(script: str) -> ProcessStream:
    return ProcessStream.start("here", Launch("local", (sys.executable, "-c", script)), dict(os.environ))


ECHO = "import sys\nfor line in sys.stdin:\n    print('got ' + line.strip(), flush=True)\nsys.stderr.write('bye\\n')\n"


def test_lines_go_in_and_come_back_and_end_of_input_ends_it():
    s = stream(ECHO)
    try:
        assert s.send_line(b"one") and s.send_line(b"two\n")
        deadline = time.monotonic() + 20
        assert s.read_line(deadline, lambda line: line.startswith(b"got t")) == b"got two"  # "got one" skipped
        assert not s.ended
    finally:
        killed = s.close()
    assert killed is False and s.ended and s.exit_status() == 0
    assert not s.send_line(b"three") and s.read_line(time.monotonic() + 1, lambda line: True) is None


def test_a_task_that_ended_says_why_from_its_stderr():
    s = stream("import sys\nsys.stderr.write('worker: no GPU\\n')\nsys.exit(3)\n")
    try:
        assert s.read_line(time.monotonic() + 20, lambda line: True) is None
        assert s.ended and s.stderr_tail() == "worker: no GPU"
        assert not s.send_line(b"x")
    finally:
        s.close()


def test_a_line_without_end_is_bounded():
    from healthcheck.runners.line_stream import MAX_LINE

    s = stream(f"import sys, time\nsys.stdout.write('x' * {MAX_LINE + 10})\nsys.stdout.flush()\ntime.sleep(60)\n")
    try:
        assert s.read_line(time.monotonic() + 30, lambda line: True) is None
        assert s.ended and "a stdout line over" in s.stderr_tail()
    finally:
        assert s.close() is True  # it did not end at the end of its input: killed


def test_the_deadline_returns_none_while_it_runs():
    s = stream(ECHO)
    try:
        started = time.monotonic()
        assert s.read_line(started + 0.5, lambda line: True) is None
        assert not s.ended and time.monotonic() - started < 5
    finally:
        s.close()


SPAWN_FROM_A_THREAD = """
import subprocess, sys, threading, time
from healthcheck.runners.local import popen_for_life
started = []
t = threading.Thread(target=lambda: started.append(popen_for_life(["sleep", "120"])))
t.start(); t.join()
time.sleep(1.0)  # the thread that asked is gone; the child must not have gone with it
print(started[0].pid, started[0].poll(), flush=True)
time.sleep(120)
"""


def test_a_child_started_from_a_short_lived_thread_outlives_it_and_dies_with_hc():
    """PR_SET_PDEATHSIG fires when the forking *thread* ends: a worker started from a test's
    thread would die with it; popen_for_life forks from a thread that lasts."""
    import signal
    import subprocess

    parent = subprocess.Popen([sys.executable, "-c", SPAWN_FROM_A_THREAD], stdout=subprocess.PIPE)
    child = None
    try:
        assert parent.stdout is not None
        pid, status = parent.stdout.readline().split()
        child = int(pid)
        assert status == b"None"  # still running after its thread ended
        parent.send_signal(signal.SIGKILL)  # no handler runs: only the kernel takes the child
        parent.wait(10)
        assert gone([child], limit_s=5), f"sleep ({child}) outlived its parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if child is not None and Path(f"/proc/{child}").exists() and b"sleep" in Path(f"/proc/{child}/cmdline").read_bytes():
            os.kill(child, 9)


def test_launched_workers_meet_at_the_launchers_name_of_the_first_member_not_the_ssh_one(tmp_path, monkeypatch):
    """Neither srun nor mpirun (Open MPI has its own ssh) reads hc's ssh config: a
    ProxyCommand or a HostName there must neither fail the test nor move the rendezvous."""
    from healthcheck.orchestrate.pairsweep.workers import WorkerPool

    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text("Host n1\n  HostName 10.9.9.9\n  ProxyCommand ssh -W %h:%p jump\n")
    seen = []
    monkeypatch.setattr(WorkerPool, "run_test",
                        lambda self, members, master: seen.append(master) or TorchOutcome([], ""))
    for launcher in ("srun", "mpirun"):
        site(tmp_path / launcher, launcher)
        main = tmp_path / launcher / "hc.yaml"
        main.write_text(main.read_text().replace("ssh: {", f"ssh: {{config_file: {ssh_config}, "))
        config = load_config(main)
        assert transport(config, pool(config)).run(["n1", "n2"]) == TorchOutcome([], "")
    assert seen == ["n1", "n1"]


def test_a_member_without_bw_serve_frees_its_partners_node_before_the_per_test_launch(tmp_path, monkeypatch):
    """Under srun each worker holds its node whole; the per-test launch for a pair whose
    other member's hc has no `bw serve` asks for both nodes, so the partner's worker ends
    first (and starts again when a later test needs it)."""
    config, _ = site(tmp_path, "srun")
    workers = pool(config)
    alive_at_launch = []

    def per_test(members):
        alive_at_launch.append(workers._workers["n1"].usable())
        return TorchOutcome(None, "per test")

    try:
        got = workers.run_test(["n1", "n2"], "127.0.0.1")
        samples, why = got.samples, got.why
        assert samples and why == "", why
        assert workers._workers["n1"].usable()
        workers._workers["n2"].lacks_serve = True  # as a worker answering "No such command 'serve'" marks it
        assert transport(config, workers, per_test).run(["n1", "n2"]) == TorchOutcome(None, "per test")
        assert alive_at_launch == [False]
    finally:
        workers.close()


NO_SERVE_ON_N2 = """node = next((a.split("=", 1)[1] for a in args if a.startswith("--nodelist=")), "")
if node == "n2" and "serve" in args:
    sys.stderr.write("Usage: hc bw [OPTIONS] COMMAND [ARGS]...\\nError: No such command 'serve'.\\n")
    sys.exit(2)
""" + RUN


@pytest.mark.parametrize("inside_a_job", [False, True], ids=["own-allocations", "steps"])
def test_a_node_found_without_bw_serve_frees_only_a_held_partner_for_the_per_test_launch(tmp_path, monkeypatch,
                                                                                         inside_a_job):
    """n2's hc answers "No such command 'serve'" when its worker starts: the test goes the
    per-test way. n1's worker holds its node whole when it is an allocation of its own, so
    it ends first; as a step of hc's own allocation it holds nothing and serves on."""
    if inside_a_job:
        monkeypatch.setenv("SLURM_JOB_ID", "4242")
    config, _ = site(tmp_path, "srun", tail=NO_SERVE_ON_N2)
    workers = pool(config)
    n1_alive_at_launch = []

    def per_test(members):
        n1_alive_at_launch.append(workers._workers["n1"].usable())
        return TorchOutcome(None, "per test")

    try:
        assert transport(config, workers, per_test).run(["n1", "n2"]) == TorchOutcome(None, "per test")
        assert workers._workers["n2"].lacks_serve
        assert n1_alive_at_launch == [inside_a_job]
    finally:
        workers.close()


def test_a_reader_never_reads_an_fd_number_closed_under_it():
    """close() from another thread while a reader waits in select: the fd numbers freed may
    be reused at once (here by pipes full of someone else's bytes); the reader returns None
    and reads none of them."""
    import subprocess
    import threading

    from healthcheck.runners import process_stream

    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    s = process_stream.ProcessStream("here", proc)
    parked, go_on = threading.Event(), threading.Event()
    real_select = process_stream.select.select

    def select(r, w, x, timeout):
        if threading.current_thread().name == "reader" and not parked.is_set():
            parked.set()
            go_on.wait(10)  # as if select returned just as close() freed the fds
            return r, [], []
        return real_select(r, w, x, timeout)

    got: list[bytes | None] = []
    reader = threading.Thread(target=lambda: got.append(s.read_line(time.monotonic() + 20, lambda line: True)),
                              name="reader")
    pipes: list[tuple[int, int]] = []
    try:
        process_stream.select.select = select
        reader.start()
        assert parked.wait(10)
        closer = threading.Thread(target=s.close)
        closer.start()
        closer.join(1.5)  # close() has ended the task and waits for the reader's lock
        for _ in range(8):
            r, w = os.pipe()
            os.write(w, b"foreign\n")
            pipes.append((r, w))
        go_on.set()
        reader.join(20)
        closer.join(20)
        for r, _ in pipes:  # every foreign byte is still there: the reader took none
            os.set_blocking(r, False)
            assert os.read(r, 100) == b"foreign\n"
    finally:
        process_stream.select.select = real_select
        go_on.set()
        for r, w in pipes:
            os.close(r)
            os.close(w)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert got == [None] and not closer.is_alive()
