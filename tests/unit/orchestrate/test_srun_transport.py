"""The Slurm transport's merge of labelled srun output, with an srun stand-in that runs
the real `hc node --local` once per node (the real srun is covered on the rig)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

from support import REPO, default_signals, run_hc, srun_stand_in, write_stub
from test_hook_contract import _end_stray, _gone, _pid_from


def config(tmp_path, mtu=65536):
    (tmp_path / "fabrics").mkdir(exist_ok=True)
    (tmp_path / "fabrics" / "t.yaml").write_text(f"net:\n  interfaces:\n    lo: {{mtu: {mtu}}}\n")
    path = tmp_path / "hc.yaml"
    path.write_text(f"default_fabric: t\nhistory: {{path: {tmp_path}/h.sqlite}}\n")
    return path


def test_sweep_via_slurm_merges_every_nodes_report(tmp_path, validate_report):
    bin_dir = srun_stand_in(tmp_path)
    r = run_hc("sweep", "--via", "slurm", "--nodes", "n[1-3]", "--tier", "quick", "--config", str(config(tmp_path)),
               "--format", "json", env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    report = validate_report(r.stdout)
    assert r.returncode == 0, r.stderr
    assert [(n["node"], n["mode"], n["status"]) for n in report["nodes"]] == [("n1", "slurm", "PASS"), ("n2", "slurm", "PASS"), ("n3", "slurm", "PASS")]
    assert report["command"] == "sweep"


def test_a_node_srun_gave_no_report_for_is_error_not_fail(tmp_path, validate_report):
    bin_dir = srun_stand_in(tmp_path, 'echo "srun: error: n4: task 3: Exited with exit code 1" >&2', dead="n4")
    r = run_hc("sweep", "--via", "slurm", "--nodes", "n[1-3]", "--tier", "quick", "--config", str(config(tmp_path, 1500)),
               "--format", "json", env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    report = validate_report(r.stdout)
    assert r.returncode == 2
    assert {n["status"] for n in report["nodes"]} == {"FAIL"}
    r = run_hc("sweep", "--via", "slurm", "--nodes", "n[1-4]", "--tier", "quick", "--config", str(config(tmp_path)),
               "--format", "json", env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    report = validate_report(r.stdout)
    n4 = next(n for n in report["nodes"] if n["node"] == "n4")
    assert n4["status"] == "ERROR" and n4["findings"][0]["id"] == "hc.E006"
    # the launcher's failure is one run-level finding, not one row per node
    (launch,) = [f for f in report["run_findings"] if f["id"] == "act.E006"]
    assert "Exited with exit code 1" in launch["message"] and launch["subject"] == "n4"


def test_sweep_input_errors(tmp_path):
    cfg = config(tmp_path)
    for args, text in [
        (["sweep"], "give exactly one of --nodes, --hostfile, --partition"),
        (["sweep", "--nodes", "a", "--partition", "p"], "give exactly one"),
        (["sweep", "--nodes", "bad;name"], "not a valid"),
        (["sweep", "--hostfile", str(tmp_path / "missing")], "cannot read"),
        (["sweep", "--nodes", "a", "--dry-run"], "--dry-run only applies with --act"),
        (["sweep", "--nodes", "a", "--checks", "nope"], "unknown check or family"),
    ]:
        r = run_hc(*args, "--config", str(cfg))
        assert r.returncode == 4 and text in r.stderr.decode(), (args, r.stderr)
    (tmp_path / "hosts").write_text("ok1\nbad;host\n")
    r = run_hc("sweep", "--hostfile", str(tmp_path / "hosts"), "--config", str(cfg))
    assert r.returncode == 4 and b"line 2" in r.stderr


def sinfo_stand_in(bin_dir: str, lines: str) -> None:
    write_stub(Path(bin_dir), "sinfo", f"printf '{lines}'\n")


def test_nodes_slurm_cannot_place_are_sorted_before_srun(tmp_path, validate_report):
    """hc-drained nodes go over SSH (they may be fixed), others' and DOWN nodes are
    skipped and named, busy ones too; srun only gets what it can place (issue 8, A6)."""
    bin_dir = srun_stand_in(tmp_path)
    sinfo_stand_in(bin_dir, "n1|idle|Unknown|none\\n"
                            "n2|drained|2026-11-22T07:55:31|hc: net.E001\\n"
                            "n3|drained|2026-11-22T07:55:31|ops: bios update\\n"
                            "n4|down*|2026-11-22T07:55:31|Not responding\\n"
                            "n5|allocated|Unknown|none\\n")
    r = run_hc("sweep", "--via", "slurm", "--nodes", "n[1-5]", "--tier", "quick", "--config", str(config(tmp_path)),
               "--format", "json", env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    report = validate_report(r.stdout)
    nodes = {n["node"]: n for n in report["nodes"]}
    assert (nodes["n1"]["mode"], nodes["n1"]["status"]) == ("slurm", "PASS")
    assert nodes["n2"]["mode"] != "slurm"  # over SSH (unreachable here: ERROR, never FAIL)
    assert nodes["n2"]["status"] == "ERROR"
    assert nodes["n3"]["status"] == "SKIP" and "ops: bios update" in nodes["n3"]["error"]
    assert nodes["n4"]["status"] == "SKIP" and "not responding" in nodes["n4"]["error"]
    assert nodes["n5"]["status"] == "SKIP" and "busy" in nodes["n5"]["error"]
    err = r.stderr.decode()
    assert "skipped n3" in err and "skipped n4" in err and "over SSH" in err


def test_an_srun_that_never_starts_is_bounded_and_its_job_cancelled(tmp_path, validate_report):
    bin_dir = tmp_path / "bin"
    write_stub(bin_dir, "srun", 'echo "srun: job 42 queued and waiting for resources" >&2\nexec sleep 60\n')
    write_stub(bin_dir, "scancel", f'echo "$@" >> {tmp_path}/scancel.log\n')
    write_stub(bin_dir, "sinfo", "printf 'n1|idle|Unknown|none\\n'\n")
    write_stub(bin_dir, "squeue", "exit 0\n")  # an empty queue, not the real squeue's DNS wait
    cfg = config(tmp_path)
    cfg.write_text(cfg.read_text() + "slurm: {sweep_timeout_s: 2}\n")
    r = run_hc("sweep", "--via", "slurm", "--nodes", "n1", "--tier", "quick", "--config", str(cfg),
               "--format", "json", env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, timeout=30)
    report = validate_report(r.stdout)
    assert r.returncode == 3, r.stderr
    (launch,) = [f for f in report["run_findings"] if f["id"] == "act.E006"]
    assert "did not finish within 2s" in launch["message"]
    (cancel,) = (tmp_path / "scancel.log").read_text().splitlines()
    assert cancel.startswith("--name=hc-sweep-")
    assert "--user=" in cancel


def test_ctrl_c_during_a_sweep_via_slurm_cancels_its_job_and_leaves_no_srun(tmp_path):
    """Ctrl-C while srun waits for its nodes: exit 130, hc's job cancelled by its own name, srun and its children gone."""
    bin_dir = tmp_path / "bin"
    # an srun that pends: it records how it was called, then waits on a child of its own
    write_stub(bin_dir, "srun", f'echo "$@" > {tmp_path}/srun.args\necho $$ > {tmp_path}/srun.pid\n'
                                f'sleep 120 &\necho $! > {tmp_path}/sleep.pid\nwait\n')
    write_stub(bin_dir, "scancel", f'echo "$@" >> {tmp_path}/scancel.log\n')
    write_stub(bin_dir, "sinfo", "printf 'n1|idle|Unknown|none\\n'\n")
    write_stub(bin_dir, "squeue", "exit 0\n")  # an empty queue, not the real squeue's DNS wait
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HC_", "SLURM"))}
    env["PATH"] = f"{bin_dir}:/usr/bin:/bin"
    # a session of its own: the Ctrl-C below reaches hc's group as a terminal's would, and nothing else
    hc = subprocess.Popen([sys.executable, "-m", "healthcheck", "sweep", "--via", "slurm", "--nodes", "n1",
                           "--tier", "quick", "--config", str(config(tmp_path))],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True,
                          preexec_fn=default_signals)
    srun = sleep = None
    try:
        srun = _pid_from(tmp_path / "srun.pid", within=15)
        sleep = _pid_from(tmp_path / "sleep.pid", within=5)
        os.killpg(hc.pid, signal.SIGINT)
        _, err = hc.communicate(timeout=15)
        assert hc.returncode == 130, err
        assert b"hc: interrupted" in err and b"Traceback" not in err
        job = next(a for a in (tmp_path / "srun.args").read_text().split() if a.startswith("--job-name="))
        (cancel,) = (tmp_path / "scancel.log").read_text().splitlines()
        assert {f"--name={job.split('=', 1)[1]}", f"--user={os.getuid()}"} <= set(cancel.split())
        assert job.startswith("--job-name=hc-sweep-")
        assert _gone(srun, within=5) and _gone(sleep, within=5), "srun or what it started outlived hc"
    finally:
        if hc.poll() is None:
            hc.kill()
            hc.wait()
        for pid, program in ((srun, b"sh"), (sleep, b"sleep")):
            if pid is not None:
                _end_stray(pid, program)


