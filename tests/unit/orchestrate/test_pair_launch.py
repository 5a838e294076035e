"""Pair tests started by mpirun or srun (bandwidth.pairs.launcher): the command line each
launcher gets, and that whatever goes wrong (the launcher missing, the timeout, a rank
failing, output that is no result, a surprise) is a TorchOutcome with no samples and why
naming the members. The
launchers are stand-in scripts or a fake `launch`; nothing reaches a network."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from healthcheck.core.config.loader import load_config
from healthcheck.orchestrate.pairsweep import choose, launched
from healthcheck.orchestrate.pairsweep.launched import LauncherTransport
from healthcheck.orchestrate.pairsweep.measure import measure_test
from healthcheck.orchestrate.pairsweep.plan import PairPlan
from healthcheck.orchestrate.pairsweep.transport import EVIDENCE_MAX, TorchOutcome, samples_from_json
from healthcheck.parsers.bandwidth_common import BandwidthSample
from healthcheck.runners.launch import Launch, LaunchResult, parse

MEMBERS = ("n01", "n02")
SAMPLE = {"collective": "all_reduce", "size_bytes": 1 << 20, "busbw_gbytes_per_s": 1.5,
          "algbw_gbytes_per_s": 1.0, "time_us": 10.0, "ranks": 2}
REPORT = json.dumps({"launcher": "srun", "ranks": 2, "samples": [SAMPLE]})


def setup(tmp_path: Path, launcher: str, *, timeout_s: float = 60) -> tuple[object, PairPlan]:
    """A config whose fabric starts pair tests through `launcher`; srun and scancel stand-ins
    in tmp_path/bin (scancel is found next to slurm.scontrol)."""
    fabrics = tmp_path / "fabrics"
    fabrics.mkdir(exist_ok=True)
    (fabrics / "f.yaml").write_text(
        "extends: generic\nbandwidth:\n  sizes: [1M]\n  torch: {backend: gloo, env: {GLOO_SOCKET_IFNAME: eth0}}\n"
        f"  pairs: {{launcher: {launcher}, port: 29600, timeout_s: {timeout_s}}}\n")
    (tmp_path / "ssh_config").write_text("Host n01\n  HostName 10.1.2.3\nHost n02\n  HostName 10.1.2.4\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (tmp_path / "hc.yaml").write_text(
        f"fabric_dirs: [{fabrics}]\nnodes: {{'n[01-04]': f}}\n"
        f"ssh: {{config_file: {tmp_path}/ssh_config, remote_hc: /opt/hc/bin/hc}}\n"
        f"slurm: {{srun: {bin_dir}/srun, scontrol: {bin_dir}/scontrol, remote_hc: /shared/hc, sweep_wait_s: 45}}\n")
    config = load_config(tmp_path / "hc.yaml")
    return config, PairPlan.from_config(config, "n01")


def astuple(got: TorchOutcome) -> tuple[object, str]:
    """What a test gave and why, without its evidence."""
    return got.samples, got.why


def run_test(config: object, plan: PairPlan, members: tuple[str, ...]) -> TorchOutcome:
    """One torch test started per test, as the fabric's launcher says (ssh, mpirun, srun)."""
    return choose.per_test_transport(config, plan).run(members)


def script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def after(argv: tuple[str, ...] | list[str], flag: str) -> str:
    return argv[list(argv).index(flag) + 1]


# ------------------------------------------------------------------------------ mpirun's command line


@pytest.mark.parametrize(("euid", "as_root"), [(0, True), (1000, False)])
def test_mpirun_one_rank_per_member_with_the_first_members_address_as_rendezvous(tmp_path, monkeypatch, euid,
                                                                                  as_root):
    monkeypatch.setattr(launched.os, "geteuid", lambda: euid)
    config, plan = setup(tmp_path, "mpirun")
    spec = launched.mpirun_spec(config, plan, MEMBERS)
    argv = spec.argv
    assert (spec.kind, argv[:3], spec.nranks) == ("mpirun", ("mpirun", "-np", "2"), 2)
    assert after(argv, "--host") == "n01,n02"  # the members, in order: rank 0 on n01
    assert ("--allow-run-as-root" in argv) is as_root
    assert after(argv, "-x") == "GLOO_SOCKET_IFNAME" and spec.env == {"GLOO_SOCKET_IFNAME": "eth0"}
    program = argv[argv.index("/opt/hc/bin/hc"):]  # ssh.remote_hc: mpirun reaches the nodes over ssh
    assert program[1:5] == ("bw", "allreduce", "--format", "json")
    assert after(program, "--master-addr") == "10.1.2.3"  # n01 as the ssh config resolves it
    assert after(program, "--master-port") == "29600"
    assert after(program, "--backend") == "gloo" and after(program, "--sizes") == "1M"


