"""The measured detector (issue 19): labelled gloo jobs (tests/diagnose_jobs/) run for real and
diagnosed by hc, live or from their saved output.

The tables are checked for what the issue asks of them (at least 30 failing and 5 healthy
jobs, a held-out set of at least 20 that is not the tuning set again, every hc class
mapped). CI runs a small subset (CI_SUBSET: worlds 2-3, a few seconds each; CI_REPLAYED of
them from their saved output) and asserts hc is at least as good as FLOOR: what main scored
when the suite was written. A rule that gets better raises the floor (the lead edits FLOOR
after a merge); one that gets worse fails here. bin/bench --only "diagnose detector" prints
the whole tuning and held-out tables.

Also in CI, and the same every time: the tuning set's saved outputs (its logs-mode jobs as they
ran when the suite was captured, tests/fixtures/diagnose-jobs/tuning/) replayed through `hc
diagnose logs`, against REPLAY_FLOOR."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import typing
from pathlib import Path

import pytest
from diagnose_jobs import harness, inprocess
from diagnose_jobs.scenarios import CI_REPLAYED, CI_SUBSET, TUNING

# Raised after issue 19's rules were merged (bin/bench --only "diagnose detector", 88623d2):
# CI_SUBSET: the exception under torchrun, the busy rank, the world-2 hang and the healthy
# job (progressing, nobody named) right; the dtype mismatch classed without a rank (gloo's
# text does not say which rank holds the other dtype).
# The tuning set's 33 saved outputs (14 until the i19-rules branch added 19 of its own): 25
# right, every class right; the size and dtype mismatches of one gloo size report classed
# without a rank (one report gives two ranks' sizes and no majority:
# tests/unit/diagnose/test_diagnose_culprits.py) and the wrong WORLD_SIZE classed without a rank.
REPLAY_FLOOR = {"rank_right": 33, "class_right": 41, "both_right": 33, "false_culprits": 0, "named_on_healthy": 0}

# Lowered in issue 19's round 10 (i19-r10live), a deliberate trade: "busy plain r0 live" is a
# pure-Python loop on rank 0 while the others wait in all_reduce, and held-out-8's healthy
# "silentcpu" job is the same loop for 20 s before it trains on; a few seconds of stacks and
# CPU time cannot tell them apart, and naming a rank on a healthy job is the worse error. hc
# now says "progressing" and names the busy rank in a note ("look again if it stays there"),
# so the busy job counts as missed: rank_right, class_right and both_right each one lower.
FLOOR = {"rank_right": 3, "class_right": 4, "both_right": 3, "false_culprits": 0, "named_on_healthy": 0}



def test_the_sets_are_as_large_and_varied_as_the_issue_asks():
    held = harness.held_out()
    every = TUNING + held
    assert len(held) >= 20
    assert sum(sc.truth != "none" for sc in every) >= 30 and sum(sc.truth == "none" for sc in every) >= 5
    assert len({sc.name for sc in every}) == len(every)
    assert {sc.launcher for sc in every} >= {"plain", "torchrun", "mpirun"}
    assert {sc.mode for sc in every} == {"live", "logs"} and any(sc.hcrun for sc in every)
    assert {sc.world for sc in every} >= set(range(2, 9)) - {7}
    assert any(len(sc.expected_ranks) > 1 for sc in every)
    assert {sc.truth for sc in every} == set(harness.CLASSES)
    for sc in every:
        assert sc.launcher in ("plain", "torchrun", "mpirun", "srun") and sc.mode in ("live", "logs"), sc.name
        assert all(0 <= r < sc.world for r in sc.culprits + sc.expected_ranks), sc.name
        assert sc.truth != "none" or not sc.expected_ranks, sc.name


def test_the_held_out_set_is_not_the_tuning_set_again():
    def shape(sc: harness.Scenario) -> tuple:
        return (sc.fault, sc.world, sc.culprits, sc.launcher, sc.mode, sc.hcrun, sc.hcrun_inside, sc.labelled,
                sc.args)

    assert not {shape(sc) for sc in harness.held_out()} & {shape(sc) for sc in TUNING}


def test_the_second_held_out_set_loads_and_is_as_varied_as_asked():
    """held-out-2 replaces held-out (read while rules were written) as the unseen jobs: at
    least 24, 20 failing and 4 healthy or slow, 8 live, every launcher, with and without `hc
    run`, worlds 2-8, several culprits at once, in shapes neither earlier set has."""
    held2 = harness.held_out("held-out-2")
    assert len(held2) >= 24 and len({sc.name for sc in held2}) == len(held2)
    assert sum(sc.truth != "none" for sc in held2) >= 20 and sum(sc.truth == "none" for sc in held2) >= 4
    assert sum(sc.mode == "live" for sc in held2) >= 8 and any(sc.mode == "logs" for sc in held2)
    assert {sc.launcher for sc in held2} == {"plain", "torchrun", "mpirun"}
    assert {sc.hcrun for sc in held2} == {True, False}
    assert {sc.world for sc in held2} == set(range(2, 9))
    assert sum(len(sc.expected_ranks) > 1 for sc in held2) >= 2
    assert {sc.truth for sc in held2} <= set(harness.CLASSES)
    for sc in held2:
        assert all(0 <= r < sc.world for r in sc.culprits + sc.expected_ranks), sc.name
        assert sc.truth != "none" or not sc.expected_ranks, sc.name

    def shape(sc: harness.Scenario) -> tuple:  # a wrong RANK and a wrong MASTER_PORT differ in rank_env only
        return (sc.fault, sc.world, sc.culprits, sc.launcher, sc.mode, sc.hcrun, sc.labelled, sc.args,
                sc.rank_env, sc.port_taken)

    seen = {shape(sc) for sc in TUNING + harness.held_out("held-out")}
    assert not {shape(sc) for sc in held2} & seen
    assert not {sc.name for sc in held2} & {sc.name for sc in TUNING + harness.held_out("held-out")}


def test_every_logs_mode_job_of_the_second_held_out_set_has_its_saved_output():
    held2 = harness.held_out("held-out-2")
    saved = harness.SAVED["held-out-2"]
    logs = {sc.slug for sc in held2 if sc.mode == "logs"}
    assert len(logs) == sum(sc.mode == "logs" for sc in held2)  # no two share a folder
    for slug in sorted(logs):
        folder = saved / slug
        assert folder.is_dir() and any(folder.rglob("*.log")), f"no saved output in {folder}"
    assert {p.name for p in saved.iterdir() if p.is_dir()} == logs  # nothing saved for a job not in the table


def test_the_third_held_out_set_loads_and_is_as_varied_as_asked():
    """held-out-3 replaces held-out and held-out-2 (both read while rules were written) as the
    unseen jobs: at least 24, 20 failing and 4 healthy or slow, 8 live, every launcher, with
    and without `hc run`, worlds 2-8, several culprits at once, in shapes and names no
    earlier set has, and mechanisms (job.py variants) none of them uses."""
    held3 = harness.held_out("held-out-3")
    assert len(held3) >= 24 and len({sc.name for sc in held3}) == len(held3)
    assert sum(sc.truth != "none" for sc in held3) >= 20 and sum(sc.truth == "none" for sc in held3) >= 4
    assert sum(sc.mode == "live" for sc in held3) >= 8 and any(sc.mode == "logs" for sc in held3)
    assert {sc.launcher for sc in held3} == {"plain", "torchrun", "mpirun"}
    assert {sc.hcrun for sc in held3} == {True, False}
    assert {sc.world for sc in held3} == set(range(2, 9))
    assert sum(len(sc.expected_ranks) > 1 for sc in held3) >= 2
    assert {sc.truth for sc in held3} <= set(harness.CLASSES)
    for sc in held3:
        assert all(0 <= r < sc.world for r in sc.culprits + sc.expected_ranks), sc.name
        assert sc.truth != "none" or not sc.expected_ranks, sc.name

    def shape(sc: harness.Scenario) -> tuple:
        return (sc.fault, sc.world, sc.culprits, sc.launcher, sc.mode, sc.hcrun, sc.labelled, sc.args,
                sc.rank_env, sc.port_taken)

    earlier = TUNING + harness.held_out("held-out") + harness.held_out("held-out-2")
    assert not {shape(sc) for sc in held3} & {shape(sc) for sc in earlier}
    assert not {sc.name for sc in held3} & {sc.name for sc in earlier}
    assert not {sc.slug for sc in held3} & {sc.slug for sc in earlier}
    # new mechanisms: every failing job's variant is one no earlier set uses ("none" with a
    # launch fault in rank_env aside)
    assert not {sc.fault for sc in held3 if sc.fault != "none"} & {sc.fault for sc in earlier}


def test_every_logs_mode_job_of_the_third_held_out_set_has_its_saved_output():
    held3 = harness.held_out("held-out-3")
    saved = harness.SAVED["held-out-3"]
    logs = {sc.slug for sc in held3 if sc.mode == "logs"}
    assert len(logs) == sum(sc.mode == "logs" for sc in held3)  # no two share a folder
    for slug in sorted(logs):
        folder = saved / slug
        assert folder.is_dir() and any(folder.rglob("*.log")), f"no saved output in {folder}"
    assert {p.name for p in saved.iterdir() if p.is_dir()} == logs  # nothing saved for a job not in the table


def test_the_third_held_out_sets_new_variants_are_in_the_job():
    """Each variant held-out-3 names is one job.py knows (documented in its docstring): a
    misspelt fault would run a healthy job labelled as a failing one."""
    from diagnose_jobs import job

    for sc in harness.held_out("held-out-3"):
        assert sc.fault == "none" or f"\n  {sc.fault} " in job.__doc__, sc.fault


def test_the_fourth_held_out_set_loads_and_is_as_varied_as_asked():
    """held-out-4 was the set of jobs no rule writer had read (the earlier ones may have been):
    32 failing and at least 5 healthy or slow, 8 live, plain, torchrun and mpirun, with and
    without `hc run`, worlds 2-8, several culprits at once and culprits at varied ranks, in
    shapes, names and mechanisms (job.py variants) no earlier set has."""
    held4 = harness.held_out("held-out-4")
    assert len({sc.name for sc in held4}) == len(held4)
    assert sum(sc.truth != "none" for sc in held4) == 32 and sum(sc.truth == "none" for sc in held4) >= 5
    assert sum(sc.mode == "live" for sc in held4) >= 8 and any(sc.mode == "logs" for sc in held4)
    assert {sc.launcher for sc in held4} >= {"plain", "torchrun", "mpirun"}
    assert {sc.hcrun for sc in held4} == {True, False}
    assert {sc.world for sc in held4} == set(range(2, 9))
    assert sum(len(sc.expected_ranks) > 1 for sc in held4) >= 3
    culprit_ranks = {r for sc in held4 for r in sc.expected_ranks}
    assert culprit_ranks >= {0, 2, 3, 4}  # not always rank 1 or the last
    assert {sc.truth for sc in held4} == set(harness.CLASSES)
    for sc in held4:
        assert all(0 <= r < sc.world for r in sc.culprits + sc.expected_ranks), sc.name
        assert sc.truth != "none" or not sc.expected_ranks, sc.name

    def shape(sc: harness.Scenario) -> tuple:
        return (sc.fault, sc.world, sc.culprits, sc.launcher, sc.mode, sc.hcrun, sc.labelled, sc.args,
                sc.rank_env, sc.port_taken)

    earlier = TUNING + harness.held_out("held-out") + harness.held_out("held-out-2") + harness.held_out("held-out-3")
    assert not {shape(sc) for sc in held4} & {shape(sc) for sc in earlier}
    assert not {sc.name for sc in held4} & {sc.name for sc in earlier}
    assert not {sc.slug for sc in held4} & {sc.slug for sc in earlier}
    # new mechanisms: every job's variant is one no earlier set uses (a launch fault, in
    # rank_env with the variant "none", aside), and its launch faults are new variables
    assert not {sc.fault for sc in held4 if sc.fault != "none"} & {sc.fault for sc in earlier}
    assert not {name for sc in held4 for _, name, _ in sc.rank_env} & \
        {name for sc in earlier for _, name, _ in sc.rank_env}


def test_every_logs_mode_job_of_the_fourth_held_out_set_has_its_saved_output():
    held4 = harness.held_out("held-out-4")
    saved = harness.SAVED["held-out-4"]
    logs = {sc.slug for sc in held4 if sc.mode == "logs"}
    assert len(logs) == sum(sc.mode == "logs" for sc in held4)  # no two share a folder
    for slug in sorted(logs):
        folder = saved / slug
        assert folder.is_dir() and any(folder.rglob("*.log")), f"no saved output in {folder}"
    assert {p.name for p in saved.iterdir() if p.is_dir()} == logs  # nothing saved for a job not in the table


def test_the_fourth_held_out_sets_new_variants_are_in_the_job():
    """Each variant held-out-4 names is one job.py knows (documented in its docstring) and
    handles: a misspelt fault would run a healthy job labelled as a failing one."""
    from diagnose_jobs import job

    source = Path(job.__file__).read_text()
    for sc in harness.held_out("held-out-4"):
        if sc.fault != "none":
            assert f"\n  {sc.fault} " in job.__doc__, sc.fault
            assert f'"{sc.fault}"' in source.split('"""', 2)[2], sc.fault  # used in the code, not only described


