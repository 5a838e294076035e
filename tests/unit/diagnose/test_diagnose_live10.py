"""Round 10 of issue 19's live rules (branch i19-r10live): ranks outside any collective
that work, or wait on something of their own, while the others wait in one; and two
ranks in different collectives with no majority. Real gloo captures made here by
tests/fixtures/diagnose/live10/make_live10.py (live10_job.py: each rank's output and the
node's collection as `hc diagnose pids` takes it, samples and CPU time included), each
diagnosed as `hc diagnose pids` diagnoses a live job.
"""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
from support import FIXTURES

from healthcheck.diagnose.live import evidence_from_nodes
from healthcheck.diagnose.nodeschema import decode_collection
from healthcheck.diagnose.verdict import Verdict, build
from healthcheck.parsers.py_spy import PySpyFrame, PySpyLocal, collective

LIVE10 = FIXTURES / "diagnose" / "live10"


# where the capture ran: its stacks name the job's source by absolute path there, and the lock
# rule reads the line a frame stands on from that path (live, the program's own node): point
# the capture's paths at this checkout's copy of live10_job.py, as if it ran here
_CAPTURE_ROOT = re.compile(rb'(?<=")/[^"]*?/(?=tests/fixtures/diagnose/live10/)')


def _collection(name: str):
    raw = (LIVE10 / name / "collect-node.json").read_bytes().strip()
    here = str(FIXTURES.parents[1]).encode() + b"/"
    return decode_collection(_CAPTURE_ROOT.sub(lambda _: here, raw))


def _diagnosed(name: str, no_cpu: bool = False) -> Verdict:
    """The capture's node collection diagnosed; `no_cpu`: every sample's CPU count held at
    its first value (a thread that used none)."""
    c = _collection(name)
    if no_cpu:
        ranks = []
        for r in c.ranks:
            first = r.samples[0].cpu if r.samples else None
            ranks.append(msgspec.structs.replace(r, samples=tuple(msgspec.structs.replace(s, cpu=first)
                                                                  for s in r.samples)))
        c = msgspec.structs.replace(c, ranks=tuple(ranks))
    return build(evidence_from_nodes([c], job=name).collected)


def _named(v: Verdict) -> list[int]:
    return sorted(o.rank for o in v.odd_ranks if o.rank is not None)


def _odd_rank(name: str) -> int:
    return int(name.rsplit("-r", 1)[1])


# ------------------------------------------------------------------ a silent CPU-bound rank works


def test_a_silent_cpu_bound_rank_is_working_not_stuck():
    """The odd rank searches primes in pure Python (its stack moves) or multiplies matrices
    with torch (one line in every sample) for 20 s, logging nothing, while the others wait
    in all_reduce; then it trains on. Its thread's CPU time rose over the look: it works.
    hc named it stuck-rank ('busy, but in no collective', 'its stack did not move')."""
    for name in ("primes-w3-r1", "matmul-w3-r2"):
        v = _diagnosed(name)
        assert _named(v) == [], (name, v.summary)
        assert v.cls == "progressing", (name, v.summary)
        assert f"rank {_odd_rank(name)}" in v.summary and "busy in" in v.summary, (name, v.summary)


def test_the_same_stack_with_no_cpu_used_is_still_stuck():
    """The control: the matrix rank's samples with its thread using no CPU (what a rank
    blocked in a wait or a read shows): its stack unchanged and no CPU time is stuck."""
    v = _diagnosed("matmul-w3-r2", no_cpu=True)
    assert (v.cls, _named(v)) == ("stuck-rank", [2]), v.summary


def test_a_cpu_count_over_the_whole_look_but_none_since_it_stopped_is_not_running():
    from healthcheck.diagnose.cpuwork import runs_throughout

    look = [(0.0, 1.0), (0.5, 1.4), (1.0, 1.4), (1.5, 1.4), (2.0, 1.4)]
    assert not runs_throughout(look, look[1:])  # ran early, blocked since its stack stopped
    assert runs_throughout(look, look[-1:])  # one sample since it last changed: the whole look says
    assert runs_throughout([(0.0, 1.0), (1.0, 1.3), (2.0, 1.6)], [(1.0, 1.3), (2.0, 1.6)])


# ------------------------------------------------------------------ pdb: a rank waiting on stdin


