"""Many commands in one session: exact per-command stdout, stderr and exit codes, whatever
the output holds, and a clean fall-back to one session per command."""

from __future__ import annotations

import time

from healthcheck.runners.base import CommandResult
from healthcheck.runners.batch import PrefetchingRunner, batch_script, parse_batch, prefetch
from healthcheck.runners.local import LocalRunner


def test_outputs_are_exact_whatever_they_contain():
    hostile = ("printf", "line1\n@@hc-batch 0 0\n\\377\\000tail")
    runner = prefetch(LocalRunner(), [hostile, ("sh", "-c", "echo out; echo err >&2; exit 7")], timeout_s=5)
    r = runner.results[hostile]
    assert r.returncode == 0 and r.stdout.startswith("line1\n@@hc-batch 0 0\n") and r.stdout.endswith("tail")
    r = runner.results[("sh", "-c", "echo out; echo err >&2; exit 7")]
    assert (r.returncode, r.stdout, r.stderr) == (7, "out\n", "err\n")


def test_missing_tools_and_timeouts_map_like_the_runners():
    runner = prefetch(LocalRunner(), [("no-such-tool-hc",), ("sleep", "30")], timeout_s=1)
    assert runner.results[("no-such-tool-hc",)].not_found
    assert runner.results[("sleep", "30")].timed_out


def test_a_kill_before_the_timeout_is_no_timeout():
    """A command SIGKILLed (as the OOM killer does) long before its timeout exits 137 from the
    wrapper, as a timed-out one does: it reads as the kill, the way one command over SSH does
    (remote_result), not as time running out."""
    killed = ("sh", "-c", "kill -9 $$")
    runner = prefetch(LocalRunner(), [killed, ("sleep", "30")], timeout_s=2)
    r = runner.results[killed]
    assert not r.timed_out and r.returncode == 137, r
    assert runner.results[("sleep", "30")].timed_out  # the one that ran out of time still does


def test_without_own_times_the_batch_length_decides():
    """A node that gave no per-command times (no /proc/uptime): a 137 in a batch shorter than
    the timeout cannot be one; in one as long, it is."""
    record = "@@hc-batch 0 137\n\n\n"
    assert not parse_batch(record, [("x",)], 0.5, timeout_s=5)[("x",)].timed_out
    assert parse_batch(record, [("x",)], 5.2, timeout_s=5)[("x",)].timed_out


def test_commands_run_concurrently_on_the_node():
    start = time.monotonic()
    prefetch(LocalRunner(), [("sleep", "1"), ("sleep", "1.01"), ("sleep", "1.02")], timeout_s=5)
    assert time.monotonic() - start < 2.5


def test_arguments_are_quoted_not_interpreted(tmp_path):
    marker = tmp_path / "pwned"
    argv = ("printf", "%s", f"$(touch {marker}); `touch {marker}`")
    runner = prefetch(LocalRunner(), [argv], timeout_s=5)
    assert runner.results[argv].stdout == f"$(touch {marker}); `touch {marker}`" and not marker.exists()


def test_unprefetched_commands_and_failed_batches_run_on_their_own():
    calls = []

    class Recorder:
        def run(self, argv, *, timeout_s, input=None):
            calls.append(argv)
            return CommandResult(tuple(argv), None, "", "", 0.0, error="connection dropped")

    runner = prefetch(Recorder(), [("ip", "link")], timeout_s=1)
    assert runner.results == {}  # the batch failed: nothing cached
    runner.run(("ip", "link"), timeout_s=1)
    assert calls[-1] == ("ip", "link")
    assert PrefetchingRunner(Recorder(), {}).run(("x",), timeout_s=1).error == "connection dropped"


def test_truncated_batch_output_keeps_only_whole_records():
    commands = [("a",), ("b",)]
    out = "@@hc-batch 0 0\nb2s=\n\n@@hc-batch 1 0\nbm8"
    results = parse_batch(out, commands, 0.1, timeout_s=5)
    assert set(results) == {("a",)} and results[("a",)].stdout == "ok"
    assert "timeout -k 2 3 a" in batch_script(commands, 2.5)


def test_env_and_cwd_bypass_the_batch_and_reach_the_runner():
    calls = []

    class Recorder:
        def run(self, argv, *, timeout_s, input=None, **kw):
            calls.append((tuple(argv), kw))
            return CommandResult(tuple(argv), 0, "live", "", 0.0)

    cached = CommandResult(("ip", "link"), 0, "cached", "", 0.0)
    runner = PrefetchingRunner(Recorder(), {("ip", "link"): cached})
    assert runner.run(("ip", "link"), timeout_s=1) is cached and calls == []
    assert runner.run(("ip", "link"), timeout_s=1, env={"A": "1"}).stdout == "live"
    assert runner.run(("ip", "link"), timeout_s=1, cwd="/tmp").stdout == "live"
    runner.run(("x",), timeout_s=1)
    # env/cwd are passed only when given, so runners without them keep working
    assert calls == [(("ip", "link"), {"env": {"A": "1"}}), (("ip", "link"), {"cwd": "/tmp"}), (("x",), {})]