# ------------------------------------------------------------------------------ srun's command line


def test_srun_outside_an_allocation_asks_for_whole_nodes_and_a_bounded_wait(tmp_path):
    config, plan = setup(tmp_path, "srun")
    spec = launched.srun_spec(config, plan, MEMBERS, {"PATH": "/usr/bin"}, "hc-pair-x")
    argv = spec.argv
    assert argv[0] == str(tmp_path / "bin" / "srun")  # slurm.srun
    for word in ("--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--nodelist=n01,n02", "--exclusive",
                 "--immediate=20", "--job-name=hc-pair-x"):  # the wait: sweep_wait_s, at most a third of 60 s
        assert word in argv, (word, argv)
    assert not [w for w in argv if w.startswith(("--jobid", "--overlap"))]
    program = argv[argv.index("/shared/hc"):]  # slurm.remote_hc
    assert program[1:3] == ("bw", "allreduce")
    assert "--master-addr" not in program  # the worker takes task 0's node from the step
    assert after(program, "--master-port") == "29600"
    assert spec.env == {"GLOO_SOCKET_IFNAME": "eth0"}  # set on srun, which hands its environment on


def test_srun_inside_an_allocation_runs_a_step_of_it(tmp_path):
    config, plan = setup(tmp_path, "srun", timeout_s=600)
    argv = launched.srun_spec(config, plan, MEMBERS, {"SLURM_JOB_ID": "4242"}, "hc-pair-x").argv
    assert "--jobid=4242" in argv and "--overlap" in argv
    assert not [w for w in argv if w.startswith(("--exclusive", "--immediate"))]
    assert "--nodelist=n01,n02" in argv and "--ntasks=2" in argv


def test_srun_wait_is_the_sweeps_when_the_test_has_time_for_it(tmp_path):
    config, plan = setup(tmp_path, "srun", timeout_s=600)
    assert "--immediate=45" in launched.srun_spec(config, plan, MEMBERS, {}, "j").argv


def test_torchruns_variables_of_hc_itself_do_not_reach_the_ranks():
    env = launched.launch_env({"RANK": "3", "WORLD_SIZE": "8", "MASTER_ADDR": "x", "PATH": "/bin",
                                  "SLURM_JOB_ID": "1"})
    assert env == {"PATH": "/bin", "SLURM_JOB_ID": "1"}


# ------------------------------------------------------------------------------ what comes back


def labelled(kind: str, lines: dict[int, list[str]]) -> str:
    tag = "{}: " if kind == "srun" else "[1,{}]<stdout>:"
    return "".join(f"{tag.format(rank)}{line}\n" for rank, ls in lines.items() for line in ls)


def fake_launch(monkeypatch, *, rc: int | None = 0, stdout: str = "", stderr: str = "", timed_out: bool = False
                ) -> list[Launch]:
    """launch() replaced: the output given, parsed as the real one parses it; returns the specs seen."""
    seen: list[Launch] = []

    def fake(spec: Launch, *, timeout_s: float, env=None, **_kw) -> LaunchResult:
        seen.append(spec)
        ranks, errs, codes = parse(spec, stdout, stderr)
        if rc == 0:
            codes = {**{r: 0 for r in range(spec.nranks or 0)}, **codes}
        return LaunchResult(spec.kind, spec.argv, ranks, errs, codes, rc, stdout, stderr, 1.0, timed_out=timed_out)

    monkeypatch.setattr(launched, "launch", fake)
    return seen


@pytest.mark.parametrize("launcher", ["mpirun", "srun"])
def test_rank_zeros_json_is_the_tests_samples(tmp_path, monkeypatch, launcher):
    config, plan = setup(tmp_path, launcher)
    seen = fake_launch(monkeypatch, stdout=labelled(launcher, {0: ["some banner", REPORT]}))
    got = run_test(config, plan, MEMBERS)  # dispatched on bandwidth.pairs.launcher
    samples, why = got.samples, got.why
    assert [s.busbw_gbytes_per_s for s in samples] == [1.5] and why == ""
    assert [s.kind for s in seen] == [launcher]


