"""`hc parse TOOL [FILE|-]`: run one parser over a captured output and print its facts."""

from __future__ import annotations

import sys

import click

from healthcheck.cli.app import App
from healthcheck.core.errors import HcError, ParseError, UsageError
from healthcheck.core.inputs import TOOL_OUTPUT_MAX_BYTES, read_bounded, read_stdin_bounded
from healthcheck.parsers import BINARY_TOOLS, TOOLS, parser_for
from healthcheck.parsers.explain import explain, render


@click.command(epilog="Tools: " + ", ".join(f"{k} ({v[2]})" for k, v in TOOLS.items()))
@click.argument("tool", type=click.Choice(sorted(TOOLS)))
@click.argument("file", required=False)
@click.option("--format", "fmt", type=click.Choice(["json", "table"]), default=None,
              help="Output format: json (the default), or table (the default with --explain).")
@click.option("--explain", is_flag=True,
              help="Say which of the parser's handlers read each line, and which lines none read "
                   "(a table; with --format json, an 'explain' key beside the facts). Send it with a "
                   "sample hc reads wrongly.")
def parse(tool: str, file: str | None, fmt: str | None, explain: bool) -> int:
    """Parse FILE (or stdin with -) as the output of TOOL and print the facts as JSON.

    For outputs pasted into tickets and logs analysed offline. Without FILE, stdin is
    read when it is a pipe or a file. Unparsable, empty or oversized input exits 4 with
    a one-line reason (with --explain, after the explanation).
    """

    if fmt == "table" and not explain:
        raise UsageError("--format table shows an explanation: add --explain (the facts are JSON)")
    data, source = _read_input(tool, file)
    payload = data if tool in BINARY_TOOLS else _text_of(data, tool, source)
    if explain:
        return _explain(tool, source, payload, fmt or "table")
    facts = parser_for(tool)(payload)
    App(fmt="json").emit_json({"tool": tool, "source": source, "facts": facts})
    return 0


def _text_of(data: bytes, tool: str, source: str) -> str:
    """A text tool's input as text; NUL bytes say it is binary, no output of the tool.
    (A BINARY_TOOLS pickle stays bytes: its parser reads it as data, running nothing in it.)"""

    text = data.decode("utf-8", errors="replace")
    if "\x00" in text:
        raise HcError(f"{source}: binary data, not the text output of {tool}")
    return text


def _explain(tool: str, source: str, payload: str | bytes, fmt: str) -> int:
    """The parse with which handler read each line; a refusal still exits 4, after it."""

    facts, explanation = explain(tool, parser_for(tool), payload)
    if fmt == "json":
        App(fmt="json").emit_json({"tool": tool, "source": source, "facts": facts, "explain": explanation})
    else:
        click.echo(render(tool, source, explanation))
    if explanation.refused:
        raise ParseError(explanation.refused)
    return 0


def _read_input(tool: str, file: str | None) -> tuple[bytes, str]:
    """(bytes, source name) of FILE or stdin, capped; a device is refused, a pipe
    (`<(ibstat)`) is read, and a terminal is never waited on unless asked with `-`."""

    what = f"{tool} output"
    if file is None and sys.stdin.isatty():
        raise UsageError(f"no input: give the file holding the {tool} output, or - to read stdin")
    if file is None or file == "-":
        return read_stdin_bounded(TOOL_OUTPUT_MAX_BYTES, what=what), "stdin"
    return read_bounded(file, TOOL_OUTPUT_MAX_BYTES, what=what, allow_fifo=True), file
