"""The Slurm jobs hc asks srun for itself outside an allocation (orchestrate/allocations.py):
named for who asked, time-limited where the partition allows, cancelled with a second look
for a grant that raced the cancel, and cancelled by the next sweep when a killed hc left
them. Stand-in srun, scancel, squeue and sinfo; the real Slurm is the rig's
(integration/test_slurm_contract.py)."""

from __future__ import annotations

import json
import math
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import run_hc, srun_stand_in, write_stub
from test_pair_workers_launched import LINGER, launches, pool, site
from test_stop_signals import RACING_SQUEUE

from healthcheck.core.config.loader import load_config


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in list(os.environ):
        if name.startswith(("SLURM", "HC_")):
            monkeypatch.delenv(name)


# ------------------------------------------------------------ names and time limits


def test_a_job_name_says_which_hc_asked_and_until_when():
    from healthcheck.orchestrate import allocations

    name = allocations.job_name("pair", 600, now=1_000_000)
    owner = allocations.owner_of(name)
    assert name.startswith("hc-pair-") and owner is not None
    assert owner.pid == os.getpid() and owner.start == allocations.start_ticks(os.getpid())
    assert owner.host == allocations.this_host() and owner.until > 1_000_000 + 600
    assert allocations.abandoned(owner, time.time()) is None  # this hc runs
    assert allocations.owner_of("hc-pair-0123456789ab") is None  # an older hc's name says nothing: never touched
    assert allocations.owner_of("myjob") is None


@pytest.mark.parametrize("text, seconds", [
    ("infinite", math.inf), ("UNLIMITED", math.inf), ("30", 1800.0), ("30:00", 1800.0), ("1:00:00", 3600.0),
    ("2-00:00:00", 172800.0), ("1-12", 129600.0), ("1-00:30", 88200.0), ("n/a", None), ("", None),
    ("1:2:3:4", None), ("9" * 20, None),
])
def test_slurm_durations(text, seconds):
    from healthcheck.orchestrate import allocations

    assert allocations.duration_s(text) == seconds


def test_the_partition_srun_uses_is_the_named_one_else_the_default():
    from healthcheck.orchestrate import allocations

    sinfo = "debug|1:00:00\nbatch*|infinite\nshort|10:00\n"
    assert allocations.max_time_of(sinfo, None) == math.inf
    assert allocations.max_time_of(sinfo, "short") == 600.0
    assert allocations.max_time_of(sinfo, "gone") is None
    assert allocations.max_time_of("n1|idle|Unknown|none\n", None) is None  # not sinfo's answer to %P|%l


def _with_sinfo(tmp_path: Path, answer: str | None) -> None:
    """The site's sinfo answers `--format=%P|%l` with `answer` (None: fails as a dead controller)."""
    body = f"echo '{answer}'\n" if answer is not None else "echo 'sinfo: error: Unable to contact slurm controller' >&2\nexit 1\n"
    sinfo = write_stub(tmp_path / "bin", "sinfo", body)
    main = tmp_path / "hc.yaml"
    main.write_text(main.read_text().replace("slurm: {", f"slurm: {{sinfo: {sinfo}, "))


# a stand-in srun that notes its argv and starts nothing: the test it was asked for fails at once
NO_TASK = "sys.exit(1)\n"


@pytest.mark.parametrize("answer, limited, serves", [("debug*|infinite", True, True),
                                                     ("debug*|2-00:00:00", True, False),
                                                     ("debug*|10:00", False, False), (None, False, False)],
                         ids=["unlimited", "above", "below", "unknown"])