def test_mpirun_a_failing_rank_is_named_by_its_member(tmp_path, monkeypatch):
    config, plan = setup(tmp_path, "mpirun")
    stderr = ("[1,1]<stderr>:hc bw allreduce: rendezvous at 10.1.2.3:29600 timed out\n"
              "-------\nmpirun detected that one or more processes exited with non-zero status...\n"
              "  Process name: [[4711,1],1]\n  Exit code:    3\n-------\n")
    fake_launch(monkeypatch, rc=3, stderr=stderr)
    got = run_test(config, plan, MEMBERS)
    samples, why = got.samples, got.why
    assert samples is None
    assert why.startswith("n01,n02: ") and "n02 (rank 1) exited 3: hc bw allreduce: rendezvous" in why
    assert "\n" not in why


def test_mpirun_that_cannot_start_its_daemons_names_the_member_its_ssh_failed_on(tmp_path, monkeypatch):
    config, plan = setup(tmp_path, "mpirun")
    stderr = ("ssh: connect to host n02 port 22: Connection refused\n"
              "--------------------------------------------------------------------------\n"
              "ORTE was unable to reliably start one or more daemons.\n"
              "--------------------------------------------------------------------------\n")
    fake_launch(monkeypatch, rc=1, stderr=stderr)
    got = run_test(config, plan, MEMBERS)
    samples, why = got.samples, got.why
    assert samples is None
    assert why == "n01,n02: mpirun exited 1: ssh: connect to host n02 port 22: Connection refused"


def test_open_mpis_whole_banner_is_the_tests_evidence_and_its_cause_the_line(tmp_path, monkeypatch):
    """Issue 18 D.18: mpirun without the site's settings failed every pair with only the last
    line of Open MPI's message ("target node: n02"); the cause (ssh's line) and the whole
    banner (bounded) are what an operator needs."""
    from support import FIXTURES

    from healthcheck.bandwidth.schedule import Test
    from healthcheck.core.status import Status
    from healthcheck.orchestrate.pairsweep.judging import group_result

    banner = (FIXTURES / "mpirun" / "unreachable-hosts.stderr").read_text()
    config, plan = setup(tmp_path, "mpirun")
    fake_launch(monkeypatch, rc=255, stderr=banner)
    got = run_test(config, plan, MEMBERS)
    samples, why = got.samples, got.why
    assert samples is None
    assert why == "n01,n02: mpirun exited 255: ssh: Could not resolve hostname n01: Name or service not known"
    evidence = got.evidence
    assert evidence.startswith("$ mpirun -np 2 ") and "(exit 255" in evidence.splitlines()[0]
    assert banner.strip() in evidence  # every line of both banners, not one
    # and the pair's bw.E107 carries it
    (measured,) = measure_test(config, plan, LauncherTransport(config, plan), MEMBERS)
    assert measured.value is None and measured.evidence == evidence
    group = group_result(Test(members=MEMBERS), Status.ERROR, [measured], f"torch: {measured.why}", plan)
    (finding,) = group.findings
    assert finding.id == "bw.E107" and "Could not resolve hostname n01" in finding.message
    assert "ORTE was unable to reliably start one or more daemons" in finding.evidence
    assert "ORTE does not know how to route a message" in finding.evidence


def test_a_launchers_evidence_is_bounded_keeping_its_start_and_its_end(tmp_path, monkeypatch):
    config, plan = setup(tmp_path, "mpirun")
    fake_launch(monkeypatch, rc=1, stderr="ssh: first words\n" + "x" * 100_000 + "\nlast words\n")
    evidence = run_test(config, plan, MEMBERS).evidence
    assert len(evidence) <= EVIDENCE_MAX
    assert "ssh: first words" in evidence and evidence.endswith("last words")


