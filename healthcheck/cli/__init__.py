"""The `hc` command line. Subcommands are imported only when invoked, so `hc --help`
and `hc prologue` stay fast."""

from __future__ import annotations

import importlib
import sys
from typing import Any, Optional

import click

from healthcheck import __version__

# name -> (module, attribute, one-line help): listed here so `hc --help` needs no imports
COMMANDS: dict[str, tuple[str, str, str]] = {
    "node": ("healthcheck.cli.node", "node", "Check nodes: this one (--local) or named ones over SSH."),
    "sweep": ("healthcheck.cli.sweep", "sweep", "Check many nodes (hostlist, hostfile, partition); fleet findings; --act."),
    "checks": ("healthcheck.cli.checks", "checks", "The catalogue of checks and finding IDs."),
    "config": ("healthcheck.cli.config", "config", "Validate the configuration; show a node's limits."),
    "parse": ("healthcheck.cli.parse", "parse", "Parse a captured tool output and print its facts."),
    "prologue": ("healthcheck.cli.hooks", "prologue", "Slurm Prolog: quick checks before a job; drain on FAIL."),
    "epilogue": ("healthcheck.cli.hooks", "epilogue", "Slurm Epilog: what the job left behind; drain on FAIL."),
    "health": ("healthcheck.cli.hooks", "health", "HealthCheckProgram/cron: check, drain on FAIL, resume when fixed."),
    "gpu": ("healthcheck.cli.gpu", "gpu", "Record NVML on a GPU node, for replay where there are none."),
    "report": ("healthcheck.cli.report", "report", "Saved reports: show one, diff two runs, list the run history."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> Optional[click.Command]:
        if name not in COMMANDS:
            return None
        module, attr, _ = COMMANDS[name]
        return getattr(importlib.import_module(module), attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][2]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


EPILOG = """\b
Exit codes:
  0  healthy (or only WARN without --fail-level warn)
  1  WARN with --fail-level warn
  2  FAIL: evidence that a node is bad
  3  ERROR: a check could not run (and nothing failed)
  4  usage, configuration or input error
  5  an action was refused by the blast-radius guard

Environment: HC_CONFIG (config file), HC_NODE_NAME (this node's name),
HC_FORMAT (table|json), HC_NVML_REPLAY (replay an NVML recording instead of
NVML), HC_DEBUG=1 (tracebacks for internal errors)."""


@click.group(cls=LazyGroup, epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="hc")
def cli() -> None:
    """hc: find broken GPU cluster nodes before jobs do, and take them out safely."""


def main(argv: Optional[list[str]] = None) -> None:
    from healthcheck.core.errors import ExitCode, HcError

    code: Any
    try:
        code = cli.main(args=argv, prog_name="hc", standalone_mode=False)
    except click.exceptions.UsageError as exc:
        if exc.ctx is not None:
            click.echo(exc.ctx.get_usage(), err=True)
        click.echo(f"hc: error: {exc.format_message()}", err=True)
        code = ExitCode.BAD_INPUT
    except click.ClickException as exc:
        click.echo(f"hc: error: {exc.format_message()}", err=True)
        code = ExitCode.BAD_INPUT
    except click.exceptions.Abort:
        click.echo("hc: interrupted", err=True)
        code = 130
    except HcError as exc:
        click.echo(f"hc: error: {exc}", err=True)
        code = exc.exit_code
    except KeyboardInterrupt:
        click.echo("hc: interrupted", err=True)
        code = 130
    except BrokenPipeError:
        code = 0
    except Exception as exc:  # never a traceback for the operator unless asked
        import os

        if os.environ.get("HC_DEBUG") == "1":
            raise
        click.echo(f"hc: internal error: {type(exc).__name__}: {exc} (HC_DEBUG=1 shows the traceback)", err=True)
        code = ExitCode.ERROR
    sys.exit(int(code) if isinstance(code, int) else 0)