def test_a_workers_allocation_has_a_time_limit_from_the_sweeps_bound_where_the_partition_allows(
        tmp_path, answer, limited, serves):
    """The worker lives at most the pool's lifetime: its job's --time is that plus a margin, in
    minutes rounded up; omitted where the partition's MaxTime is lower (Slurm would refuse or
    hold the job) or unknown. One answer's workers are started and serve the test (the stand-in
    passes --time by, as it does every option: what one serves, all would; without --time:
    test_pair_workers_launched's srun workers); the others' srun lines are asked for and read
    without starting torch twice more for each."""
    pytest.importorskip("torch")
    config, log = site(tmp_path, "srun") if serves else site(tmp_path, "srun", tail=NO_TASK)
    _with_sinfo(tmp_path, answer)
    workers = pool(load_config(tmp_path / "hc.yaml"))
    try:
        got = workers.run_test(["n1", "n2"], "127.0.0.1")
        samples, why = got.samples, got.why
        if serves:
            assert samples and why == "", why
    finally:
        workers.close()
    assert {a for argv in launches(log) for a in argv if a.startswith("--nodelist=")} >= {"--nodelist=n1"}
    for argv in launches(log):
        minutes = [int(a.split("=", 1)[1]) for a in argv if a.startswith("--time=")]
        if limited:  # the worker's whole life, and a few minutes' margin: never less, never unlimited
            assert len(minutes) == 1 and workers.lifetime_s <= minutes[0] * 60 <= workers.lifetime_s + 600, argv
        else:
            assert minutes == [], argv


def test_a_per_test_srun_gets_a_time_limit_from_the_tests_bound(tmp_path):
    from healthcheck.orchestrate import allocations
    from healthcheck.orchestrate.pairsweep import launched
    from healthcheck.orchestrate.pairsweep.plan import PairPlan

    config, _ = site(tmp_path, "srun")
    _with_sinfo(tmp_path, "debug*|infinite")
    config = load_config(tmp_path / "hc.yaml")
    plan = PairPlan.from_config(config, "n1")
    job = allocations.OwnJob(config.main.slurm, {}, "pair", plan.pairs.timeout_s)
    job.release()
    argv = launched.srun_spec(config, plan, ["n1", "n2"], {}, job.name, time_args=job.srun_args()).argv
    assert f"--time={math.ceil((plan.pairs.timeout_s + allocations.MARGIN_S) / 60)}" in argv
    assert f"--job-name={job.name}" in argv and "--exclusive" in argv


# ------------------------------------------------------------ a grant racing the cancel


def test_a_grant_that_raced_the_cancel_by_name_is_cancelled_by_its_id(tmp_path):
    """srun had to be killed (it outlived its worker): its job is cancelled by name, and the
    look after it finds the job granted just then, which is cancelled by its id."""
    pytest.importorskip("torch")
    config, log = site(tmp_path, "srun", tail=LINGER)
    write_stub(tmp_path / "bin", "squeue", "")
    (tmp_path / "bin" / "squeue").write_text(RACING_SQUEUE.format(python=sys.executable, d=str(tmp_path)))
    (tmp_path / "bin" / "scancel").write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/scancel.log\n')
    workers = pool(config)
    try:
        got = workers.run_test(["n1", "n2"], "127.0.0.1")
        samples, why = got.samples, got.why
        assert samples and why == "", why
    finally:
        workers.close()
    names = sorted(next(a.split("=", 1)[1] for a in argv if a.startswith("--job-name=")) for argv in launches(log))
    cancels = (tmp_path / "scancel.log").read_text().splitlines()
    assert sorted(w.split("=", 1)[1] for line in cancels for w in line.split() if w.startswith("--name=")) == names
    assert sorted(w for line in cancels for w in line.split() if w.isdigit()) == ["7700", "7701"], cancels
    assert all(" granted as it was cancelled" in note for note in workers.notes), workers.notes


# ------------------------------------------------------------ leftovers of a killed hc


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


LISTING_SQUEUE = """#!{python}
import sys
open({d!r} + "/squeue.log", "a").write(" ".join(sys.argv[1:]) + "\\n")
try:
    cancelled = set(open({d!r} + "/scancel.log").read().split())
except OSError:
    cancelled = set()
for line in open({d!r} + "/jobs").read().splitlines():
    if line.split("|", 1)[0] not in cancelled:
        print(line)
"""


