"""Probes talk to the system (commands, sysfs, /proc, NVML) and hand raw output to parsers.

Each module registers fact providers with `healthcheck.core.facts.provides`. A run loads
only the modules of the facts its checks need (`FACT_MODULES`, by name, as the kernel
loads plugins): a quick tier never imports the bandwidth, DCGM or ib_write_bw probes, nor
the parsers and launchers they import. `load_all` loads every one (catalogues, tests).
"""

from __future__ import annotations

import importlib
import threading

from healthcheck.core.plugins import load

MODULES = ("net", "ib", "sysinfo", "gpu", "bw", "ib_write_bw", "dcgm")

# fact -> the module whose providers gather it, over every transport
# (tests/unit/test_probe_modules.py holds it to what the modules register)
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
    "shared_libs": "gpu",
    "nccl_tests": "bw",
    "torch_sweep": "bw",
    "ib_write_bw_loopback": "ib_write_bw",
    "dcgm_diag": "dcgm",
    "dcgm_diag_deep": "dcgm",
}

# per-node threads look providers up at once (agentless prefetch): one import at a time
_loading = threading.Lock()


def load_all() -> None:
    load(__name__, MODULES)


def load_for(fact: str) -> None:
    """Import the module that provides `fact` (every module for a fact not listed, so that
    one registered without a row here is still found)."""
    module = FACT_MODULES.get(fact)
    with _loading:
        if module is None:
            load_all()
        else:
            importlib.import_module(f"{__name__}.{module}")
