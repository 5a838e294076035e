"""`hc bw serve`: real worker processes on gloo over loopback, driven through their stdin
as a deep sweep drives them over SSH. One process serves many tests, with its rank and
partner changing between them; bad requests are refused without ending it; it ends at
the end of its input or when idle; wrong data is exit 2 in the reply."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time

import pytest
from support import torch_installed
from test_torch_sweep import _env, _free_port, _port_free

if not torch_installed():
    pytest.skip("torch is not installed", allow_module_level=True)

SERVE = [sys.executable, "-m", "healthcheck", "bw", "serve", "--backend", "gloo"]
PREFIX = b"hc-bw-serve "


class Worker:
    def __init__(self, *extra: str, **env: str) -> None:
        self.proc = subprocess.Popen([*SERVE, *extra], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=_env(**env))

    def send(self, request: dict | bytes) -> None:
        data = request if isinstance(request, bytes) else json.dumps(request).encode()
        assert self.proc.stdin is not None
        self.proc.stdin.write(data + b"\n")
        self.proc.stdin.flush()

    def read(self, timeout: float = 60) -> dict:
        """The next protocol line (other stdout lines are not the worker's to the caller)."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                break
            line = self.proc.stdout.readline()
            if not line:
                raise AssertionError(f"the worker ended: {self.proc.stderr.read().decode()[-500:]}")
            if line.startswith(PREFIX):
                return json.loads(line[len(PREFIX):])
        raise AssertionError("no reply in time")

    def end(self, timeout: float = 30) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


@pytest.fixture
def workers():
    started: list[Worker] = []

    def start(n: int = 2, *extra: str, **env: str) -> list[Worker]:
        new = [Worker(*extra, **env) for _ in range(n)]
        started.extend(new)
        for w in new:
            ready = w.read()
            assert ready["ready"] is True and ready["backend"] == "gloo" and ready["device"] == "cpu"
            assert ready["pid"] == w.proc.pid
            assert ready["pgid"] == os.getpgid(w.proc.pid)  # what hc kills where it gives up on a test
        return new

    yield start
    for w in started:
        w.kill()


@pytest.fixture(scope="module")
def served_on():
    """One worker for every bad request below, as one worker meets them in a sweep: each must
    leave it serving (the test's next request), and after all of them the end of its input
    still ends it with 0. A worker per request started torch ten times for the same answer."""
    w = Worker()
    try:
        ready = w.read()
        assert ready["ready"] is True, ready
        yield w
        assert w.end() == 0
    finally:
        w.kill()


def request(test_id: str, rank: int, port: int, **extra) -> dict:
    return {"id": test_id, "rank": rank, "world_size": 2, "master_addr": "127.0.0.1", "master_port": port,
            "sizes": [65536, 262144], "iters": 2, "warmup": 1, "timeout_s": 30, **extra}


def test_one_worker_serves_many_tests_with_its_rank_changing_and_frees_the_port(workers):
    a, b = workers(2)
    port = _free_port()
    for i in range(3):  # the same port every time, as the fabric's pair port is
        ranks = (0, 1) if i % 2 == 0 else (1, 0)
        a.send(request(f"t{i}", ranks[0], port, collectives=["all_reduce", "all_gather"]))
        b.send(request(f"t{i}", ranks[1], port, collectives=["all_reduce", "all_gather"]))
        replies = [a.read(), b.read()]
        assert [r["id"] for r in replies] == [f"t{i}", f"t{i}"]
        assert [r["exit"] for r in replies] == [0, 0], replies
        for r in replies:  # every rank gets the report, as `hc bw allreduce` gives every rank
            got = [(s["collective"], s["size_bytes"]) for s in r["report"]["samples"]]
            assert got == [(c, s) for c in ("all_reduce", "all_gather") for s in (65536, 262144)]
            assert r["report"]["wrong"] == 0 and r["report"]["ranks"] == 2
        assert _port_free(port)  # rank 0 freed the rendezvous port before it replied
    assert [a.end(), b.end()] == [0, 0]  # the end of input ends the worker


@pytest.mark.parametrize("line, why", [
    (b"not json", "JSON is malformed"),
    (json.dumps({"id": "r", "rank": 2, "world_size": 2, "master_addr": "h", "master_port": 1,
                 "sizes": [1]}).encode(), "rank 2 in a world of 2"),
    (json.dumps({"id": "c", "rank": 0, "world_size": 2, "master_addr": "h", "master_port": 1, "sizes": [1],
                 "collectives": ["all_reduce", "scan"]}).encode(), "unknown collectives"),
    (json.dumps({"id": "p", "rank": 0, "world_size": 2, "master_addr": "h", "master_port": 70000,
                 "sizes": [1]}).encode(), "master_port"),
    (json.dumps({"id": "x", "rank": 0, "world_size": 2, "master_addr": "h; rm -rf /", "master_port": 1,
                 "sizes": [1]}).encode(), "master_addr"),
    (json.dumps({"id": "u", "rank": 0, "world_size": 2, "master_addr": "h", "master_port": 1, "sizes": [1],
                 "extra": 1}).encode(), "unknown field"),
    (b"{" + b" " * (70 * 1024) + b"}", "longer than"),
    # invalid UTF-8 inside a JSON string (msgspec raises UnicodeDecodeError there, not its
    # DecodeError) and as bare bytes: a refusal, never the worker's end (issue 18, D.15)
    (b'{"id": "b", "rank": 0, "world_size": 1, "master_addr": "h\xff\xfe", "master_port": 1, "sizes": [1]}',
     "not UTF-8"),
    (b'{"id": "\xc3(", "rank": 0, "world_size": 1, "master_addr": "h", "master_port": 1, "sizes": [1]}',
     "not UTF-8"),
    (b"\xff\xfe\x00garbage", "not UTF-8"),
])
def test_a_bad_request_is_refused_with_exit_4_and_the_worker_serves_on(served_on, line, why):
    a = served_on
    a.send(line)
    reply = a.read()
    assert reply["exit"] == 4 and why in reply["error"], reply
    assert reply["id"] in ("", "r", "c", "p", "x", "u", "b")
    a.send(request("alone", 0, _free_port(), sizes=[4096]) | {"world_size": 1})
    reply = a.read()
    assert (reply["id"], reply["exit"]) == ("alone", 0), reply


def test_a_rendezvous_whose_partner_never_comes_is_exit_3_and_frees_the_port_at_once(workers):
    """Rank 0 whose partner hung: its reply, exit 3 naming the rendezvous, comes as its own
    timeout runs out, with the pair port free. Not HANDSHAKE_S later: the failed rendezvous
    kept a reference to rank 0's store, which still listened on the port it then waited for,
    so a worker hc had given up on held its node's pair port into the next test."""
    from healthcheck.bandwidth.rendezvous import HANDSHAKE_S

    (a,) = workers(1)
    port = _free_port()
    timeout_s = 2
    start = time.monotonic()
    a.send(request("alone", 0, port, timeout_s=timeout_s))
    reply = a.read()
    took = time.monotonic() - start
    assert (reply["id"], reply["exit"]) == ("alone", 3) and "rendezvous at 127.0.0.1" in reply["error"], reply
    assert _port_free(port)
    assert took < timeout_s + HANDSHAKE_S, took  # it did not wait out the port it held itself
    assert a.end() == 0


def test_wrong_data_is_exit_2_in_the_reply_with_the_report(workers):
    a, b = workers(2, HC_BW_TEST_CORRUPT_RANK="1")
    port = _free_port()
    a.send(request("w", 0, port))
    b.send(request("w", 1, port))
    replies = [a.read(), b.read()]
    assert [r["exit"] for r in replies] == [2, 2]
    assert all(r["report"]["wrong"] > 0 and "wrong elements" in r["error"] for r in replies)


def test_an_idle_worker_ends_on_its_own(workers):
    w = Worker("--idle-timeout", "1")
    try:
        assert w.read()["ready"] is True
        assert w.proc.wait(30) == 0
        assert b"no request for 1 s" in w.proc.stderr.read()
    finally:
        w.kill()


def test_a_worker_without_torch_says_so_in_its_ready_line_and_exits_3(tmp_path):
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("raise ImportError('no torch here')\n")
    env = _env(PYTHONPATH=f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    r = subprocess.run(SERVE, input=b"", capture_output=True, env=env, timeout=60)
    assert r.returncode == 3
    (line,) = [ln for ln in r.stdout.splitlines() if ln.startswith(PREFIX)]
    ready = json.loads(line[len(PREFIX):])
    assert ready["ready"] is False and "needs torch" in ready["error"]
