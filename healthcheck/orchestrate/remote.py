"""Check nodes from elsewhere (a login node): over SSH, in agent or agentless mode.

Agent mode: hc is installed on the node; run `hc node --local --format json` there
(GPU checks need NVML in-process on the node) and take its report. Agentless: run the
tools (`ip -j link`, `ibstat`, `perfquery -x`, `nvidia-smi -q`, ...) over SSH and parse
their output here with the same parsers. `auto` uses the agent where `hc` is on the
node's PATH. Failures stay with their node: it is ERROR, the others finish.

A repair put on record here (`hc node NODES --repaired`) is sent on to each node over the same
transport (`record_repairs_on_nodes`): in agent mode the node's hc records it in the node's own
history (`hc node --local --record-repair JSON`); agentless, nothing here can write that
history, and the outcome says so.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable, Iterable

import msgspec

from healthcheck.core.config import Config
from healthcheck.core.errors import ConfigError, HcError
from healthcheck.core.facts import ProbeContext, prefetch_commands
from healthcheck.core.model import NodeResult
from healthcheck.core.registry import select
from healthcheck.orchestrate.engine import plan_facts, run_checks, unreachable_result
from healthcheck.orchestrate.localrun import AGENT_ENV
from healthcheck.report.jsonio import decode
from healthcheck.report.recurrence import Repair
from healthcheck.runners.batch import prefetch
from healthcheck.runners.fanout import fan_out
from healthcheck.runners.ssh import SshConnection, SshError

MODES = ("auto", "agent", "agentless")
RECORD_REPAIR = "--record-repair"  # `hc node --local` on the node: put a repair sent from here on record
NOT_REACHED = "not reached"  # how an outcome of record_repairs_on_nodes begins where the node's history was not written


def check_over_ssh(
    config: Config,
    nodes: list[str],
    *,
    tier: str,
    only: Iterable[str] = (),
    mode: str = "auto",
    params: dict | None = None,
    on_done: Callable[[str, NodeResult], None] | None = None,
) -> list[NodeResult]:
    settings = config.main.ssh
    only = list(only)
    specs = select(tier, only)
    fabrics = {node: config.fabric_of(node) for node in nodes}  # config errors stop the run here

    def work(node: str) -> NodeResult:
        try:
            return _check_one(config, node, fabrics[node], specs=specs, tier=tier, only=only, mode=mode,
                              params=params or {})
        except ConfigError:
            raise
        except Exception as exc:  # one node's surprise must not end the sweep
            return unreachable_result(node, fabrics[node], f"{type(exc).__name__}: {exc}", mode)

    def stuck(node: str) -> NodeResult:
        return unreachable_result(node, fabrics[node], f"{node}: no result within {backstop:g}s (abandoned)", mode)

    # work bounds itself (connect timeout + node_timeout_s); this only catches a node stuck
    # in-process (a hung paramiko call), so one such node cannot hold the sweep up
    backstop = settings.connect_timeout_s + settings.node_timeout_s + settings.command_timeout_s + 10
    results = fan_out(nodes, work, max_parallel=settings.max_parallel, on_done=on_done, timeout_s=backstop,
                      on_timeout=stuck)
    return [results[n] for n in nodes]


def _check_one(config: Config, node: str, fabric: str, *, specs, tier: str, only: list[str], mode: str,
               params: dict) -> NodeResult:

    settings = config.main.ssh
    deadline = time.monotonic() + settings.node_timeout_s
    conn = SshConnection(node, settings)
    try:
        conn.connect()
    except SshError as exc:
        return unreachable_result(node, fabric, exc.message, mode if mode != "auto" else "agentless",
                                  value=exc.kind.value)  # the plain string in the report
    try:
        chosen = mode
        if mode == "auto":
            probe = conn.run(("sh", "-c", f"command -v {shlex.quote(settings.remote_hc)}"),
                             timeout_s=settings.command_timeout_s)
            chosen = "agent" if probe.ok and probe.stdout.strip() else "agentless"
        if chosen == "agent":
            return _agent(conn, node, fabric, settings, tier=tier, only=only, params=params, deadline=deadline,
                          config_args=config.remote_args())
        node_config = config.for_node(node)
        ctx = ProbeContext(runner=conn, transport="ssh", params={k: v for k, v in params.items() if v is not None},
                           limits=node_config.limits)
        # every command the needed facts will run, in one SSH session (see runners/batch.py)
        _, _, needs = plan_facts(specs, node_config.limits)
        ctx.runner = prefetch(conn, prefetch_commands(list(needs), ctx), settings.command_timeout_s)
        result, _ = run_checks(node_config, specs, ctx, deadline=deadline, mode="agentless",
                               budget_floor=settings.command_timeout_s)
        return result
    finally:
        conn.close()


def _agent(conn, node: str, fabric: str, settings, *, tier: str, only: list[str], params: dict,
           deadline: float, config_args: list[str]) -> NodeResult:

    argv = [settings.remote_hc, "node", "--local", "--format", "json", "--tier", tier, *config_args]
    if only:
        argv += ["--checks", ",".join(only)]
    if params.get("since") is not None:
        argv += ["--since", str(params["since"])]
    timeout = max(1.0, deadline - time.monotonic())
    result = conn.run(tuple(argv), timeout_s=timeout, env={"HC_NODE_NAME": node, AGENT_ENV: "1"})
    if result.timed_out:
        return unreachable_result(node, fabric, f"hc on {node} did not finish within {timeout:.0f}s", "agent")
    if result.error:
        return unreachable_result(node, fabric, f"{node}: {result.error}", "agent")
    if result.returncode not in (0, 1, 2, 3):
        said = (result.stderr or result.stdout).strip().splitlines()
        return unreachable_result(node, fabric, f"hc on {node} exited {result.returncode}: {said[-1] if said else ''}",
                                  "agent", evidence=result.stderr[-2000:] or None)
    try:
        report = decode(result.stdout.encode(), f"hc on {node}")
    except HcError as exc:
        return unreachable_result(node, fabric, str(exc), "agent", evidence=result.stdout[-2000:] or None)
    if len(report.nodes) != 1:
        return unreachable_result(node, fabric, f"hc on {node} reported {len(report.nodes)} nodes", "agent")
    return msgspec.structs.replace(report.nodes[0], node=node, mode="agent")


def record_repairs_on_nodes(config: Config, repairs: list[Repair], payloads: dict[str, str], *,
                            mode: str = "auto") -> dict[str, str]:
    """Each repaired node's outcome of sending its repair (`payloads[node]`: repairs.repair_payload)
    to the node's hc, which records it in the node's own history: "recorded in the node's history
    (PATH)", "already on record in the node's history (PATH)" (a history shared with this host), or
    "not reached: WHY" (agentless, SSH, an hc that could not)."""
    settings = config.main.ssh
    nodes = [r.node for r in repairs]
    backstop = settings.connect_timeout_s + 2 * settings.command_timeout_s + 10

    def work(node: str) -> str:
        try:
            return _send_repair(config, node, payloads[node], mode)
        except Exception as exc:  # one node's surprise must not keep the others' repairs from them
            return f"{NOT_REACHED}: {type(exc).__name__}: {exc}"

    def stuck(node: str) -> str:
        return f"{NOT_REACHED}: no answer within {backstop:g}s (abandoned)"

    return fan_out(nodes, work, max_parallel=settings.max_parallel, timeout_s=backstop, on_timeout=stuck)


def _send_repair(config: Config, node: str, payload: str, mode: str) -> str:
    settings = config.main.ssh
    if mode == "agentless":
        return f"{NOT_REACHED}: --mode agentless: only hc on the node writes the node's history"
    conn = SshConnection(node, settings)
    try:
        conn.connect()
    except SshError as exc:
        return f"{NOT_REACHED}: {exc.message}"
    try:
        if mode == "auto":
            probe = conn.run(("sh", "-c", f"command -v {shlex.quote(settings.remote_hc)}"),
                             timeout_s=settings.command_timeout_s)
            if not (probe.ok and probe.stdout.strip()):
                return (f"{NOT_REACHED}: agentless ({settings.remote_hc} is not on the node's PATH): only hc on "
                        "the node writes the node's history")
        argv = (settings.remote_hc, "node", "--local", RECORD_REPAIR, payload, *config.remote_args())
        result = conn.run(argv, timeout_s=settings.command_timeout_s, env={"HC_NODE_NAME": node, AGENT_ENV: "1"})
    finally:
        conn.close()
    return _repair_outcome(node, result)


def _repair_outcome(node: str, result) -> str:
    if result.timed_out:
        return f"{NOT_REACHED}: hc on {node} did not finish"
    if result.error:
        return f"{NOT_REACHED}: {result.error}"
    said = (result.stderr or result.stdout).strip().splitlines()
    if result.returncode != 0:
        return f"{NOT_REACHED}: hc on {node} exited {result.returncode}: {said[-1][:200] if said else ''}"
    try:
        answer = json.loads(result.stdout.strip().splitlines()[-1])
        history, fresh = str(answer["history"]), bool(answer["recorded"])
    except (ValueError, IndexError, KeyError, TypeError):
        return f"{NOT_REACHED}: hc on {node} gave no answer hc reads: {result.stdout.strip()[-200:]!r}"
    return (f"recorded in the node's history ({history})" if fresh
            else f"already on record in the node's history ({history}): the same file as here, or sent before")
