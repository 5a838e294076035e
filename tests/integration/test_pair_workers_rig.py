"""A deep sweep's persistent torch workers (orchestrate/pairsweep/workers.py) on the rig's real
sshd hosts: one `hc bw serve` per node serves every test it takes part in; a worker that
was killed, or hung, costs the test it was in (ERROR, naming the node) and is started
afresh for the next; closing the pool ends every worker on the nodes. The whole `hc sweep
--tier deep` on workers (no restart, none left) is the healthy sweep in test_bandwidth_rig's
culprit-resumed test."""

from __future__ import annotations

import dataclasses
import os
import signal
import time

import msgspec
import pytest
from test_remote_rig import site as site

from healthcheck.core.config.loader import load_config
from healthcheck.orchestrate.pairsweep.choose import per_test_transport
from healthcheck.orchestrate.pairsweep.plan import PairPlan
from healthcheck.orchestrate.pairsweep.workers import WorkerPool, WorkerTransport

pytestmark = pytest.mark.rig

FABRIC = """bandwidth:
  sizes: [256K]
  repeats: 1
  torch: {backend: gloo, iters: 3, warmup: 1}
  pairs: {timeout_s: TIMEOUT, reply_grace_s: GRACE}
"""
# what the hung tests wait past their timeout for a reply that never comes: the least the
# config takes (a retired worker is ended before its node's next test, so no more is needed)
SHORT_GRACE_S = 1.0


def pool_for(site, timeout_s: int = 60, reply_grace_s: float = 10.0) -> tuple[WorkerPool, PairPlan]:
    rig_yaml = site.dir / "fabrics" / "rig.yaml"
    fabric = FABRIC.replace("TIMEOUT", str(timeout_s)).replace("GRACE", f"{reply_grace_s:g}")
    rig_yaml.write_text(rig_yaml.read_text() + fabric)
    config = load_config(site.config)
    plan = PairPlan.from_config(config, "node1")
    return WorkerPool(config, plan, 3), plan


def one_test(config_plan, members):
    """One test through the workers' transport, as the sweep runs it: (samples, why)."""
    pool, _ = config_plan
    plan = pool.plan  # as a test may have set it (a shorter timeout)
    got = WorkerTransport(pool.config, plan, pool, per_test_transport(pool.config, plan)).run(members)
    return got.samples, got.why


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # the rig's hosts are network namespaces: their processes are ours to see
    except ProcessLookupError:
        return False
    return True


def gone(pids, limit_s: float = 15) -> bool:
    deadline = time.monotonic() + limit_s
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not any(alive(p) for p in pids)


def resume(pid: int) -> None:
    """SIGCONT a worker this test stopped, if hc has not ended it already."""
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        pass


def pids(pool: WorkerPool) -> dict[str, int]:
    return {n: w.pid for n, w in pool._workers.items()}


def test_one_worker_per_node_serves_every_test_and_ends_with_the_pool(site):
    pool, plan = got = pool_for(site)
    try:
        for members in (["node1", "node2"], ["node2", "node3"], ["node3", "node1"], ["node1", "node2"]):
            samples, why = one_test(got, members)
            assert samples and why == "", why
            assert {(s.collective, s.size_bytes, s.ranks) for s in samples} == {("all_reduce", 256 * 1024, 2)}
            assert all(s.wrong == 0 for s in samples)
        assert pool.starts() == {"node1": 1, "node2": 1, "node3": 1}  # each started once for four tests
        workers = pids(pool)
        assert all(alive(p) for p in workers.values())
    finally:
        pool.close()
    assert gone(workers.values())


def test_a_killed_worker_costs_its_test_only_and_is_started_again(site):
    pool, plan = got = pool_for(site)
    try:
        assert one_test(got, ["node1", "node2"])[0]
        first = pids(pool)
        os.kill(first["node2"], signal.SIGKILL)
        assert gone([first["node2"]])
        samples, why = one_test(got, ["node2", "node3"])  # node2's worker is gone: started afresh, the test runs
        assert samples, why
        assert pool.starts() == {"node1": 1, "node2": 2, "node3": 1}
        assert pids(pool)["node1"] == first["node1"]
    finally:
        pool.close()