def test_the_fifth_held_out_set_loads_and_is_as_varied_as_asked():
    """held-out-5 is the set of jobs no rule writer has read (the earlier ones have been): at
    least 22 failing and 5 healthy or slow, about a third live, plain, torchrun, mpirun and
    srun-labelled, with and without `hc run`, worlds 2-8, several culprits at once and
    culprits at varied ranks, in shapes, names and mechanisms (job.py variants) no earlier set
    has."""
    held5 = harness.held_out("held-out-5")
    assert len({sc.name for sc in held5}) == len(held5)
    assert sum(sc.truth != "none" for sc in held5) >= 22 and sum(sc.truth == "none" for sc in held5) >= 5
    assert 3 * sum(sc.mode == "live" for sc in held5) >= len(held5) - 6 and any(sc.mode == "logs" for sc in held5)
    assert {sc.launcher for sc in held5} == {"plain", "torchrun", "mpirun", "srun"}
    assert {sc.hcrun for sc in held5} == {True, False}
    assert {sc.world for sc in held5} == set(range(2, 9))
    assert sum(len(sc.expected_ranks) > 1 for sc in held5) >= 3
    culprit_ranks = [r for sc in held5 for r in sc.expected_ranks]
    assert set(culprit_ranks) >= {0, 1, 2, 3, 4, 5, 6, 7}
    assert sum(r in (0, 1) for r in culprit_ranks) * 3 < len(culprit_ranks)  # not mostly rank 0 or 1
    assert {sc.truth for sc in held5} == set(harness.CLASSES)
    for sc in held5:
        assert all(0 <= r < sc.world for r in sc.culprits + sc.expected_ranks), sc.name
        assert sc.truth != "none" or not sc.expected_ranks, sc.name

    def shape(sc: harness.Scenario) -> tuple:
        return (sc.fault, sc.world, sc.culprits, sc.launcher, sc.mode, sc.hcrun, sc.labelled, sc.args,
                sc.rank_env, sc.port_taken)

    earlier = TUNING + [sc for name in ("held-out", "held-out-2", "held-out-3", "held-out-4")
                        for sc in harness.held_out(name)]
    assert not {shape(sc) for sc in held5} & {shape(sc) for sc in earlier}
    assert not {sc.name for sc in held5} & {sc.name for sc in earlier}
    assert not {sc.slug for sc in held5} & {sc.slug for sc in earlier}
    # new mechanisms: every job's variant is one no earlier set uses (a launch fault, in
    # rank_env with the variant "none", aside), and its launch faults are new variables
    assert not {sc.fault for sc in held5 if sc.fault != "none"} & {sc.fault for sc in earlier}
    assert not {name for sc in held5 for _, name, _ in sc.rank_env} & \
        {name for sc in earlier for _, name, _ in sc.rank_env}


