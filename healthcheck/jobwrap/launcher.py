"""`hc run -- LAUNCHER ...`: hc around a launcher is not a rank, and must not say it is one.

torchrun, mpirun/mpiexec and srun start the ranks themselves: the process hc runs in is
their parent (torchrun's agent, mpirun, srun), and its environment says nothing of the
ranks (a plain `hc run` is "rank 0 of 1"; under `srun --ntasks-per-node 1` it is a node's
index). So around a launcher hc writes no rank manifest. Its own output (the launcher's,
with every rank's lines in it) is kept as `hc-run.launcher.<host>.<pid>.log`.

torchrun can do better: it starts each rank as `$PYTHON_EXEC -u [-m] SCRIPT ARGS` (the
agent's own interpreter when PYTHON_EXEC is unset). hc points PYTHON_EXEC at a small
shell script in the log directory that runs `hc run --inner ... -- PYTHON -u [-m] SCRIPT
ARGS`: every rank is then wrapped as if the user had written `torchrun ... -m healthcheck
run -- python SCRIPT`, with the rank, local rank and world size the agent gave it, its own
manifest and its own output file. PYTHON_EXEC is put back as it was before the rank's
command starts. Where torchrun will not use PYTHON_EXEC (`--no-python`, `--run-path`, or
their PET_* variables) or its interpreter cannot be found, hc says so and wraps nothing.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from healthcheck.core.atomic import write_atomic
from healthcheck.core.errors import UsageError
from healthcheck.core.inputs import clip
from healthcheck.jobwrap.envset import safe_key
from healthcheck.parsers.run_output import SHIM_MARK

# the launcher's name (command[0]'s basename) -> its kind
LAUNCHERS = {"torchrun": "torchrun", "mpirun": "mpirun", "mpiexec": "mpirun", "orterun": "mpirun",
             "prterun": "mpirun", "srun": "srun"}
TORCH_MODULES = ("torch.distributed.run", "torch.distributed.launch")
MAX_SHEBANG = 4096
# torchrun options (and argparse's abbreviations of them) with which PYTHON_EXEC is not used
_NO_PYTHON_EXEC = re.compile(r"--(?:no[-_]p|run[-_]p)[a-z_-]{0,10}(?:=.*)?")
_SH_EXEC = re.compile(r"""^'''exec' "?([^"\s]{1,4000})"? """)


def launcher_of(command: Sequence[str]) -> str | None:
    """'torchrun', 'mpirun' or 'srun' when the command is that launcher, else None."""
    name = os.path.basename(command[0])
    if name in LAUNCHERS:
        return LAUNCHERS[name]
    if name.startswith("python"):
        for i, arg in enumerate(command[1:], 1):
            if arg == "-m":
                return "torchrun" if i + 1 < len(command) and command[i + 1] in TORCH_MODULES else None
            if not arg.startswith("-") or arg == "-c":
                return None
    return None


def _interpreter_of_script(path: str) -> str | None:
    """The Python a console script (torchrun) runs with: its `#!` line, or pip's /bin/sh trampoline."""
    try:
        with open(path, "rb") as f:
            head = f.read(MAX_SHEBANG).decode("utf-8", errors="replace").split("\n")
    except OSError:
        return None
    if not head or not head[0].startswith("#!"):
        return None
    words = head[0][2:].split()
    if not words:
        return None
    if os.path.basename(words[0]) == "sh" and len(head) > 1:  # long paths: '''exec' "/x/python" "$0" "$@"
        m = _SH_EXEC.match(head[1])
        return m.group(1) if m else None
    if os.path.basename(words[0]) == "env" and len(words) > 1:
        return shutil.which(words[-1])
    return words[0]


def torchrun_python(command: Sequence[str], env: Mapping[str, str]) -> str | None:
    """The interpreter torchrun will start the ranks with (absolute), None when it cannot be told."""
    if env.get("PYTHON_EXEC"):
        found = shutil.which(env["PYTHON_EXEC"], path=env.get("PATH", os.defpath))
    elif os.path.basename(command[0]) == "torchrun":
        script = shutil.which(command[0], path=env.get("PATH", os.defpath))
        found = _interpreter_of_script(script) if script else None
    else:  # python -m torch.distributed.run
        found = shutil.which(command[0], path=env.get("PATH", os.defpath))
    if not found or not os.path.isabs(found) or not os.access(found, os.X_OK):
        return None
    return found


def why_not_delegated(command: Sequence[str], env: Mapping[str, str]) -> str | None:
    """Why torchrun would not start its ranks through PYTHON_EXEC; None when it will."""
    for arg in command[1:]:
        if _NO_PYTHON_EXEC.fullmatch(arg):
            return f"torchrun {clip(arg, 40)} starts the ranks without PYTHON_EXEC"
    for name in ("PET_NO_PYTHON", "PET_RUN_PATH"):
        if env.get(name, "").strip().lower() not in ("", "0", "false"):
            return f"${name} is set: torchrun starts the ranks without PYTHON_EXEC"
    return None


@dataclass(frozen=True)
class Delegation:
    """torchrun's ranks wrapped by `hc run --inner`: the shim and the variable that names it."""

    shim: Path
    python: str  # the interpreter the ranks run with (torchrun's)
    python_exec_was: str | None  # the user's PYTHON_EXEC, put back for the rank's command


def shim_text(hc_argv: Sequence[str], python: str) -> str:
    """The shell script torchrun runs as PYTHON_EXEC: hc run (this very hc) around the rank's python."""

    package_parent = str(Path(__file__).resolve().parents[2])
    entry = "import sys; sys.path.insert(0, sys.argv[1]); from healthcheck.cli import main; main(sys.argv[2:])"
    words = [sys.executable, "-c", entry, package_parent, *hc_argv, "--", python]
    return f"#!/bin/sh\n{SHIM_MARK} (PYTHON_EXEC); see hc run --help\nexec {shlex.join(words)} \"$@\"\n"


def write_shim(log_dir: Path, host: str, pid: int, hc_argv: Sequence[str], python: str) -> Path:
    """Write the shim (0750, atomically) and check that it can be executed there (a noexec mount)."""

    path = log_dir / f"hc-run-python.{safe_key(host)}.{pid}"
    write_atomic(path, shim_text(hc_argv, python).encode(), mode=0o750)
    if not os.access(path, os.X_OK):
        raise UsageError(f"{path}: cannot be executed there (a noexec file system?)")
    return path
