"""A hook run as its own process ends without the interpreter's teardown (issue 22: ~15 ms
of a prologue's CPU), and nothing that can be seen changes: its exit code, its output, the
atexit functions. A run that cannot leave so (a thread that is no daemon still running, a
caller in the same process) leaves the ordinary way."""

from __future__ import annotations

import subprocess
import sys

import pytest
from support import REPO, lean_hook_env, process_state_restored

from healthcheck import cli

# a module-level object's finalizer runs in a teardown, and only there
RUN = """
import atexit, sys, threading, time
said, torn = sys.argv[1], sys.argv[2]
atexit.register(lambda: open(said, "w").write("atexit ran"))
class Torn:
    def __del__(self, open=open, torn=torn):
        open(torn, "w").write("torn down")
keep = Torn()
if sys.argv[3] == "thread":
    threading.Thread(target=time.sleep, args=(1.0,)).start()
sys.argv = ["hc", *sys.argv[4:]]
from healthcheck.cli import main
main()
"""


def _run(tmp_path, thread: str, *args: str) -> tuple[subprocess.CompletedProcess, str, str]:
    env = lean_hook_env(tmp_path, "sys:\n  mounts: [/]\n  disk_free_min_gib: {/tmp: 0.001}\n")
    said, torn = tmp_path / "said", tmp_path / "torn"
    done = subprocess.run([sys.executable, "-c", RUN, str(said), str(torn), thread, *args], capture_output=True,
                          text=True, cwd=REPO, env=env, timeout=120)
    read = [p.read_text() if p.exists() else "" for p in (said, torn)]
    return done, read[0], read[1]


@pytest.mark.parametrize("args, code, line", [
    (("prologue",), 0, "hc prologue: node1; job 7; PASS; exit 0"),
    (("epilogue",), 0, "hc epilogue: node1; job 7; SKIP; exit 0"),
    (("node", "--local", "--checks", "sys.mounts", "--format", "json"), 0, '"status":'),
    (("node", "--local", "--checks", "no.such_check"), 4, "no.such_check"),
])
def test_a_lean_run_leaves_without_teardown_and_says_what_it_said(tmp_path, args, code, line):
    done, said, torn = _run(tmp_path, "none", *args)
    assert done.returncode == code, done.stderr[-2000:]
    assert line in done.stdout + done.stderr
    assert said == "atexit ran"  # the atexit functions still run
    assert torn == ""  # no teardown


def test_a_thread_that_is_no_daemon_is_waited_for_as_before(tmp_path):
    done, said, torn = _run(tmp_path, "thread", "prologue")
    assert done.returncode == 0, done.stderr[-2000:]
    assert said == "atexit ran" and torn == "torn down"


def test_other_commands_and_in_process_callers_leave_the_ordinary_way(tmp_path):
    done, said, torn = _run(tmp_path, "none", "--version")
    assert done.returncode == 0 and said == "atexit ran" and torn == "torn down"
    # an argv given: a caller in this process (the tests) gets SystemExit; the stop handling
    # hc node installs is put back after it (it left a wakeup fd set in the test worker)
    with process_state_restored() as problems, pytest.raises(SystemExit):
        cli.main(["node", "--local", "--checks", "no.such_check"])
    assert problems == []


def test_a_stream_that_cannot_be_flushed_leaves_the_ordinary_way(monkeypatch):
    class Full:
        def flush(self):
            raise OSError(28, "No space left on device")

    ran: list[str] = []
    monkeypatch.setattr(cli.threading, "enumerate", lambda: [cli.threading.main_thread()])
    monkeypatch.setattr(cli.atexit, "_run_exitfuncs", lambda: ran.append("atexit"))  # not this process's own
    monkeypatch.setattr(sys, "stdout", Full())
    monkeypatch.setattr(cli.os, "_exit", lambda status: pytest.fail("left without flushing"))
    assert cli.leave_now(0) is None and ran == ["atexit"]