def test_every_logs_mode_job_of_the_fifth_held_out_set_has_its_saved_output():
    held5 = harness.held_out("held-out-5")
    saved = harness.SAVED["held-out-5"]
    logs = {sc.slug for sc in held5 if sc.mode == "logs"}
    assert len(logs) == sum(sc.mode == "logs" for sc in held5)  # no two share a folder
    for slug in sorted(logs):
        folder = saved / slug
        assert folder.is_dir() and any(folder.rglob("*.log")), f"no saved output in {folder}"
    assert {p.name for p in saved.iterdir() if p.is_dir()} == logs  # nothing saved for a job not in the table


def test_the_fifth_held_out_sets_new_variants_are_in_the_job():
    """Each variant held-out-5 names is one job.py knows (documented in its docstring) and
    handles: a misspelt fault would run a healthy job labelled as a failing one."""
    from diagnose_jobs import job

    source = Path(job.__file__).read_text()
    for sc in harness.held_out("held-out-5"):
        if sc.fault != "none":
            assert f"\n  {sc.fault} " in job.__doc__, sc.fault
            assert f'"{sc.fault}"' in source.split('"""', 2)[2], sc.fault  # used in the code, not only described


def test_the_sixth_held_out_set_loads_and_is_as_varied_as_asked():
    """held-out-6 is the set of jobs no rule writer has read (the earlier ones have been, or may
    have been): at least 24 failing and 5 healthy or slow, about a third live, plain, torchrun,
    mpirun and srun-labelled, with and without `hc run`, worlds 2-8, several culprits at once and
    culprits at varied ranks, in shapes, names and mechanisms (job.py variants) no earlier set
    has."""
    held6 = harness.held_out("held-out-6")
    assert len({sc.name for sc in held6}) == len(held6)
    assert sum(sc.truth != "none" for sc in held6) >= 24 and sum(sc.truth == "none" for sc in held6) >= 5
    assert 3 * sum(sc.mode == "live" for sc in held6) >= len(held6) - 6 and any(sc.mode == "logs" for sc in held6)
    assert {sc.launcher for sc in held6} == {"plain", "torchrun", "mpirun", "srun"}
    assert {sc.hcrun for sc in held6} == {True, False}
    assert {sc.world for sc in held6} == set(range(2, 9))
    assert sum(len(sc.expected_ranks) > 1 for sc in held6) >= 3
    culprit_ranks = [r for sc in held6 for r in sc.expected_ranks]
    assert set(culprit_ranks) >= {0, 1, 2, 3, 4, 5, 6, 7}
    assert sum(r in (0, 1) for r in culprit_ranks) * 3 < len(culprit_ranks)  # not mostly rank 0 or 1
    assert {sc.truth for sc in held6} == set(harness.CLASSES)
    for sc in held6:
        assert all(0 <= r < sc.world for r in sc.culprits + sc.expected_ranks), sc.name
        assert sc.truth != "none" or not sc.expected_ranks, sc.name

    def shape(sc: harness.Scenario) -> tuple:
        return (sc.fault, sc.world, sc.culprits, sc.launcher, sc.mode, sc.hcrun, sc.labelled, sc.args,
                sc.rank_env, sc.port_taken)

    earlier = TUNING + [sc for name in ("held-out", "held-out-2", "held-out-3", "held-out-4", "held-out-5")
                        for sc in harness.held_out(name)]
    assert not {shape(sc) for sc in held6} & {shape(sc) for sc in earlier}
    assert not {sc.name for sc in held6} & {sc.name for sc in earlier}
    assert not {sc.slug for sc in held6} & {sc.slug for sc in earlier}
    # new mechanisms: every job's variant is one no earlier set uses (a launch fault, in
    # rank_env with the variant "none", aside), and its launch faults are new variables
    assert not {sc.fault for sc in held6 if sc.fault != "none"} & {sc.fault for sc in earlier}
    assert not {name for sc in held6 for _, name, _ in sc.rank_env} & \
        {name for sc in earlier for _, name, _ in sc.rank_env}


