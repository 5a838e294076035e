"""The progress bar of a run over many nodes: the CLI's concern, so orchestration only
calls back when a node is done."""

from __future__ import annotations

import sys
from collections.abc import Callable

from healthcheck.core.model import NodeResult


def progress_printer(total: int) -> Callable[[str, NodeResult], None] | None:
    """A progress bar on a terminal (stderr), nothing otherwise."""
    if not sys.stderr.isatty():
        return None
    import threading

    import click

    bar = click.progressbar(length=total, label="checking", file=sys.stderr, show_pos=True)
    bar.__enter__()
    done = [0]
    lock = threading.Lock()  # workers finish from many threads at once

    def on_done(node: str, result: NodeResult) -> None:
        with lock:
            done[0] += 1
            bar.update(1)
            if done[0] == total:
                bar.__exit__(None, None, None)

    return on_done
