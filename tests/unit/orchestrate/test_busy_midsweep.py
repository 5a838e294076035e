"""A job that lands on a node during a deep sweep (issue 18, B.6): before each batch of
tests between nodes, and after a round's last, hc asks Slurm (one sinfo; one squeue for
the nodes it shows busy) whether a job other than hc's own took a member. Such a test is
not run (or its result not used) and is ERROR naming the job; that node is tested no
more in the sweep and the pairs analysis does not vouch for it. Slurm is a stand-in
client here (busy.JobWatch's); the rig test runs it against real Slurm for every launcher."""

from __future__ import annotations

import os
import re
from pathlib import Path

from pair_fakes import torch_tests_by

from healthcheck.actions.slurm import NodeStates, SlurmJob, SlurmNode
from healthcheck.core.config.loader import load_config
from healthcheck.core.model import CheckResult, NodeResult
from healthcheck.core.nodes import parse_hostlist
from healthcheck.core.status import Status
from healthcheck.orchestrate.allocations import job_name, this_host
from healthcheck.orchestrate.busy import JobWatch
from healthcheck.orchestrate.pairsweep import choose, sweep
from healthcheck.parsers.bandwidth_common import BandwidthSample

ME = os.getuid()


class Slurm:
    """sinfo and squeue as JobWatch asks them: a node is allocated while a job in `jobs` holds it."""

    def __init__(self) -> None:
        self.jobs: list[SlurmJob] = []
        self.calls: list[tuple[str, str]] = []
        self.sinfo_error: str | None = None
        self.squeue_error: str | None = None
        self.installed = True

    def node_states(self, names=None, partition=None) -> NodeStates:
        self.calls.append(("sinfo", names))
        if not self.installed:
            return NodeStates({}, "sinfo not found", not_installed=True)
        if self.sinfo_error:
            return NodeStates({}, self.sinfo_error)
        busy = {n for j in self.jobs for n in parse_hostlist(j.nodes).names()}
        return NodeStates({n: SlurmNode(n, "allocated" if n in busy else "idle")
                           for n in parse_hostlist(names).names()})

    def jobs_on(self, names):
        self.calls.append(("squeue", names))
        if self.squeue_error:
            return [], self.squeue_error
        asked = set(parse_hostlist(names).names())
        return [j for j in self.jobs if asked & set(parse_hostlist(j.nodes).names())], None


def watch(slurm: Slurm, env: dict[str, str] | None = None) -> JobWatch:
    return JobWatch(config=None, env=env or {}, client=slurm)  # type: ignore[arg-type]


def test_a_node_a_job_took_is_named_with_the_job_and_stays_taken():
    slurm = Slurm()
    w = watch(slurm)
    assert w.check(["n1", "n2"]) == {} and slurm.calls == [("sinfo", "n[1-2]")]  # idle: no squeue
    slurm.jobs = [SlurmJob("4242", ME + 1, "train", "n2")]
    stop = w.check(["n1", "n2"])
    assert stop == {"n2": "job 4242 took n2 during the sweep: its tests between nodes stop there"}
    assert slurm.calls[1:] == [("sinfo", "n[1-2]"), ("squeue", "n2")]
    slurm.jobs = []  # the job ended: n2 is still not tested again in this sweep
    assert w.check(["n2", "n3"]) == stop and slurm.calls[-1] == ("sinfo", "n3")
    assert w.taken == stop


def test_hcs_own_jobs_are_not_a_job_taking_the_node():
    slurm = Slurm()
    slurm.jobs = [SlurmJob("10", ME, job_name("pair", 600), "n1"),  # a worker's allocation of its own
                  SlurmJob("11", ME, job_name("pair", 60), "n[2-3]"),  # a per-test allocation
                  SlurmJob("12", ME + 1, "batch", "n4")]  # the allocation hc runs in (SLURM_JOB_ID)
    w = watch(slurm, {"SLURM_JOB_ID": "12"})
    assert w.check(["n1", "n2", "n3", "n4"]) == {} and not w.taken
    # another user's job named like hc's is theirs
    slurm.jobs.append(SlurmJob("13", ME + 1, "hc-pair-evil", "n1"))
    assert set(w.check(["n1", "n2"])) == {"n1"} and "job 13 took n1" in w.taken["n1"]


