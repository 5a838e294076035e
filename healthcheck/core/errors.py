"""Errors that end a command with a one-line message, and the documented exit codes."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Process exit codes: Nagios convention for results, a code of its own for bad input."""

    OK = 0  # every check passed (or only WARN without --fail-level warn)
    WARN = 1  # worst status WARN and --fail-level warn
    FAIL = 2  # at least one FAIL: evidence that a node is bad
    ERROR = 3  # no FAIL, but a check could not run (Nagios UNKNOWN)
    BAD_INPUT = 4  # usage error, invalid configuration, unreadable or unparsable input
    GUARD = 5  # an action policy refused to act (blast-radius guard)


class HcError(Exception):
    """An error with a one-line message for the operator and an exit code."""

    exit_code: ExitCode = ExitCode.BAD_INPUT


class UsageError(HcError):
    """The command line asks for something that cannot be done."""


class ConfigError(HcError):
    """The configuration is missing, malformed or inconsistent.

    The message names the file, line and key where that is known.
    """


class ParseError(HcError):
    """A parser could not make sense of a tool's output.

    Parsers raise it; probes turn it into a check ERROR, and `hc parse` into exit 4.
    """


class FragmentError(ParseError):
    """The text holds a tool's values without what names them: a CSV's header (which column
    is which: a fragment whose cut took it, or `--format=csv,noheader`), a record's name line
    or a row's node list (whose values they are). Reading them would be a guess; refused as
    any ParseError (exit 4), this class says why (tests/field/mutate.py counts the facts of
    a fragment so refused after a cut as not in the text)."""
