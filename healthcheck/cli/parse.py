"""`hc parse TOOL [FILE|-]`: run one parser over a captured output and print its facts."""

from __future__ import annotations

import sys

import click

from healthcheck.parsers import TOOLS


@click.command(epilog="Tools: " + ", ".join(f"{k} ({v[2]})" for k, v in TOOLS.items()))
@click.argument("tool", type=click.Choice(sorted(TOOLS)))
@click.argument("file", default="-")
@click.option("--format", "fmt", type=click.Choice(["json"]), default="json", show_default=True,
              help="Output format.")
def parse(tool: str, file: str, fmt: str) -> int:
    """Parse FILE (or stdin with -) as the output of TOOL and print the facts as JSON.

    For outputs pasted into tickets and logs analysed offline. Unparsable input exits 4
    with a one-line reason.
    """
    from healthcheck.cli.app import App
    from healthcheck.core.errors import HcError
    from healthcheck.parsers import parser_for

    if file == "-":
        data = sys.stdin.buffer.read()
        source = "stdin"
    else:
        try:
            with open(file, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise HcError(f"{file}: cannot read: {exc.strerror or exc}") from None
        source = file
    text = data.decode("utf-8", errors="replace")
    if "\x00" in text:
        raise HcError(f"{source}: binary data, not the text output of {tool}")
    facts = parser_for(tool)(text)
    App(fmt=fmt).emit_json({"tool": tool, "source": source, "facts": facts})
    return 0
