"""Helpers shared by the tests: fixture paths and running the real `hc` command."""

from __future__ import annotations

import io
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parent / "fixtures"
CORPUS = FIXTURES / "corpus"
REPO = Path(__file__).resolve().parents[1]


def torch_installed() -> bool:
    """torch, with its distributed package, is installed here; found, not imported: a module
    that imports torch (or starts a Python to try) to decide a skip costs every xdist worker
    ~2 s of CPU while it collects, and no test starts before every worker has collected. The
    tests that need torch start it in processes of their own."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    return spec is not None and spec.origin is not None and (Path(spec.origin).parent / "distributed").is_dir()


def corpus_files(folder: str) -> list[Path]:
    return sorted((CORPUS / folder).glob("*.txt"))


def best_time(fn: Callable[[Any], Any], arg: Any, runs: int = 3, enough: float = 0.0) -> float:
    """The fastest of `runs` calls of fn(arg), in seconds, a ParseError counting as done; the
    collector is paused during each call, so a cycle collection that happens to land in one
    measurement does not count against the parser. A call faster than `enough` ends it early:
    a caller asking "was any call under this?" has its answer."""
    import gc
    import time

    from healthcheck.core.errors import ParseError

    took = []
    # what was alive before (in a whole suite's worker: every collected test, ~1 s of a full
    # collection) is set aside, so each collection below costs what the runs left, not that
    gc.freeze()
    try:
        for _ in range(runs):
            gc.collect()
            gc.disable()
            start = time.perf_counter()
            try:
                fn(arg)
            except ParseError:
                pass
            finally:
                took.append(time.perf_counter() - start)
                gc.enable()
            if took[-1] < enough:
                break
    finally:
        gc.unfreeze()
    return min(took)


def assert_linear(fn: Callable[[Any], Any], small: Any, large: Any, *, slack: float = 0.2,
                  what: object = None, attempts: int = 3) -> None:
    """Assert that fn costs about linear time, `large` being 10x `small`: linear is ~10x the
    time, quadratic ~100x, and the bound is 25x (plus `slack` seconds for tiny inputs). No
    absolute time is asserted, and the machine is shared (CI once saw a linear parser take 28x
    in one measurement), so a failed comparison is measured again: only a ratio over the bound
    in every attempt fails."""
    seen = []
    for _ in range(attempts):
        t_small = best_time(fn, small, 3)
        bound = 25 * t_small + slack
        # the second call of the large input only where the first was over the bound: the
        # verdict is the one min() over both gives, at half the cost when it passes
        t_large = best_time(fn, large, 2, enough=bound)
        if t_large < bound:
            return
        seen.append((round(t_small, 4), round(t_large, 4)))
    label = f" ({what!r})" if what is not None else ""
    raise AssertionError(f"not linear{label}: seconds for the 1x and 10x inputs, each attempt: {seen}")


def run_hc(*args: str, env: dict[str, str] | None = None, input: str | bytes | None = None,
           timeout: float = 60, cwd: str | None = None) -> subprocess.CompletedProcess:
    """Run the real `hc` entry point in a subprocess, as an operator would."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("HC_", "SLURM"))}
    # a crash in C code (a signal, not an exit) leaves its Python stack on stderr
    full_env["PYTHONFAULTHANDLER"] = "1"
    full_env.update(env or {})
    data = input.encode() if isinstance(input, str) else input
    r = subprocess.run(
        [sys.executable, "-m", "healthcheck", *args],
        input=data,
        capture_output=True,
        env=full_env,
        timeout=timeout,
        cwd=cwd,
    )
    if r.returncode < 0:  # shown in the failing test's captured output
        print(f"hc {' '.join(args)} died with signal {-r.returncode}; stderr:\n"
              f"{r.stderr.decode(errors='replace')}", file=sys.stderr)
    return r


def no_hardware_outputs() -> dict[str, tuple[str, str, int]]:
    """The recorded outputs of IB/GPU tools on a machine without the hardware.

    Returns command -> (stdout, stderr, exit code), from fixtures/no-hardware-outputs.txt.
    """
    import re

    out: dict[str, tuple[str, str, int]] = {}
    cmd = None
    stdout: list[str] = []
    stderr: list[str] = []
    code = 0
    for line in (FIXTURES / "no-hardware-outputs.txt").read_text().splitlines():
        m = re.match(r"^### \$ (.*?)\s+\(exit (\d+)\)\s*$", line)
        if m or line.startswith("### "):
            if cmd is not None:
                out[cmd] = ("".join(stdout), "".join(stderr), code)
            cmd, stdout, stderr = (m.group(1), [], []) if m else (None, [], [])
            code = int(m.group(2)) if m else 0
        elif cmd is not None and line.startswith("stdout| "):
            stdout.append(line[8:] + "\n")
        elif cmd is not None and line.startswith("stderr| "):
            stderr.append(line[8:] + "\n")
    if cmd is not None:
        out[cmd] = ("".join(stdout), "".join(stderr), code)
    return out


