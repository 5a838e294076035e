"""The click group `hc`: its subcommands looked up lazily from COMMANDS, --version, and
what click's own exceptions become (one line, exit 4; the help where it was asked for).
cli/__init__.py's main() runs it for every command line the lean entry (cli/lean.py)
does not take."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

import click

from healthcheck import __version__
from healthcheck.cli import COMMANDS, EPILOG, VERSIONS_MODULE, flushed, interrupted
from healthcheck.cli.echo import echo
from healthcheck.core.errors import ExitCode

if TYPE_CHECKING:  # pragma: no cover
    from click.shell_completion import CompletionItem


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, attr, _ = COMMANDS[name]
        return getattr(importlib.import_module(module), attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][2]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[CompletionItem]:
        """Subcommand names (with their help) from COMMANDS, then the group's options.

        click's own Group.shell_complete looks every subcommand up for its help line, which
        here imports all of them (torch's checks included) on each TAB.
        """

        from click.shell_completion import CompletionItem  # noqa: PLC0415 -- on TAB only; not for hc --help

        items = [CompletionItem(name, help=COMMANDS[name][2]) for name in self.list_commands(ctx)
                 if name.startswith(incomplete)]
        return items + click.Command.shell_complete(self, ctx, incomplete)


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return

    click.echo("\n".join(importlib.import_module(VERSIONS_MODULE).version_lines(__version__)))
    ctx.exit()


@click.group(cls=LazyGroup, epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show hc's version and the Python, torch, NCCL and NVIDIA driver versions it sees, and exit.")
def cli() -> None:
    """hc: find broken GPU cluster nodes before jobs do, and take them out safely."""


# click 8.2+ raises this (a UsageError) for a group invoked alone; older click prints the
# help and exits 0 by itself, and an empty tuple catches nothing
_NO_ARGS_IS_HELP: Any = getattr(click.exceptions, "NoArgsIsHelpError", ())


def invoke(argv: list[str] | None) -> Any:
    """Run the click group on `argv`; click's own exceptions become their exit codes (the
    others, hc's, are main()'s to turn into one line)."""
    try:
        return cli.main(args=argv, prog_name="hc", standalone_mode=False)
    except _NO_ARGS_IS_HELP as exc:
        # `hc`, `hc report`, `hc config` alone: the help the operator asked for, not an error
        echo(exc.ctx.get_help() if exc.ctx is not None else exc.format_message())
        return flushed(ExitCode.OK)
    except click.exceptions.UsageError as exc:
        if exc.ctx is not None:
            echo(exc.ctx.get_usage(), err=True)
        echo(f"hc: error: {exc.format_message()}", err=True)
        return ExitCode.BAD_INPUT
    except click.ClickException as exc:
        echo(f"hc: error: {exc.format_message()}", err=True)
        return ExitCode.BAD_INPUT
    except click.exceptions.Abort:  # click's word for a KeyboardInterrupt (a stop included)
        return interrupted()
