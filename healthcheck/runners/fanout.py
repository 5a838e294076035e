"""Run one piece of work per node, at most N at once, each within its own time limit.

Transport-neutral: SSH checks (orchestrate/remote.py) use it, and so can anything else that
turns a node name into a result. `work` is expected to bound itself (the SSH runner's
timeouts); the per-node limit here is the backstop for work stuck in-process (a hung
library call), whose thread is abandoned, never waited for.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def fan_out(
    nodes: list[str],
    work: Callable[[str], T],
    *,
    max_parallel: int,
    on_done: Callable[[str, T], None] | None = None,
    timeout_s: float | None = None,
    on_timeout: Callable[[str], T] | None = None,
) -> dict[str, T]:
    """Run work(node) for every node, at most `max_parallel` at once; {node: result}.

    `work` is expected to turn one node's failure into a result. If it raises anyway
    (or on_done does), that is a bug or a deliberate stop (e.g. a ConfigError): nodes
    not yet started are cancelled, the running ones finish, and the first exception
    is re-raised. on_done is called from the calling thread, in completion order.
    Duplicate node names run once.

    timeout_s (with on_timeout): a node whose work has not returned that long after it
    started gets on_timeout(node) as its result; its thread is abandoned (a daemon, so
    it cannot hold the process up) and its slot goes to the next node.
    """
    if max_parallel < 1:
        raise ValueError(f"max_parallel must be at least 1, got {max_parallel}")
    if timeout_s is not None and on_timeout is None:
        raise ValueError("timeout_s needs on_timeout (the result of a node that ran out of time)")
    unique = list(dict.fromkeys(nodes))
    run = _FanOut(work, max_parallel, timeout_s, on_timeout, on_done)
    run.go(unique)
    return {node: run.results[node] for node in unique}


class _FanOut:
    """The state of one fan_out call: what waits, what runs (with its deadline), what is done."""

    def __init__(self, work: Callable[[str], Any], max_parallel: int, timeout_s: float | None,
                 on_timeout: Callable[[str], Any] | None, on_done: Callable[[str, Any], None] | None) -> None:
        self.work = work
        self.max_parallel = max_parallel
        self.timeout_s = timeout_s
        self.on_timeout = on_timeout
        self.on_done = on_done
        self.results: dict[str, Any] = {}
        self.running: dict[str, float] = {}  # node -> monotonic deadline
        self.done: queue.Queue[tuple[str, bool, Any]] = queue.Queue()
        self.threads: dict[str, threading.Thread] = {}

    def go(self, nodes: list[str]) -> None:
        """Run every node; the first exception stops new starts and is re-raised at the end."""
        todo = deque(nodes)
        failure: BaseException | None = None
        try:
            while todo or self.running:
                while todo and len(self.running) < self.max_parallel:
                    self._start(todo.popleft())
                raised = self._collect()
                if raised is not None and failure is None:
                    failure, todo = raised, deque()  # cancel what has not started
        except BaseException as exc:  # on_done raised, or Ctrl-C: let the running ones end
            failure = exc
            self._drain()
        if failure is not None:
            raise failure

    def _start(self, node: str) -> None:
        limit = self.timeout_s if self.timeout_s is not None else math.inf
        self.running[node] = time.monotonic() + limit
        thread = threading.Thread(target=self._one, args=(node,), name=f"hc-fan-out-{node}", daemon=True)
        self.threads[node] = thread
        thread.start()

    def _one(self, node: str) -> None:
        try:
            self.done.put((node, True, self.work(node)))
        except BaseException as exc:  # handed to the calling thread, which re-raises it
            self.done.put((node, False, exc))

    def _collect(self) -> BaseException | None:
        """Wait for one node to finish or run out of time; its exception, if it raised."""
        wait = min(self.running.values()) - time.monotonic()
        try:
            node, ok, value = self.done.get(timeout=None if wait == math.inf else max(wait, 0.0))
        except queue.Empty:
            self._expire()
            return None
        # it has handed its result over and is ending: wait for that, so no worker is
        # still tearing down (paramiko, cryptography) while the interpreter finalizes --
        # a daemon thread alive at exit is how the sweep once died with SIGSEGV
        thread = self.threads.pop(node, None)
        if thread is not None:
            thread.join(5.0)
        if node not in self.running:  # finished after it was given up on
            return None
        del self.running[node]
        if not ok:
            return value
        self._record(node, value)
        return None

    def _expire(self) -> None:
        now = time.monotonic()
        for node, deadline in list(self.running.items()):
            if deadline <= now:
                del self.running[node]
                assert self.on_timeout is not None  # checked by fan_out
                self._record(node, self.on_timeout(node))

    def _record(self, node: str, value: Any) -> None:
        self.results[node] = value
        if self.on_done is not None:
            self.on_done(node, value)

    def _drain(self) -> None:
        """Wait for the nodes still running (each at most until its deadline), ignoring results."""
        while self.running:
            wait = min(self.running.values()) - time.monotonic()
            try:
                node, _, _ = self.done.get(timeout=None if wait == math.inf else max(wait, 0.0))
            except queue.Empty:
                now = time.monotonic()
                self.running = {n: d for n, d in self.running.items() if d > now}
                continue
            self.running.pop(node, None)
            thread = self.threads.pop(node, None)
            if thread is not None:
                thread.join(5.0)