def test_every_logs_mode_job_of_the_sixth_held_out_set_has_its_saved_output():
    held6 = harness.held_out("held-out-6")
    saved = harness.SAVED["held-out-6"]
    logs = {sc.slug for sc in held6 if sc.mode == "logs"}
    assert len(logs) == sum(sc.mode == "logs" for sc in held6)  # no two share a folder
    for slug in sorted(logs):
        folder = saved / slug
        assert folder.is_dir() and any(folder.rglob("*.log")), f"no saved output in {folder}"
    assert {p.name for p in saved.iterdir() if p.is_dir()} == logs  # nothing saved for a job not in the table


def test_the_sixth_held_out_sets_new_variants_are_in_the_job():
    """Each variant held-out-6 names is one job.py knows (documented in its docstring) and
    handles: a misspelt fault would run a healthy job labelled as a failing one."""
    from diagnose_jobs import job

    source = Path(job.__file__).read_text()
    for sc in harness.held_out("held-out-6"):
        if sc.fault != "none":
            assert f"\n  {sc.fault} " in job.__doc__, sc.fault
            assert f'"{sc.fault}"' in source.split('"""', 2)[2], sc.fault  # used in the code, not only described


def test_the_seventh_held_out_set_loads_and_is_as_varied_as_asked():
    """held-out-7 is the set of jobs no rule writer has read, and the first whose jobs are not
    job.py's loop: at least 30 failing and 6 healthy or slow, at least 10 live, plain, torchrun,
    mpirun and srun-labelled, with and without `hc run`, worlds 2-8 (several of 2 and 3),
    several culprits at once and culprits at varied ranks, at least half of them running a job
    script of the set's own, in names and mechanisms no earlier set has."""
    held7 = harness.held_out("held-out-7")
    assert len({sc.name for sc in held7}) == len(held7)
    assert sum(sc.truth != "none" for sc in held7) >= 30 and sum(sc.truth == "none" for sc in held7) >= 6
    assert sum(sc.mode == "live" for sc in held7) >= 10 and any(sc.mode == "logs" for sc in held7)
    assert {sc.launcher for sc in held7} == {"plain", "torchrun", "mpirun", "srun"}
    assert {sc.hcrun for sc in held7} == {True, False}
    assert {sc.world for sc in held7} == set(range(2, 9))
    assert sum(sc.world == 2 for sc in held7) >= 2 and sum(sc.world == 3 for sc in held7) >= 2
    assert sum(len(sc.expected_ranks) > 1 for sc in held7) >= 3
    culprit_ranks = [r for sc in held7 for r in sc.expected_ranks]
    assert set(culprit_ranks) >= {0, 1, 2, 3, 4, 5, 6}
    assert sum(r == 0 for r in culprit_ranks) * 3 < len(culprit_ranks)  # rank 0 in a few, not most
    assert {sc.truth for sc in held7} == set(harness.CLASSES)
    assert 2 * sum(bool(sc.script) for sc in held7) >= len(held7)  # not job.py's loop, in at least half
    for sc in held7:
        assert all(0 <= r < sc.world for r in sc.culprits + sc.expected_ranks), sc.name
        assert sc.truth != "none" or not sc.expected_ranks, sc.name
        assert sc.script == "" or (harness.REPO / sc.script).is_file(), sc.name
        assert sc.restarts == 0 or sc.launcher == "torchrun", sc.name

    earlier = TUNING + [sc for name in ("held-out", "held-out-2", "held-out-3", "held-out-4", "held-out-5",
                                        "held-out-6") for sc in harness.held_out(name)]
    assert not {sc.name for sc in held7} & {sc.name for sc in earlier}
    assert not {sc.slug for sc in held7} & {sc.slug for sc in earlier}
    assert not {sc.fault for sc in held7 if sc.fault != "none"} & {sc.fault for sc in earlier}
    assert not {name for sc in held7 for _, name, _ in sc.rank_env} & \
        {name for sc in earlier for _, name, _ in sc.rank_env}


