"""`hc completion bash|zsh|fish`: Click's completion script for hc, and `complete_nodes`,
the completer of every argument that names nodes (`hc node NODES`, `hc sweep --nodes`,
`hc diagnose hosts HOSTLIST`, `hc config show NODE`).

Node names come from the config's hostlists (`nodes`, `rails`, `overrides`), then from
`sinfo -h -o %N` where Slurm answers within SINFO_TIMEOUT_S. A TAB must never hang or
break the shell: the work is bounded (at most MAX_SCAN names expanded, larger patterns
left out), a config that cannot be read gives no names, and any failure gives fewer
candidates, never an error. This module imports only click at load time: node.py,
sweep.py and diagnose.py import it for `complete_nodes`.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Iterator
from os.path import commonprefix
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from healthcheck.cli import cli
from healthcheck.core.config.loader import default_config_path
from healthcheck.core.config.yamlsrc import load_yaml
from healthcheck.core.nodes import HostlistError, is_valid_node_name, parse_hostlist
from healthcheck.runners.local import run_command

if TYPE_CHECKING:  # pragma: no cover
    from click.shell_completion import CompletionItem

SHELLS = ("bash", "zsh", "fish")
PROG_NAME = "hc"
COMPLETE_VAR = "_HC_COMPLETE"  # what click derives from the program name; the scripts set it

# Bounds on one TAB. Expanding a hostlist costs ~1.3 us a name in ClusterShell (20,000
# names: ~26 ms); a pattern larger than what is left of MAX_SCAN is skipped, not cut.
MAX_SCAN = 20_000
# More matches than this and the shell gets the distinct next characters instead (see
# _narrow): a list cut at the first N names would make bash complete a prefix only
# those N share.
MAX_CANDIDATES = 200
SINFO_TIMEOUT_S = 1.0  # a login node's sinfo answers in tens of ms; a dead controller never
SINFO_MAX_CHARS = 1024 * 1024  # folded hostlists, one per partition and state
MAX_HOSTLISTS = 5_000  # from each source: far above a cluster's partitions and config patterns
_PARSE_COST = 50  # parsing one bracketed hostlist costs what expanding ~50 names does (~80 us)
MAX_HOSTLIST_CHARS = 65536  # what parse_hostlist accepts

# one comma-separated term of a hostlist in plain form: text and [ranges], no operators
_PLAIN_TERM = re.compile(r"[A-Za-z0-9._-]*(?:\[[0-9,/-]*\][A-Za-z0-9._-]*)*")


@click.command()
@click.argument("shell", type=click.Choice(SHELLS))
def completion(shell: str) -> None:
    """Print the completion script for SHELL. Enable it with

    \b
      bash:  eval "$(hc completion bash)"   in ~/.bashrc, or save it as
             /etc/bash_completion.d/hc (every user)
      zsh:   eval "$(hc completion zsh)"    in ~/.zshrc, after compinit
      fish:  hc completion fish > ~/.config/fish/completions/hc.fish

    Node arguments complete from the config's hostlists and, where Slurm answers within
    a second, from sinfo.
    """
    from click.shell_completion import get_completion_class  # noqa: PLC0415 -- cli.completion loads for hc node

    complete_class = get_completion_class(shell)
    if complete_class is None:  # pragma: no cover -- click ships all three
        raise click.UsageError(f"click has no completion for {shell}")
    click.echo(complete_class(cli, {}, PROG_NAME, COMPLETE_VAR).source())


def complete_nodes(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """click's shell_complete= for node arguments: names from the config and sinfo."""
    from click.shell_completion import CompletionItem  # noqa: PLC0415 -- on TAB only, never for a run

    try:
        already = ctx.params.get(param.name or "")
        given = set(already) if isinstance(already, (tuple, list)) else set()
        names = node_candidates(incomplete, ctx.params.get("config_path"))
        return [CompletionItem(name) for name in names if name not in given]
    except Exception:  # a failed completion offers nothing; the shell must not see a traceback
        return []


def node_candidates(incomplete: str, config_path: Path | None = None, *,
                    sinfo_timeout_s: float = SINFO_TIMEOUT_S) -> list[str]:
    """The node names that complete `incomplete` (after its last comma, so the rest of a
    hostlist being typed is kept), at most MAX_CANDIDATES of them."""
    head, sep, tail = incomplete.rpartition(",")
    if "[" in tail:  # a range being typed: no name starts with it
        return []
    prefix = head + sep
    patterns, sinfo = _config_hostlists(config_path)
    budget = _Budget(MAX_SCAN)
    found: dict[str, None] = {}
    for name in _matching(patterns, tail, budget):
        found.setdefault(name)
    if budget.left > 0:
        for name in _matching(_sinfo_hostlists(sinfo, sinfo_timeout_s), tail, budget):
            found.setdefault(name)
    return [prefix + name for name in _narrow(list(found), MAX_CANDIDATES)]