def test_mpirun_gets_hcs_ssh_view_of_the_nodes(tmp_path, monkeypatch):
    """mpirun's ssh knows nothing of hc's ssh section: hc hands it the same config, keys,
    known hosts and policy, and never a prompt (a prompt only waits for the timeout)."""
    monkeypatch.delenv("OMPI_MCA_plm_rsh_agent", raising=False)
    monkeypatch.delenv("OMPI_MCA_plm_rsh_args", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.openmpi/mca-params.conf of the test's user
    monkeypatch.setattr("healthcheck.runners.ompi.param_files", lambda environ, mpirun="mpirun": [])
    config, plan = setup(tmp_path, "mpirun")
    argv = launched.mpirun_spec(config, plan, MEMBERS).argv
    assert after(argv, "--mca") == "plm_rsh_args"
    ssh = argv[argv.index("plm_rsh_args") + 1].split(" ")  # Open MPI splits it at spaces
    assert ssh[:2] == ["-F", str(tmp_path / "ssh_config")]
    assert "BatchMode=yes" in ssh and "StrictHostKeyChecking=yes" in ssh
    assert argv.index("--mca") < argv.index("/opt/hc/bin/hc")  # mpirun's option, not the program's


def test_mpirun_keeps_the_sites_own_ssh_settings(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    config, plan = setup(tmp_path, "mpirun")
    env = {"OMPI_MCA_plm_rsh_agent": "ssh -F /site/ssh_config", "HOME": str(tmp_path)}
    assert "--mca" not in launched.mpirun_spec(config, plan, MEMBERS, env).argv
    (tmp_path / ".openmpi").mkdir()
    (tmp_path / ".openmpi" / "mca-params.conf").write_text("# site\nplm_rsh_args = -F /site/ssh_config\n")
    assert "--mca" not in launched.mpirun_spec(config, plan, MEMBERS, {"HOME": str(tmp_path)}).argv


def test_a_surprise_in_the_launch_is_the_tests_error_not_the_sweeps_end(tmp_path, monkeypatch):
    config, plan = setup(tmp_path, "mpirun")

    def boom(spec, **_kw):
        raise RuntimeError("boom")

    monkeypatch.setattr(launched, "launch", boom)
    assert astuple(run_test(config, plan, MEMBERS)) == (None, "n01,n02: mpirun: RuntimeError: boom")


def test_an_ssh_config_that_cannot_name_the_rendezvous_is_the_tests_error(tmp_path, monkeypatch):
    config, plan = setup(tmp_path, "mpirun")
    (tmp_path / "ssh_config").write_text("Host n01\n  Port not-a-port\n")  # (ProxyCommand is honoured now)
    fake_launch(monkeypatch)
    got = run_test(config, plan, MEMBERS)
    samples, why = got.samples, got.why
    assert samples is None and why.startswith("n01,n02: n01: bad Port")


def test_ssh_launcher_keeps_hcs_own_fan_out(tmp_path, monkeypatch):
    config, plan = setup(tmp_path, "ssh")
    monkeypatch.setattr(LauncherTransport, "run", lambda *a: pytest.fail("not through a launcher"))
    (tmp_path / "ssh_config").write_text("Host n01\n  Port not-a-port\n")  # fails before any connection
    got = run_test(config, plan, MEMBERS)
    samples, why = got.samples, got.why
    assert samples is None and "bad Port" in why


@pytest.mark.parametrize(("rank0", "expected"), [
    ("motd\n" + REPORT, ([BandwidthSample(**SAMPLE)], "")),
    ("no json at all", (None, "the torch sweep printed no result")),
])
def test_ssh_reads_rank_zeros_json_with_the_same_helper(tmp_path, monkeypatch, rank0, expected):
    from healthcheck.orchestrate.pairsweep import ssh
    from healthcheck.runners.base import CommandResult

    class Conn:  # hc's SSH fan-out, without a network: each member's worker "ran"
        def __init__(self, node, settings):
            self.node = node

        def connect(self):
            pass

        def run(self, argv, *, timeout_s, env):
            return CommandResult(tuple(argv), 0, rank0 if env["RANK"] == "0" else "", "", 0.1)

        def close(self):
            pass

    config, plan = setup(tmp_path, "ssh")
    monkeypatch.setattr(ssh, "SshConnection", Conn)
    assert astuple(run_test(config, plan, MEMBERS)) == expected


# ------------------------------------------------------------------------------ real launch(), stand-in launchers


def test_mpirun_missing(tmp_path, monkeypatch):
    config, plan = setup(tmp_path, "mpirun")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))  # no mpirun there
    assert astuple(run_test(config, plan, MEMBERS)) == (
        None, "n01,n02: mpirun not found (bandwidth.pairs.launcher: mpirun)")


def test_srun_missing(tmp_path):
    config, plan = setup(tmp_path, "srun")
    got = run_test(config, plan, MEMBERS)
    samples, why = got.samples, got.why
    assert samples is None and why == f"n01,n02: {tmp_path}/bin/srun not found (bandwidth.pairs.launcher: srun)"


