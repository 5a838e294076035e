"""Pure functions: a tool's output text -> typed facts. No I/O; garbage raises ParseError.

`TOOLS` is what `hc parse TOOL` offers: tool name -> (module, function, description).
Modules are imported only when their tool is asked for.

Each parser runs in time linear in its input (hostile lines included: agentless mode
parses text from the nodes) and raises ParseError, never anything else, on garbage.
`parser_for` refuses empty input for every tool alike: a capture with no text is a
lost capture, never "no devices". Where empty output with exit 0 does mean something
(ibstat on a machine without an HCA), the probe that saw the exit code calls the parser
function itself.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any

from healthcheck.core.errors import ParseError

TOOLS: dict[str, tuple[str, str, str]] = {
    "ip-link": ("healthcheck.parsers.ip_link", "parse_ip_link", "ip -j link / ip -d link (text)"),
    "ibstat": ("healthcheck.parsers.ibstat", "parse_ibstat", "ibstat (all CAs)"),
    "ibstatus": ("healthcheck.parsers.ibstatus", "parse_ibstatus", "ibstatus"),
    "perfquery": ("healthcheck.parsers.perfquery", "parse_perfquery", "perfquery, perfquery -x, perfquery -E"),
    "nvidia-smi-q": ("healthcheck.parsers.nvidia_smi", "parse_nvidia_smi_q_pasted",
                     "nvidia-smi -q (also lines grep'd out of it)"),
    "nvidia-smi-query-gpu": ("healthcheck.parsers.nvidia_smi_query", "parse_nvidia_smi_query_pasted",
                             "nvidia-smi --query-gpu=... --format=csv (every field kept)"),
    "nvidia-smi": ("healthcheck.parsers.nvidia_smi_table", "parse_nvidia_smi_table",
                   "nvidia-smi default table: GPUs, MIG devices, processes, ERR! cells (drivers 384-610)"),
    "sinfo": ("healthcheck.parsers.sinfo", "parse_sinfo",
              "sinfo -R, sinfo -N -l, sinfo, -o/-O with a header, hc's -h -N -o '%N|%T|%H|%E'"),
    "scontrol-show-node": ("healthcheck.parsers.scontrol_node", "parse_scontrol_show_node",
                           "scontrol show node (many nodes, -o): state and flags, reason with who and when"),
    "ibv_devinfo": ("healthcheck.parsers.ibv_devinfo", "parse_ibv_devinfo",
                    "ibv_devinfo, -v, -l (rdma-core and MLNX_OFED): ports, state, MTU, link layer, firmware"),
    "hostfile": ("healthcheck.parsers.hostfile", "parse_hostfile", "hostfile: plain, Open MPI slots=N, MPICH host:N"),
    "ldconfig": ("healthcheck.parsers.ldconfig", "parse_ldconfig",
                 "ldconfig -N -X -v (shared libraries, e.g. the NCCL version)"),
    "xid": ("healthcheck.parsers.xid", "parse_kernel_log",
            "kernel log (dmesg, dmesg -T/--time-format iso, journal, syslog) -> Xid/SXid events"),
    "nvidia-smi-topo": ("healthcheck.parsers.nvidia_topo", "parse_nvidia_topo", "nvidia-smi topo -m"),
    "nvidia-smi-nvlink": ("healthcheck.parsers.nvlink_status", "parse_nvlink_status",
                          "nvidia-smi nvlink -s (link status); -e, -gt d, -gt r (counters per link)"),
    "nccl-tests": ("healthcheck.parsers.nccl_tests", "parse_nccl_tests",
                   "nccl-tests/rccl-tests *_perf output (text, -J JSON)"),
    "ib_write_bw": ("healthcheck.parsers.perftest", "parse_perftest", "perftest ib_write_bw / ib_read_bw / ib_send_bw"),
    "nccl-log": ("healthcheck.parsers.nccl_log", "parse_nccl_log",
                 "NCCL debug log (NCCL_DEBUG=INFO/WARN, NCCL_DEBUG_FILE, stdout with NCCL lines), 2.4-2.30"),
    "torch-log": ("healthcheck.parsers.torch_log", "parse_torch_log",
                  "PyTorch distributed / torchrun output: watchdog, NCCL and gloo errors, ChildFailedError"),
    "py-spy": ("healthcheck.parsers.py_spy", "parse_py_spy",
               "py-spy dump (text, --json, --locals, --native, --subprocesses; its errors as facts)"),
    "flight-recorder": ("healthcheck.parsers.flight_recorder", "parse_flight_recorder",
                        "torch Flight Recorder dump (pickle, read as data and never executed; or its JSON)"),
    "flight-recorder-analysis": ("healthcheck.parsers.flight_recorder", "parse_fr_analysis",
                                 "torchfrtrace / NVRx Flight Recorder attribution output"),
    "nccl-ras": ("healthcheck.parsers.nccl_ras", "parse_nccl_ras",
                 "NCCL RAS STATUS / VERBOSE STATUS reply (port 28028, ncclras; text or 2.29+ JSON)"),
    "dcgmi-diag": ("healthcheck.parsers.dcgmi_diag", "parse_dcgmi_diag",
                   "dcgmi diag (DCGM 2.x-4.x: -j JSON or the table; dcgmi's own errors as facts)"),
}
# tools whose input is bytes, not text: the parser gets them undecoded
BINARY_TOOLS = frozenset({"flight-recorder"})


def parser_for(tool: str) -> Callable[[Any], Any]:
    """TOOL's parser, with empty (or blank) input a ParseError whatever the tool (text, or
    bytes for BINARY_TOOLS)."""
    module, func, _ = TOOLS[tool]
    parse = getattr(importlib.import_module(module), func)

    @functools.wraps(parse)
    def parse_text(text: str | bytes) -> Any:
        if not text.strip():
            raise ParseError(f"{tool}: empty input: no output to parse")
        return parse(text)

    return parse_text