def allocation_stand_ins(tmp_path: Path) -> tuple[Path, Path]:
    """sinfo and srun (recording their arguments), scontrol and scancel for a 5-node partition
    `gpu`: n1 in the caller's allocation, n2 drained by hc, n3 by an admin, n4 DOWN, n5
    idle outside the allocation. A config whose fabric FAILs every node, whose SSH goes
    to a closed local port and whose guard lets the partition lose two nodes."""
    bin_dir = tmp_path / "bin"
    real = srun_stand_in(tmp_path / "srun-stand-in")
    write_stub(bin_dir, "srun", f'echo "$@" >> {tmp_path}/srun.log\nexec {real}/srun "$@"\n')
    write_stub(bin_dir, "scontrol", f'echo "$@" >> {tmp_path}/scontrol.log\n')
    write_stub(bin_dir, "scancel", f'echo "$@" >> {tmp_path}/scancel.log\n')
    write_stub(bin_dir, "sinfo", f'echo "$@" >> {tmp_path}/sinfo.log\n'
                                 "printf 'n1|allocated|Unknown|none\\n"
                                 "n2|drained|2026-11-22T07:55:31|hc: net.E001\\n"
                                 "n3|drained|2026-11-22T07:55:31|ops: bios update\\n"
                                 "n4|down*|2026-11-22T07:55:31|Not responding\\n"
                                 "n5|idle|Unknown|none\\n'\n")
    (tmp_path / "ssh_config").write_text("Host *\n  HostName 127.0.0.1\n  Port 1\n")
    cfg = config(tmp_path, mtu=1500)
    cfg.write_text(cfg.read_text() +
                   f"slurm: {{audit_log: {tmp_path}/audit.jsonl, state_dir: {tmp_path}/state,"
                   f" drain: {{max_drain_fraction: 0.5}}}}\n"
                   f"ssh: {{config_file: {tmp_path}/ssh_config, known_hosts: [{tmp_path}/known_hosts],"
                   f" connect_timeout_s: 2}}\n")
    return bin_dir, cfg


