"""`hc run`'s tee, its output file format, and hc run around a launcher, without torch:
the console gets the job's bytes unchanged (stdout and stderr apart, no newline added), a
console that goes away ends the job as it would have, the file keeps every line with its
time and the exit, is bounded, and reads back with the rank its header names (never the
one a host name suggests); torchrun's ranks go through the shim with the user's
PYTHON_EXEC given back; a launcher hc cannot see into is said so, and no rank is claimed."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import run_hc, write_stub

from healthcheck.diagnose.sources import collect
from healthcheck.jobwrap import launcher, tee
from healthcheck.parsers import run_output
from healthcheck.parsers.run_output import parse_run_output

PY = sys.executable
HOST = socket.gethostname()
LAUNCH = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK",
          "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE", "PYTHON_EXEC", "HC_RUN_LOG_DIR", "PET_NO_PYTHON")


@pytest.fixture(autouse=True)
def _clean_launch_env(monkeypatch):
    for name in LAUNCH:
        monkeypatch.delenv(name, raising=False)
    for name in list(os.environ):
        if name.startswith(("OMPI_", "PMIX_", "SLURM_")):
            monkeypatch.delenv(name, raising=False)


def logs_of(tmp_path: Path) -> dict[int | None, run_output.RunOutput]:
    out = {}
    for p in (tmp_path / "logs").glob("hc-run.*.log"):
        parsed = parse_run_output(p.read_bytes().decode(errors="replace"))
        assert parsed is not None
        out[parsed.rank] = parsed
    return out


# ------------------------------------------------------------------ the tee


def test_the_console_gets_the_jobs_bytes_unchanged_and_the_file_every_line_with_its_stream(tmp_path):
    job = ("import os, sys; os.write(1, b'out 1\\nout 2 no newline'); os.write(2, b'err \\xff\\n'); "
           "os.write(1, b'\\n' + b'x' * 200000 + b'\\nlast'); sys.exit(5)")
    r = run_hc("run", "--log-dir", str(tmp_path / "logs"), "--no-preflight", "--", PY, "-c", job)
    assert r.returncode == 5  # the job's own
    assert r.stdout == b"out 1\nout 2 no newline\n" + b"x" * 200000 + b"\nlast"  # byte for byte, none added
    assert b"err \xff\n" in r.stderr and b"out 1" not in r.stderr  # stderr apart, as it was
    kept = logs_of(tmp_path)[0]
    assert (kept.rank, kept.world_size, kept.host, kept.exit_code) == (0, 1, HOST, 5)
    lines = kept.text.splitlines()
    assert "out 1" in lines and "out 2 no newline" in lines and "last" in lines and "err \ufffd" in lines
    assert sum(len(ln) for ln in lines if set(ln) == {"x"}) == 200000  # a long line, in pieces
    assert any(ln.startswith("hc run: ") for ln in lines)  # hc's own lines too: they are the rank's
    raw = next((tmp_path / "logs").glob("hc-run.rank0.*.log")).read_bytes().decode(errors="replace").splitlines()
    assert any(ln[run_output.STAMP_LEN:].startswith(" err err ") for ln in raw)  # its stream, stamped


def test_a_console_that_goes_away_ends_the_job_as_it_would_have(tmp_path):
    # `yes` stops on EPIPE when `head` has gone; a tee that kept reading would keep it alive forever
    hc = f"{PY} -m healthcheck run --log-dir {tmp_path / 'logs'} --no-preflight -- yes"
    r = subprocess.run(["sh", "-c", f"{hc} | head -n 2"], capture_output=True, timeout=60)
    assert r.stdout == b"y\ny\n"
    assert logs_of(tmp_path)[0].exit_code == -13  # SIGPIPE, as without hc


def test_the_tee_ends_with_the_job_and_a_signalled_rank_is_recorded_as_such(tmp_path):
    job = "import os, signal, sys; print('about to die', flush=True); os.kill(os.getpid(), signal.SIGKILL)"
    env = {**os.environ, "RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": "1"}
    r = subprocess.run([PY, "-m", "healthcheck", "run", "--log-dir", str(tmp_path / "logs"), "--no-preflight", "--",
                        PY, "-c", job], env=env, capture_output=True, timeout=60)
    assert r.returncode == -9 and r.stdout == b"about to die\n"
    deadline = time.monotonic() + 10  # the tee says it once the rank has gone: after hc's exit status
    while not logs_of(tmp_path) or logs_of(tmp_path)[2].exit_code is None and time.monotonic() < deadline:
        time.sleep(0.05)
    kept = logs_of(tmp_path)[2]
    assert kept.exit_code == -9 and kept.world_size == 4 and "about to die" in kept.text
    ev = collect([tmp_path / "logs"]).evidence
    assert ev.ranks[2].signal == "SIGKILL" and ev.ranks[2].exit_code == -9 and ev.ranks[2].alive is False
    assert not ev.unreadable  # the rank's output had nothing hc knows: read, not "not read"
    assert any(s.endswith(".log") for s in ev.ranks[2].sources)


def test_the_file_is_bounded_and_keeps_the_end(tmp_path, monkeypatch):
    monkeypatch.setattr(tee, "MAX_FILE_BYTES", 4096)
    path = tmp_path / "hc-run.rank0.h.1.log"
    path.write_text(run_output.header(rank=0, world=1, local_rank=0, host="h", pid=1, launcher="none") + "\n")
    f = tee._File(str(path), os.open(path, os.O_WRONLY | os.O_APPEND))
    stream = tee._Stream("out", -1, -1)
    for i in range(400):
        f.write(tee._lines(stream, f"line {i}\n".encode(), time.time(), final=False))
    assert path.stat().st_size <= 4096 and Path(f"{path}.1").stat().st_size <= 4096
    newest = parse_run_output(path.read_text())
    older = parse_run_output(Path(f"{path}.1").read_text())
    assert newest is not None and older is not None and newest.rank == older.rank == 0
    assert newest.text.rstrip().endswith("line 399")


# ------------------------------------------------------------------ the format, read back


def test_the_rank_comes_from_the_header_never_from_a_host_called_rank7(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    head = run_output.header(rank=None, world=None, local_rank=None, host="rank7", pid=42, launcher="torchrun")
    body = run_output.line(1_800_000_000.25, "err", b"[rank1]: RuntimeError: boom")
    (logs / "hc-run.launcher.rank7.42.log").write_bytes(head.encode() + b"\n" + body)
    head3 = run_output.header(rank=3, world=4, local_rank=3, host="rank7", pid=43, launcher="torchrun")
    (logs / "hc-run.rank3.rank7.43.log").write_bytes(head3.encode() + b"\n" + run_output.line(
        1_800_000_001.5, "out", b"step 1") + run_output.end_line(1_800_000_002.0, None))
    (logs / "hc-run-python.rank7.42").write_text(launcher.shim_text(["run", "--inner"], PY))
    col = collect([logs])
    assert 7 not in col.evidence.ranks and col.evidence.ranks[3].host == "rank7"
    assert col.evidence.ranks[3].exit_code is None  # exit=unknown: not seen, not made up
    assert not col.evidence.unreadable  # the shim is hc's, passed over
    (launched,) = [t for t in col.evidence.torch_logs if t.source.endswith("launcher.rank7.42.log")]
    assert launched.rank in (None, 1)  # whatever the lines say, never the host's "7"
    stamps = col.stamps[launched.source]
    assert stamps.at(2) == pytest.approx(1_800_000_000.25)


def test_the_format_reads_back_what_was_written_and_refuses_what_is_not_it():
    head = run_output.header(rank=1, world=2, local_rank=1, host="a b=c", pid=9, launcher="mpirun")
    data = (head + "\n").encode() + run_output.line(1.5, "out", b"hello") + b"a line cut by hand\n" + \
        run_output.line(2.0, "err", b"") + run_output.end_line(3.0, -6)
    got = parse_run_output(data.decode())
    assert got is not None and (got.rank, got.world_size, got.pid, got.launcher) == (1, 2, 9, "mpirun")
    assert got.host == "a_b_c" and got.exit_code == -6 and got.ended_at == 3.0
    assert got.text.split("\n") == ["", "hello", "a line cut by hand", "", "", ""]
    assert got.stamps == [(2, 1.5), (4, 2.0)]
    assert parse_run_output("hello\n") is None and parse_run_output("# hc run output (other): rank=1\n") is None
    hostile = head + "\n" + ("9" * 200 + "\n") * 2000 + "x" * 1_000_000
    t0 = time.monotonic()
    assert parse_run_output(hostile) is not None and time.monotonic() - t0 < 2


# ------------------------------------------------------------------ around a launcher


def test_launchers_are_told_apart_from_jobs():
    assert launcher.launcher_of(["/x/torchrun", "--standalone", "t.py"]) == "torchrun"
    assert launcher.launcher_of(["python3", "-u", "-m", "torch.distributed.run", "t.py"]) == "torchrun"
    assert launcher.launcher_of(["mpiexec", "-n", "2", "a"]) == "mpirun"
    assert launcher.launcher_of(["srun", "a"]) == "srun"
    assert launcher.launcher_of(["python", "-m", "mypkg.train"]) is None
    assert launcher.launcher_of(["python", "train.py", "-m", "torch.distributed.run"]) is None
    assert launcher.why_not_delegated(["torchrun", "--no-python", "a"], {}) is not None
    assert launcher.why_not_delegated(["torchrun", "--no_py", "a"], {}) is not None  # argparse's abbreviation
    assert launcher.why_not_delegated(["torchrun", "--run-path", "a"], {}) is not None
    assert launcher.why_not_delegated(["torchrun", "a"], {"PET_NO_PYTHON": "1"}) is not None
    assert launcher.why_not_delegated(["torchrun", "--nproc-per-node", "2", "a"], {}) is None


def test_the_python_of_a_console_script_is_found_from_its_shebang_or_pips_trampoline(tmp_path):
    plain = tmp_path / "torchrun"
    plain.write_text(f"#!{PY}\nimport sys\n")
    assert launcher._interpreter_of_script(str(plain)) == PY
    long_path = tmp_path / "torchrun2"
    long_path.write_text(f"#!/bin/sh\n'''exec' \"{PY}\" \"$0\" \"$@\"\n' '''\nimport sys\n")
    assert launcher._interpreter_of_script(str(long_path)) == PY
    (tmp_path / "binary").write_bytes(b"\x7fELF\x00")
    assert launcher._interpreter_of_script(str(tmp_path / "binary")) is None


@pytest.mark.parametrize("user_python_exec", [None, PY])
def test_torchrun_starts_each_rank_through_hc_and_the_rank_sees_the_users_python_exec(tmp_path, user_python_exec):
    # a stand-in torchrun that starts one worker as torchrun does: $PYTHON_EXEC -u SCRIPT, RANK set
    worker = tmp_path / "worker.py"
    worker.write_text("import json, os; print(json.dumps({'pid': os.getpid(), "
                      "'python_exec': os.environ.get('PYTHON_EXEC')}), flush=True)\n")
    stub = tmp_path / "bin" / "torchrun"
    stub.parent.mkdir()
    stub.write_text(f"#!{PY}\nimport os, sys, subprocess\n"
                    "env = dict(os.environ, RANK='1', WORLD_SIZE='2', LOCAL_RANK='1', LOCAL_WORLD_SIZE='2', "
                    "TORCHELASTIC_RUN_ID='t', GROUP_RANK='0')\n"
                    "cmd = os.environ.get('PYTHON_EXEC', sys.executable)\n"
                    "sys.exit(subprocess.call([cmd, '-u', sys.argv[-1]], env=env))\n")
    stub.chmod(0o755)
    env = {"PATH": f"{stub.parent}:{os.environ['PATH']}"}
    if user_python_exec:
        env["PYTHON_EXEC"] = user_python_exec
    r = run_hc("run", "--log-dir", str(tmp_path / "logs"), "--no-preflight", "--", "torchrun", str(worker), env=env)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    seen = json.loads(r.stdout.decode().strip().splitlines()[-1])
    assert seen["python_exec"] == user_python_exec  # the rank's own command: as the user had it
    (manifest,) = [json.loads(p.read_text()) for p in (tmp_path / "logs").glob("hc-run.rank*.json")]
    assert (manifest["rank"], manifest["world_size"], manifest["pid"]) == (1, 2, seen["pid"])
    assert set(logs_of(tmp_path)) == {None, 1}  # torchrun's output, and the rank's


def test_a_torchrun_hc_cannot_see_into_is_said_so_and_no_rank_is_claimed(tmp_path):
    stub = write_stub(tmp_path / "bin", "torchrun", "echo ran \"$@\"\n")
    r = run_hc("run", "--log-dir", str(tmp_path / "logs"), "--no-preflight", "--", str(stub), "--no-python",
               "./a.sh", env={"PATH": f"{stub.parent}:{os.environ['PATH']}"})
    assert r.returncode == 0 and r.stdout == b"ran --no-python ./a.sh\n"
    (warning,) = [ln for ln in r.stderr.decode().splitlines() if "ranks not recorded" in ln]
    assert "--no-python" in warning and "-m healthcheck run" in warning
    assert not list((tmp_path / "logs").glob("hc-run.rank*"))  # "rank 0 of 1" would be false
    assert set(logs_of(tmp_path)) == {None}


def test_the_next_step_is_said_again_after_a_failure_but_not_when_hc_stopped_the_job(tmp_path):
    logs = tmp_path / "logs"
    failed = run_hc("run", "--log-dir", str(logs), "--no-preflight", "--", PY, "-c", "import sys; sys.exit(3)")
    assert failed.returncode == 3
    assert failed.stderr.decode().rstrip().splitlines()[-1] == f"hc run: the command exited 3: hc diagnose logs {logs}"
    ok = run_hc("run", "--log-dir", str(logs), "--no-preflight", "--", "true")
    assert ok.returncode == 0 and "exited" not in ok.stderr.decode()
    # a preflight FAIL: hc exits 2 itself, the command never ran; one line, no "exited 2"
    stopped = run_hc("run", "--log-dir", str(logs), "--no-node-check", "--", "true",
                     env={"RANK": "0", "WORLD_SIZE": "2"})
    assert stopped.returncode == 2
    errors = [ln for ln in stopped.stderr.decode().splitlines() if "exited" in ln or ln.startswith("hc: error")]
    assert len(errors) == 1 and errors[0].startswith("hc: error: preflight")
