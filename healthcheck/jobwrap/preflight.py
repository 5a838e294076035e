"""`hc run`'s preflight: what would make the job fail or hang, found before it starts.

Each check is a function of the environment (and, for the port, this host's sockets)
returning `Problem`s: FAIL stops the job (exit 2, one line), WARN is printed and the job
runs. The node's quick tier runs as a subprocess (`hc node --local --tier quick`) under a
hard deadline, on local rank 0 only; its FAIL stops the job, its ERROR or a timeout only
warns. The straggler test (straggler.py) then exchanges every rank's verdict, so a FAIL
on one rank stops every rank with the same line instead of leaving them to time out.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from glob import glob

from healthcheck.bandwidth.rendezvous import port_in_use
from healthcheck.core.errors import ExitCode, HcError
from healthcheck.core.inputs import clip
from healthcheck.runners.local import run_command

QUICK_TIER_TIMEOUT_S = 60.0


class PreflightFail(HcError):
    """The preflight found what would break the job: it is not started (exit 2)."""

    exit_code = ExitCode.FAIL


class PreflightError(HcError):
    """The preflight could not complete (the straggler test's rendezvous or collective failed): exit 3."""

    exit_code = ExitCode.ERROR


@dataclass(frozen=True)
class Problem:
    status: str  # FAIL | WARN
    message: str


def _fail(message: str) -> Problem:
    return Problem("FAIL", message)


def _warn(message: str) -> Problem:
    return Problem("WARN", message)


def under_torchrun(env: Mapping[str, str]) -> bool:
    return "TORCHELASTIC_RUN_ID" in env or "GROUP_RANK" in env


# ------------------------------------------------------------------ launcher variables


def _int_vars(env: Mapping[str, str], names: tuple[str, ...], problems: list[Problem]) -> dict[str, int]:
    out: dict[str, int] = {}
    for name in names:
        if name not in env:
            continue
        value = env[name].strip()
        if not value.isdigit():
            problems.append(_fail(f"${name}={clip(env[name], 40)!r} is not a non-negative integer"))
        else:
            out[name] = int(value)
    return out


def check_launcher_env(env: Mapping[str, str]) -> list[Problem]:
    """RANK/WORLD_SIZE/LOCAL_RANK/LOCAL_WORLD_SIZE/MASTER_ADDR/MASTER_PORT present and coherent,
    and agreeing with Slurm's or Open MPI's view of the same process where both are set."""
    problems: list[Problem] = []
    names = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_PORT", "SLURM_PROCID", "SLURM_NTASKS",
             "SLURM_LOCALID", "SLURM_STEP_NUM_NODES", "SLURM_NNODES", "OMPI_COMM_WORLD_RANK",
             "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE")
    n = _int_vars(env, names, problems)
    # every launcher's own rank inside its own world, with or without torch's variables
    # (srun or mpirun alone runs one task per rank: a rank outside its world never meets)
    for rank_name, world_name in _LAUNCHER_WORLDS:
        problems += _rank_in_world(n, rank_name, world_name)
    torch_vars = [v for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
                  if v in env]
    if not torch_vars:
        return problems  # no torch.distributed variables: srun/mpirun alone, or one process
    for have, need in (("RANK", "WORLD_SIZE"), ("WORLD_SIZE", "RANK")):
        if have in env and need not in env:
            problems.append(_fail(f"${have} is set but ${need} is not: torch.distributed's env:// needs both"))
    problems += _rank_in_world(n, "RANK", "WORLD_SIZE")
    if "RANK" in n and "WORLD_SIZE" in n:
        world = n["WORLD_SIZE"]
        if world > 1 or "MASTER_ADDR" in env or "MASTER_PORT" in env:
            for name in ("MASTER_ADDR", "MASTER_PORT"):
                if not env.get(name, "").strip():
                    problems.append(_fail(f"${name} is not set ({world} ranks): env:// cannot find rank 0's store"))
    if "MASTER_PORT" in n and not 1 <= n["MASTER_PORT"] <= 65535:
        problems.append(_fail(f"$MASTER_PORT={n['MASTER_PORT']} is not a TCP port (1-65535)"))
    if "LOCAL_RANK" in n and "LOCAL_WORLD_SIZE" in n and n["LOCAL_RANK"] >= n["LOCAL_WORLD_SIZE"]:
        problems.append(_fail(f"$LOCAL_RANK={n['LOCAL_RANK']} is not below $LOCAL_WORLD_SIZE={n['LOCAL_WORLD_SIZE']}"))
    if "LOCAL_WORLD_SIZE" in n and "WORLD_SIZE" in n and n["LOCAL_WORLD_SIZE"] > n["WORLD_SIZE"] > 0:
        problems.append(_fail(f"$LOCAL_WORLD_SIZE={n['LOCAL_WORLD_SIZE']} is above $WORLD_SIZE={n['WORLD_SIZE']}"))
    if under_torchrun(env):
        problems += _torchrun_vs_slurm(env, n)
    else:
        problems += _same_process(n, "SLURM", ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"))
        problems += _same_process(n, "Open MPI", ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                                  "OMPI_COMM_WORLD_LOCAL_RANK"))
    return problems