def _start_ticks(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    return int(stat[stat.rfind(b")") + 2:].split()[19])


def test_the_next_sweep_cancels_the_jobs_a_killed_hc_left_and_only_those(tmp_path, validate_report):
    """Jobs of hc's name whose hc is gone (this host: no process with that pid and start time)
    or past its bound (another host) are cancelled, named in act.E010 and audited; a running
    hc's, a young one from another host, an ending one and anyone else's are not touched."""
    host = re.sub(r"[^A-Za-z0-9_-]", "", socket.gethostname().split(".", 1)[0])
    future, past = int(time.time()) + 3600, int(time.time()) - 60
    me = f"{os.getpid()}.{_start_ticks(os.getpid())}"
    jobs = {
        "101": f"hc-pair-aaaaaaaa.{_dead_pid()}.1.{future}@{host}|RUNNING",  # its hc died here: cancelled
        "102": f"hc-pair-bbbbbbbb.{me}.{future}@{host}|RUNNING",  # this test's process runs: kept
        "103": f"hc-sweep-cccccccc.1.1.{past}@otherhost|PENDING",  # another host's, past its bound: cancelled
        "104": f"hc-pair-dddddddd.1.1.{future}@otherhost|RUNNING",  # another host's, within its bound: kept
        "105": "training|RUNNING",  # anyone else's
        "106": f"hc-pair-eeeeeeee.{_dead_pid()}.1.{future}@{host}|COMPLETING",  # ending already
    }
    (tmp_path / "jobs").write_text("".join(f"{job}|{line}\n" for job, line in jobs.items()))
    bin_dir = Path(srun_stand_in(tmp_path))
    write_stub(bin_dir, "scancel", f'echo "$@" >> {tmp_path}/scancel.log\n')
    write_stub(bin_dir, "squeue", "")
    (bin_dir / "squeue").write_text(LISTING_SQUEUE.format(python=sys.executable, d=str(tmp_path)))
    write_stub(bin_dir, "sinfo", "printf 'n1|idle|Unknown|none\\n'\n")
    cfg = tmp_path / "hc.yaml"
    (tmp_path / "fabrics").mkdir()
    (tmp_path / "fabrics" / "t.yaml").write_text("net:\n  interfaces:\n    lo: {mtu: 65536}\n")
    cfg.write_text(f"default_fabric: t\nhistory: {{path: {tmp_path}/h.sqlite}}\n"
                   f"slurm: {{audit_log: {tmp_path}/audit.jsonl}}\n")
    r = run_hc("sweep", "--via", "slurm", "--nodes", "n1", "--tier", "quick", "--config", str(cfg), "--format", "json",
               env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, timeout=60)
    report = validate_report(r.stdout)
    assert r.returncode == 0, r.stderr  # n1 passed: the leftovers are the run's finding, not its verdict
    (finding,) = [f for f in report["run_findings"] if f["id"] == "act.E010"]
    assert "101 hc-pair-aaaaaaaa" in finding["message"] and "103 hc-sweep-cccccccc" in finding["message"]
    assert not any(f" {j} " in f" {finding['message']} " for j in ("102", "104", "105", "106"))
    assert sorted(finding["value"]) == ["101", "103"]
    cancels = (tmp_path / "scancel.log").read_text().splitlines()
    leftover_cancel = [line for line in cancels if "--name=" not in line]
    assert [sorted(w for w in line.split() if w.isdigit()) for line in leftover_cancel] == [["101", "103"]]
    assert f"--user={os.getuid()}" in leftover_cancel[0].split()
    assert all(f"--user={os.getuid()}" in line for line in (tmp_path / "squeue.log").read_text().splitlines())
    audit = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert sorted((a["action"], a["job"], a["ok"]) for a in audit) == [("cancel-leftover", "101", True),
                                                                       ("cancel-leftover", "103", True)]
    assert "gone" in next(a["reason"] for a in audit if a["job"] == "101")
    assert "past its bound" in next(a["reason"] for a in audit if a["job"] == "103")
    assert b"left behind" in r.stderr  # said where the operator looks, too


def test_a_sweep_inside_an_allocation_or_without_slurm_looks_for_no_leftovers(tmp_path):
    from healthcheck.orchestrate.allocations import before_run

    cfg = tmp_path / "hc.yaml"
    cfg.write_text(f"default_fabric: generic\nslurm: {{scontrol: {tmp_path}/bin/scontrol, audit_log: {tmp_path}/audit.jsonl}}\n")
    squeue = write_stub(tmp_path / "bin", "squeue", f"echo called >> {tmp_path}/squeue.log\n")
    config = load_config(cfg)
    assert before_run(config, ["n1"], via="slurm", tier="quick", pairs=True, env={"SLURM_JOB_ID": "7"}).findings == []
    assert before_run(config, ["n1", "n2"], via="ssh", tier="deep", pairs=True, env={}).findings == []  # ssh pairs
    assert not (tmp_path / "squeue.log").exists()
    squeue.unlink()  # no Slurm here: nothing to say
    out = before_run(config, ["n1"], via="slurm", tier="quick", pairs=True, env={})
    assert out.findings == [] and out.notes == []


def test_leftovers_scancel_refuses_are_named_as_not_cancelled_and_audited_so(tmp_path):
    """scancel refuses (a job of hc's name owned by this user that Slurm will not cancel): the
    finding says which and why, and the audit records the attempt as failed."""
    from healthcheck.actions.audit import AuditLog
    from healthcheck.orchestrate.allocations import cancel_leftovers

    host = re.sub(r"[^A-Za-z0-9_-]", "", socket.gethostname().split(".", 1)[0])
    (tmp_path / "jobs").write_text(f"201|hc-pair-aaaaaaaa.{_dead_pid()}.1.{int(time.time()) + 3600}@{host}|RUNNING\n")
    bin_dir = tmp_path / "bin"
    write_stub(bin_dir, "scancel", "echo 'scancel: error: Kill job error on job id 201: Access/permission denied' >&2\n"
                                   "exit 1\n")
    write_stub(bin_dir, "squeue", "")
    (bin_dir / "squeue").write_text(LISTING_SQUEUE.format(python=sys.executable, d=str(tmp_path)))
    cfg = tmp_path / "hc.yaml"
    cfg.write_text(f"slurm: {{scontrol: {bin_dir}/scontrol}}\n")
    audit = AuditLog(tmp_path / "audit.jsonl")
    out = cancel_leftovers(load_config(cfg).main.slurm, {"PATH": "/usr/bin:/bin"}, audit)
    (finding,) = out.findings
    assert finding.id == "act.E010" and "could not cancel job(s) 201" in finding.message
    assert "permission denied" in finding.message and "cancelled 1" not in finding.message
    assert [(a["job"], a["ok"]) for a in audit.read()] == [("201", False)]


# squeue as Slurm answers while a cancelled job's node finishes its epilog: COMPLETING for two
# looks after the cancel, then gone
COMPLETING_SQUEUE = """#!{python}
import os
d = {d!r}
cancelled = os.path.exists(d + "/scancel.log")
looks = len(open(d + "/looks").read()) if os.path.exists(d + "/looks") else 0
if cancelled:
    open(d + "/looks", "a").write("x")
for line in open(d + "/jobs").read().splitlines():
    job, name, state = line.split("|")
    if not cancelled:
        print(line)
    elif looks < 2:
        print(job + "|" + name + "|COMPLETING")
"""


def test_the_leftovers_nodes_are_free_before_the_sweep_goes_on(tmp_path):
    """A cancelled leftover's node stays busy while its job completes (its epilog: hc's own
    epilogue, say); the look waits (bounded) until the job has left, so the sweep that
    follows does not skip the node as busy."""
    from healthcheck.actions.audit import AuditLog
    from healthcheck.orchestrate.allocations import cancel_leftovers

    host = re.sub(r"[^A-Za-z0-9_-]", "", socket.gethostname().split(".", 1)[0])
    (tmp_path / "jobs").write_text(f"301|hc-pair-aaaaaaaa.{_dead_pid()}.1.{int(time.time()) + 3600}@{host}|RUNNING\n")
    bin_dir = tmp_path / "bin"
    write_stub(bin_dir, "scancel", f'echo "$@" >> {tmp_path}/scancel.log\n')
    write_stub(bin_dir, "squeue", "")
    (bin_dir / "squeue").write_text(COMPLETING_SQUEUE.format(python=sys.executable, d=str(tmp_path)))
    cfg = tmp_path / "hc.yaml"
    cfg.write_text(f"slurm: {{scontrol: {bin_dir}/scontrol}}\n")
    out = cancel_leftovers(load_config(cfg).main.slurm, {"PATH": "/usr/bin:/bin"}, AuditLog(tmp_path / "audit.jsonl"))
    assert len((tmp_path / "looks").read_text()) == 3  # completing, completing, gone: then it returned
    (finding,) = out.findings
    assert "cancelled 1 " in finding.message and "301" in finding.message