class _Budget:
    def __init__(self, names: int) -> None:
        self.left = names


def _config_hostlists(config_path: Path | None) -> tuple[list[str], str]:
    """The hostlist patterns of the main config (nodes, rails, overrides) and its sinfo
    command. Only the main file is read, and only as YAML: a fabric that does not
    validate must not cost the operator completion."""

    try:
        data: Any = load_yaml(Path(config_path) if config_path is not None else default_config_path()).data
    except Exception:  # missing, unreadable, malformed: no names from it; sinfo may still answer
        return [], "sinfo"
    if not isinstance(data, dict):
        return [], "sinfo"
    patterns = [key for section in ("nodes", "rails", "overrides")
                if isinstance(data.get(section), dict) for key in data[section] if isinstance(key, str)]
    slurm = data.get("slurm")
    sinfo = slurm.get("sinfo") if isinstance(slurm, dict) else None
    return patterns, sinfo if isinstance(sinfo, str) and sinfo else "sinfo"


def _sinfo_hostlists(sinfo: str, timeout_s: float) -> list[str]:
    """Slurm's node names as folded hostlists, one per line; [] when sinfo is missing,
    slow (its process group is killed at the timeout) or fails."""

    result = run_command((sinfo, "-h", "-o", "%N"), timeout_s=timeout_s)
    if not result.ok:
        return []
    return [line.strip() for line in result.stdout[:SINFO_MAX_CHARS].splitlines() if line.strip()]


def _matching(hostlists: Iterable[str], tail: str, budget: _Budget) -> Iterator[str]:
    """Names from `hostlists` that start with `tail`, for at most budget.left names' worth of work."""

    for text in itertools.islice(hostlists, MAX_HOSTLISTS):
        if len(text) > MAX_HOSTLIST_CHARS:
            continue
        for term in _terms(text, tail):
            if budget.left <= 0:
                return
            if "[" not in term and is_valid_node_name(term):  # one name (a per-node override): no parsing
                budget.left -= 1
                if term.startswith(tail):
                    yield term
                continue
            budget.left -= _PARSE_COST  # thousands of small patterns must not add up to seconds
            try:
                hostlist = parse_hostlist(term)
                if hostlist.size_bound > budget.left:
                    continue  # too many to expand on a TAB; smaller patterns still count
                # only the names that start with what is typed are built (a TAB on a
                # 10,000-node pattern expanded all of them: ~0.2 s of the shell's wait)
                names = hostlist.names_starting(tail)
            except HostlistError:
                continue
            budget.left -= hostlist.size_bound
            yield from (n for n in names if is_valid_node_name(n))


def _terms(text: str, tail: str) -> list[str]:
    """`text` split into its comma-separated terms, without those that cannot name a node
    starting with `tail` (their text before the first bracket says so); a hostlist with
    operators or @groups stays whole, for ClusterShell."""
    terms = _split_top(text)
    if terms is None or not all(_PLAIN_TERM.fullmatch(t.strip()) for t in terms):
        return [text]  # parse_hostlist says what is wrong with it, or hands it to ClusterShell
    kept = []
    for term in (t.strip() for t in terms):
        literal = term.split("[", 1)[0]
        if literal.startswith(tail) or tail.startswith(literal):
            kept.append(term)
    return kept


def _split_top(text: str) -> list[str] | None:
    """`text` split at the commas outside brackets, in one pass (a regex with a bracket
    alternative rescans the rest of the line from every unclosed "["); None for nested or
    unbalanced brackets."""
    terms, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
            if depth > 1:
                return None
        elif ch == "]":
            depth -= 1
            if depth < 0:
                return None
        elif ch == "," and depth == 0:
            terms.append(text[start:i])
            start = i + 1
    if depth:
        return None
    terms.append(text[start:])
    return terms


def _narrow(names: list[str], cap: int) -> list[str]:
    """`names` when there are at most `cap`; else each distinct prefix one character past
    their common prefix ("gpu0", "gpu1", ...): the shell then completes only what every
    match shares, and the next TAB narrows further."""
    if len(names) <= cap:
        return names

    n = len(commonprefix(names)) + 1
    return sorted({name[:n] for name in names})