# (rank, world) of each launcher: Slurm's task, Open MPI's rank and its rank on the node
_LAUNCHER_WORLDS = (("SLURM_PROCID", "SLURM_NTASKS"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                    ("OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"))


def _rank_in_world(n: Mapping[str, int], rank_name: str, world_name: str) -> list[Problem]:
    """FAIL where a world of that name is empty or the rank is not inside it."""
    if world_name in n and n[world_name] < 1:
        return [_fail(f"${world_name}=0: a job needs at least one rank")]
    if rank_name in n and world_name in n and n[rank_name] >= n[world_name]:
        return [_fail(f"${rank_name}={n[rank_name]} is not below ${world_name}={n[world_name]}")]
    return []


def _same_process(n: Mapping[str, int], who: str, names: tuple[str, str, str]) -> list[Problem]:
    """Outside torchrun, RANK/WORLD_SIZE/LOCAL_RANK set by hand must be the launcher's own."""
    out = []
    for torch_name, other in zip(("RANK", "WORLD_SIZE", "LOCAL_RANK"), names, strict=True):
        if torch_name in n and other in n and n[torch_name] != n[other]:
            out.append(_fail(f"${torch_name}={n[torch_name]} but {who} says ${other}={n[other]}: "
                             f"every task would claim another rank than {who} gave it"))
    return out


def _torchrun_vs_slurm(env: Mapping[str, str], n: Mapping[str, int]) -> list[Problem]:
    """torchrun under srun: one torchrun per node, so WORLD_SIZE = nodes x LOCAL_WORLD_SIZE."""
    nodes = n.get("SLURM_STEP_NUM_NODES", n.get("SLURM_NNODES"))
    tasks = n.get("SLURM_NTASKS")
    if "SLURM_PROCID" not in env or nodes is None or tasks is None:
        return []
    out = []
    if tasks > nodes:
        out.append(_warn(f"srun started {tasks} tasks on {nodes} nodes, each a torchrun: start one torchrun "
                         "per node (srun --ntasks-per-node=1)"))
    elif "WORLD_SIZE" in n and "LOCAL_WORLD_SIZE" in n and n["WORLD_SIZE"] != nodes * n["LOCAL_WORLD_SIZE"]:
        out.append(_warn(f"$WORLD_SIZE={n['WORLD_SIZE']} but the Slurm step has {nodes} nodes x "
                         f"$LOCAL_WORLD_SIZE={n['LOCAL_WORLD_SIZE']}: torchrun's --nnodes may not match the step"))
    return out


# ------------------------------------------------------------------ GPU mapping


def node_has_nvidia_gpus(dev: str = "/dev") -> bool:
    return bool(glob(os.path.join(dev, "nvidia[0-9]*")))


def check_cuda_mapping(env: Mapping[str, str], has_gpus: bool) -> list[Problem]:
    """CUDA_VISIBLE_DEVICES under torchrun: torchrun does not split it between local ranks, so
    one device for several local ranks means every rank on the node shares that GPU."""
    if not under_torchrun(env) or "CUDA_VISIBLE_DEVICES" not in env:
        return []
    visible = [d.strip() for d in env["CUDA_VISIBLE_DEVICES"].split(",") if d.strip()]
    local_world = (env.get("LOCAL_WORLD_SIZE") or "").strip()
    local_rank = (env.get("LOCAL_RANK") or "").strip()
    if not local_world.isdigit() or int(local_world) < 2 or not visible:
        return []
    lws = int(local_world)
    make = _fail if has_gpus else _warn  # a CPU (gloo) job does not care
    shown = clip(env["CUDA_VISIBLE_DEVICES"], 60)
    if len(visible) == 1:
        return [make(f"CUDA_VISIBLE_DEVICES={shown} under torchrun with {lws} local ranks: every local rank "
                     "sees the same single GPU (torchrun does not split it); unset it or list one GPU per rank")]
    dupes = sorted({d for d in visible if visible.count(d) > 1})
    if dupes:
        return [make(f"CUDA_VISIBLE_DEVICES={shown} lists {','.join(dupes)} twice: two local ranks would share a GPU")]
    if len(visible) < lws and local_rank.isdigit() and int(local_rank) >= len(visible):
        return [make(f"CUDA_VISIBLE_DEVICES={shown} shows {len(visible)} GPUs to {lws} local ranks: local rank "
                     f"{local_rank} has no GPU of its own (cuda:{local_rank} does not exist)")]
    return []


# ------------------------------------------------------------------ the master port


def _local_address(addr: str) -> bool:
    """Whether `addr` (a name or an address) is one of this host's: bind to it on port 0 succeeds."""
    try:
        infos = socket.getaddrinfo(addr, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return False
    for family, _, _, _, sockaddr in infos:
        try:
            with socket.socket(family, socket.SOCK_STREAM) as s:
                s.bind((sockaddr[0], 0))
                return True
        except OSError:
            continue
    return False


def check_master_port(env: Mapping[str, str]) -> tuple[list[Problem], str]:
    """The rendezvous port already taken on the master's host: checkable only on that host, and only
    where rank 0's process will listen on it (torchrun's agent holds it itself: nothing to check)."""
    addr, port = env.get("MASTER_ADDR", "").strip(), env.get("MASTER_PORT", "").strip()
    if not addr or not port.isdigit() or not 1 <= int(port) <= 65535:
        return [], "no MASTER_ADDR/MASTER_PORT"
    if env.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        return [], f"port {port} is held by torchrun's agent store"
    if not _local_address(addr):
        return [], f"MASTER_ADDR {clip(addr, 60)} is not this host"
    why = port_in_use(int(port))
    if why:
        return [_fail(f"MASTER_PORT {port} on {clip(addr, 60)} (this host) is already in use ({why}): rank 0 "
                      "cannot listen there; pick another port or end what holds it")], ""
    return [], f"port {port} is free"


# ------------------------------------------------------------------ the node's quick tier


def quick_tier(env: Mapping[str, str], timeout_s: float = QUICK_TIER_TIMEOUT_S) -> Problem | None:
    """`hc node --local --tier quick` as a subprocess: FAIL -> FAIL with the findings, ERROR or a
    timeout -> WARN, PASS/WARN -> None (its WARN findings are the node's business, not the job's)."""

    argv = (sys.executable, "-m", "healthcheck", "node", "--local", "--tier", "quick", "--format", "json")
    child_env = {k: v for k, v in env.items() if k != "HC_FORMAT"}
    result = run_command(argv, timeout_s=timeout_s, env=child_env)
    if result.timed_out:
        return _warn(f"the node's quick tier did not finish within {timeout_s:g} s (not judged)")
    try:
        report = json.loads(result.stdout)
        status = report["status"]
        findings = [f for node in report.get("nodes", []) for f in node.get("findings") or []]
    except (ValueError, KeyError, TypeError):
        line = next((ln for ln in result.stderr.splitlines() if ln.strip()), f"exit {result.returncode}")
        return _warn(f"the node's quick tier could not run: {clip(line, 200)}")
    if status == "FAIL":
        bad = [f"{f.get('id')} {f.get('message')}" for f in findings if f.get("status") == "FAIL"]
        more = f" (+{len(bad) - 3} more)" if len(bad) > 3 else ""
        return _fail(f"the node's quick tier FAILED: {'; '.join(clip(b, 160) for b in bad[:3])}{more}")
    if status == "ERROR":
        bad = [f"{f.get('id')} {f.get('message')}" for f in findings if f.get("status") == "ERROR"]
        return _warn(f"the node's quick tier could not judge everything: {clip('; '.join(bad[:2]), 300)}")
    return None
