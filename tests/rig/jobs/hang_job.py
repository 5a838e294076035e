"""A torch.distributed (gloo, CPU) job that hangs or fails the same way every time.

Every rank runs `train_step` (one all_reduce) in a loop; `--scenario` and `--odd-rank`
make one rank misbehave:

  healthy  no rank misbehaves (stops after --steps steps)
  skip     (a) the odd rank skips one all_reduce and goes on to the next collective, a
           broadcast in `sync_params`: it waits there, the others in all_reduce (gloo:
           both sides hang until the collective timeout)
  size     (b) the odd rank's tensor has another size at step --at: gloo's receiving side
           aborts ("Received data size doesn't match"), the others see the peer go
  kill     (c) the odd rank waits in `wait_to_be_killed` (sleeps) at step --at and is
           SIGKILLed by the test; the others are in all_reduce or see the peer go
  sleep    (d) the odd rank sleeps in `load_batch_slowly` at step --at: the others wait
           in all_reduce
  stop     (e) like kill: the odd rank waits at step --at in `wait_to_be_stopped`; the
           test SIGSTOPs it (state T), the others wait in all_reduce
  port     (f) nothing odd in the job: the test holds the master port, so rank 0's store
           (or torchrun's rendezvous) cannot listen

With --then SCENARIO:RANK (sleep, stop or kill; repeatable) one job misbehaves in turn:
phase 1 is --scenario/--odd-rank at step --at, phase i+1 the i-th --then at step --at+i.
The odd rank of a phase that has a next one waits in its function until the test writes
`release<i>` under --out (a stopped rank, once continued, goes on), so one job's start
serves several collections, each with one odd rank (sleep, then stop, then kill).

The collective timeout (--timeout, default 600 s) keeps a hung job hung while it is
collected. Each rank writes, under --out: `rank<R>.json` at start (pid, rank, host,
Slurm job id), `rank<R>.log` (what it prints, each line prefixed `[rank<R>]: ` as
torch's own logs are), and `rank<R>.hung` once it has entered the step where it hangs
(`rank<R>.hung<i>` for phase i > 1).
A rank that catches an error logs its traceback and, with --linger S, stays alive S
seconds in `after_failure` (so survivors can be collected), then exits 1.

Rank, world size and master come from torchrun (RANK, WORLD_SIZE, MASTER_ADDR/PORT) or,
under srun, from SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID and MASTER_ADDR/MASTER_PORT
set by the caller.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import sys
import time
import traceback

SCENARIOS = ("healthy", "skip", "size", "kill", "sleep", "stop", "port")


class Log:
    def __init__(self, rank: int, out: str) -> None:
        self.prefix = f"[rank{rank}]: "
        self.file = open(os.path.join(out, f"rank{rank}.log"), "a", buffering=1)

    def __call__(self, *parts: object) -> None:
        text = " ".join(str(p) for p in parts)
        stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
        for line in text.splitlines() or [""]:
            print(f"{self.prefix}{line}", flush=True)
            self.file.write(f"{stamp} {self.prefix}{line}\n")


def env_int(*names: str, default: int | None = None) -> int:
    for name in names:
        value = os.environ.get(name)
        if value is not None and value.strip().isdigit():
            return int(value)
    if default is None:
        raise SystemExit(f"none of {names} is set: run under torchrun or srun")
    return default


def train_step(dist, torch, step: int, size: int) -> float:
    t = torch.full((size,), float(step + 1))
    dist.all_reduce(t)
    return float(t[0])


def sync_params(dist, torch, size: int) -> None:
    t = torch.zeros(size)
    dist.broadcast(t, src=0)


# Each wait sleeps in its own frame (py-spy names the function the rank is in; os.access is
# C, no frame of its own) until `seconds` pass or the file `release` (a phase's end, written
# by the test) exists
def load_batch_slowly(seconds: float, release: str = "") -> None:
    until = time.monotonic() + seconds
    while time.monotonic() < until and not (release and os.access(release, os.F_OK)):
        time.sleep(0.1)


def wait_to_be_killed(seconds: float, release: str = "") -> None:
    until = time.monotonic() + seconds
    while time.monotonic() < until and not (release and os.access(release, os.F_OK)):
        time.sleep(0.1)


def wait_to_be_stopped(seconds: float, release: str = "") -> None:
    until = time.monotonic() + seconds
    while time.monotonic() < until and not (release and os.access(release, os.F_OK)):
        time.sleep(0.1)


def after_failure(seconds: float) -> None:
    time.sleep(seconds)


def phase(text: str) -> tuple[str, int]:
    """`--then SCENARIO:RANK` as (scenario, rank)."""
    scenario, _, rank = text.partition(":")
    if scenario not in ("sleep", "stop", "kill") or not rank.isdigit():
        raise SystemExit(f"--then {text!r}: SCENARIO:RANK, SCENARIO one of sleep, stop, kill")
    return scenario, int(rank)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenario", choices=SCENARIOS, default="healthy")
    ap.add_argument("--odd-rank", type=int, default=1)
    ap.add_argument("--at", type=int, default=3, help="the step where the odd rank misbehaves")
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=1024, help="all_reduce elements")
    ap.add_argument("--timeout", type=float, default=600.0, help="collective timeout (s)")
    ap.add_argument("--stall", type=float, default=600.0, help="how long the odd rank sleeps / waits")
    ap.add_argument("--linger", type=float, default=0.0, help="stay alive this long after an error")
    ap.add_argument("--then", action="append", default=[], metavar="SCENARIO:RANK",
                    help="a further phase (sleep, stop, kill) at the next step, once the test releases the last")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    rank = env_int("RANK", "SLURM_PROCID")
    world = env_int("WORLD_SIZE", "SLURM_NTASKS")
    local_rank = env_int("LOCAL_RANK", "SLURM_LOCALID", default=0)
    os.environ.setdefault("RANK", str(rank))
    os.environ.setdefault("WORLD_SIZE", str(world))
    os.environ.setdefault("LOCAL_RANK", str(local_rank))
    os.makedirs(args.out, exist_ok=True)
    log = Log(rank, args.out)
    host = socket.gethostname()
    with open(os.path.join(args.out, f"rank{rank}.json"), "w") as f:
        json.dump({"pid": os.getpid(), "rank": rank, "local_rank": local_rank, "world_size": world, "host": host,
                   "slurm_job_id": os.environ.get("SLURM_JOB_ID"), "scenario": args.scenario,
                   "odd_rank": args.odd_rank}, f)
    phases = [(args.scenario, args.odd_rank)] + [phase(p) for p in args.then]
    odd = rank == args.odd_rank
    log(f"pid {os.getpid()} host {host} rank {rank}/{world} local_rank {local_rank} scenario {args.scenario}"
        f"{' (the odd rank)' if odd and args.scenario not in ('healthy', 'port') else ''}"
        + "".join(f", then {s} by rank {r}" for s, r in phases[1:]))

    import torch
    import torch.distributed as dist

    try:
        log(f"init_process_group gloo master {os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}")
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
        log("init done")
        for step in range(args.steps):
            i = step - args.at  # the phase this step is (0: the first), if any
            if 0 <= i < len(phases):
                scenario, odd_rank = phases[i]
                odd = rank == odd_rank
                open(os.path.join(args.out, f"rank{rank}.hung{i + 1 if i else ''}"), "w").close()
                release = os.path.join(args.out, f"release{i + 1}") if i + 1 < len(phases) else ""
                if odd and scenario == "skip":
                    log(f"step {step}: skipping all_reduce, going on to sync_params (broadcast)")
                    sync_params(dist, torch, args.size)
                    continue
                if odd and scenario == "sleep":
                    log(f"step {step}: load_batch_slowly({args.stall:g})")
                    load_batch_slowly(args.stall, release)
                if odd and scenario == "kill":
                    log(f"step {step}: wait_to_be_killed")
                    wait_to_be_killed(args.stall, release)
                if odd and scenario == "stop":
                    log(f"step {step}: wait_to_be_stopped")
                    wait_to_be_stopped(args.stall, release)
                size = args.size + 1 if odd and scenario == "size" else args.size
                log(f"step {step}: all_reduce of {size} floats")
                value = train_step(dist, torch, step, size)
            else:
                value = train_step(dist, torch, step, args.size)
            if step < args.at or step % 100 == 0:
                log(f"step {step} done: {value:g}")
        log("finished")
        dist.destroy_process_group()
        return 0
    except Exception as exc:  # the evidence: the error as torch printed it, with the rank prefix
        log(f"{type(exc).__name__}: {exc}")
        log(traceback.format_exc())
        if args.linger > 0:
            log(f"after_failure: lingering {args.linger:g} s")
            after_failure(args.linger)
        return 1


if __name__ == "__main__":
    sys.exit(main())
