"""Pure functions: a tool's output text -> typed facts. No I/O; garbage raises ParseError.

`TOOLS` is what `hc parse TOOL` offers: tool name -> (module, function, description).
Modules are imported only when their tool is asked for.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

TOOLS: dict[str, tuple[str, str, str]] = {
    "ip-link": ("healthcheck.parsers.ip_link", "parse_ip_link", "ip -j link / ip -d link (text)"),
    "ibstat": ("healthcheck.parsers.ibstat", "parse_ibstat", "ibstat (all CAs)"),
    "ibstatus": ("healthcheck.parsers.ibstatus", "parse_ibstatus", "ibstatus"),
    "perfquery": ("healthcheck.parsers.perfquery", "parse_perfquery", "perfquery, perfquery -x, perfquery -E"),
    "nvidia-smi-q": ("healthcheck.parsers.nvidia_smi", "parse_nvidia_smi_q", "nvidia-smi -q"),
    "nvidia-smi-query-gpu": ("healthcheck.parsers.nvidia_smi_query", "parse_nvidia_smi_query", "nvidia-smi --query-gpu=... --format=csv"),
    "hostfile": ("healthcheck.parsers.hostfile", "parse_hostfile", "hostfile: plain, Open MPI slots=N, MPICH host:N"),
    "ldconfig": ("healthcheck.parsers.ldconfig", "parse_ldconfig", "ldconfig -N -X -v (shared libraries, e.g. the NCCL version)"),
    "xid": ("healthcheck.parsers.xid", "parse_kernel_log", "kernel log (dmesg, dmesg -T/--time-format iso, journal, syslog) -> Xid/SXid events"),
    "nvidia-smi-topo": ("healthcheck.parsers.nvidia_topo", "parse_nvidia_topo", "nvidia-smi topo -m"),
    "nvidia-smi-nvlink": ("healthcheck.parsers.nvlink_status", "parse_nvlink_status", "nvidia-smi nvlink -s"),
}


def parser_for(tool: str) -> Callable[[str], Any]:
    module, func, _ = TOOLS[tool]
    return getattr(importlib.import_module(module), func)