def serve_pids(net) -> set[int]:
    """Every `hc bw serve` on this rig's hosts: the hosts share the machine's pid namespace,
    so a process is theirs by its network namespace (another rig's hosts, or anything else
    on the machine, run beside this one in CI's other workers)."""
    hosts = {os.readlink(f"/proc/{h.pid}/ns/net") for h in net.hosts}
    out = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                words = f.read().split(b"\0")
            if b"serve" in words and b"bw" in words and os.readlink(f"/proc/{entry}/ns/net") in hosts:
                out.add(int(entry))
        except OSError:
            continue
    return out


def test_a_node_whose_hc_has_no_bw_serve_gets_its_tests_started_per_test(site):
    """A rolling upgrade: node2's hc predates `hc bw serve`; its tests run as `hc bw allreduce`
    per member (measured, not ERROR), and its worker is not tried again."""
    from test_remote_rig import hc_bin

    old = site.dir / "old-hc"
    old.write_text(f"#!/bin/sh\nif [ \"$1 $2\" = 'bw serve' ] && [ \"$(hostname)\" = node2 ]; then\n"
                   f"  echo \"Usage: hc bw [OPTIONS] COMMAND [ARGS]...\" >&2\n"
                   f"  echo \"hc: error: No such command 'serve'.\" >&2\n  exit 4\nfi\n"
                   f"exec {hc_bin(site.dir)} \"$@\"\n")
    old.chmod(0o755)
    text = site.config.read_text()
    site.config.write_text(text.replace(f"  remote_hc: {hc_bin(site.dir)}\n", f"  remote_hc: {old}\n", 1))
    pool, plan = got = pool_for(site)
    try:
        for members in (["node1", "node2"], ["node2", "node3"], ["node1", "node3"]):
            samples, why = one_test(got, members)
            assert samples, why
        assert pool.starts() == {"node1": 1, "node2": 1, "node3": 1}  # node2's serve tried once, not for its 2nd test
        assert pool._workers["node2"].lacks_serve
    finally:
        pool.close()


def test_a_hung_worker_is_this_tests_error_and_leaves_no_worker_behind(site):
    """A worker that answers nothing (node3's, stopped: hung in a collective, or the node):
    the test is ERROR naming node3, within its timeout and the reply grace. hc retires both
    members' workers, and retiring ends them, with their process groups, before the test
    returns: the hung one (stopped: it reads nothing) killed by its process group over SSH,
    the other (node1's, in its rendezvous, not reading its input) too. So node1's pair port
    is free at once: node1's next test, as rank 0 on that port, runs and measures instead of
    meeting EADDRINUSE from its old worker; and node3's next test starts its worker afresh.
    (One pool for both: each start of a worker is a torch import.)"""
    pool, plan = got = pool_for(site, reply_grace_s=SHORT_GRACE_S)
    assert plan.pairs.reply_grace_s == SHORT_GRACE_S
    started_with = plan.pairs
    stopped = None
    try:
        assert one_test(got, ["node1", "node3"])[0]
        first = pids(pool)
        stopped = first["node3"]
        os.kill(stopped, signal.SIGSTOP)
        # the hung test under the shortest timeout a test has (its workers are up: no start-up in it)
        pool.plan = dataclasses.replace(plan, pairs=msgspec.structs.replace(started_with, timeout_s=5))
        start = time.monotonic()
        samples, why = one_test(got, ["node1", "node3"])
        assert samples is None and "node3" in why, why
        assert time.monotonic() - start < 5 + SHORT_GRACE_S + 15  # the timeout, the grace, slack for 2 cores
        pool.plan = plan  # the next tests start their workers afresh: the start-up's timeout again
        assert gone([stopped], limit_s=2), "the hung worker outlived its retirement"
        stopped = None
        assert gone([first["node1"]], limit_s=2), "node1's retired worker outlived its retirement"
        samples, why = one_test(got, ["node1", "node2"])  # node1 is rank 0: the pair port is its
        assert samples and why == "", why
        samples, why = one_test(got, ["node1", "node3"])
        assert samples and why == "", why
        assert pool.starts() == {"node1": 2, "node2": 1, "node3": 2}
    finally:
        if stopped is not None:
            resume(stopped)
        pool.close()
