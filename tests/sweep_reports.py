"""Deep-sweep reports made by hc's own code paths, for the HTML report's tests, bin/bench and
docs/report-html.png.

`run_many` runs as `hc sweep --tier deep` does (Slurm's busy-node guard, fleet analyses,
the pair tests planned and judged by `bandwidth.localize` and the `bw.pairs` analysis,
make_report, the history), with two stand-ins: the SSH transport returns each node's
result from the real `bw.torch` check evaluated over stand-in torch-sweep facts (so its
metrics, bw.E001 findings and limits are what the check writes), and a pair test's
busbw comes from a model of the fabric (one node slow with every partner, one slow link).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from healthcheck.core.model import CheckResult, NodeResult, Report
from healthcheck.core.status import worst

FABRIC = "sim-h100"
SIZES = ("64M", "1G", "16G")
NODE_PEAK = 480.0  # GB/s single-node all_reduce at the largest size (NVLS-class)
PAIR_PEAK = 370.0  # GB/s between two nodes (8 NICs, RING)
NODE_FLOOR, PAIR_FLOOR = 460, 340

FABRIC_YAML = f"""\
extends: generic
description: a simulated 8-GPU NDR fabric for the HTML report's tests
gpu: {{count: 8}}
bandwidth:
  sizes: [{", ".join(SIZES)}]
  repeats: 1
  all_reduce:
    single_node:
      busbw_min_gbytes_per_s: {{"16G": {NODE_FLOOR}}}
    pair:
      busbw_min_gbytes_per_s: {{"16G": {PAIR_FLOOR}}}
  pairs: {{circle_max: 128}}
