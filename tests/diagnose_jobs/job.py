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

Variants added for the second held-out set (tests/fixtures/diagnose-jobs/held-out-2/); the
ones above are unchanged by them:

  deep        RuntimeError four frames down in the model's code (every rank runs the model
              code; the culprit's batch holds a NaN at --at)
  transform   AssertionError in the data loader's transform (load_batch -> apply_transforms
              -> normalize -> check_range)
  preinit     ValueError parsing the config, before init_process_group: the peers wait in the
              rendezvous (no marker from the culprit)
  exit1       sys.exit(1) in save_checkpoint, nothing printed
  segv        a segmentation fault in native code (ctypes reads address 0)
  term        SIGTERM sent by another process (`kill -TERM pid`)
  skipbarrier every rank enters a barrier each step; the culprit skips it at --at
  p2p         each step ranks 2k and 2k+1 exchange a tensor (the even one sends first); at
              --at the culprits receive first: a pair of culprits deadlocks in recv
  extra       the culprit calls one all_reduce more than its peers at --at (a metric)
  lock        the main thread waits for a lock a background flush thread holds while it hangs
  queue       each step a prefetch thread hands the batch over a queue; at --at it hangs and
              the main thread waits in queue.get
  subproc     the rank waits for a child process (a checkpoint upload that hangs --hang s)
  stall       time.sleep(--hang) in log_metrics, between the gradient all_reduce and the
              buffers' broadcast
  straggler   with --slow-factor F: the culprit's compute takes F times as long

Before its fault a rank writes MARK/rank<R>.json ({rank, pid, step}); every rank writes
it at the start too (step -1), so the harness knows the pids. --timeout is the collective
timeout; --record wraps main in torchelastic's @record.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import logging
import os
import queue
import random
import signal
import subprocess
import sys
import threading
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
    ap.add_argument("--slow-factor", type=float, default=1.0, help="straggler: its compute takes this many times as long")
    ap.add_argument("--jitter", type=float, default=0.0, help="random extra seconds per step, every rank")
    ap.add_argument("--step-time", type=float, default=0.2, help="a step's compute, s")
    ap.add_argument("--sync-every", type=int, default=2)
    ap.add_argument("--mark", default="", help="a folder for the harness' markers")
    ap.add_argument("--record", action="store_true", help="torchelastic's @record around main")
    return ap.parse_args(argv)


def check_finite(name: str, t, step: int) -> None:
    import torch

    if not bool(torch.isfinite(t).all()):
        raise RuntimeError(f"{name}: non-finite values in the activations at step {step}")


def scaled_softmax(scores, step: int):
    check_finite("attention scores", scores, step)
    return scores.softmax(dim=-1)


def attention_block(x, step: int):
    weights = scaled_softmax(x @ x.T / x.shape[1] ** 0.5, step)
    return weights @ x


def model_forward(batch, step: int):
    return attention_block(batch, step) * 0.01


def check_range(x, step: int) -> None:
    assert float(x.min()) >= 0.0, f"pixel values must be non-negative after decoding (step {step}, min {float(x.min())})"


def normalize(x, step: int):
    check_range(x, step)
    return (x - x.mean()) / (x.std() + 1e-6) + 1.0


def apply_transforms(x, step: int):
    return normalize(x.flip(0), step)


def parse_learning_rate(text: str) -> float:
    return float(text)


def load_config(broken: bool) -> dict:
    # the culprit's copy of the config has a stray comma: float() says so, before any rendezvous
    return {"lr": parse_learning_rate("3e-4," if broken else "3e-4")}


