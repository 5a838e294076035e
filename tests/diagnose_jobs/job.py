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

Variants added for the third held-out set (tests/fixtures/diagnose-jobs/held-out-3/); the
ones above are unchanged by them:

  hookraise   every rank runs autograd (a loss, backward) with a gradient hook; the culprit's
              hook raises (RuntimeError: gradient clipping sees an inf) inside backward()
  autograd    a custom autograd Function (ScaledGelu) whose backward raises on the culprit
  keyerror    the batch comes from a Dataset's __getitem__; the culprit's index map lacks the
              sample of step --at (KeyError)
  shortdata   the culprit's shard holds --at batches: its loop ends, it logs that training is
              done and calls destroy_process_group (no final barrier) while its peers wait
  osexit      a loader worker thread calls os._exit(2): the process ends, nothing printed
  threaddied  a decode thread raises (uncaught: "Exception in thread") and the main thread
              waits forever (no timeout) for the batch it would have handed over
  pollloop    the rank polls for a file that never appears (time.sleep in a loop), outside any
              collective
  fifo        torch.save of the checkpoint to a path that is a FIFO nobody reads (blocks in open)
  wrongsrc    every step a config broadcast from rank 0; at --at the culprit calls it with
              itself as the source (its "is main" test is wrong), same size
  gatherlen   every step an all_gather of a metric; at --at the culprit's output list has one
              tensor fewer than the world size
  rsmix       every step the loss is reduced with reduce_scatter_tensor; at --at the culprit
              uses all_reduce
  twobarrier  every step a barrier; at --at the culprit calls barrier twice
  grouporder  two groups of all ranks (grads, metrics) made with new_group; the culprit makes
              them in the other order, then every step each rank all_reduces on its "grads"
  nthstraggler  the culprit's step is --slow s slower on every --slow-every-th step (progressing)
  uneven      healthy: rank r's compute is --step-time * (1 + --uneven * r) every step

Variants added for the fourth held-out set (tests/fixtures/diagnose-jobs/held-out-4/); the
ones above are unchanged by them:

  anomaly     every rank's loss backward runs under torch.autograd.detect_anomaly(); the
              culprit's batch makes a sqrt of negatives, and autograd raises (SqrtBackward0
              returned nan) inside backward()
  cassert     a native kernel's assertion fails on the culprit (libc __assert_fail: the
              assertion message, then SIGABRT)
  cfgexit     the culprit's checkpoint-time config check fails: sys.exit("config check
              failed ..."), the message on stderr, exit status 1
  recursion   the culprit's metrics dict holds itself; flattening it for the logger raises
              RecursionError
  workerraise the batch comes from a torch DataLoader with one forked worker process; the
              culprit's dataset raises ValueError in the worker for sample --at, re-raised in
              the rank's main process when it reaches that batch
  workerkilled  as workerraise, but the culprit's worker is SIGKILLed at sample --at (as the
              OOM killer does): "DataLoader worker (pid N) is killed by signal"
  brokenpool  every rank tokenizes through a ProcessPoolExecutor of one forked worker; the
              culprit's worker dies (os._exit) at --at: BrokenProcessPool in the rank
  swallow     the culprit's evaluation manifest, read at the start of step --at, is missing: it
              logs the exception (traceback and all), stops training and exits 0; its peers wait
  lingering   every rank runs a non-daemon metrics-uploader thread; the culprit's metric
              code raises IndexError at --at: the traceback is printed, the main thread is
              gone, the uploader keeps the process alive
  relock      the culprit's metrics callback takes the (non-reentrant) metrics lock its
              caller already holds: the main thread deadlocks on itself
  sockrecv    the culprit asks a local sidecar service for the learning rate; it accepts
              the connection and never answers (socket recv, no timeout)
  poolhang    every rank tokenizes through a multiprocessing.Pool of one forked worker; the
              culprit's worker dies (os._exit) at --at and pool.map waits forever
  ckptlock    every step each rank writes its checkpoint under an flock, then all ranks meet
              in dist.monitored_barrier; the culprit leaked the lock at --at - 1 and blocks
              in flock at --at
  evalonly    the culprits' "is main" test is true (local rank 0 of a node of 4): at --at
              only they evaluate, gathering predictions with all_gather_object
  condreduce  every step an inf-check flag is all_reduced, but the culprit skips that
              all_reduce at --at (its batch was empty: "nothing to unscale")
  rsdtype     every step a metrics vector goes through reduce_scatter_tensor; at --at the
              culprit's is float64 (the others' float32)
  a2asplit    every step tokens are exchanged with all_to_all_single, 2 per rank; at --at
              the culprit routes 3 tokens to its next rank (its input splits differ)
  ckptpause   healthy: every --slow-every-th step each rank pauses --slow s in a
              (synchronous) checkpoint, all at once
  lograte     healthy: rank r logs its step line every (1 + r mod 4) steps only
  warmup      healthy: every rank's first --at steps take --slow s more (warm-up)
  accum       healthy: gradient accumulation, the gradient and loss are reduced every
              --slow-every-th step only

Variants added for the fifth held-out set (tests/fixtures/diagnose-jobs/held-out-5/); the
ones above are unchanged by them:

  sigint      the culprit gets SIGINT from another process (a Ctrl-C meant for someone else,
              `kill -INT pid`): KeyboardInterrupt in its main thread, its traceback printed
  preempt     every rank installs a SIGTERM handler (preemption); the culprit is sent SIGTERM
              at --at: its handler logs that it checkpoints and leaves, and it exits 0
  memerr      the culprit sizes its prefetch buffer from a corrupt shard header: bytearray of
              tens of TiB raises MemoryError
  eoferror    the culprit finds its checkpoint folder taken and asks `overwrite? [y/N]` with
              input(): its stdin is /dev/null, EOFError
  importerr   the culprit's optimizer step takes the "fused" path, whose extension module its
              node lacks: ModuleNotFoundError
  collatediv  the batch goes through a collate function that averages the samples' lengths;
              the culprit's batch at --at is empty: ZeroDivisionError
  permckpt    the culprit's checkpoint folder is on a path it may not create (/sys/...):
              PermissionError from os.makedirs
  pipefail    every rank pipes its metrics to a logger child process; the culprit's child has
              exited at --at: BrokenPipeError writing to it
  debugwait   a debugging hook left in on the culprit: it listens and waits in accept() for a
              debugger to attach (as debugpy.wait_for_client does), outside any collective
  backoff     the culprit cannot reach a metadata service (connection refused) and retries
              with exponential back-off (1, 2, 4, ... s, a warning per try), for ever
  eventwait   every step an EMA thread updates the weights and sets an Event the main thread
              waits for; the culprit's code path does not start the thread at --at: wait()
              with no timeout
  abba        the culprit's main thread holds the state lock and wants the I/O lock while its
              checkpoint-I/O thread holds the I/O lock and wants the state lock (a deadlock)
  earlystop   the culprit's early stopping looks at its own validation loss (not reduced): at
              --at it stops and waits in the final barrier while the others go on training
  worldbarrier  each node of half the ranks meets every step in a barrier on its own group
              (new_group); at --at the culprit calls the barrier without its group (the world)
  extraparam  the culprit's model has one parameter more (a bias its config enables): from
              --at its flattened gradient (all_reduced as one bucket) has 13 elements, not 12
  objlist     every step rank 0 broadcasts the run's config with broadcast_object_list; at
              --at the culprit passes a list of 2 objects where the others pass 3
  ncclbackend the culprit picks the "nccl" backend (its check thinks it has a GPU): this
              torch has no NCCL; the others wait in the rendezvous
  evalall     healthy: every 3rd step every rank evaluates (--slow s), then all_reduces the
              accuracy
  warnburst   healthy: from --at the culprit warns in bursts (30 warnings every 3rd step)
  asyncckpt   healthy: every 4th step each rank saves its checkpoint in a background thread
              (--slow s) while training goes on
  noisywarn   healthy: every rank warns (a FutureWarning, a logged warning) every step and the
              job finishes
  slowinit    healthy: the culprit starts --slow s late (before init_process_group); the
              others wait in the rendezvous, then all train