"""


def write_config(root: Path, pattern: str, *, history: bool = True) -> Path:
    """A main config naming `pattern` (a hostlist) as the simulated fabric, with a history
    under `root` and a `sinfo` that is not there (no Slurm: deep tests run with a warning)."""
    fabrics = root / "fabrics"
    fabrics.mkdir(parents=True, exist_ok=True)
    (fabrics / f"{FABRIC}.yaml").write_text(FABRIC_YAML)
    path = root / "hc.yaml"
    hist = f"{root}/history.sqlite" if history else "null"
    path.write_text(f"fabric_dirs: [{fabrics}]\nnodes: {{'{pattern}': {FABRIC}}}\n"
                    f"history: {{path: {hist}}}\n"
                    f"slurm: {{sinfo: {root}/no-slurm/sinfo, scontrol: {root}/no-slurm/scontrol, retries: 1}}\n")
    return path


def _curve(peak: float, size: str) -> float:
    """busbw at `size` for a path whose large-message busbw is `peak`: latency-bound when small."""
    from healthcheck.core.units import parse_size

    n = parse_size(size)
    return peak * n / (n + (96 << 20))


def _jitter(*parts: str) -> float:
    """A deterministic +-1.5% from names: runs repeat exactly."""
    h = int.from_bytes(hashlib.sha256("/".join(parts).encode()).digest()[:4], "big")
    return 1 + ((h % 3001) - 1500) / 100_000


def torch_facts(node: str, scale: float, run: int = 0) -> Any:
    """What hc's torch sweep gives on an 8-GPU node whose NVLink reaches `scale` of the fabric's."""
    from healthcheck.core.units import parse_size
    from healthcheck.parsers.bandwidth_common import BandwidthAttempt, BandwidthRun, BandwidthRuns, BandwidthSample

    samples = tuple(
        BandwidthSample(collective="all_reduce", size_bytes=parse_size(s), ranks=8, time_us=100.0,
                        busbw_gbytes_per_s=round(_curve(NODE_PEAK, s) * scale * _jitter(node, s, str(run)), 2),
                        algbw_gbytes_per_s=round(_curve(NODE_PEAK, s) * scale / 1.75, 2), wrong=0)
        for s in SIZES)
    attempt = BandwidthAttempt(argv=("torchrun", "--nproc-per-node", "8", "hc", "bw", "allreduce"), samples=samples,
                               ranks=8, expected_ranks=8, duration_s=20.0, returncode=0, wrong=0)
    return BandwidthRuns(tool="torch", gpus=8, runs=(BandwidthRun("all_reduce", "single_node", (attempt,)),))


def node_results(config: Any, names: Sequence[str], slow: dict[str, float], run: int = 0,
                 base: Callable[[str, int], NodeResult] | None = None) -> list[NodeResult]:
    """Each node's result from the real `bw.torch` check over stand-in facts (nodes in `slow`
    reach that fraction of the fabric's busbw), added to `base`'s checks and metrics."""
    import msgspec

    from healthcheck.core.registry import select
    from healthcheck.core.stamp import stamp
    from healthcheck.orchestrate.engine import _evaluate

    (spec,) = select("deep", ["bw.torch"])
    node_config = config.for_node(names[0])  # one fabric: the same limits and sources for every node
    out = []
    for i, name in enumerate(names):
        facts = {"torch_sweep": torch_facts(name, slow.get(name, 1.0), run)}
        status, reason, found, metrics = _evaluate(spec, facts, node_config.limits)
        findings = [stamp(f, check=spec.name, node=name, limit_source=node_config.source) for f in found]
        check = CheckResult(spec.name, status, 21.5, reason)
        if base is not None:
            b = base(name, i)
            result = msgspec.structs.replace(b, fabric=FABRIC, mode="agentless", checks=[*b.checks, check],
                                             findings=[*b.findings, *findings], metrics=[*b.metrics, *metrics],
                                             status=worst((b.status, status)))
        else:
            result = NodeResult(node=name, fabric=FABRIC, status=status, mode="agentless", checks=[check],
                                findings=findings, metrics=metrics)
        out.append(result)
    return out


def pair_model(culprit: str | None, slow_link: tuple[str, str] | None, run: int = 0,
               culprit_scale: float = 0.28, link_scale: float = 0.55) -> Callable[..., Any]:
    """Every torch test (pair_fakes.torch_tests_by) for a fabric where `culprit` is slow with
    everyone and `slow_link` is slow."""
    from healthcheck.core.units import format_size
    from healthcheck.parsers.bandwidth_common import BandwidthSample

    def run_test(config: Any, plan: Any, members: Sequence[str]) -> tuple[list[Any], str]:
        scale = 1.0
        if culprit is not None and culprit in members:
            scale = culprit_scale
        elif slow_link is not None and set(members) == set(slow_link):
            scale = link_scale
        key = "-".join(sorted(members))
        return [BandwidthSample(collective=plan.collective, size_bytes=size, ranks=2 * 8, time_us=100.0,
                                busbw_gbytes_per_s=round(_curve(PAIR_PEAK, format_size(size)) * scale
                                                         * _jitter(key, str(size), str(run)), 2),
                                algbw_gbytes_per_s=1.0) for size in plan.sizes], ""

    return run_test


@contextlib.contextmanager
def _patched(obj: Any, name: str, value: Any) -> Iterator[None]:
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def sweep(config_path: Path, names: Sequence[str], *, slow: dict[str, float] | None = None,
          culprit: str | None = None, slow_link: tuple[str, str] | None = None, pair_nodes: int | None = None,
          run: int = 0, base: Callable[[str, int], NodeResult] | None = None, culprit_scale: float = 0.28) -> Report:
    """One `hc sweep --tier deep` over `names` through run_many: node tests from the stand-in
    facts, pair tests (every pair of the first `pair_nodes` nodes, all by default) from the
    model; recorded in the config's history."""
    from pair_fakes import torch_tests_by

    from healthcheck.core.config import load_config
    from healthcheck.orchestrate import multirun, remote
    from healthcheck.orchestrate.pairsweep import choose
    from healthcheck.orchestrate.pairsweep import sweep as pair_sweep

    config = load_config(config_path)
    results = {r.node: r for r in node_results(config, names, slow or {}, run, base)}
    real_run_pairs = pair_sweep.run_pairs

    def check_over_ssh(cfg: Any, nodes: Sequence[str], **_kw: Any) -> list[NodeResult]:
        return [results[n] for n in nodes]

    def run_pairs(cfg: Any, got: Sequence[NodeResult], *, exhaustive: bool = False, **kw: Any) -> Any:
        subset = list(got)[:pair_nodes] if pair_nodes else list(got)
        return real_run_pairs(cfg, subset, exhaustive=True, max_parallel=4)

    with _patched(remote, "check_over_ssh", check_over_ssh), _patched(multirun, "run_pairs", run_pairs), \
            _patched(choose, "open_transport", torch_tests_by(pair_model(culprit, slow_link, run, culprit_scale))):
        done = multirun.run_many(config, multirun.RunRequest(list(names), command="sweep", tier="deep"))
    return done.report


def history_of_sweeps(config_path: Path, names: Sequence[str], *, runs: int = 4, pair_nodes: int | None = None,
                      base: Callable[[str, int], NodeResult] | None = None) -> Report:
    """`runs` sweeps, recorded in the history: the second node's NVLink below the floor from the
    third run on, the fourth node getting slower with every partner (culprit in the last two
    runs), the slow link between the fifth and sixth from the start. Returns the last report."""
    slow_node, culprit, link = names[1], names[3], (names[4], names[5])
    report = None
    for r in range(runs):
        late = r >= runs - 2
        report = sweep(config_path, names, run=r, pair_nodes=pair_nodes, base=base,
                       slow={slow_node: 0.78} if r >= 2 or runs < 3 else {},
                       culprit=culprit, culprit_scale=0.28 if late else 1.0 - 0.04 * r, slow_link=link)
    assert report is not None
    return report