def test_every_logs_mode_job_of_the_seventh_held_out_set_has_its_saved_output():
    held7 = harness.held_out("held-out-7")
    saved = harness.SAVED["held-out-7"]
    logs = {sc.slug for sc in held7 if sc.mode == "logs"}
    assert len(logs) == sum(sc.mode == "logs" for sc in held7)  # no two share a folder
    for slug in sorted(logs):
        folder = saved / slug
        assert folder.is_dir() and any(folder.rglob("*.log")), f"no saved output in {folder}"
    assert {p.name for p in saved.iterdir() if p.is_dir()} == logs  # nothing saved for a job not in the table


def test_the_seventh_held_out_sets_variants_are_in_their_scripts():
    """Each variant a held-out-7 job names is one its script knows (documented in its docstring)
    and handles: a misspelt fault would run a healthy job labelled as a failing one."""
    import ast

    for sc in harness.held_out("held-out-7"):
        if sc.fault == "none":
            continue
        source = (harness.REPO / (sc.script or "tests/diagnose_jobs/job.py")).read_text()
        doc = ast.get_docstring(ast.parse(source), clean=False) or ""
        assert f"\n  {sc.fault} " in doc, (sc.name, sc.fault)
        assert f'"{sc.fault}"' in source.split('"""', 2)[2], (sc.name, sc.fault)  # used in the code