Variants added for the sixth held-out set (tests/fixtures/diagnose-jobs/held-out-6/); the
ones above are unchanged by them:

  ckptrecompute every rank runs a block under torch.utils.checkpoint (non-reentrant); the
              culprit's packing length changes between the forward and backward's
              recomputation at --at: torch raises CheckpointError (recomputed metadata differ)
  futureraise every rank decodes its batch's record header on a ThreadPoolExecutor thread and
              takes future.result(); the culprit's record is truncated at --at: struct.error
              raised in the worker thread, re-raised in the main thread by result()
  argparsehelp the culprit's evaluation hook parses its options with argparse from a string
              that ends in --help (a launcher script's stray flag): usage printed, exit 0
  sigbus      every rank memory-maps its shard file; the culprit's file is truncated under it
              at --at (another process rewrites the shard): SIGBUS reading the mapping
  doublefree  the culprit's native tokenizer frees a buffer twice: glibc's "free(): double
              free detected", then SIGABRT
  alarm       the culprit's remote-read helper arms signal.alarm(1) as a timeout, on a code
              path that never installed its SIGALRM handler, and the read takes longer:
              the process is killed by SIGALRM ("Alarm clock"), nothing printed
  badckpt     at --at the culprit rolls back to its last checkpoint, which is half written:
              torch.load fails, re-raised as "rollback ... failed" (a chained traceback)
  reinit      at --at the culprit's metrics push fails; its recovery path calls
              init_process_group again without destroying the group: ValueError
  sighandler  every rank installs a SIGUSR1 handler that pushes its stats (as trainers do on
              "dump stats"); the culprit gets SIGUSR1 from another process at --at and its
              handler blocks (time.sleep waiting on the stats service) in the main thread
  mpqueue     every rank gets a batch id from a producer process over a multiprocessing.Queue;
              the culprit's producer raises at --at (its traceback printed by
              multiprocessing) and the rank waits in queue.get() with no timeout
  pipefull    every rank pipes its metrics to a logger child; at --at the culprit's child
              stops reading and the rank writes a 1 MiB histogram: blocked in write on the
              full pipe
  gilhang     at --at the culprit calls a native function that sleeps holding the GIL
              (ctypes.PyDLL: a driver query that never returns)
  evalevery   every rank evaluates under torch.no_grad() every N steps and meets the others in
              a dist.barrier() after it; the culprit's N is --at + 1, the others' --at + 2:
              at --at it waits in the eval barrier while the others are in the step's
              collectives
  bucketorder every step the gradient goes as two buckets (12 and 5 elements) through
              all_reduce; from --at the culprit reduces them in the other order (its
              parameters were registered in another order)
  agitsize    every step the ranks' metric vectors are gathered with all_gather_into_tensor
              (4 each); from --at the culprit's has 5 (one metric more), its output 5 x world
  scattersize every step rank 0 scatters 8 sample ids to each rank; at --at the culprit's
              receive buffer holds 6 (its micro-batch config differs)
  fileinit    the culprit's init_method is file:// (a shared-file-system rendezvous left in its
              config) where the others use env://: each side waits for the other
  slowloader  healthy: the culprit's data loader takes --slow s a step (a slow file system),
              about twice the others' step; it keeps up
  finalckpt   healthy: training ends after step --at; the culprit (rank 0) writes the final
              checkpoint in chunks for --slow s while the others wait in the final barrier
  loaderwarm  healthy: every rank's first batch takes --slow + 0.3 * rank s (the loader's
              shuffle buffer fills), then steps are fast
  lastbatch   healthy: the last step's batch is smaller and uneven across ranks; the sample
              counts are all_reduced to weight the loss; the job finishes
  clipspike   healthy: every rank clips its gradient norm; on some steps (random per rank) the
              norm spikes, a warning is logged and the step takes 0.5 s more

Before its fault a rank writes MARK/rank<R>.json ({rank, pid, step}); every rank writes
it at the start too (step -1), so the harness knows the pids. --timeout is the collective
timeout; --record wraps main in torchelastic's @record.
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import importlib
import json
import logging
import multiprocessing
import os
import queue
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from datetime import timedelta

log = logging.getLogger("train")

# held-out-5's variants by the part of the step they live in
HELD_OUT_5_COMPUTE = ("sigint", "memerr", "importerr", "noisywarn")
HELD_OUT_5_METRICS = ("pipefail", "debugwait", "backoff", "eventwait", "abba", "warnburst")
# held-out-6's
HELD_OUT_6_LOAD = ("mpqueue", "slowloader", "loaderwarm", "lastbatch")
HELD_OUT_6_COMPUTE = ("ckptrecompute", "futureraise", "sigbus", "doublefree", "alarm", "gilhang", "sighandler",
                      "clipspike")
HELD_OUT_6_METRICS = ("argparsehelp", "badckpt", "reinit", "pipefull")
HELD_OUT_6_COLLECTIVES = ("evalevery", "bucketorder", "agitsize", "scattersize", "lastbatch")


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
    ap.add_argument("--slow-every", type=int, default=0, help="nthstraggler: slow on every Nth step")
    ap.add_argument("--uneven", type=float, default=0.0, help="uneven: rank r computes (1 + UNEVEN * r) times as long")
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


class ClipGradient:
    """A gradient hook that refuses an infinite gradient (as a clipping guard does)."""

    def __init__(self, broken: bool, step: int) -> None:
        self.broken = broken
        self.step = step

    def __call__(self, grad):
        import torch

        if self.broken:
            grad = grad * float("inf")
        if not bool(torch.isfinite(grad).all()):
            raise RuntimeError(f"clip_grad: non-finite gradient norm at step {self.step}")
        return grad


