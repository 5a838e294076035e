"""Probes talk to the system (commands, sysfs, /proc, NVML) and hand raw output to parsers.

Each module registers fact providers with `healthcheck.core.facts.provides`. A run loads
only the modules of the facts its checks need, over its transport (`FACT_MODULES`,
`TRANSPORT_MODULES`, by name, as the kernel loads plugins): a quick tier never imports the
bandwidth, DCGM or ib_write_bw probes, nor a local run the agentless ones, nor the parsers
and launchers they import. `load_all` loads every one (catalogues, tests).
"""

from __future__ import annotations

import importlib
import threading

from healthcheck.core.plugins import load

MODULES = ("net", "ib", "ib_agentless", "sysinfo", "gpu", "gpu_agentless", "libs", "bw", "ib_write_bw", "dcgm")

# fact -> the module whose providers gather it, over every transport but those in
# TRANSPORT_MODULES (tests/unit/probes/test_probe_modules.py holds both to what the modules register)
FACT_MODULES: dict[str, str] = {
    "ip_links": "net",
    "ib_ports": "ib",
    "ib_counters": "ib",
    "meminfo": "sysinfo",
    "mounts": "sysinfo",
    "disk_space": "sysinfo",
    "processes": "sysinfo",
    "gpus": "gpu",
    "kernel_gpu_log": "gpu",
    "shared_libs": "libs",
    "nccl_tests": "bw",
    "torch_sweep": "bw",
    "ib_write_bw_loopback": "ib_write_bw",
    "dcgm_diag": "dcgm",
    "dcgm_diag_deep": "dcgm",
}

# (fact, transport) -> the module, where a transport's provider reads a tool's text that
# the other's does not (agentless: nvidia-smi, ibstat, perfquery and their parsers)
TRANSPORT_MODULES: dict[tuple[str, str], str] = {
    ("gpus", "ssh"): "gpu_agentless",
    ("ib_ports", "ssh"): "ib_agentless",
    ("ib_counters", "ssh"): "ib_agentless",
}

# per-node threads look providers up at once (agentless prefetch): one import at a time
_loading = threading.Lock()


def load_all() -> None:
    load(__name__, MODULES)


def load_for(fact: str, transport: str) -> None:
    """Import the module that provides `fact` over `transport` (every module for a fact not
    listed, so that one registered without a row here is still found)."""
    module = TRANSPORT_MODULES.get((fact, transport), FACT_MODULES.get(fact))
    with _loading:
        if module is None:
            load_all()
        else:
            importlib.import_module(f"{__name__}.{module}")
