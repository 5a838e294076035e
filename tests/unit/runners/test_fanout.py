"""The bounded fan-out: parallelism, order, failures, and the per-node time limit."""

from __future__ import annotations

import threading
import time

import pytest

from healthcheck.runners.fanout import fan_out


def test_a_node_past_its_limit_gets_on_timeout_and_frees_its_slot():
    release = threading.Event()
    done: list[str] = []

    def work(node: str) -> str:
        if node == "stuck":
            release.wait(30)  # stuck in-process, e.g. a hung library call
        return f"ok {node}"

    try:
        out = fan_out(["stuck", "a", "b"], work, max_parallel=1, timeout_s=0.3,
                      on_timeout=lambda n: f"timed out {n}", on_done=lambda n, r: done.append(n))
    finally:
        release.set()
    assert out == {"stuck": "timed out stuck", "a": "ok a", "b": "ok b"}
    assert list(out) == ["stuck", "a", "b"] and done[0] == "stuck"


def test_a_late_result_after_the_limit_is_ignored():
    def work(node: str) -> str:
        time.sleep(0.4 if node == "slow" else 0)
        return node

    out = fan_out(["slow", "fast"], work, max_parallel=2, timeout_s=0.1, on_timeout=lambda n: "late")
    assert out == {"slow": "late", "fast": "fast"}
    time.sleep(0.5)  # the abandoned thread finishes and puts its result nowhere


def test_timeout_needs_a_timeout_result():
    with pytest.raises(ValueError, match="on_timeout"):
        fan_out(["a"], lambda n: n, max_parallel=1, timeout_s=1)


def test_first_exception_wins_and_running_nodes_finish():
    finished: list[str] = []

    def work(node: str) -> str:
        if node in ("x", "y"):
            raise RuntimeError(f"broken {node}")
        time.sleep(0.1)
        finished.append(node)
        return node

    with pytest.raises(RuntimeError, match="broken x"):
        fan_out(["x", "a", "y"], work, max_parallel=3)
    assert finished == ["a"]  # started before the failure: allowed to end


def test_on_done_raising_stops_the_run():
    with pytest.raises(KeyError):
        fan_out(["a", "b", "c"], lambda n: n, max_parallel=1, on_done=lambda n, r: (_ for _ in ()).throw(KeyError(n)))


def test_ssh_module_re_exports_the_same_function():
    from healthcheck.runners import ssh

    assert ssh.fan_out is fan_out