def test_another_hcs_allocation_is_a_job_taking_the_node():
    """Only this hc's own jobs share its nodes: the workers of a sweep beside it (same user,
    another pid, another host, an older hc's name), or a leftover of a killed one, would run
    their bandwidth tests beside this sweep's, and each would measure the other."""
    here = job_name("pair", 600)
    other_pid = re.sub(r"\.(\d+)\.(\d+)\.", lambda m: f".{int(m[1]) + 1}.{m[2]}.", here, count=1)
    other_host = here.rsplit("@", 1)[0] + ("@login2" if this_host() != "login2" else "@login3")
    for i, name in enumerate([other_pid, other_host, "hc-pair-0123456789ab", "hc-sweep-ba9876543210"]):
        slurm = Slurm()
        slurm.jobs = [SlurmJob(str(20 + i), ME, name, "n1")]
        w = watch(slurm)
        assert set(w.check(["n1", "n2"])) == {"n1"} and f"job {20 + i} took n1" in w.taken["n1"], name


def test_slurm_that_does_not_answer_tests_nothing_blind_and_asks_again_next_time():
    slurm = Slurm()
    slurm.sinfo_error = "Unable to contact slurm controller"
    w = watch(slurm)
    stop = w.check(["n1", "n2"])
    assert set(stop) == {"n1", "n2"} and "Unable to contact slurm controller" in stop["n1"]
    assert not w.taken  # not known to be taken: asked again
    slurm.sinfo_error = None
    slurm.jobs = [SlurmJob("7", ME + 1, "x", "n1")]
    slurm.squeue_error = "squeue: error: Socket timed out"
    stop = w.check(["n1", "n2"])
    assert set(stop) == {"n1"} and "did not say whose" in stop["n1"] and not w.taken
    assert w.check(["n2"]) == {}


def test_no_slurm_installed_means_nothing_to_watch():
    slurm = Slurm()
    slurm.installed = False
    w = watch(slurm)
    assert w.check(["n1"]) == {} and w.check(["n1"]) == {} and len(slurm.calls) == 1  # asked once


# --------------------------------------------------------------- squeue's answer, read strictly


def test_squeue_is_read_strictly_and_whole():
    """Garbage from squeue is no answer (never "no job on the node"); a name may hold "|";
    a big job's node list is as long as its hostlist is (a thousand scattered nodes: 6,000
    characters), not cut at 4,096 (every busy node would then go untested, round after round)."""
    from healthcheck.actions.slurm import read_squeue

    scattered = "gpu[" + ",".join(f"{i:04d}" for i in range(1, 2400, 2)) + "]"
    assert len(scattered) > 4096
    jobs, error = read_squeue(f"4242|1000|train|a|b|n[01-02]\n77_3|0|x|{scattered}\n")
    assert error is None
    assert [(j.id, j.uid, j.name, j.nodes) for j in jobs] == [("4242", 1000, "train|a|b", "n[01-02]"),
                                                               ("77_3", 0, "x", scattered)]
    for garbage in ("\x00\xff\x10binary", "JOBID USER NAME NODELIST", "4242|1000|train", "x|1000|train|n01"):
        jobs, error = read_squeue(f"1|0|ok|n01\n{garbage}\n")
        assert jobs == [] and error is not None and "not jobs" in error, garbage


# --------------------------------------------------------------- in a sweep (run_pairs)


def config(tmp_path: Path):
    fabrics = tmp_path / "fabrics"
    fabrics.mkdir(exist_ok=True)
    (fabrics / "f.yaml").write_text("extends: generic\nbandwidth:\n  sizes: [1M]\n  repeats: 2\n"
                                    "  pairs: {circle_max: 8, group_size: 4}\n")
    (tmp_path / "hc.yaml").write_text(f"fabric_dirs: [{fabrics}]\nnodes: {{'n[01-04]': f}}\n")
    return load_config(tmp_path / "hc.yaml")


def results(n: int) -> list[NodeResult]:
    return [NodeResult(node=f"n{i:02d}", fabric="f", status=Status.PASS, mode="agent",
                       checks=[CheckResult("bw.torch", Status.PASS, 0.0)]) for i in range(1, n + 1)]


def sample(busbw: float) -> list[BandwidthSample]:
    return [BandwidthSample(collective="all_reduce", size_bytes=1 << 20, busbw_gbytes_per_s=busbw,
                            algbw_gbytes_per_s=busbw, time_us=1.0, ranks=2)]