def scaled_gelu_function():
    """A custom autograd Function, made when first needed (torch is imported lazily)."""
    import torch

    class ScaledGelu(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, broken: bool):
            ctx.save_for_backward(x)
            ctx.broken = broken
            return torch.nn.functional.gelu(x) * 0.5

        @staticmethod
        def backward(ctx, grad_out):
            (x,) = ctx.saved_tensors
            if ctx.broken:
                raise FloatingPointError("ScaledGelu.backward: overflow in the gelu derivative")
            return grad_out * 0.5 * torch.sigmoid(1.702 * x), None

    return ScaledGelu


class ShardDataset:
    """A map-style dataset: sample ids of the rank's shard -> tensors."""

    def __init__(self, rank: int, missing: int | None) -> None:
        import torch

        self.index = {f"sample-{rank}-{i:05d}": torch.ones(16, 8) * (rank + 1) for i in range(64)}
        self.rank = rank
        if missing is not None:
            del self.index[self.key(missing)]  # a sample the index file lists but the shard lacks

    def key(self, i: int) -> str:
        return f"sample-{self.rank}-{i:05d}"

    def __getitem__(self, i: int):
        return self.index[self.key(i)]


def die_with_parent() -> None:
    """A child that the kernel kills when its parent (the rank) dies: nothing outlives the job."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def collate_batch(samples: list):
    """Stack a batch's samples, after checking their mean length (a padding heuristic)."""
    import torch

    # an empty batch divides by zero here
    mean_len = sum(s.shape[0] for s in samples) / len(samples)
    return torch.cat(samples)[: int(mean_len * 4)]


class StopTraining(Exception):
    """A rank that decided to stop training early (it returns 0 from main)."""


def flatten_metrics(metrics: dict, prefix: str = "") -> dict:
    """{"a": {"b": 1}} -> {"a/b": 1}, as a metrics logger flattens nested metrics."""
    flat: dict = {}
    for key, value in metrics.items():
        if isinstance(value, dict):
            flat.update(flatten_metrics(value, f"{prefix}{key}/"))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def tokenize(step: int, crash: bool) -> int:
    """A tokenizer pool's task; a crashing one ends its worker process without a word."""
    if crash:
        os._exit(3)
    return step * 7


class RecordDataset:
    """A map-style dataset read by a DataLoader worker process; sample `bad` is broken."""

    def __init__(self, rank: int, length: int, bad: int, how: str) -> None:
        self.rank, self.length, self.bad, self.how = rank, length, bad, how

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int):
        import torch

        if i == self.bad:
            self.broken_record(i)
        return torch.ones(16, 8) * (self.rank + 1)

    def broken_record(self, i: int) -> None:
        if self.how == "workerraise":
            raise ValueError(f"record {i} of shard {self.rank}: truncated protobuf (expected 4096 bytes, got 1733)")
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGKILL)  # the OOM killer takes the worker



def produce_batch_ids(requests, batches, rank: int, bad: int) -> None:
    """The batch producer process: a batch id per request; sample `bad` of its shard is corrupt."""
    die_with_parent()  # a forked child outlives a SIGKILLed rank otherwise (torchrun's ranks)
    while True:
        step = requests.get()
        if step == bad:
            raise OSError(f"shard {rank}: record {step} checksum mismatch (crc32 0x1f3a9c2e != 0x00000000)")
        batches.put(step * 1000 + rank)


def unpack_record_header(record: bytes) -> tuple:
    """A record's header: a length and a crc, 8 bytes."""
    import struct

    return struct.unpack("<II", record)


def native_tokenizer_release() -> None:
    """The tokenizer extension's cleanup frees its buffer twice (a native bug): glibc aborts."""
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    buffer = libc.malloc(256)
    libc.free(buffer)
    libc.free(buffer)


