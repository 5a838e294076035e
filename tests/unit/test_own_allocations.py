"""The Slurm jobs hc asks srun for itself outside an allocation (orchestrate/allocations.py):
named for who asked, time-limited where the partition allows, cancelled with a second look
for a grant that raced the cancel. Stand-in srun, scancel, squeue and sinfo; the real
Slurm is the rig's (integration/test_pair_launchers_rig.py)."""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path

import pytest
from support import write_stub
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


@pytest.mark.parametrize("answer, limited", [("debug*|infinite", True), ("debug*|2-00:00:00", True),
                                             ("debug*|10:00", False), (None, False)],
                         ids=["unlimited", "above", "below", "unknown"])
def test_a_workers_allocation_has_a_time_limit_from_the_sweeps_bound_where_the_partition_allows(
        tmp_path, answer, limited):
    """The worker lives at most the pool's lifetime: its job's --time is that plus a margin, in
    minutes rounded up; omitted where the partition's MaxTime is lower (Slurm would refuse or
    hold the job) or unknown."""
    pytest.importorskip("torch")
    config, log = site(tmp_path, "srun")
    _with_sinfo(tmp_path, answer)
    workers = pool(load_config(tmp_path / "hc.yaml"))
    try:
        samples, why = workers.run_test(["n1", "n2"], "127.0.0.1")
        assert samples and why == "", why
    finally:
        workers.close()
    for argv in launches(log):
        minutes = [int(a.split("=", 1)[1]) for a in argv if a.startswith("--time=")]
        if limited:  # the worker's whole life, and a few minutes' margin: never less, never unlimited
            assert len(minutes) == 1 and workers.lifetime_s <= minutes[0] * 60 <= workers.lifetime_s + 600, argv
        else:
            assert minutes == [], argv


def test_a_per_test_srun_gets_a_time_limit_from_the_tests_bound(tmp_path):
    from healthcheck.orchestrate import allocations, pair_launch, pairs

    config, _ = site(tmp_path, "srun")
    _with_sinfo(tmp_path, "debug*|infinite")
    config = load_config(tmp_path / "hc.yaml")
    plan = pairs._Plan(config, "n1")
    job = allocations.OwnJob(config.main.slurm, {}, "pair", plan.pairs.timeout_s)
    job.release()
    argv = pair_launch.srun_spec(config, plan, ["n1", "n2"], {}, job.name, time_args=job.srun_args()).argv
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
        samples, why = workers.run_test(["n1", "n2"], "127.0.0.1")
        assert samples and why == "", why
    finally:
        workers.close()
    names = sorted(next(a.split("=", 1)[1] for a in argv if a.startswith("--job-name=")) for argv in launches(log))
    cancels = (tmp_path / "scancel.log").read_text().splitlines()
    assert sorted(w.split("=", 1)[1] for line in cancels for w in line.split() if w.startswith("--name=")) == names
    assert sorted(w for line in cancels for w in line.split() if w.isdigit()) == ["7700", "7701"], cancels
    assert all(" granted as it was cancelled" in note for note in workers.notes), workers.notes