def test_an_unknown_held_out_set_is_refused():
    assert "held-out-99" not in harness.SETS
    with pytest.raises(ValueError):
        harness.held_out("held-out-99")


def test_every_class_hc_can_answer_is_mapped_to_the_suites():
    from healthcheck.diagnose.classify import FailureClass

    for cls in typing.get_args(FailureClass):
        assert cls in harness.HC_CLASS, f"map hc's {cls!r} in tests/diagnose_jobs/harness.py HC_CLASS"


def test_scoring_counts_rank_class_and_false_culprits():
    sc = harness.Scenario("t", "loader", 4, "stuck", (1, 3))
    assert harness.Outcome(sc, "stuck-rank", (1, 3)).right
    wrong = harness.Outcome(sc, "collective-mismatch", (0, 1))
    assert not wrong.rank_right and not wrong.class_right and wrong.false_culprits == 1
    healthy = harness.Scenario("h", "straggler", 4, "none", (2,))
    assert healthy.expected_ranks == ()
    assert harness.Outcome(healthy, "unknown", ()).right
    named = harness.Outcome(healthy, "stuck-rank", (2,))
    assert named.named_on_healthy and named.false_culprits == 1
    assert harness.Score([named, wrong]).row().startswith("rank right 0/2 (0%), class right 0/2")