def test_a_sweep_inside_an_allocation_gives_srun_only_the_allocations_nodes(tmp_path, validate_report):
    """Inside an allocation srun gets only its nodes (no wait of its own); hc-drained go over SSH; the rest named skipped."""
    bin_dir, cfg = allocation_stand_ins(tmp_path)
    r = run_hc("sweep", "--via", "slurm", "--nodes", "n[1-5]", "--tier", "quick", "--act", "--config", str(cfg),
               "--format", "json", env={"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_JOB_ID": "77",
                                         "SLURM_JOB_NODELIST": "n1"}, timeout=30)
    report = validate_report(r.stdout)
    assert r.returncode == 2, r.stderr  # n1 FAILed
    (srun,) = (tmp_path / "srun.log").read_text().splitlines()
    assert "--nodelist=n1" in srun.split() and "--immediate" not in srun
    nodes = {n["node"]: n for n in report["nodes"]}
    assert (nodes["n1"]["mode"], nodes["n1"]["status"]) == ("slurm", "FAIL")
    assert nodes["n2"]["mode"] != "slurm" and nodes["n2"]["status"] == "ERROR"  # tried over SSH: port 1 refuses
    assert "127.0.0.1:1" in nodes["n2"]["error"]
    assert nodes["n3"]["status"] == "SKIP" and "ops: bios update" in nodes["n3"]["error"]
    assert nodes["n4"]["status"] == "SKIP" and "not responding" in nodes["n4"]["error"]
    assert nodes["n5"]["status"] == "SKIP" and "not in this job's allocation" in nodes["n5"]["error"]
    err = r.stderr.decode()
    assert "skipped n3" in err and "skipped n4" in err and "skipped n5" in err and "n2 over SSH" in err
    # --act: the FAIL in the allocation drained, nobody else's node touched
    assert (tmp_path / "scontrol.log").read_text().splitlines() == ["update nodename=n1 state=drain reason=hc: net.E001"]
    assert not (tmp_path / "scancel.log").exists()  # inside an allocation hc submits no job of its own