def die_with_parent() -> None:
    """A child that the kernel kills when its parent (the rank) dies: nothing outlives the job."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Job:
    def __init__(self, args: argparse.Namespace, rank: int, world: int) -> None:
        self.args = args
        self.rank = rank
        self.world = world
        self.culprit = rank in {int(r) for r in args.culprits.split(",") if r.strip()}
        self.rng = random.Random(rank)
        self.groups: list = []
        self.metrics_lock = threading.Lock()

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
        if self.args.fault == "queue":
            return self.prefetched(step)
        if self.args.fault == "transform":
            batch = torch.ones(16, 8) * (self.rank + 1)
            if self.faulty(step, "transform"):
                batch[5, 3] = -255.0  # a corrupt image decodes to negative pixels
            return apply_transforms(batch, step)
        return torch.ones(16, 8) * (self.rank + 1)

    def read_shard(self, step: int, out: queue.Queue) -> None:
        import torch

        if self.faulty(step, "queue"):
            time.sleep(self.args.hang)  # a shard read from storage that never returns
        out.put(torch.ones(16, 8) * (self.rank + 1))

    def prefetched(self, step: int):
        handoff: queue.Queue = queue.Queue(maxsize=1)
        threading.Thread(target=self.read_shard, args=(step, handoff), name="prefetch", daemon=True).start()
        return handoff.get(timeout=self.args.hang + 60)

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
        if self.faulty(step, "segv"):
            ctypes.string_at(0)  # a native extension reading a null pointer
        if self.faulty(step, "term"):
            subprocess.run(["kill", "-TERM", str(os.getpid())], check=False)
            time.sleep(5)  # the signal arrives from the other process
        if self.args.fault == "deep":
            if self.faulty(step, "deep"):
                batch = batch.clone()
                batch[2, 1] = float("nan")
            batch = batch + model_forward(batch, step)
        straggling = self.culprit and self.args.fault == "straggler"
        compute = self.args.step_time * (self.args.slow_factor if straggling else 1.0)
        end = time.monotonic() + compute + (self.args.slow if straggling else 0.0)
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
        if self.faulty(step, "exit1"):
            sys.exit(1)  # a guard that gives up without a word
        if self.faulty(step, "subproc"):
            self.upload_checkpoint()

    def upload_checkpoint(self) -> None:
        # an upload tool that hangs: the rank waits for its child
        subprocess.run([sys.executable, "-c", f"import time; time.sleep({self.args.hang})"],
                       preexec_fn=die_with_parent, check=False)

    def flush_metrics(self) -> None:
        with self.metrics_lock:
            time.sleep(self.args.hang)  # a metrics push to a server that never answers

    def log_metrics(self, step: int) -> None:
        if self.faulty(step, "stall"):
            time.sleep(self.args.hang)  # a blocking metrics call mid-step
        if self.faulty(step, "lock"):
            threading.Thread(target=self.flush_metrics, name="metrics-flush", daemon=True).start()
            time.sleep(0.2)
            with self.metrics_lock:  # waits for the flush thread
                pass

    def extra_collectives(self, step: int) -> None:
        import torch
        import torch.distributed as dist

        if self.faulty(step, "extra"):
            dist.all_reduce(torch.zeros(1))  # a metric only this rank reduces
        if self.args.fault == "p2p":
            self.exchange(step)
        if self.args.fault == "skipbarrier" and not self.faulty(step, "skipbarrier"):
            dist.barrier()

    def exchange(self, step: int) -> None:
        """Ranks 2k and 2k+1 swap a halo; the even one sends first, unless it is a culprit at --at."""
        import torch
        import torch.distributed as dist

        partner = self.rank ^ 1
        if partner >= self.world:
            return
        out, into = torch.full((8,), float(self.rank)), torch.empty(8)
        if self.rank % 2 == 0 and not self.faulty(step, "p2p"):
            dist.send(out, partner)
            dist.recv(into, partner)
        else:
            dist.recv(into, partner)
            dist.send(out, partner)

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
        self.log_metrics(step)
        self.extra_collectives(step)
        self.sync_buffers(step)
        loss = torch.tensor([float(grad.sum())])
        dist.all_reduce(loss)
        log.info("step %d loss %.3f (%.2f s)", step, loss.item() / self.world, time.monotonic() - started)
        return True

    def run(self) -> int:
        import torch.distributed as dist

        if self.args.fault == "preinit":
            load_config(broken=self.culprit)
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