def make_fake_sysfs_ib(root: Path, specs: list[str], counters: dict[str, dict[str, int]] | None = None) -> Path:
    """A /sys/class/infiniband tree under `root`, laid out as the kernel does (and as the
    rig's fake-ib.sh does). spec: "ca[:state[:phys[:rate[:link_layer[:ca_type[:ports]]]]]]"."""
    states = {"Active": "4: ACTIVE", "Down": "1: DOWN", "Init": "2: INIT", "Armed": "3: ARMED"}
    phys = {"LinkUp": "5: LinkUp", "Disabled": "3: Disabled", "Polling": "2: Polling"}
    base = root / "sys/class/infiniband"
    base.mkdir(parents=True, exist_ok=True)
    for spec in specs:
        parts = (spec.split(":") + [""] * 7)[:7]
        ca, st, ph, rate, layer, ca_type, nports = parts
        d = base / ca
        (d / "ports").mkdir(parents=True, exist_ok=True)
        (d / "hca_type").write_text((ca_type or "MT4129") + "\n")
        (d / "fw_ver").write_text("28.39.1002\n")
        for n in range(1, int(nports or 1) + 1):
            p = d / "ports" / str(n)
            (p / "counters").mkdir(parents=True, exist_ok=True)
            (p / "state").write_text(states.get(st or "Active", st) + "\n")
            (p / "phys_state").write_text(phys.get(ph or "LinkUp", ph) + "\n")
            (p / "rate").write_text(f"{rate or 400} Gb/sec (4X NDR)\n")
            (p / "link_layer").write_text((layer or "InfiniBand") + "\n")
            (p / "lid").write_text(f"0x{16 + n:x}\n")
            for name, value in ((counters or {}).get(f"{ca}/{n}") or {}).items():
                (p / "counters" / name).write_text(f"{value}\n")
            # the counters real mlx5 sysfs (and the rig's fake-ib.sh) has
            for name in ("symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors",
                         "port_rcv_remote_physical_errors", "port_xmit_discards", "local_link_integrity_errors",
                         "excessive_buffer_overrun_errors", "port_xmit_data", "port_rcv_data"):
                if not (p / "counters" / name).exists():
                    (p / "counters" / name).write_text("0\n")
    return base


STOP_SIGNALS = ("SIGINT", "SIGHUP", "SIGTERM")


def default_signals() -> None:
    """A child's stop signals at their defaults before it execs (a Popen preexec_fn): a test
    that sends one must not inherit the runner's dispositions. Started under `nohup` or in a
    shell's background, the suite ignores SIGHUP and SIGINT, every child inherits that, and hc
    rightly keeps a signal ignored at its start ignored (nohup's meaning)."""
    import signal

    for name in STOP_SIGNALS:
        signal.signal(getattr(signal, name), signal.SIG_DFL)


def write_stub(directory: Path, name: str, script: str) -> Path:
    """An executable stand-in for a tool, for PATH-based tests."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)
    return path


def srun_stand_in(tmp_path: Path, script_tail: str = "", dead: str = "none") -> str:
    """A bin dir whose `srun` runs the real `hc` once per node of --nodelist, labelled
    like `srun --label` (the real srun is covered on the rig); `dead`: a node whose task
    never started."""
    bin_dir = tmp_path / "bin"
    # like `srun --label`: run the command once per node of --nodelist, prefix each line
    write_stub(bin_dir, "srun", f"""
nodes=""
while [ $# -gt 0 ]; do
  case "$1" in
    --nodelist=*) nodes="${{1#--nodelist=}}" ;;
    --*) ;;
    *) break ;;
  esac
  shift
done
shift  # the hc command itself
i=0
for n in $({sys.executable} -c 'import sys; from ClusterShell.NodeSet import NodeSet; print(" ".join(NodeSet(sys.argv[1])))' "$nodes"); do
  [ "$n" = "{dead}" ] && continue  # a node whose task never started
  HC_NODE_NAME=$n {sys.executable} -m healthcheck "$@" | sed "s/^/$i: /"
  i=$((i+1))
done
{script_tail}
exit 2
""")
    # the stand-in Slurm's queue is empty: no job a killed hc left (the real squeue, with no
    # controller to ask, would make every sweep warn that it could not look)
    write_stub(bin_dir, "squeue", "exit 0\n")
    return str(bin_dir)


def diagnose_saved(folder: Path) -> Any:
    """`hc diagnose logs FOLDER`'s verdict, in process (a saved job's output)."""
    from healthcheck.diagnose.sources import collect
    from healthcheck.diagnose.verdict import build

    return build(collect([folder]))


def named_ranks(verdict: Any) -> list[int]:
    """The ranks a diagnosis verdict names, in its order."""
    return [o.rank for o in verdict.odd_ranks]


def assert_culprits(verdict: Any, cls: str, culprits: list[int], victims: list[int]) -> None:
    """The verdict's class, the culprits it names (exactly, in order), and none of the victims."""
    assert verdict.cls == cls, verdict.summary
    assert named_ranks(verdict) == culprits, verdict.summary
    assert not set(named_ranks(verdict)) & set(victims)


class Tty(io.StringIO):
    """An output stream that says it is a terminal (colour, wrapping, a live progress line)."""

    def isatty(self) -> bool:
        return True


class Pipe(io.StringIO):
    """An output stream that says it is not a terminal (a script's pipe, a captured stderr)."""

    def isatty(self) -> bool:
        return False


def open_mpi_mpirun() -> str:
    """Open MPI's mpirun (the rig tests start its daemons over the rig's sshd); the test is
    skipped where there is none, no orted beside it, or an mpirun of another MPI."""
    import pytest

    mpirun = shutil.which("mpirun")
    if mpirun is None or shutil.which("orted") is None:
        pytest.skip("Open MPI (mpirun, orted) is not installed")
    version = subprocess.run([mpirun, "--version"], capture_output=True, text=True, timeout=20, check=False)
    if "Open MPI" not in version.stdout + version.stderr:
        pytest.skip(f"{mpirun} is not Open MPI's: {(version.stdout + version.stderr).strip()[:100]!r}")
    return mpirun


def free_port() -> int:
    """A TCP port on loopback that nothing listened on a moment ago (the OS picked it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