NIGHTLY = REPO / "slurm" / "nightly-sweep.sbatch"


def test_the_nightly_sweep_script_checks_its_partition_as_its_comment_says(tmp_path):
    """The nightly script, run as sbatch would: its allocation through srun, hc-drained nodes over SSH, the rest named."""
    script = NIGHTLY.read_text()
    # only a script that keeps its writes where this test points them is run (not /var/log/hc)
    assert "HC_SWEEP_DIR" in script and "export HC_CONFIG" in script
    bin_dir, cfg = allocation_stand_ins(tmp_path)
    write_stub(bin_dir, "hc", f'exec {sys.executable} -m healthcheck "$@"\n')
    (tmp_path / "slurm.env").write_text(f"HC_BIN={bin_dir}/hc\nHC_CONFIG={cfg}\nHC_SWEEP_DIR={tmp_path}/sweeps\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HC_", "SLURM"))}
    env.update(PATH=f"{bin_dir}:/usr/bin:/bin", HOME=str(tmp_path), HC_SETTINGS=str(tmp_path / "slurm.env"),
               SLURM_JOB_ID="77", SLURM_JOB_NODELIST="n1", SLURM_NODELIST="n1", SLURM_JOB_PARTITION="gpu")
    r = subprocess.run(["bash", str(NIGHTLY)], capture_output=True, env=env, timeout=60)
    assert r.returncode == 2, r.stderr  # hc's exit: n1 FAILed
    (out,) = (tmp_path / "sweeps").glob("sweep-*.json")
    report = json.loads(out.read_text())
    assert "-p gpu" in (tmp_path / "sinfo.log").read_text()  # the whole partition, not the allocation's nodes
    (srun,) = (tmp_path / "srun.log").read_text().splitlines()
    assert "--nodelist=n1" in srun.split()
    nodes = {n["node"]: n for n in report["nodes"]}
    assert set(nodes) == {"n1", "n2", "n5"}  # n3 and n4 left out by the partition's listing, and named
    assert nodes["n1"]["mode"] == "slurm" and nodes["n2"]["mode"] != "slurm"
    assert nodes["n5"]["status"] == "SKIP" and "not in this job's allocation" in nodes["n5"]["error"]
    err = r.stderr.decode()
    assert "skipped n3 (drained by someone else: ops: bios update)" in err and "skipped n4" in err
    assert (tmp_path / "scontrol.log").read_text().splitlines() == ["update nodename=n1 state=drain reason=hc: net.E001"]


def test_the_nightly_sweep_script_sweeps_its_whole_partition_via_slurm_and_acts():
    """The script's hc command keeps what its comment promises: --via slurm, --act, the partition (not the allocation)."""
    text = NIGHTLY.read_text().replace("\\\n", " ")
    (line,) = [x for x in text.splitlines() if x.lstrip().startswith('"$HC_BIN" sweep')]
    argv = shlex.split(line.split("||")[0].split(">")[0])
    assert argv[:2] == ["$HC_BIN", "sweep"]
    pairs = dict(zip(argv[2:], argv[3:], strict=False))
    assert pairs.get("--via") == "slurm" and "--act" in argv
    assert pairs.get("--partition") == "$SLURM_JOB_PARTITION"
    assert not {"--nodes", "--hostfile", "--dry-run"} & set(argv)
    assert "--output" in argv and pairs.get("--format") == "json"


def test_srun_gets_a_bounded_wait_outside_an_allocation_and_none_inside(tmp_path):
    from healthcheck.core.config import load_config
    from healthcheck.orchestrate.srun import srun_argv

    cfg = load_config(config(tmp_path))
    outside = srun_argv(cfg, ["n1"], tier="quick", only=(), since=None, job_name="hc-sweep-x", wait_s=60)
    assert "--immediate=60" in outside and "--job-name=hc-sweep-x" in outside
    assert not any(a.startswith("--immediate") for a in srun_argv(cfg, ["n1"], tier="quick", only=(), since=None))
