"""A small gloo (CPU) "training" job that goes wrong on purpose, for the measured detector.

One process per rank, started plainly (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT), by
torchrun, by mpirun (OMPI_COMM_WORLD_RANK/SIZE) or by srun (SLURM_PROCID/NTASKS). Every
rank runs `train_step` --steps times: `load_batch` (a data loader), `forward_backward`
(compute), `reduce_gradients` (an all_reduce of a [3, 4] gradient), `sync_buffers` (a
broadcast from rank 0 every --sync-every steps), then an all_reduce of the loss, and logs
the step the way a training script does. At step --at the ranks in --culprits do --fault:

  raise       an exception in the rank's own code (forward_backward: ValueError)
  exit0       the data loader runs out of data: the rank returns 0 early
  loader      the data loader blocks (sleeps --hang s) while the others wait in all_reduce
  sleep       the rank sleeps --hang s in `save_checkpoint` before the all_reduce
  busy        a busy loop in forward_backward for --hang s
  kill        SIGKILL (a kill -9 from outside)
  oom         allocates memory, then SIGKILL, as the OOM killer does
  stop        SIGSTOP itself (a debugger, a frozen node): state T
  op          all_gather where the others all_reduce the gradient
  size        a [4, 5] gradient where the others have [3, 4]
  small       a [2, 3] gradient where the others have [3, 4] (an uneven last batch)
  dtype       a float64 gradient where the others have float32
  bcast       the broadcast's source (the culprit, --sync-src) sends a wrong-sized tensor
  group       the rank passes a process group it does not belong to (torch warns, skips)
  straggler   no fault: the rank is --slow s slower every step (still progressing)
  none        healthy; --jitter s of random delay per rank and step

Before its fault a rank writes MARK/rank<R>.json ({rank, pid, step}); every rank writes
it at the start too (step -1), so the harness knows the pids. --timeout is the collective
timeout; --record wraps main in torchelastic's @record.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import signal
import sys
import time
from datetime import timedelta

log = logging.getLogger("train")


def identity() -> tuple[int, int]:
    """(rank, world size) from whichever launcher started this process; exported as torch's env://."""
    for rank_var, size_var in (("RANK", "WORLD_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                               ("SLURM_PROCID", "SLURM_NTASKS")):
        if rank_var in os.environ and size_var in os.environ:
            os.environ.setdefault("RANK", os.environ[rank_var])
            os.environ.setdefault("WORLD_SIZE", os.environ[size_var])
            return int(os.environ[rank_var]), int(os.environ["WORLD_SIZE"])
    raise SystemExit("no rank variable: run under torchrun, mpirun or srun, or set RANK and WORLD_SIZE")


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fault", default="none")
    ap.add_argument("--culprits", default="", help="comma-separated ranks")
    ap.add_argument("--at", type=int, default=3, help="the step at which the culprits misbehave")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--timeout", type=float, default=10.0, help="collective timeout, s")
    ap.add_argument("--hang", type=float, default=600.0, help="how long a blocked rank blocks, s")
    ap.add_argument("--slow", type=float, default=0.0, help="straggler: extra seconds per step")
    ap.add_argument("--jitter", type=float, default=0.0, help="random extra seconds per step, every rank")
    ap.add_argument("--step-time", type=float, default=0.2, help="a step's compute, s")
    ap.add_argument("--sync-every", type=int, default=2)
    ap.add_argument("--mark", default="", help="a folder for the harness' markers")
    ap.add_argument("--record", action="store_true", help="torchelastic's @record around main")
    return ap.parse_args(argv)


class Job:
    def __init__(self, args: argparse.Namespace, rank: int, world: int) -> None:
        self.args = args
        self.rank = rank
        self.world = world
        self.culprit = rank in {int(r) for r in args.culprits.split(",") if r.strip()}
        self.rng = random.Random(rank)
        self.groups: list = []

    def faulty(self, step: int, *faults: str) -> bool:
        return self.culprit and step == self.args.at and self.args.fault in faults

    def mark(self, step: int) -> None:
        if self.args.mark:
            path = os.path.join(self.args.mark, f"rank{self.rank}.json")
            with open(path + ".tmp", "w") as f:
                json.dump({"rank": self.rank, "pid": os.getpid(), "step": step}, f)
            os.replace(path + ".tmp", path)

    # the training loop's parts: each name is what a stack shows
    def load_batch(self, step: int):
        import torch

        if self.faulty(step, "loader"):
            time.sleep(self.args.hang)  # a data loader worker that never answers
        if self.faulty(step, "exit0"):
            raise StopIteration
        if self.args.jitter:
            time.sleep(self.rng.uniform(0, self.args.jitter))
        return torch.ones(16, 8) * (self.rank + 1)

    def forward_backward(self, batch, step: int):

        if self.faulty(step, "raise"):
            raise ValueError(f"NaN in the loss at step {step}: batch {step * self.world + self.rank} is corrupt")
        if self.faulty(step, "kill"):
            os.kill(os.getpid(), signal.SIGKILL)
        if self.faulty(step, "oom"):
            hog = [bytearray(64 << 20) for _ in range(4)]  # what the OOM killer finds, then kills
            os.kill(os.getpid(), signal.SIGKILL)
            del hog
        if self.faulty(step, "stop"):
            os.kill(os.getpid(), signal.SIGSTOP)
        end = time.monotonic() + self.args.step_time + (self.args.slow if self.culprit and
                                                        self.args.fault == "straggler" else 0.0)
        if self.faulty(step, "busy"):
            end = time.monotonic() + self.args.hang
        x = 0
        while time.monotonic() < end:  # compute
            x += 1
        return batch[:3, :4] * 0.5

    def reduce_gradients(self, grad, step: int) -> None:
        import torch
        import torch.distributed as dist

        if self.faulty(step, "size"):
            grad = torch.ones(4, 5)
        if self.faulty(step, "small"):
            grad = torch.ones(2, 3)
        if self.faulty(step, "dtype"):
            grad = grad.to(torch.float64)
        if self.faulty(step, "op"):
            out = [torch.empty_like(grad) for _ in range(self.world)]
            dist.all_gather(out, grad)
            return
        if self.args.fault == "group" and self.groups and step == self.args.at:
            mine, other = self.groups if self.rank < self.world // 2 else self.groups[::-1]
            dist.all_reduce(grad, group=other if self.culprit else mine)
            return
        dist.all_reduce(grad)

    def sync_buffers(self, step: int) -> None:
        import torch
        import torch.distributed as dist

        bad_source = self.args.fault == "bcast" and step == self.args.at
        if not bad_source and (self.args.sync_every <= 0 or step % self.args.sync_every):
            return
        # a bad broadcast's source is the (first) culprit, and only it holds the wrong size
        src = int(self.args.culprits.split(",")[0]) if bad_source else 0
        buf = torch.zeros(48 if self.faulty(step, "bcast") else 32)
        dist.broadcast(buf, src=src)

    def save_checkpoint(self, step: int) -> None:
        if self.faulty(step, "sleep"):
            time.sleep(self.args.hang)  # a checkpoint write to a file system that hangs

    def train_step(self, step: int) -> bool:
        import torch
        import torch.distributed as dist

        started = time.monotonic()
        if step == self.args.at and self.culprit:
            self.mark(step)
        try:
            batch = self.load_batch(step)
        except StopIteration:
            log.info("rank %d: data loader exhausted after %d steps, finishing", self.rank, step)
            return False
        grad = self.forward_backward(batch, step)
        self.save_checkpoint(step)
        self.reduce_gradients(grad, step)
        self.sync_buffers(step)
        loss = torch.tensor([float(grad.sum())])
        dist.all_reduce(loss)
        log.info("step %d loss %.3f (%.2f s)", step, loss.item() / self.world, time.monotonic() - started)
        return True

    def run(self) -> int:
        import torch.distributed as dist

        dist.init_process_group("gloo", timeout=timedelta(seconds=self.args.timeout))
        log.info("rank %d of %d initialized (gloo, pid %d)", self.rank, dist.get_world_size(), os.getpid())
        if self.args.fault == "group":
            half = self.world // 2
            self.groups = [dist.new_group(list(range(half))), dist.new_group(list(range(half, self.world)))]
        self.mark(-1)
        for step in range(self.args.steps):
            if not self.train_step(step):
                return 0
        dist.barrier()
        log.info("training done")
        dist.destroy_process_group()
        return 0


def main() -> int:
    args = parse(sys.argv[1:])
    rank, world = identity()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s %(levelname)s [train rank {rank}] %(message)s")
    job = Job(args, rank, world)
    if args.record:
        from torch.distributed.elastic.multiprocessing.errors import record

        return record(job.run)()
    return job.run()


if __name__ == "__main__":
    sys.exit(main())
