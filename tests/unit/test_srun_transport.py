"""The Slurm transport's merge of labelled srun output, with an srun stand-in that runs
the real `hc node --local` once per node (the real srun is covered on the rig)."""

from __future__ import annotations

from pathlib import Path

from support import run_hc, srun_stand_in, write_stub


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


def test_srun_gets_a_bounded_wait_outside_an_allocation_and_none_inside(tmp_path):
    from healthcheck.core.config import load_config
    from healthcheck.orchestrate.srun import srun_argv

    cfg = load_config(config(tmp_path))
    outside = srun_argv(cfg, ["n1"], tier="quick", only=(), since=None, job_name="hc-sweep-x", wait_s=60)
    assert "--immediate=60" in outside and "--job-name=hc-sweep-x" in outside
    assert not any(a.startswith("--immediate") for a in srun_argv(cfg, ["n1"], tier="quick", only=(), since=None))
