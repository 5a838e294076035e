"""`hc node`: check this node (--local) or named nodes (over SSH)."""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path

import click

from healthcheck.cli.app import App, exit_code_for, export_prometheus, prometheus_dir
from healthcheck.cli.completion import complete_nodes
from healthcheck.cli.localnode import parse_since, run_local
from healthcheck.cli.options import (
    config_option,
    fail_level_option,
    format_option,
    output_option,
    prometheus_option,
    tier_option,
)
from healthcheck.core.nodes import expand, this_node_name
from healthcheck.core.registry import select

# What `hc node` needs only for some runs, loaded by import path where the run is known (as
# cli.COMMANDS are): a --local check imports neither the machinery of many nodes (SSH,
# Slurm, the pair sweep, the progress bar); its run is cli/localnode.py's.
MANY_NODES = "healthcheck.orchestrate.multirun"
PROGRESS = "healthcheck.cli.progress"
REPAIRS = "healthcheck.actions.repairs"  # `--repaired`, `--gpu-reset`: the history and the audit log
REMOTE = "healthcheck.orchestrate.remote"  # `--repaired`: the repair sent on to each node's own history


def _put_on_record(app: App, names: list[str], repaired: str | None, gpu_reset: str | None, mode: str) -> None:
    """--repaired and --gpu-reset: the repair or the GPU resets of the nodes on record, each said on stderr."""
    if repaired is None and gpu_reset is None:
        return
    repairs = importlib.import_module(REPAIRS)
    if gpu_reset is not None:
        repairs.reset_gpus(gpu_reset)  # a usage error before a repair is written
    if repaired is not None:
        _record_repairs(app, repairs, names, repaired, mode)
    if gpu_reset is not None:
        for reset in repairs.record_gpu_resets(app.config.main, names, gpu_reset):
            click.echo(f"hc: reset of {reset.node}'s {reset.gpu or 'GPUs'} on record ({reset.at}, by {reset.by})",
                       err=True)


def _record_repairs(app: App, repairs, names: list[str], text: str, mode: str) -> None:
    """The repairs on record here, then sent to each node's own history (what its `hc health`
    reads), then audited with where each reached; each node's outcome said on stderr."""
    done = repairs.new_repairs(names, text)
    repairs.record_in_history(app.config.main, done)
    sender = os.uname().nodename.split(".", 1)[0]
    payloads = {r.node: repairs.repair_payload(r, sender) for r in done}
    on_node = importlib.import_module(REMOTE).record_repairs_on_nodes(app.config, done, payloads, mode=mode)
    repairs.audit_repairs(app.config.main, done, on_node)
    for repair in done:
        click.echo(f"hc: repair of {repair.node} on record ({repair.at}, by {repair.by}): {repair.text}; "
                   f"on the node: {on_node.get(repair.node, 'not sent')}", err=True)


def _record_own_repair(app: App, payload: str) -> int:
    """--local --record-repair JSON: a repair of this node, sent by the hc that put it on record
    elsewhere, on record in this node's own history; the outcome as one JSON line."""
    outcome = importlib.import_module(REPAIRS).record_own_repair(app.config.main, this_node_name(), payload)
    click.echo(json.dumps(outcome, sort_keys=True))
    return 0


def since_option(fn):
    return click.option("--since", default="boot", show_default=True,
                        help="Kernel-log window for Xid events: 'boot', an ISO 8601 time or epoch seconds "
                             "(1970 to 9999; a time in the future is read as asked, with a warning).")(fn)


def mode_option(fn):
    return click.option("--mode", type=click.Choice(["auto", "agent", "agentless"]), default="auto", show_default=True,
                        envvar="HC_MODE",
                        help="Remote nodes: run hc on the node (agent), or run the tools over SSH and parse them "
                             "here (agentless); auto uses the agent where hc is installed.")(fn)


@click.command()
@click.argument("nodes", nargs=-1, shell_complete=complete_nodes)
@click.option("--local", "local", is_flag=True, help="Check the machine hc runs on.")
@tier_option()
@click.option("--checks", "only", default="", help="Only these checks or families, comma-separated (e.g. ib,net.mtu).")
@since_option
@mode_option
@click.option("--repaired", "repaired", default=None, metavar="TEXT",
              help="Put a repair of NODES on record first (history and audit log: Xid escalation, counter rates "
                   "and trends start again from it), also in each node's own history where hc runs on it "
                   "(agent mode), then check them: the run that shows the repair worked.")
@click.option("--gpu-reset", "gpu_reset", default=None, metavar="GPUS",
              help="Put a reset of these GPUs of NODES on record first (nvidia-smi -r; 'all', indexes 3,5 or "
                   "PCI bus ids): the same Xid logged after it counts as a recurrence, as after a reboot "
                   "(hc cannot see a GPU reset by itself), then check them.")
@click.option("--record-repair", "record_repair", default=None, hidden=True,
              help="With --local: put on record in this node's history a repair another hc sent (its JSON).")
@config_option
@format_option
@output_option
@prometheus_option
@fail_level_option
def node(nodes: tuple[str, ...], local: bool, tier: str, only: str, since: str, mode: str, repaired: str | None,
         gpu_reset: str | None, record_repair: str | None, config_path: Path | None, fmt: str, output: Path | None,
         prometheus_to: Path | None, fail_level: str) -> int:
    """Check nodes: NODES (hostlists, e.g. gpu017 'gpu[001-004]') over SSH, or --local this machine."""
    if not local and not nodes:
        raise click.UsageError("name the nodes to check, or use --local for this machine")
    if local and nodes:
        raise click.UsageError("--local checks this machine; do not name nodes with it")
    if local and repaired is not None:
        raise click.UsageError("--repaired names the nodes repaired: use it with NODES, not --local")
    if local and gpu_reset is not None:
        raise click.UsageError("--gpu-reset puts a reset of NODES' GPUs on record: use it with NODES, not --local")
    if record_repair is not None and not local:
        raise click.UsageError("--record-repair is hc's own, sent to a node's hc with --local")
    app = App(config_path, fmt)
    if record_repair is not None:
        return _record_own_repair(app, record_repair)
    checks = [s for s in only.split(",") if s]
    if local:
        return run_local(app, tier=tier, only=checks, since=since, output=output, prometheus_to=prometheus_to,
                         fail_level=fail_level)
    prom = prometheus_dir(app, prometheus_to, "node")

    names = expand(nodes)
    if not names:  # '' or "$EMPTY": checking nothing must not read as healthy
        raise click.UsageError(f"no node to check: {' '.join(repr(n) for n in nodes)} names no node")
    select(tier, checks)  # unknown check names are a usage error before anything runs
    _put_on_record(app, names, repaired, gpu_reset, mode)
    many = importlib.import_module(MANY_NODES)
    request = many.RunRequest(names, command="node", via="ssh", mode=mode, tier=tier, only=checks,
                              since=parse_since(since))
    run = many.run_many(app.config, request, on_done=importlib.import_module(PROGRESS).progress_printer(len(names)))
    for warning in run.warnings:
        click.echo(f"hc: warning: {warning}", err=True)
    lost = [e for e in (export_prometheus(app, run.report, prom),) if e is not None]
    shown = app.emit_report(run.report, output=output, lost=lost)
    return int(exit_code_for(shown.status, fail_level))