def assert_at_least(score: harness.Score, floor: dict[str, int]) -> None:
    table = "\n".join(" | ".join(row) for row in score.table())
    assert score.errors == 0, table
    for better_when_more in ("rank_right", "class_right", "both_right"):
        assert getattr(score, better_when_more) >= floor[better_when_more], (better_when_more, table)
    for better_when_fewer in ("false_culprits", "named_on_healthy"):
        assert getattr(score, better_when_fewer) <= floor[better_when_fewer], (better_when_fewer, table)


def test_the_tuning_sets_saved_outputs_are_diagnosed_at_least_as_well_as_the_floor():
    # in process: the same `hc diagnose logs` entry point without 41 interpreters' start (the
    # real subprocess is the CI subset's replay, and the parity test below holds them equal)
    scenarios = [sc for sc in TUNING if sc.mode == "logs"]
    score = harness.replay_all(scenarios, harness.SAVED["tuning"], ask=inprocess.ask_hc)
    assert score.n == len(scenarios) == 41  # every logs-mode tuning job has its saved output
    assert_at_least(score, REPLAY_FLOOR)


def test_a_replay_in_process_answers_byte_for_byte_what_the_hc_command_answers():
    # the scoring above runs hc in process: it must be the verdict `hc diagnose logs` prints
    # (the collection time aside, a clock reading), exit code included
    stamp = re.compile(r'"collected_at": "[^"]*"')
    for name in CI_REPLAYED:
        (sc,) = harness.by_name(TUNING, [name])
        argv, env = ["logs", str(harness.SAVED["tuning"] / sc.slug)], harness.clean_env()
        real = subprocess.run([*harness.hc_argv(), "diagnose", *argv, "--format", "json"], capture_output=True,
                              text=True, env=env, cwd=harness.REPO, timeout=harness.HC_TIMEOUT_S, check=False)
        code, out, _ = inprocess.run_diagnose(argv, env, harness.REPO)
        assert '"class"' in out and len(stamp.findall(out)) == 1, out[-2000:]
        assert (code, stamp.sub("", out)) == (real.returncode, stamp.sub("", real.stdout)), name


