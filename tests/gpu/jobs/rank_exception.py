"""A rank of a torchrun job on the GPU that raises in its own code after a few steps while
its peers (gloo on the CPU beside it, as one GPU cannot hold two NCCL ranks) wait in
all_reduce: the dead rank is the one whose exception came first (device check)."""

import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=timedelta(seconds=20))
rank = dist.get_rank()
x = torch.ones(4096, device="cuda" if rank == 0 else "cpu")
for step in range(5):
    if rank == int(os.environ.get("HC_TEST_DYING_RANK", "1")) and step == 3:
        raise ValueError(f"bad batch at step {step}")  # the rank's own bug
    y = x.cpu()
    dist.all_reduce(y)
    time.sleep(0.2)
print(f"rank {rank}: done", flush=True)