class Job:
    def __init__(self, args: argparse.Namespace, rank: int, world: int) -> None:
        self.args = args
        self.rank = rank
        self.world = world
        self.culprit = rank in {int(r) for r in args.culprits.split(",") if r.strip()}
        self.rng = random.Random(rank)
        self.groups: list = []
        self.metrics_lock = threading.Lock()
        self.dataset = None
        self.grads_group = None
        self.loader = None       # held-out-4: a DataLoader iterator, a tokenizer pool
        self.pool = None
        self.uploader: threading.Thread | None = None
        self.leaked_lock = None
        self.metrics_child: subprocess.Popen | None = None  # held-out-5
        self.producer = None     # held-out-6: the batch producer process and its queue
        self.shard = None        # held-out-6: the memory-mapped shard
        self.seq_len = 4

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
        if self.args.fault in ("keyerror", "osexit", "threaddied"):
            return self.load_batch_held_out_3(step)
        if self.args.fault in ("workerraise", "workerkilled", "brokenpool", "poolhang"):
            return self.load_batch_held_out_4(step)
        if self.args.fault == "collatediv":
            return self.collated(step)
        if self.args.fault in HELD_OUT_6_LOAD:
            return self.load_batch_held_out_6(step)
        if self.args.fault == "transform":
            batch = torch.ones(16, 8) * (self.rank + 1)
            if self.faulty(step, "transform"):
                batch[5, 3] = -255.0  # a corrupt image decodes to negative pixels
            return apply_transforms(batch, step)
        return torch.ones(16, 8) * (self.rank + 1)

    def load_batch_held_out_3(self, step: int):
        if self.args.fault == "keyerror":
            if self.dataset is None:
                self.dataset = ShardDataset(self.rank, self.args.at if self.culprit else None)
            return self.dataset[step]
        if self.args.fault == "osexit":
            worker = threading.Thread(target=self.loader_worker, args=(step,), name="loader-worker-0")
            worker.start()
            worker.join()
            return self.load_batch_plain()
        return self.decoded(step)

    def load_batch_plain(self):
        import torch

        return torch.ones(16, 8) * (self.rank + 1)

    def loader_worker(self, step: int) -> None:
        if self.faulty(step, "osexit"):
            os._exit(2)  # a worker that ends the whole process, no word, no cleanup

    def decode_shard(self, step: int, out: queue.Queue) -> None:
        import torch

        if self.faulty(step, "threaddied"):
            raise UnicodeDecodeError("utf-8", b"\xff\xfe", 0, 1, f"invalid start byte in the shard's header (step {step})")
        out.put(torch.ones(16, 8) * (self.rank + 1))

    def decoded(self, step: int):
        handoff: queue.Queue = queue.Queue(maxsize=1)
        threading.Thread(target=self.decode_shard, args=(step, handoff), name=f"decode-{step}", daemon=True).start()
        return handoff.get()  # no timeout: the thread's death is never noticed

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
        if self.args.fault in ("hookraise", "autograd"):
            self.backward(step)
        if self.args.fault in ("anomaly", "cassert"):
            self.compute_held_out_4(step)
        if self.args.fault in HELD_OUT_5_COMPUTE:
            self.compute_held_out_5(step)
        if self.args.fault in HELD_OUT_6_COMPUTE:
            self.compute_held_out_6(step)
        straggling = self.culprit and self.args.fault == "straggler"
        compute = self.args.step_time * (self.args.slow_factor if straggling else 1.0)
        end = time.monotonic() + compute + (self.args.slow if straggling else 0.0) + self.extra_compute(step)
        if self.faulty(step, "busy"):
            end = time.monotonic() + self.args.hang
        x = 0
        while time.monotonic() < end:  # compute
            x += 1
        return batch[:3, :4] * 0.5

    def backward(self, step: int) -> None:
        """A loss and its backward, with a gradient hook (hookraise) or a custom Function (autograd)."""
        import torch

        weight = torch.full((8, 4), 0.1, requires_grad=True)
        x = torch.ones(16, 8) * (self.rank + 1)
        broken = self.faulty(step, "hookraise", "autograd")
        if self.args.fault == "hookraise":
            weight.register_hook(ClipGradient(broken, step))
            out = x @ weight
        else:
            out = scaled_gelu_function().apply(x @ weight, broken)
        out.sum().backward()

    def extra_compute(self, step: int) -> float:
        """Seconds more than --step-time: the periodic straggler's, an uneven rank's."""
        if self.args.fault == "nthstraggler" and self.culprit and self.args.slow_every > 0:
            return self.args.slow if step % self.args.slow_every == self.args.slow_every - 1 else 0.0
        if self.args.fault == "uneven":
            return self.args.step_time * self.args.uneven * self.rank
        if self.args.fault == "warmup" and step < self.args.at:
            return self.args.slow
        return 0.0

    def reduce_gradients(self, grad, step: int) -> None:
        import torch
        import torch.distributed as dist

        if self.faulty(step, "size"):
            grad = torch.ones(4, 5)
        if self.faulty(step, "small"):
            grad = torch.ones(2, 3)
        if self.faulty(step, "dtype"):
            grad = grad.to(torch.float64)
        if self.args.fault == "extraparam":
            grad = self.flat_gradient(grad, step)
        if self.faulty(step, "op"):
            out = [torch.empty_like(grad) for _ in range(self.world)]
            dist.all_gather(out, grad)
            return
        if self.args.fault == "grouporder":
            dist.all_reduce(grad, group=self.grads_group)
            return
        if not self.syncs_gradients(step):
            return  # an accumulation step: no_sync
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
        if self.faulty(step, "pollloop"):
            self.wait_for_checkpoint_slot()
        if self.faulty(step, "fifo"):
            self.write_checkpoint_to_fifo(step)
        if self.args.fault in ("cfgexit", "ckptlock", "ckptpause"):
            self.save_checkpoint_held_out_4(step)
        if self.args.fault in ("preempt", "eoferror", "permckpt", "asyncckpt"):
            self.save_checkpoint_held_out_5(step)

    def wait_for_checkpoint_slot(self) -> None:
        # polls for a lock file another service should write: it never does (not busy: sleeps)
        ready = os.path.join(self.args.mark or "/nonexistent", f"slot-ready-{self.rank}")
        deadline = time.monotonic() + self.args.hang
        while not os.path.exists(ready) and time.monotonic() < deadline:
            time.sleep(0.5)

    def write_checkpoint_to_fifo(self, step: int) -> None:
        import tempfile

        import torch

        folder = self.args.mark or tempfile.mkdtemp(prefix="ckpt-")
        path = os.path.join(folder, f"ckpt-rank{self.rank}-step{step}.pt")
        os.mkfifo(path)  # a mount that swallows writes: open() for writing waits for a reader
        torch.save({"step": step, "weights": torch.ones(4)}, path)

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
        if self.args.fault in ("recursion", "relock", "sockrecv", "lingering"):
            self.log_metrics_held_out_4(step)
        if self.args.fault in HELD_OUT_5_METRICS:
            self.log_metrics_held_out_5(step)
        if self.args.fault in HELD_OUT_6_METRICS:
            self.log_metrics_held_out_6(step)

    def extra_collectives(self, step: int) -> None:
        import torch
        import torch.distributed as dist

        if self.faulty(step, "extra"):
            dist.all_reduce(torch.zeros(1))  # a metric only this rank reduces
        if self.args.fault == "p2p":
            self.exchange(step)
        if self.args.fault == "skipbarrier" and not self.faulty(step, "skipbarrier"):
            dist.barrier()
        self.extra_collectives_held_out_3(step)
        if self.args.fault in ("evalonly", "condreduce", "rsdtype", "a2asplit"):
            self.extra_collectives_held_out_4(step)
        if self.args.fault in ("worldbarrier", "objlist", "evalall"):
            self.extra_collectives_held_out_5(step)
        if self.args.fault in HELD_OUT_6_COLLECTIVES:
            self.extra_collectives_held_out_6(step)

    def extra_collectives_held_out_3(self, step: int) -> None:
        import torch
        import torch.distributed as dist

        if self.args.fault == "wrongsrc":
            config = torch.zeros(6)
            dist.broadcast(config, src=self.rank if self.faulty(step, "wrongsrc") else 0)
        if self.args.fault == "gatherlen":
            n = self.world - 1 if self.faulty(step, "gatherlen") else self.world
            dist.all_gather([torch.empty(2) for _ in range(n)], torch.ones(2) * self.rank)
        if self.args.fault == "twobarrier":
            dist.barrier()
            if self.faulty(step, "twobarrier"):
                dist.barrier()  # a second one in a helper the others do not call

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

    def reduce_loss_scattered(self, loss, step: int) -> None:
        import torch
        import torch.distributed as dist

        if self.faulty(step, "rsmix"):
            dist.all_reduce(loss)  # an old code path on this rank
            return
        full = loss.repeat(self.world)
        part = torch.empty(1)
        dist.reduce_scatter_tensor(part, full)
        loss.copy_(part)

    def train_step(self, step: int) -> bool:
        import torch
        import torch.distributed as dist

        started = time.monotonic()
        if step == self.args.at and self.culprit:
            self.mark(step)
        if self.faulty(step, "swallow"):
            self.evaluate_from_manifest(step)  # the step's evaluation, before its batch
        if self.faulty(step, "shortdata"):
            log.info("rank %d: epoch done after %d steps (its shard is shorter)", self.rank, step)
            return False
        if self.faulty(step, "earlystop"):
            log.info("rank %d: validation loss has not improved for 3 evaluations: early stopping at step %d",
                     self.rank, step)
            return False
        if self.args.fault == "finalckpt" and step == self.args.at:
            log.info("rank %d: reached max_steps (%d), finishing", self.rank, step)
            return False
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
        if self.args.fault == "rsmix":
            self.reduce_loss_scattered(loss, step)
        elif self.syncs_gradients(step):
            dist.all_reduce(loss)
        if self.logs_step(step):
            log.info("step %d loss %.3f (%.2f s)", step, loss.item() / self.world, time.monotonic() - started)
        return True

    def run(self) -> int:
        import torch.distributed as dist

        if self.args.fault == "preinit":
            load_config(broken=self.culprit)
        self.before_init_held_out_5()
        self.before_init_held_out_6()
        dist.init_process_group(self.backend(), timeout=timedelta(seconds=self.args.timeout),
                                **self.init_method())
        log.info("rank %d of %d initialized (gloo, pid %d)", self.rank, dist.get_world_size(), os.getpid())
        if self.args.fault == "worldbarrier":
            half = self.world // 2
            self.groups = [dist.new_group(list(range(half))), dist.new_group(list(range(half, self.world)))]
        if self.args.fault == "group":
            half = self.world // 2
            self.groups = [dist.new_group(list(range(half))), dist.new_group(list(range(half, self.world)))]
        if self.args.fault == "grouporder":
            self.make_groups_in_order()
        self.mark(-1)
        for step in range(self.args.steps):
            if not self.train_step(step):
                if self.args.fault in ("earlystop", "finalckpt"):
                    break  # to the final barrier, as a finished run does
                if self.args.fault == "shortdata":
                    log.info("training done")
                    dist.destroy_process_group()
                return 0
        if self.args.fault == "finalckpt" and self.culprit:
            self.save_final_checkpoint()
        dist.barrier()
        log.info("training done")
        dist.destroy_process_group()
        return 0


    def make_groups_in_order(self) -> None:
        import torch.distributed as dist

        everyone = list(range(self.world))
        if self.culprit:  # its setup code builds the metrics group first
            _metrics = dist.new_group(everyone)
            self.grads_group = dist.new_group(everyone)
        else:
            self.grads_group = dist.new_group(everyone)
            _metrics = dist.new_group(everyone)

    # ------------------------------------------------------------ held-out-4's variants

    def syncs_gradients(self, step: int) -> bool:
        """accum: only every --slow-every-th step reduces (the others accumulate, no_sync)."""
        if self.args.fault != "accum" or self.args.slow_every <= 1:
            return True
        return step % self.args.slow_every == self.args.slow_every - 1

    def logs_step(self, step: int) -> bool:
        """lograte: rank r logs its step line every (1 + r mod 4) steps."""
        return self.args.fault != "lograte" or step % (1 + self.rank % 4) == 0

    def load_batch_held_out_4(self, step: int):
        if self.args.fault in ("workerraise", "workerkilled"):
            return self.next_from_loader(step)
        self.tokenize_text(step)
        return self.load_batch_plain()

    def next_from_loader(self, step: int):
        import torch

        if self.loader is None:
            dataset = RecordDataset(self.rank, self.args.steps, self.args.at if self.culprit else -1, self.args.fault)
            self.loader = iter(torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=1,
                                                           multiprocessing_context="fork"))
        return next(self.loader)

    def tokenize_text(self, step: int) -> None:
        crash = self.faulty(step, "brokenpool", "poolhang")
        context = multiprocessing.get_context("fork")
        if self.args.fault == "brokenpool":
            from concurrent.futures import ProcessPoolExecutor

            if self.pool is None:
                self.pool = ProcessPoolExecutor(1, mp_context=context)
            self.pool.submit(tokenize, step, crash).result()  # BrokenProcessPool if its worker died
            return
        if self.pool is None:
            self.pool = context.Pool(1)
        self.pool.starmap(tokenize, [(step, crash)])  # waits forever if its worker died

    def compute_held_out_4(self, step: int) -> None:
        if self.args.fault == "anomaly":
            self.loss_backward_checked(step)
        elif self.faulty(step, "cassert"):
            self.fused_kernel_check(step)

    def loss_backward_checked(self, step: int) -> None:
        import torch

        with torch.autograd.detect_anomaly():  # the training script debugs NaNs on every rank
            weight = torch.full((8, 4), 0.1, requires_grad=True)
            x = torch.ones(16, 8) * (self.rank + 1)
            shift = 100.0 if self.faulty(step, "anomaly") else 0.0  # a batch whose variance came out negative
            torch.sqrt(x @ weight - shift + 1.0).sum().backward()

    def fused_kernel_check(self, step: int) -> None:
        assert_fail = getattr(ctypes.CDLL(None), "__assert_fail")  # getattr: no name mangling in a class
        assert_fail(b"n_tokens % block_size == 0", b"csrc/fused_attention.cpp", 212,
                           b"void fused_attention_forward(const Tensor&)")

    def save_checkpoint_held_out_4(self, step: int) -> None:
        import torch.distributed as dist

        if self.faulty(step, "cfgexit"):
            sys.exit(f"config check failed at step {step}: micro_batch_size 12 does not divide "
                     f"global_batch_size 100 / data_parallel_size {self.world} (rank {self.rank})")
        if self.args.fault == "ckptlock":
            self.write_checkpoint_locked(step)
            dist.monitored_barrier(timeout=timedelta(seconds=self.args.timeout))
        if self.args.fault == "ckptpause" and self.args.slow_every > 0 and \
                step % self.args.slow_every == self.args.slow_every - 1:
            log.info("rank %d: saving checkpoint at step %d", self.rank, step)
            time.sleep(self.args.slow)  # a synchronous checkpoint: every rank at once
            log.info("rank %d: checkpoint saved", self.rank)

    def write_checkpoint_locked(self, step: int) -> None:
        import tempfile

        path = os.path.join(self.args.mark or tempfile.gettempdir(), f"ckpt-rank{self.rank}.lock")
        f = open(path, "w")
        fcntl.flock(f, fcntl.LOCK_EX)  # blocks while an earlier open of the file holds the lock
        f.write(f"step {step}\n")
        f.flush()
        if self.culprit and step == self.args.at - 1:
            self.leaked_lock = f  # an error path that returns without closing: the lock stays held
            return
        fcntl.flock(f, fcntl.LOCK_UN)
        f.close()

    def log_metrics_held_out_4(self, step: int) -> None:
        metrics = {"step": step, "loss": {"train": 0.5, "scale": 1.0}}
        if self.args.fault == "recursion":
            if self.faulty(step, "recursion"):
                metrics["loss"]["parent"] = metrics  # a metrics dict that holds itself
            flatten_metrics(metrics)
        elif self.args.fault == "relock":
            with self.metrics_lock:
                self.emit_metrics(metrics, step)
        elif self.faulty(step, "sockrecv"):
            self.query_lr_service(step)
        elif self.args.fault == "lingering":
            self.upload_in_background()
            if self.faulty(step, "lingering"):
                history = [0.5] * step
                metrics["loss"]["delta"] = history[step] - history[step - 1]  # IndexError

    def emit_metrics(self, metrics: dict, step: int) -> None:
        if self.faulty(step, "relock"):
            self.on_flush(metrics)  # a callback that takes the lock its caller holds

    def on_flush(self, metrics: dict) -> None:
        with self.metrics_lock:
            metrics.clear()

    def query_lr_service(self, step: int) -> None:
        # a sidecar that accepts the connection (the kernel's backlog) and never answers
        sidecar = socket.socket()
        sidecar.bind(("127.0.0.1", 0))
        sidecar.listen(1)
        conn = socket.create_connection(sidecar.getsockname())
        conn.sendall(f"GET /lr?step={step} HTTP/1.0\r\n\r\n".encode())
        conn.recv(4096)  # no timeout

    def upload_in_background(self) -> None:
        if self.uploader is None:
            self.uploader = threading.Thread(target=self.upload_loop, name="metrics-uploader")  # not a daemon
            self.uploader.start()

    def upload_loop(self) -> None:
        while True:  # uploads forever; nobody stops it when the main thread dies
            time.sleep(1.0)

    def evaluate_from_manifest(self, step: int) -> None:
        manifest = os.path.join(self.args.mark or "/nonexistent", f"eval-manifest-{step}.json")
        try:
            with open(manifest) as f:
                json.load(f)
        except OSError:
            log.exception("rank %d: evaluation manifest unreadable; stopping training early", self.rank)
            raise StopTraining from None

    def extra_collectives_held_out_4(self, step: int) -> None:
        import torch
        import torch.distributed as dist

        if self.faulty(step, "evalonly"):
            self.evaluate(step)
        if self.args.fault == "condreduce":
            found_inf = torch.zeros(1)
            if not self.faulty(step, "condreduce"):  # the culprit's batch was empty: nothing to unscale
                dist.all_reduce(found_inf)
        if self.args.fault == "rsdtype":
            dtype = torch.float64 if self.faulty(step, "rsdtype") else torch.float32
            part = torch.empty(2, dtype=dtype)
            dist.reduce_scatter_tensor(part, torch.ones(2 * self.world, dtype=dtype))
        if self.args.fault == "a2asplit":
            self.route_tokens(step)

    def evaluate(self, step: int) -> None:
        import torch.distributed as dist

        predictions: list = [None] * self.world
        dist.all_gather_object(predictions, {"rank": self.rank, "step": step, "accuracy": 0.5})
        log.info("rank %d: eval at step %d done", self.rank, step)

    def route_tokens(self, step: int) -> None:
        import torch
        import torch.distributed as dist

        splits = [2] * self.world
        if self.faulty(step, "a2asplit"):
            splits[(self.rank + 1) % self.world] = 3  # one token more to the next rank's expert
        tokens = torch.ones(sum(splits))
        received = torch.empty(2 * self.world)
        dist.all_to_all_single(received, tokens, output_split_sizes=[2] * self.world, input_split_sizes=splits)

    # ------------------------------------------------------------ held-out-5's variants

    def backend(self) -> str:
        if self.args.fault == "ncclbackend" and self.culprit:
            return "nccl"  # its "do I have a GPU" check is wrong: this torch has no NCCL
        return "gloo"

    def before_init_held_out_5(self) -> None:
        if self.args.fault == "sigint":
            # Python's own Ctrl-C handler, even where a shell started the job with SIGINT ignored
            signal.signal(signal.SIGINT, signal.default_int_handler)
        if self.args.fault == "preempt":
            signal.signal(signal.SIGTERM, self.on_preemption)
        if self.args.fault == "slowinit" and self.culprit:
            log.info("rank %d: loading the tokenizer and the shard index before joining", self.rank)
            time.sleep(self.args.slow)  # a slow file system on its node: it joins late

    def on_preemption(self, signum, frame) -> None:
        log.warning("rank %d: SIGTERM received (preemption): checkpointing and exiting", self.rank)
        sys.exit(0)  # a "graceful" exit: status 0, its process group not destroyed

    def collated(self, step: int):
        import torch

        n = 0 if self.faulty(step, "collatediv") else 4  # the culprit's bucket came out empty
        samples = [torch.ones(4, 8) * (self.rank + 1) for _ in range(n)]
        return collate_batch(samples)

    def compute_held_out_5(self, step: int) -> None:
        if self.faulty(step, "sigint"):
            subprocess.run(["kill", "-INT", str(os.getpid())], check=False)
            # the signal arrives from the other process
            time.sleep(5)
        if self.faulty(step, "memerr"):
            header_len = (1 << 44) * self.world  # a corrupt shard header's record length
            self.prefetch_buffer = bytearray(header_len)
        if self.faulty(step, "importerr"):
            # its node's image lacks the extension
            fused = importlib.import_module("fused_adam_ext")
            fused.step()
        if self.args.fault == "noisywarn":
            warnings.warn("torch.cuda.amp.GradScaler(args...) is deprecated. Please use "
                          "torch.amp.GradScaler('cuda', args...) instead.", FutureWarning, stacklevel=1)
            log.warning("rank %d: lr_scheduler.step() called before optimizer.step() at step %d", self.rank, step)

    def flat_gradient(self, grad, step: int):
        """extraparam: the gradients flattened into one bucket; the culprit's has its extra bias."""
        import torch

        flat = grad.flatten()
        if self.culprit and step >= self.args.at:
            flat = torch.cat([flat, torch.zeros(1)])  # the bias only its config enables
        return flat

    def save_checkpoint_held_out_5(self, step: int) -> None:
        folder = os.path.join(self.args.mark or "/tmp", f"checkpoints-rank{self.rank}")
        if self.faulty(step, "preempt"):
            subprocess.run(["kill", "-TERM", str(os.getpid())], check=False)  # the scheduler's notice
            time.sleep(5)
        if self.faulty(step, "eoferror"):
            answer = input(f"rank {self.rank}: checkpoint folder {folder} exists; overwrite? [y/N] ")
            log.info("rank %d: answered %r", self.rank, answer)
        if self.faulty(step, "permckpt"):
            folder = f"/sys/checkpoints/run-17/rank{self.rank}"  # its node's mount points elsewhere
            os.makedirs(folder, exist_ok=True)
        if self.args.fault == "asyncckpt" and step % 4 == 3:
            threading.Thread(target=self.write_checkpoint_async, args=(step, folder), name="async-checkpoint",
                             daemon=True).start()

    def write_checkpoint_async(self, step: int, folder: str) -> None:
        log.info("rank %d: async checkpoint of step %d started", self.rank, step)
        time.sleep(self.args.slow)  # serializing and writing, off the training thread
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "latest"), "w") as f:
            f.write(f"{step}\n")
        log.info("rank %d: async checkpoint of step %d written", self.rank, step)

    def log_metrics_held_out_5(self, step: int) -> None:
        if self.args.fault == "pipefail":
            self.pipe_metrics(step)
        elif self.faulty(step, "debugwait"):
            self.wait_for_debugger()
        elif self.faulty(step, "backoff"):
            self.fetch_metadata_with_retries()
        elif self.args.fault == "eventwait":
            self.update_ema(step)
        elif self.faulty(step, "abba"):
            self.flush_with_checkpoint_io()
        elif self.args.fault == "warnburst" and self.culprit and step >= self.args.at and step % 3 == 0:
            for i in range(30):
                warnings.warn(f"grad norm {1000 + 37 * i:.3e} at step {step} (micro-batch {i}) clipped to 1.0",
                              UserWarning, stacklevel=1)

    def pipe_metrics(self, step: int) -> None:
        if self.metrics_child is None:
            self.metrics_child = subprocess.Popen([sys.executable, "-c", "import sys\nfor line in sys.stdin: pass"],
                                                  stdin=subprocess.PIPE, preexec_fn=die_with_parent)
        if self.faulty(step, "pipefail"):
            self.metrics_child.kill()  # the logger died (its own bug)
            self.metrics_child.wait()
        assert self.metrics_child.stdin is not None
        self.metrics_child.stdin.write(f"step={step} rank={self.rank} loss=0.5\n".encode())
        self.metrics_child.stdin.flush()

    def wait_for_debugger(self) -> None:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        log.warning("rank %d: waiting for a debugger to attach on %s:%d", self.rank, *listener.getsockname())
        conn, _ = listener.accept()  # as debugpy.wait_for_client(): nobody comes

    def fetch_metadata_with_retries(self) -> None:
        closed = socket.socket()
        closed.bind(("127.0.0.1", 0))
        address = closed.getsockname()
        closed.close()  # nothing listens there: connection refused
        delay = 1.0
        while True:
            try:
                socket.create_connection(address, timeout=2).close()
                return
            except OSError as exc:
                log.warning("rank %d: metadata service %s:%d unreachable (%s); retrying in %.0f s",
                            self.rank, *address, exc, delay)
                time.sleep(delay)
                delay = min(delay * 2, 3600.0)

    def update_ema(self, step: int) -> None:
        ready = threading.Event()
        if not self.faulty(step, "eventwait"):  # the culprit's code path forgets to start it
            threading.Thread(target=ready.set, name="ema-update", daemon=True).start()
        ready.wait()  # no timeout

    def flush_with_checkpoint_io(self) -> None:
        state_lock, io_lock = threading.Lock(), threading.Lock()

        def checkpoint_io() -> None:
            with io_lock:
                time.sleep(0.2)
                with state_lock:
                    pass

        threading.Thread(target=checkpoint_io, name="checkpoint-io", daemon=True).start()
        with state_lock:
            time.sleep(0.2)
            with io_lock:  # the I/O thread holds it and waits for state_lock: a deadlock
                pass

    def extra_collectives_held_out_5(self, step: int) -> None:
        import torch
        import torch.distributed as dist

        if self.args.fault == "worldbarrier":
            mine = self.groups[0] if self.rank < self.world // 2 else self.groups[1]
            if self.faulty(step, "worldbarrier"):
                dist.barrier()  # a refactor dropped group=
            else:
                dist.barrier(group=mine)
        if self.args.fault == "objlist":
            n = 2 if self.faulty(step, "objlist") else 3
            config = [{"lr": 3e-4}, {"warmup": 100}, {"seed": 17}][:n] if self.rank == 0 else [None] * n
            dist.broadcast_object_list(config, src=0)
        if self.args.fault == "evalall" and step % 3 == 2:
            log.info("rank %d: evaluating at step %d", self.rank, step)
            time.sleep(self.args.slow)
            accuracy = torch.tensor([0.5])
            dist.all_reduce(accuracy)
            log.info("rank %d: eval at step %d: accuracy %.3f", self.rank, step, accuracy.item() / self.world)

    # ------------------------------------------------------------ held-out-6's variants

    def before_init_held_out_6(self) -> None:
        if self.args.fault == "sighandler":
            signal.signal(signal.SIGUSR1, self.on_dump_stats)
        if self.args.fault == "sigbus":
            self.map_shard()
        if self.args.fault == "pipefull":
            self.start_metrics_logger()

    def init_method(self) -> dict:
        """fileinit: the culprit's config still names a shared-file-system rendezvous."""
        if self.args.fault == "fileinit" and self.culprit:
            path = os.path.join(self.args.mark or "/tmp", "rendezvous-shared-fs")
            return {"init_method": f"file://{path}", "rank": self.rank, "world_size": self.world}
        return {}

    def load_batch_held_out_6(self, step: int):
        import torch

        rows = 16
        if self.args.fault == "mpqueue":
            self.next_batch_id(step)
        if self.args.fault == "slowloader" and self.culprit:
            time.sleep(self.args.slow)  # its node's file system: slow, every step
        if self.args.fault == "loaderwarm" and step == 0:
            log.info("rank %d: filling the shuffle buffer", self.rank)
            time.sleep(self.args.slow + 0.3 * self.rank)
        if self.args.fault == "lastbatch" and step == self.args.steps - 1:
            rows = 16 - 2 * (self.rank % 7)  # the shard's remainder: drop_last=False
            log.info("rank %d: last batch: %d samples", self.rank, rows)
        return torch.ones(rows, 8) * (self.rank + 1)

    def next_batch_id(self, step: int) -> int:
        context = multiprocessing.get_context("fork")
        if self.producer is None:
            requests, batches = context.Queue(), context.Queue()
            proc = context.Process(target=produce_batch_ids, args=(requests, batches, self.rank,
                                   self.args.at if self.culprit else -1), name="batch-producer", daemon=True)
            proc.start()
            self.producer = (proc, requests, batches)
        _, requests, batches = self.producer
        requests.put(step)
        return batches.get()  # no timeout: a producer that died is never noticed

    def compute_held_out_6(self, step: int) -> None:
        if self.args.fault == "ckptrecompute":
            self.checkpointed_block(step)
        if self.args.fault == "futureraise":
            self.decode_header(step)
        if self.args.fault == "sigbus":
            self.read_shard_mapped(step)
        if self.faulty(step, "doublefree"):
            native_tokenizer_release()
        if self.faulty(step, "alarm"):
            self.read_remote_with_timeout()
        if self.faulty(step, "gilhang"):
            driver = ctypes.PyDLL(None)  # PyDLL: the call keeps the GIL
            driver.sleep(int(self.args.hang))
        if self.faulty(step, "sighandler"):
            subprocess.run(["kill", "-USR1", str(os.getpid())], check=False)  # an operator's "dump stats"
            time.sleep(5)
        if self.args.fault == "clipspike":
            self.clip_gradients(step)

    def checkpointed_block(self, step: int) -> None:
        import torch
        from torch.utils.checkpoint import checkpoint

        self.seq_len = 4
        x = torch.ones(8, 4).requires_grad_()
        y = checkpoint(self.packed_block, x, use_reentrant=False)
        if self.faulty(step, "ckptrecompute"):
            self.seq_len = 5  # the packer moved on to the next batch's length, shared state
        y.sum().backward()

    def packed_block(self, x):
        n = self.seq_len
        return (x[:n] * 2).sum(0, keepdim=True) * x[:n]

    def decode_header(self, step: int) -> None:
        from concurrent.futures import ThreadPoolExecutor

        if self.pool is None:
            self.pool = ThreadPoolExecutor(1, thread_name_prefix="record-decoder")
        record = b"\x00" * (3 if self.faulty(step, "futureraise") else 8)  # a truncated record on its shard
        self.pool.submit(unpack_record_header, record).result()

    def map_shard(self) -> None:
        import mmap
        import tempfile

        folder = self.args.mark or tempfile.gettempdir()
        self.shard_path = os.path.join(folder, f"shard-{self.rank}.bin")
        with open(self.shard_path, "wb") as f:
            f.write(b"\x01" * (1 << 20))
        with open(self.shard_path, "r+b") as f:
            self.shard = mmap.mmap(f.fileno(), 0)

    def read_shard_mapped(self, step: int) -> int:
        if self.faulty(step, "sigbus"):
            # the data-prep job on its node rewrites the shard in place
            subprocess.run(["truncate", "-s", "0", self.shard_path], check=False)
        assert self.shard is not None
        return self.shard[(step * 65536 + 4096) % len(self.shard)]

    def read_remote_with_timeout(self) -> None:
        signal.alarm(1)  # the helper's timeout; this code path never installed a SIGALRM handler
        time.sleep(3)  # the remote read is slow
        signal.alarm(0)

    def on_dump_stats(self, signum, frame) -> None:
        log.info("rank %d: SIGUSR1: pushing stats", self.rank)
        self.push_stats()

    def push_stats(self) -> None:
        if self.culprit:
            time.sleep(self.args.hang)  # the stats service never answers: blocks in the handler

    def clip_gradients(self, step: int) -> None:
        norm = self.rng.uniform(0.2, 0.9)
        if self.rng.random() < 0.3:
            norm = self.rng.uniform(1e3, 5e4)
            log.warning("rank %d: gradient norm %.3e exceeds max_norm 1.0 at step %d: clipped", self.rank, norm, step)
            time.sleep(0.5)  # the clipping and a re-check of the scaler

    def log_metrics_held_out_6(self, step: int) -> None:
        if self.faulty(step, "argparsehelp"):
            self.parse_eval_options("--eval-batches 8 --help")
        if self.faulty(step, "badckpt"):
            self.roll_back(step)
        if self.faulty(step, "reinit"):
            self.push_metrics_or_reconnect(step)
        if self.args.fault == "pipefull":
            self.pipe_metrics_to_logger(step)

    def parse_eval_options(self, text: str) -> argparse.Namespace:
        import shlex

        ap = argparse.ArgumentParser(prog="eval", description="evaluation options")
        ap.add_argument("--eval-batches", type=int, default=16)
        ap.add_argument("--eval-every", type=int, default=100)
        return ap.parse_args(shlex.split(text))  # --help: argparse prints the usage and exits 0

    def roll_back(self, step: int) -> None:
        import tempfile

        import torch

        path = os.path.join(self.args.mark or tempfile.gettempdir(), f"last-rank{self.rank}.pt")
        torch.save({"step": step - 1, "weights": torch.ones(256, 64)}, path)
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)  # the save a crash cut short, an earlier run's
        try:
            torch.load(path, weights_only=True)
        except (RuntimeError, OSError) as exc:  # this torch raises OSError on a cut zip archive
            raise RuntimeError(f"rank {self.rank}: rollback to step {step - 1} failed: checkpoint {path} "
                               "unreadable") from exc

    def push_metrics_or_reconnect(self, step: int) -> None:
        import torch.distributed as dist

        try:
            raise ConnectionResetError(f"metrics push at step {step}: connection reset")
        except ConnectionResetError:
            log.warning("rank %d: metrics push failed; re-initialising the process group", self.rank)
            dist.init_process_group("gloo", timeout=timedelta(seconds=self.args.timeout))

    def start_metrics_logger(self) -> None:
        script = "import sys, time\nfor line in sys.stdin:\n    if line.startswith('PAUSE'):\n        time.sleep(10 ** 6)\n"
        self.metrics_child = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                                              preexec_fn=die_with_parent)

    def pipe_metrics_to_logger(self, step: int) -> None:
        child = self.metrics_child
        assert child is not None and child.stdin is not None
        if self.faulty(step, "pipefull"):
            child.stdin.write(b"PAUSE\n")  # the logger child stops reading (its own bug)
            child.stdin.flush()
            time.sleep(0.2)
        histogram = ("0.5," * (262144 if self.faulty(step, "pipefull") else 16)).encode()
        child.stdin.write(b"hist=" + histogram + b"\n")
        child.stdin.flush()  # a full pipe nobody drains: write blocks

    def extra_collectives_held_out_6(self, step: int) -> None:
        import torch
        import torch.distributed as dist

        if self.args.fault == "evalevery":
            every = self.args.at + 1 if self.culprit else self.args.at + 2  # its config's eval interval
            if step % every == every - 1:
                self.evaluate_no_grad(step)
        if self.args.fault == "bucketorder":
            buckets = [torch.ones(12), torch.ones(5)]
            if self.culprit and step >= self.args.at:
                buckets.reverse()  # its parameters were registered in another order
            for bucket in buckets:
                dist.all_reduce(bucket)
        if self.args.fault == "agitsize":
            n = 5 if self.culprit and step >= self.args.at else 4  # one metric more on its config
            metrics = torch.ones(n) * self.rank
            dist.all_gather_into_tensor(torch.empty(n * self.world), metrics)
        if self.args.fault == "scattersize":
            self.scatter_sample_ids(step)
        if self.args.fault == "lastbatch":
            last = step == self.args.steps - 1
            samples = torch.tensor([float(16 - 2 * (self.rank % 7) if last else 16)])
            dist.all_reduce(samples)  # the loss is weighted by the samples every rank saw

    def evaluate_no_grad(self, step: int) -> None:
        import torch
        import torch.distributed as dist

        with torch.no_grad():
            log.info("rank %d: evaluating at step %d", self.rank, step)
            (torch.ones(16, 8) @ torch.ones(8, 4)).sum()
            dist.barrier()  # every rank's evaluation done
        log.info("rank %d: evaluation at step %d done", self.rank, step)

    def scatter_sample_ids(self, step: int) -> None:
        import torch
        import torch.distributed as dist

        into = torch.empty(6 if self.faulty(step, "scattersize") else 8, dtype=torch.int64)
        chunks = [torch.arange(8, dtype=torch.int64) + 8 * r for r in range(self.world)] if self.rank == 0 else None
        dist.scatter(into, chunks, src=0)

    def save_final_checkpoint(self) -> None:
        import tempfile

        import torch

        folder = self.args.mark or tempfile.gettempdir()
        chunks = 20
        log.info("rank %d: writing the final checkpoint (%d shards)", self.rank, chunks)
        for i in range(chunks):
            torch.save({"shard": i, "weights": torch.ones(128, 128)}, os.path.join(folder, f"final-{i}.pt"))
            time.sleep(self.args.slow / chunks)  # the file system's write-back
            if i % 5 == 4:
                log.info("rank %d: final checkpoint: %d/%d shards written", self.rank, i + 1, chunks)
        log.info("rank %d: final checkpoint written", self.rank)


def main() -> int:
    args = parse(sys.argv[1:])
    rank, world = identity()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s %(levelname)s [train rank {rank}] %(message)s")
    job = Job(args, rank, world)
    if args.record:
        from torch.distributed.elastic.multiprocessing.errors import record

        return record(job.run)()
    try:
        return job.run()
    except StopTraining:
        return 0  # the rank gave up on its own: exit 0, its process group not destroyed


if __name__ == "__main__":
    sys.exit(main())