def test_a_rank_in_pdb_is_stuck_waiting_on_stdin_while_the_others_wait_on_a_future():
    """A leftover breakpoint(): rank 1 in pdb's command loop, reading stdin (a pipe no one
    writes); ranks 0 and 2 wait on their gradient all_reduce's future
    (`all_reduce(..., async_op=True).get_future()`, `fut.then(cb).wait()`: native, the
    program's frame holding the Future, no c10d frame). hc said 'no diagnosis': nobody
    was seen waiting in a collective."""
    v = _diagnosed("pdb-w3-r1")
    assert (v.cls, _named(v)) == ("stuck-rank", [1]), v.summary
    assert "pdb" in v.summary and "stdin" in v.summary, v.summary


def test_a_frame_holding_a_collectives_future_is_a_wait_and_one_holding_none_is_not():
    fut = PySpyLocal(name="fut", repr="<torch._C.Future at 0x7f5418635c30>")
    waiting = (PySpyFrame(name="wait", file="torch/futures/__init__.py", line=131, filename="/x/torch/futures/__init__.py"),
               PySpyFrame(name="scaled_gradient", file="job.py", line=9, locals=(fut,)),
               PySpyFrame(name="main", file="job.py", line=20))
    assert collective(waiting) == "wait"
    assert collective(waiting[1:]) == "wait"  # torch._C.Future.wait: native, no frame of its own
    computing = (PySpyFrame(name="scaled_gradient", file="job.py", line=9), PySpyFrame(name="main", file="job.py", line=20))
    assert collective(computing) is None


# ------------------------------------------------------------------ a lock-order deadlock between its own threads


def test_a_lock_order_deadlock_between_a_ranks_threads_is_named_with_why():
    """Rank 2's main thread holds the stats lock and wants the model lock; its reporter
    thread holds the model lock and wants the stats lock. hc named the rank but said
    only where it was; it says why: two of its threads block taking a lock."""
    v = _diagnosed("locks-w3-r2")
    assert (v.cls, _named(v)) == ("stuck-rank", [2]), v.summary
    assert "lock" in v.summary and "reporter" in v.summary, v.summary


# ------------------------------------------------------------------ world size 2: no majority


def test_two_ranks_in_different_collectives_at_world_two_are_a_mismatch_naming_no_rank():
    """Rank 1 keeps its gathered parameters and skips the backward's
    all_gather_into_tensor: it waits in reduce_scatter_tensor while rank 0 waits in
    all_gather_into_tensor. No side is a minority, and a skip on one rank leaves the same
    stacks as an extra call on the other: hc said 'no diagnosis'; it says the ranks called
    different collectives and that it cannot tell which is off, naming nobody."""
    v = _diagnosed("gathers-w2-r1")
    assert v.cls == "collective-mismatch", v.summary
    assert _named(v) == [], v.summary
    # torch 2.13's reduce_scatter_tensor is a deprecated alias of reduce_scatter_single: the
    # stack names either (py_spy.COLLECTIVES counts the single-tensor forms since round 11)
    assert "cannot tell" in v.summary and ("reduce_scatter_tensor" in v.summary
                                           or "reduce_scatter_single" in v.summary), v.summary


def test_the_captures_are_this_scripts():
    script = (LIVE10 / "live10_job.py").read_text()
    assert "written here, not copied from any held-out set" in script.replace("\n", " ").lower()
    for name in ("primes-w3-r1", "matmul-w3-r2", "pdb-w3-r1", "gathers-w2-r1", "locks-w3-r2"):
        assert Path(LIVE10 / name / "collect-node.json").stat().st_size > 0


def test_no_majority_leaves_point_to_point_and_unnamed_waits_to_their_rules():
    """Two ranks in recv against two in broadcast (held-out-2's p2p order, which p2p.py names)
    or waits whose op the stack does not say: no finding here."""
    from healthcheck.diagnose.analysis import Analysis
    from healthcheck.diagnose.nomajority import no_majority
    from healthcheck.diagnose.stacks import StackGroup

    c = _collection("gathers-w2-r1")
    col = evidence_from_nodes([c], job="x").collected
    for other in ("recv", "wait", "backward"):
        out = Analysis()
        no_majority(col, out, [StackGroup(ranks=(0, 1), label="broadcast <- f", collective="broadcast", function="f"),
                               StackGroup(ranks=(2, 3), label=f"{other} <- g", collective=other, function="g")])
        assert out.findings == [], other
    out = Analysis()
    no_majority(col, out, [StackGroup(ranks=(0, 1), label="broadcast <- f", collective="broadcast", function="f"),
                           StackGroup(ranks=(2, 3), label="all_reduce <- g", collective="all_reduce", function="g")])
    assert [f.cls for f in out.findings] == ["collective-mismatch"] and not out.findings[0].ranks
