"""Check nodes through Slurm: one `srun` task per node runs `hc node --local`, and the
labelled output of every task is merged. This is how a sweep scales to thousands of
nodes: Slurm does the fan-out, hc adds no machinery of its own."""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Iterable, Optional

import msgspec

from healthcheck.core.config import Config
from healthcheck.core.engine import unreachable_result
from healthcheck.core.errors import HcError
from healthcheck.core.model import NodeResult
from healthcheck.core.nodes import fold
from healthcheck.runners.local import run_command

_LABEL = re.compile(r"^\s*(\d+): ?(.*)$")


def srun_argv(config: Config, nodes: list[str], *, tier: str, only: Iterable[str], since: Optional[float]) -> list[str]:
    s = config.main.slurm
    argv = [
        s.srun, f"--nodelist={fold(nodes)}", f"--nodes={len(nodes)}", f"--ntasks={len(nodes)}",
        "--ntasks-per-node=1", "--label", "--kill-on-bad-exit=0", "--job-name=hc-sweep",
        s.remote_hc, "node", "--local", "--format", "json", "--tier", tier, *config.remote_args(),
    ]
    only = list(only)
    if only:
        argv += ["--checks", ",".join(only)]
    if since is not None:
        argv += ["--since", str(since)]
    return argv


def check_over_srun(config: Config, nodes: list[str], *, tier: str, only: Iterable[str] = (),
                    since: Optional[float] = None, env: Optional[dict] = None) -> list[NodeResult]:
    from healthcheck.report.jsonio import decode

    argv = srun_argv(config, nodes, tier=tier, only=only, since=since)
    result = run_command(argv, timeout_s=config.main.slurm.sweep_timeout_s, env=env)
    if result.not_found:
        raise HcError(f"{argv[0]} not found: the Slurm transport needs srun (or use --via ssh)")
    tasks: dict[int, list[str]] = defaultdict(list)
    for line in result.stdout.splitlines():
        m = _LABEL.match(line)
        if m:
            tasks[int(m.group(1))].append(m.group(2))
    by_node: dict[str, NodeResult] = {}
    problems: list[str] = []
    for task, lines in sorted(tasks.items()):
        try:
            report = decode("\n".join(lines).encode(), f"srun task {task}")
        except HcError as exc:
            problems.append(str(exc))
            continue
        for n in report.nodes:
            by_node[n.node] = msgspec.structs.replace(n, mode="slurm")
    said = [l for l in result.stderr.splitlines() if l.strip()]
    why = "; ".join(problems) or (said[-1] if said else "")
    if result.timed_out:
        why = f"srun did not finish within {config.main.slurm.sweep_timeout_s:g}s" + (f": {why}" if why else "")
    out = []
    for node in nodes:
        if node in by_node:
            out.append(by_node[node])
        else:
            out.append(unreachable_result(node, config.fabric_of(node), f"no report from srun for {node}"
                                          + (f": {why}" if why else ""), "slurm", evidence=result.stderr[-2000:] or None))
    return out
