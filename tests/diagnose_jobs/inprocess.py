"""`hc diagnose logs` in this process: the same entry point as the `hc` command
(healthcheck.cli.main), run under click's CliRunner isolation (the given environment, stdout
and stderr captured), in place of harness.ask_hc's subprocess.

Why: the tuning set's replays are forty-one `hc diagnose logs` runs; as subprocesses each paid
Python's start and hc's imports (~2 s of CPU each on this machine), more than the diagnosis.
The scoring tests replay in process; the replay contract keeps its real subprocess
(test_diagnose_jobs' CI subset replays through harness.ask_hc, and a parity test holds the
two answers byte-identical on a saved replay). bin/bench keeps the subprocess: it measures hc
as an operator runs it.
"""

from __future__ import annotations

import json
import os
import time

from support import run_hc_inproc


def run_diagnose(argv: list[str], env: dict[str, str], cwd: os.PathLike[str] | str) -> tuple[int, str, str]:
    """`hc diagnose ARGV --format json` in process: (exit code, stdout, stderr). `env` is the
    whole environment the run sees (what os.environ has beyond it is unset for the run), as
    harness.ask_hc's subprocess gets it; tests/support.py run_hc_inproc runs it (and puts back
    what a real process would have taken with it)."""
    r = run_hc_inproc("diagnose", *argv, "--format", "json", env=env, cwd=cwd, whole_env=True)
    return r.returncode, r.stdout.decode(), r.stderr.decode()


def ask_hc(argv: list[str], env: dict[str, str]) -> tuple[dict, float, int, str]:
    """harness.ask_hc's answer (verdict, seconds, exit code, error), hc run in process."""
    from diagnose_jobs import harness

    start = time.perf_counter()
    code, out, err = run_diagnose(argv, env, harness.REPO)
    seconds = time.perf_counter() - start
    try:
        return json.loads(out), seconds, code, ""
    except ValueError:
        return {}, seconds, code, f"rc {code}, no JSON: {err.strip()[-200:]}"