def test_a_job_landing_mid_sweep_stops_the_nodes_tests_and_is_named(tmp_path, monkeypatch):
    slurm = Slurm()
    tested: list[tuple[str, ...]] = []

    def model(cfg, plan, members):
        tested.append(tuple(members))
        if len(tested) == 1:  # a job lands on n02 while the first round runs
            slurm.jobs = [SlurmJob("4242", ME + 1, "train", "n02")]
        return sample(10.0), ""

    released: list[str] = []
    monkeypatch.setattr(choose, "open_transport", torch_tests_by(model, released))
    cfg = config(tmp_path)
    run = sweep.run_pairs(cfg, results(4), watch=watch(slurm))
    assert released == ["n02"]  # its persistent worker ends when the job is seen, not with the sweep
    first = [t for t in tested if "n02" in t]
    assert len(first) == 1 and tested.index(first[0]) < 2  # n02 was tested in the first round only
    with_n02 = [g for g in run.groups if "n02" in g.members]
    assert with_n02 and all(g.status is Status.ERROR for g in with_n02)
    for g in with_n02:
        (f,) = g.findings
        assert f.id == "bw.E107" and "job 4242 took n02 during the sweep" in f.message
    # the round it landed in: measured, but not used (the job may have run beside it); later: not run
    assert any(g.findings[0].message.startswith("not judged: ") for g in with_n02)
    assert any(g.findings[0].message.startswith("not run: ") for g in with_n02)
    assert all("n02" not in r.members for r in run.results)
    others = {frozenset(g.members) for g in run.groups if g.status is Status.PASS}
    assert others == {frozenset(p) for p in [("n01", "n03"), ("n01", "n04"), ("n03", "n04")]}
    assert run.taken == {"n02": "job 4242 took n02 during the sweep: its tests between nodes stop there"}
    assert any("job 4242 took n02" in note for note in run.notes)
    # the analysis vouches for the nodes tested to the end only
    _nodes, _groups, runs, _ = sweep.judge_pairs(results(4), run)
    (judged,) = [r for r in runs if r.name == "bw.pairs"]
    assert set(parse_hostlist(judged.nodes).names()) == {"n01", "n03", "n04"}
    # bounded: one sinfo before each batch and one after each round; squeue only while a node is busy
    sinfo = [c for c in slurm.calls if c[0] == "sinfo"]
    assert len(sinfo) <= 2 * 2 * (run.rounds or 1) + 2
    assert [c for c in slurm.calls if c[0] == "squeue"] == [("squeue", "n02")]  # a taken node is not asked again


def test_a_sweep_through_multirun_watches_with_the_guards_client(tmp_path, monkeypatch):
    """hc sweep --tier deep: the idle check's client asks again before the pair tests."""
    from healthcheck.orchestrate import busy, multirun, remote

    slurm = Slurm()
    monkeypatch.setattr(multirun, "guard_sweep", lambda config, nodes, env=None, client=None: busy.SweepGuard(
        allowed=list(nodes), watch=watch(slurm)))
    monkeypatch.setattr(remote, "check_over_ssh", lambda config, nodes, **kw: results(4))
    slurm.jobs = [SlurmJob("99", ME + 1, "train", "n03")]  # a job landed after the idle check
    monkeypatch.setattr(choose, "open_transport", torch_tests_by(lambda cfg, plan, members: (sample(10.0), "")))
    run = multirun.run_many(config(tmp_path), multirun.RunRequest([f"n{i:02d}" for i in range(1, 5)], command="sweep",
                                                                tier="deep"))
    stopped = [g for g in run.report.groups if "n03" in g.members]
    assert stopped and all(g.status is Status.ERROR and "job 99 took n03" in g.findings[0].message
                           for g in stopped)
    assert any("job 99 took n03" in w for w in run.warnings)


def test_a_short_test_is_not_repeated_beside_a_job_and_its_first_attempt_is_not_used(tmp_path, monkeypatch):
    slurm = Slurm()
    tested: list[tuple[str, ...]] = []

    def model(cfg, plan, members):
        tested.append(tuple(members))
        if "n02" in members:  # slow, so it would run again; a job lands on n02 meanwhile
            slurm.jobs = [SlurmJob("77", ME + 1, "train", "n02")]
            return sample(1.0), ""
        return sample(10.0), ""

    monkeypatch.setattr(choose, "open_transport", torch_tests_by(model))
    run = sweep.run_pairs(config(tmp_path), results(4), watch=watch(slurm))
    assert len([t for t in tested if "n02" in t]) == 1  # never again, not even its repeat
    (first,) = [g for g in run.groups if "n02" in g.members and g.findings[0].message.startswith("not judged: ")]
    assert "job 77 took n02" in first.findings[0].message and first.status is Status.ERROR
    assert all("n02" not in r.members for r in run.results)  # its short figure implicates nobody
