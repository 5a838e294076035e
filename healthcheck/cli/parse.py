"""`hc parse TOOL [FILE|-]`: run one parser over a captured output and print its facts."""

from __future__ import annotations

import sys

import click

from healthcheck.parsers import BINARY_TOOLS, TOOLS


@click.command(epilog="Tools: " + ", ".join(f"{k} ({v[2]})" for k, v in TOOLS.items()))
@click.argument("tool", type=click.Choice(sorted(TOOLS)))
@click.argument("file", required=False)
@click.option("--format", "fmt", type=click.Choice(["json"]), default="json", show_default=True,
              help="Output format.")
def parse(tool: str, file: str | None, fmt: str) -> int:
    """Parse FILE (or stdin with -) as the output of TOOL and print the facts as JSON.

    For outputs pasted into tickets and logs analysed offline. Without FILE, stdin is
    read when it is a pipe or a file. Unparsable, empty or oversized input exits 4 with
    a one-line reason.
    """
    from healthcheck.cli.app import App
    from healthcheck.core.errors import HcError
    from healthcheck.parsers import parser_for

    data, source = _read_input(tool, file)
    if tool in BINARY_TOOLS:  # a pickle: the parser reads it as data, without running anything in it
        facts = parser_for(tool)(data)
    else:
        text = data.decode("utf-8", errors="replace")
        if "\x00" in text:
            raise HcError(f"{source}: binary data, not the text output of {tool}")
        facts = parser_for(tool)(text)
    App(fmt=fmt).emit_json({"tool": tool, "source": source, "facts": facts})
    return 0


def _read_input(tool: str, file: str | None) -> tuple[bytes, str]:
    """(bytes, source name) of FILE or stdin, capped; a device is refused, a pipe
    (`<(ibstat)`) is read, and a terminal is never waited on unless asked with `-`."""
    from healthcheck.core.errors import UsageError
    from healthcheck.core.inputs import TOOL_OUTPUT_MAX_BYTES, read_bounded, read_stdin_bounded

    what = f"{tool} output"
    if file is None and sys.stdin.isatty():
        raise UsageError(f"no input: give the file holding the {tool} output, or - to read stdin")
    if file is None or file == "-":
        return read_stdin_bounded(TOOL_OUTPUT_MAX_BYTES, what=what), "stdin"
    return read_bounded(file, TOOL_OUTPUT_MAX_BYTES, what=what, allow_fifo=True), file