@pytest.mark.slow
def test_ci_subset_is_at_least_as_good_as_the_floor():
    if not Path(sys.executable).with_name("torchrun").exists() or shutil.which("py-spy") is None and \
            not Path(sys.executable).with_name("py-spy").exists():
        pytest.skip("torch (torchrun) and py-spy are needed next to this Python")
    scenarios = harness.by_name(TUNING, CI_SUBSET)
    assert len(scenarios) == len(CI_SUBSET) and set(CI_REPLAYED) <= set(CI_SUBSET)
    score = harness.run_all([sc for sc in scenarios if sc.name not in CI_REPLAYED], repeat_healthy=False)
    replayed = harness.replay_all([sc for sc in scenarios if sc.name in CI_REPLAYED], harness.SAVED["tuning"])
    assert replayed.n == len(CI_REPLAYED)  # each has its saved output: none is left out of the score
    score.outcomes += replayed.outcomes
    assert_at_least(score, FLOOR)
    assert_answered_in_time(score.outcomes, replayed.outcomes)


# hc's own start and a log folder's reading, measured in the run (the replays: a real `hc
# diagnose logs` each), may take this many times as long again in another answer of the run:
# the machine is shared (CI's workers), and a few-second answer that grows by 10 s is not noise.
# 4 was too tight: CI's run of 2026-11-29 had a real logs-mode job's answer at 1.46 s against a
# replay's 0.36 s (4.1x) with both cores busy, and passed alone
STARTUP_FACTOR = 8


def assert_answered_in_time(outcomes: list[harness.Outcome], replayed: list[harness.Outcome]) -> None:
    """No absolute time (the machine's speed is no property of hc): a live answer within the
    deadline hc was given (`--timeout`, issue 19's bound, sampling included) plus what starting
    hc and reading a job's logs cost in this run; a logs-mode answer within that cost."""
    startup = max(o.seconds for o in replayed)
    table = "\n".join(" | ".join(row) for row in harness.Score(outcomes).table())
    for o in outcomes:
        deadline = harness.HC_LIVE_DEADLINE_S if o.scenario.mode == "live" else 0
        assert o.seconds < deadline + STARTUP_FACTOR * startup, (o.scenario.name, o.seconds, startup, table)


def test_an_answer_is_in_time_against_the_runs_own_start_up_cost():
    """The CI subset's time check compares each answer with what hc's start cost in the same
    run (a replay): a live answer may use hc's --timeout on top of it, a logs-mode one not."""
    live = harness.Scenario("l", "sleep", 2, "stuck", (1,), mode="live")
    logs = harness.Scenario("g", "raise", 2, "dead", (0,))
    replay = [harness.Outcome(logs, seconds=1.0)]
    in_time = [harness.Outcome(live, seconds=harness.HC_LIVE_DEADLINE_S + STARTUP_FACTOR - 0.1),
               harness.Outcome(logs, seconds=STARTUP_FACTOR - 0.1)]
    assert_answered_in_time(in_time, replay)
    for late in (harness.Outcome(live, seconds=harness.HC_LIVE_DEADLINE_S + STARTUP_FACTOR + 0.1),
                 harness.Outcome(logs, seconds=STARTUP_FACTOR + 0.1)):
        with pytest.raises(AssertionError):
            assert_answered_in_time([late], replay)


def test_a_process_its_exited_launcher_left_in_the_session_is_found_to_be_killed():
    """held-out-10's hung DataLoader worker outlived the harness' kill by minutes: its launcher
    had exited, so the session it led was not signalled. What is left in the session is."""
    import os
    import signal
    import subprocess
    import time

    leader = subprocess.Popen(["sh", "-c", "sleep 60 & exit 0"], start_new_session=True)
    leader.wait(10)
    left = []
    for _ in range(50):  # the child may take a moment to show in /proc
        left = harness.session_members(leader.pid)
        if left:
            break
        time.sleep(0.05)
    try:
        assert left and leader.pid not in left  # the orphan, which Run.kill now signals by pid
    finally:
        for pid in left:
            os.kill(pid, signal.SIGKILL)
