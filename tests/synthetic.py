"""Synthetic node results for scale tests and bin/bench: a fleet of 8-GPU, 8-HCA nodes.

Deterministic for a seed. Each node looks like what `hc node --local --tier standard`
reports on an H100 NDR node: ~15 checks, ~150 metrics (8 GPUs with 10 each, 8 HCA ports
with rate, firmware and 8 error counters, interfaces with their MTU, node-wide
versions), FAIL or WARN findings on ~2% of nodes, and some drift (old firmware, an
interface at the wrong MTU).
"""

from __future__ import annotations

import datetime as dt
import random

import msgspec

from healthcheck.actions.slurm import SlurmNode
from healthcheck.core.model import CheckResult, Finding, Limit, Metric, NodeResult, Report, fingerprint
from healthcheck.core.status import Status, worst

FABRIC = "h100-ndr400"
CHECKS = ("gpu.clocks", "gpu.count", "gpu.ecc", "gpu.nvlink", "gpu.pcie", "gpu.versions", "gpu.xid",
          "ib.counters", "ib.ports", "net.mtu", "sys.disk", "sys.memory", "sys.mounts", "sys.services")
COUNTERS = ("symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors",
            "port_rcv_remote_physical_errors", "port_xmit_discards", "local_link_integrity_errors",
            "excessive_buffer_overrun_errors")
T0 = dt.datetime(2026, 11, 22, 3, 0, tzinfo=dt.timezone.utc)


def node_name(i: int) -> str:
    return f"gpu{i:05d}"


def _finding(node: str, check: str, fid: str, status: Status, component: str, message: str, value=None,
             limit: Limit | None = None) -> Finding:
    subject = f"{node}:{component}" if component else node
    return Finding(id=fid, status=status, message=message, component=component, value=value, limit=limit,
                   node=node, check=check, subject=subject, hint="see hc checks list",
                   suggested_action="investigate", fingerprint=fingerprint(node, check, subject, fid))


def _gpu_metrics(rng: random.Random, hot: bool) -> list[Metric]:
    out = []
    for g in range(8):
        c = f"GPU{g}"
        temp = rng.gauss(58 + g, 2.0) if not (hot and g == 3) else 88.0
        out += [
            Metric("model", "NVIDIA H100 80GB HBM3", component=c),
            Metric("temperature_c", round(temp, 1), "C", component=c),
            Metric("ecc_volatile_uncorrected", 0, component=c),
            Metric("ecc_volatile_corrected", rng.choice((0, 0, 0, 0, 1, 2)), component=c),
            Metric("remapped_rows_correctable", 0, component=c),
            Metric("remapped_rows_uncorrectable", 0, component=c),
            Metric("pcie_width", 16, component=c),
            Metric("pcie_gen", 5, component=c),
            Metric("nvlink_active", 18, component=c),
            Metric("vbios_version", "96.00.99.00.01", component=c),
        ]
    return out


def _ib_metrics(rng: random.Random, old_fw: bool) -> list[Metric]:
    out = []
    for h in range(8):
        c = f"mlx5_{h}/1"
        out.append(Metric("rate_gbps", 400.0, "Gb/s", component=c))
        out.append(Metric("fw_ver", "28.39.1002" if not (old_fw and h == 0) else "28.36.1010", component=c))
        for name in COUNTERS:
            noisy = name == "symbol_error" and rng.random() < 0.005
            out.append(Metric(name, rng.randint(1, 20) if noisy else 0, component=c))
    return out


def synthetic_node(i: int, seed: int = 0, fabric: str = FABRIC) -> NodeResult:
    """One node's result; node i's quirks depend only on (i, seed)."""
    rng = random.Random(seed * 1_000_003 + i)
    name = node_name(i)
    roll = rng.random()
    metrics = _gpu_metrics(rng, hot=roll < 0.003)
    metrics += _ib_metrics(rng, old_fw=0.003 <= roll < 0.008)
    ipoib_mtu = 2044 if 0.008 <= roll < 0.010 else 4092
    metrics += [Metric("mtu", ipoib_mtu, "bytes", component=f"ib{k}") for k in range(8)]
    metrics += [Metric("mtu", 9000, "bytes", component="eth0"), Metric("mtu", 65536, "bytes", component="lo")]
    metrics += [Metric("gpu_count", 8), Metric("driver_version", "550.54.15"), Metric("cuda_version", "12.4"),
                Metric("mem_total_gib", 2015.6, "GiB"), Metric("xid_events", 0),
                Metric("free_gib", round(rng.uniform(50, 400), 2), "GiB", component="/tmp")]
    findings: list[Finding] = []
    failing: dict[str, Status] = {}
    if 0.010 <= roll < 0.025:  # ~1.5%: a port down (FAIL)
        port = f"mlx5_{rng.randrange(8)}/1"
        findings.append(_finding(name, "ib.ports", "ib.E002", Status.FAIL, port,
                                 f"{port} is Down/Polling (expected Active/LinkUp)"))
        failing["ib.ports"] = Status.FAIL
    elif 0.025 <= roll < 0.030:  # ~0.5%: corrected ECC above the limit (WARN)
        findings.append(_finding(name, "gpu.ecc", "gpu.E003", Status.WARN, "GPU5",
                                 "GPU5 has 1200 corrected ECC errors since reset, above 1000", 1200,
                                 Limit("<=", 1000, "gpu.ecc_volatile_corrected_max")))
        failing["gpu.ecc"] = Status.WARN
    checks = [CheckResult(c, failing.get(c, Status.PASS), round(rng.uniform(0.001, 0.2), 4)) for c in CHECKS]
    return NodeResult(node=name, fabric=fabric, status=worst(c.status for c in checks), mode="local",
                      checks=checks, findings=findings, metrics=metrics)


def single_node_report(result: NodeResult, i: int = 0) -> Report:
    """The report `hc node --local --format json` writes for one node."""
    start = T0 + dt.timedelta(milliseconds=i)
    stamp = start.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return Report(
        run_id=start.strftime("%Y%m%dT%H%M%SZ") + f"-{i % 0xFFFFFF:06x}", hc_version="0.0.0", command="node",
        tier="standard", config_digest="sha256:" + "0" * 64, config_path="/etc/hc/hc.yaml", started_at=stamp,
        finished_at=stamp, duration_s=0.4, host=result.node, status=result.status, nodes=[result],
        summary={s.value: int(result.status is s) for s in Status},
    )


def node_documents(n: int, seed: int = 0) -> list[bytes]:
    """n per-node JSON reports, as `hc node --local --format json` prints them (indented)."""
    encoder = msgspec.json.Encoder()
    return [msgspec.json.format(encoder.encode(single_node_report(synthetic_node(i, seed), i)), indent=2)
            for i in range(n)]


def slurm_states(names: list[str], seed: int = 0) -> dict[str, SlurmNode]:
    """Slurm's view of the nodes: mostly idle or allocated, a few drained by hc or by someone else."""
    rng = random.Random(seed)
    out = {}
    for name in names:
        r = rng.random()
        if r < 0.01:
            out[name] = SlurmNode(name, "drained", "hc: ib.E002", "2026-11-21T07:55:31")
        elif r < 0.02:
            out[name] = SlurmNode(name, "drained", "bad dimm, ticket 4711", "2026-11-20T10:00:00")
        else:
            out[name] = SlurmNode(name, "allocated" if r < 0.7 else "idle")
    return out
