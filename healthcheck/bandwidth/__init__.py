"""Bandwidth tests: collective sweeps across ranks (`hc bw`).

torch_sweep.py measures collectives with torch.distributed (NCCL on GPUs, gloo on CPUs)
the way nccl-tests does, and reports `parsers.bandwidth_common.BandwidthSample`s, so its
results are judged like nccl-tests' own. Nothing here imports torch at module import.
"""