def test_srun_timeout_kills_it_cancels_its_job_and_names_the_members(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    config, plan = setup(tmp_path, "srun", timeout_s=1)
    script(tmp_path / "bin" / "srun", "echo '0: starting'\nexec sleep 30\n")
    script(tmp_path / "bin" / "scancel", f'echo "$@" > {tmp_path}/cancelled\n')
    got = run_test(config, plan, MEMBERS)
    samples, why = got.samples, got.why
    assert samples is None and why == "n01,n02: srun did not finish within 1s"
    assert (tmp_path / "cancelled").read_text().startswith("--name=hc-pair-")  # its own job, by its name


def test_a_cancel_that_fails_after_a_timeout_is_said_in_the_tests_error(tmp_path, monkeypatch):
    """scancel refused: the job srun asked for may hold both nodes until its time limit.
    The test's ERROR says so (it was dropped: nothing said the allocation was left)."""
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    config, plan = setup(tmp_path, "srun", timeout_s=1)
    script(tmp_path / "bin" / "srun", "echo '0: starting'\nexec sleep 30\n")
    script(tmp_path / "bin" / "scancel", "echo 'scancel: error: Unable to contact slurm controller' >&2\nexit 1\n")
    got = run_test(config, plan, MEMBERS)
    samples, why = got.samples, got.why
    assert samples is None and why.startswith("n01,n02: srun did not finish within 1s; ")
    assert "could not cancel the allocation srun asked for, job hc-pair-" in why
    assert "Unable to contact slurm controller" in why


def test_an_srun_that_never_ran_asked_for_nothing_to_cancel(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    config, plan = setup(tmp_path, "srun")
    script(tmp_path / "bin" / "scancel", f'echo "$@" >> {tmp_path}/cancelled\n')
    got = run_test(config, plan, MEMBERS)  # no srun in bin/
    samples, why = got.samples, got.why
    assert samples is None and why == f"n01,n02: {tmp_path}/bin/srun not found (bandwidth.pairs.launcher: srun)"
    assert not (tmp_path / "cancelled").exists()  # no scancel (nor squeue looks) for a job never asked for


def test_srun_a_failing_task_is_named_with_its_node_from_sruns_error(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    config, plan = setup(tmp_path, "srun")
    script(tmp_path / "bin" / "srun",
           "echo '1: hc bw allreduce: could not run: rendezvous timed out' >&2\n"
           "echo 'srun: error: n02: task 1: Exited with exit code 3' >&2\nexit 3\n")
    got = run_test(config, plan, MEMBERS)
    samples, why = got.samples, got.why
    assert samples is None
    assert why.startswith("n01,n02: task 1 exited 3: hc bw allreduce: could not run")
    assert "srun exited 3: srun: error: n02: task 1: Exited with exit code 3" in why


@pytest.mark.parametrize("output", ["0: Traceback (most recent call last):", "0: {not json", ""])
def test_srun_garbage_is_no_result(tmp_path, monkeypatch, output):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    config, plan = setup(tmp_path, "srun")
    script(tmp_path / "bin" / "srun", f"echo '{output}'\n")
    assert astuple(run_test(config, plan, MEMBERS)) == (None, "n01,n02: the torch sweep printed no result")


def test_srun_result_with_the_fabrics_variables_on_srun(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setenv("RANK", "5")  # hc under torchrun: not the ranks' business
    config, plan = setup(tmp_path, "srun")
    (tmp_path / "report.json").write_text(REPORT)
    script(tmp_path / "bin" / "srun", f'[ "$GLOO_SOCKET_IFNAME" = eth0 ] && [ -z "$RANK" ] || exit 9\n'
                                      f'echo "0: $(cat {tmp_path}/report.json)"\n')
    got = run_test(config, plan, MEMBERS)
    samples, why = got.samples, got.why
    assert why == "" and samples == [BandwidthSample(**SAMPLE)]


# ------------------------------------------------------------------------------ rank 0's JSON


def test_samples_from_json():
    assert samples_from_json("motd\n" + REPORT) == [BandwidthSample(**SAMPLE)]
    assert samples_from_json('{"samples": []}') == []
    for bad in ("", "no json", "{", '{"samples": [{"size_bytes": "x"}]}', '{"samples": 3}'):
        assert samples_from_json(bad) is None, bad
