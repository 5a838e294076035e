"""One NCCL rank whose second all_reduce waits behind a long GPU kernel past the process
group's timeout: the watchdog's post-mortem in this torch's own wording (device check)."""

import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

dist.init_process_group("nccl", timeout=timedelta(seconds=float(sys.argv[1]) if len(sys.argv) > 1 else 5.0))
rank = dist.get_rank()
torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
t = torch.ones(1 << 20, device="cuda")
dist.all_reduce(t)
torch.cuda.synchronize()
print(f"rank {rank}: warm-up all_reduce done on {torch.cuda.get_device_name()}", flush=True)
torch.cuda._sleep(int(2e11))  # ~100 s of one SM spinning: the next collective cannot start
dist.all_reduce(t)
torch.cuda.synchronize()
time.sleep(60)
