"""Round 11 of issue 19's rules (branch i19-r11), logs mode: the false culprits of
held-out-9's first measure, each rebuilt here as a gloo job of its own
(tests/fixtures/diagnose/rules11/make_rules11.py, rules11_job.py; plain processes, each
rank's output in rankN.log). The rules must not need the job's source file: the captures
name this worktree's script paths, and the tests pass from any checkout.
"""

from __future__ import annotations

import re

import pytest
from support import FIXTURES, assert_culprits, diagnose_saved

SCEN = FIXTURES / "diagnose" / "rules11"


@pytest.mark.parametrize(("name", "culprit", "victims"), [("wronggroup-w4-r1", 1, [0, 2, 3]),
                                                         ("wronggroup-w6-r4", 4, [0, 1, 2, 3, 5])])
def test_the_rank_that_passed_a_group_it_is_not_in_is_named_not_its_partner(name, culprit, victims):
    # torch warns "Running all_reduce on global rank R which does not belong to the given
    # group" (the culprit's output only) and skips the call; its pair partner waits alone
    # in the pair's all_reduce while the rest time out in the world's: hc named the partner
    assert_culprits(diagnose_saved(SCEN / name), "collective-mismatch", [culprit], victims)


def test_a_group_many_ranks_call_from_outside_names_no_one():
    from healthcheck.diagnose.skippedgroup import skipped_group
    from healthcheck.diagnose.sources import collect

    col = collect([SCEN / "wronggroup-w4-r1"])
    assert skipped_group(col) is not None
    # the same warning from half the world is a program calling a group's collective from
    # every rank on purpose (non-members skip): no culprit from it
    extra = (SCEN / "wronggroup-w4-r1" / "rank1.log").read_text().replace("global rank 1 ", "global rank 2 ")
    import shutil
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "job"
        shutil.copytree(SCEN / "wronggroup-w4-r1", folder)
        (folder / "rank2.log").write_text((folder / "rank2.log").read_text() + extra)
        assert skipped_group(collect([folder])) is None


@pytest.mark.parametrize(("name", "culprit", "victims"), [("dcpwrite-w3-r1", 1, [0, 2]),
                                                         ("dcpwrite-w4-r0", 0, [1, 2, 3])])
def test_dcp_names_the_rank_whose_write_failed_not_every_rank_that_reraised_it(name, culprit, victims):
    # DCP gathers the writer's OSError and raises `CheckpointException ranks:dict_keys([R])`
    # on every rank: hc named every rank dead (or none, where no launcher said the job failed)
    v = diagnose_saved(SCEN / name)
    assert_culprits(v, "dead-rank", [culprit], victims)


def test_checkpoint_exception_reads_the_ranks_it_names():
    from healthcheck.diagnose.dcpgather import checkpoint_victim, gathered_ranks

    assert gathered_ranks("CheckpointException ranks:dict_keys([0, 3])") == {0, 3}
    assert gathered_ranks("OSError: [Errno 28] No space left on device") is None
    assert checkpoint_victim("torch.distributed.checkpoint.api.CheckpointException",
                             "CheckpointException ranks:dict_keys([3])", 1) is True
    assert checkpoint_victim("CheckpointException", "CheckpointException ranks:dict_keys([3])", 3) is False
    assert checkpoint_victim("OSError", "CheckpointException ranks:dict_keys([3])", 1) is None


def test_rpc_timeouts_are_the_callers_wait_and_the_silent_server_is_named():
    # the server's push handler takes its own lock twice; its trainers' rpc_sync raise "RPC
    # ran for more than set timeout": hc named the trainers dead, never the server
    v = diagnose_saved(SCEN / "rpclock-w3-r0")
    assert_culprits(v, "stuck-rank", [0], [1, 2])


@pytest.mark.parametrize("name", ["groupcount-w4-r3", "groupcount-w4-r1"])
def test_a_rank_waiting_to_create_a_group_is_no_culprit(name):
    # the odd rank builds a group per rank where its peers build pairs: the groups' names
    # no longer meet, and a member of its pair waits in new_group's store (`Failed to recv`)
    # while the others time out in all_reduce; hc named the waiting rank as "one
    # collective more". The logs do not say which member built other groups: no rank
    v = diagnose_saved(SCEN / name)
    assert v.cls in ("collective-mismatch", "unknown"), v.summary
    assert not [o.rank for o in v.odd_ranks], v.summary


_CAPTURE_ROOT = re.compile(rb'(?<=")/[^"]*?/(?=tests/fixtures/diagnose/rules11/)')


def _live(name: str):
    """A live capture's node collection (`hc diagnose collect --pids`), its paths pointed at
    this checkout, diagnosed."""
    from healthcheck.diagnose.live import evidence_from_nodes
    from healthcheck.diagnose.nodeschema import decode_collection
    from healthcheck.diagnose.verdict import build

    raw = (SCEN / name / "collect-node.json").read_bytes().strip()
    here = str(FIXTURES.parents[1]).encode() + b"/"
    return build(evidence_from_nodes([decode_collection(_CAPTURE_ROOT.sub(lambda _: here, raw))],
                                     job=name).collected)


def test_live_the_rpc_server_whose_handler_is_blocked_is_named_not_its_callers():
    # the server's push handler holds its own non-reentrant lock and asks for it again: its
    # trainers' main threads wait in rpc_sync, its main thread in rpc.shutdown(); no process
    # group, no collective, and hc said unknown
    v = _live("rpclock-live-w3-r0")
    assert_culprits(v, "stuck-rank", [0], [1, 2])


def test_live_rpc_callers_that_move_name_no_one():
    import msgspec

    from healthcheck.diagnose.classify import analyse
    from healthcheck.diagnose.live import evidence_from_nodes
    from healthcheck.diagnose.nodeschema import decode_collection
    from healthcheck.diagnose.rpcwait import rpc_callee

    raw = (SCEN / "rpclock-live-w3-r0" / "collect-node.json").read_bytes().strip()
    c = decode_collection(raw)
    col = evidence_from_nodes([c], job="x").collected
    out = analyse(col)
    assert rpc_callee(col, out) is not None
    moved = msgspec.structs.replace(out, motion=msgspec.structs.replace(
        out.motion, ranks={r: msgspec.structs.replace(m, moved=(r == 1)) for r, m in out.motion.ranks.items()}))
    assert rpc_callee(col, moved) is None  # a caller that moved: the server answers, slowly


def test_live_a_rank_polling_while_its_peers_wait_in_fsdps_all_gather_is_named():
    # FSDP2 waits in torch 2.13's `all_gather_single`, a c10d function py-spy's reading did
    # not count as a collective: the peers looked "outside any collective" like the rank
    # sleeping in its poll loop, and hc said unknown
    v = _live("fsdppoll-live-w3-r1")
    assert_culprits(v, "stuck-rank", [1], [0, 2])


def test_torch_single_tensor_collectives_are_collectives():
    from healthcheck.parsers.py_spy import PySpyFrame, collective

    for name in ("all_gather_single", "reduce_scatter_single"):
        frames = (PySpyFrame(name=name, file="torch/distributed/distributed_c10d.py", line=4394),
                  PySpyFrame(name="DefaultAllGather.__call__", file="torch/distributed/fsdp/_fully_shard/x.py"))
        assert collective(frames) == name
