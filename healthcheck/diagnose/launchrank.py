"""A wrong RANK or WORLD_SIZE on one rank, read from what the store says (init-failure).

* The store's host (rank 0) times out `J/W clients joined` where J is every rank the logs
  hold (ranks 0..J-1, each heard) and W is larger: every process that exists joined, and
  the host waits for more. Its WORLD_SIZE is W where the job has J: the host is named.
  (A node whose ranks never started and left no log reads the same: the finding says so.)
* Every rank heard, the store's host included, times out waiting for one key
  `.../K` of a rank K that is heard (its own file or label says K): every process joined
  the store, but none published rank K. The process heard as K runs under another RANK
  (two processes share one): rank K is named.

* A rank that waits for the key of a rank no peer needed: a peer that finished init and
  went on into a collective had every key of its world published, so the rank awaited is
  not in its world and the waiter's WORLD_SIZE is larger (startup.py names it; captured
  with torch 2.13, tests/fixtures/diagnose/rules8, where the other ranks left no log).

* The store host's message in the output of a rank K > 0: K runs as RANK 0 (only RANK 0
  hosts the store under env://); the real rank 0's `address already in use` is the
  consequence, not its own failure: K is named, not 0.

Where none holds the text cannot say which rank's setting differs: init-failure names
none (startup.py), as before.
"""

from __future__ import annotations

import re

from healthcheck.diagnose.analysis import fact_rank, log_evidence
from healthcheck.diagnose.findings import Evidence
from healthcheck.diagnose.logfacts import first_errors, ranks_heard
from healthcheck.diagnose.setupdeath import SETUP_FUNCTIONS
from healthcheck.diagnose.sources import Collected

_JOINED = re.compile(r"(\d{1,7})/(\d{1,7}) clients joined")


def awaited_rank(message: str) -> int | None:
    """`wait timeout after 4000ms, keys: /default_pg/0//cpu//0/3` -> 3 (one key only)."""
    keys = message.partition("keys: ")[2].strip()
    tail = keys.rsplit("/", 1)[-1] if keys.count(",") == 0 and "/" in keys else ""
    return int(tail) if tail.isascii() and tail.isdigit() and len(tail) < 8 else None


def _store_lines(col: Collected) -> tuple[list[tuple[int | None, Evidence, str]], dict[int, tuple[int, Evidence]]]:
    """(the store host's `J/W clients joined` lines: rank, evidence, message), and each
    rank's awaited key: rank -> (K, evidence)."""
    hosts: list[tuple[int | None, Evidence, str]] = []
    waits: dict[int, tuple[int, Evidence]] = {}
    for f in col.evidence.torch_logs:
        if f.log is None:
            continue
        for z in f.log.rendezvous:
            rank = fact_rank(z, f.rank)
            item = log_evidence(col, f.source, z.line, f"rendezvous/store {z.kind}: {z.message}", rank)
            if z.kind == "clients-timeout":
                hosts.append((rank, item, z.message))
            elif z.kind == "wait-timeout" and rank is not None:
                key = awaited_rank(z.message)
                if key is not None:
                    waits.setdefault(rank, (key, item))
    return hosts, waits


def store_host_world(col: Collected) -> tuple[int, list[Evidence], str] | None:
    """The store's host whose WORLD_SIZE is larger than the job (see the docstring)."""
    heard = ranks_heard(col)
    hosts, _ = _store_lines(col)
    if not heard or heard != set(range(len(heard))) or len(hosts) != 1:
        return None
    rank, item, message = hosts[0]
    m = _JOINED.search(message)
    if rank is None or m is None:
        return None
    joined, wanted = int(m.group(1)), int(m.group(2))
    if joined != len(heard) or wanted <= joined:
        return None
    return rank, [item], (f"its WORLD_SIZE is {wanted}: the store it hosts waited for {wanted} clients, and all "
                          f"{joined} ranks of the job (0-{joined - 1}, each in the logs) joined it (unless "
                          f"{wanted - joined} more ranks ran and left no log here)")


def unpublished_rank(col: Collected) -> tuple[int, list[Evidence], str] | None:
    """The rank heard whose key no process published (see the docstring)."""
    heard = ranks_heard(col)
    hosts, waits = _store_lines(col)
    keys = {k for k, _ in waits.values()}
    if hosts or len(heard) < 2 or set(waits) != heard or len(keys) != 1:
        return None
    (key,) = keys
    if key not in heard:
        return None  # a rank nobody knows: startup's "beyond the world"
    items = [waits[key][1]] + [item for r, (_, item) in sorted(waits.items()) if r != key][:3]
    return key, items, (f"every rank, rank {key} too, timed out in the store waiting for rank {key}'s key: all "
                        f"joined the store but none published rank {key}, so the process launched as rank "
                        f"{key} runs under another RANK (two processes share one)")


def ranks_past_setup(col: Collected) -> set[int]:
    """Ranks whose first error was raised inside a collective past the process group's
    setup: they finished init, every key of their world was published."""
    return {r for r, e in first_errors(col).items() if e.collective and e.collective not in SETUP_FUNCTIONS}


def store_host_impostor(col: Collected) -> tuple[int, list[Evidence], str] | None:
    """A rank K > 0 whose own output holds the store host's `J/W clients joined`: under
    env:// only RANK 0 hosts the store, so K runs as RANK 0; the real rank 0 then could
    not listen on the port K took (its `address already in use` is the consequence)."""
    hosts, _ = _store_lines(col)
    if len(hosts) != 1 or hosts[0][0] in (None, 0):
        return None
    rank, item, _message = hosts[0]
    assert rank is not None
    return rank, [item], (f"its output holds the store host's message, and only RANK 0 hosts the store: rank {rank} "
                          "runs as RANK 0 (two processes claim it; the other could not listen on the port it took)")


def wrong_launch(col: Collected) -> tuple[int, list[Evidence], str] | None:
    """The rank whose RANK or WORLD_SIZE differs, with its evidence and why, or None."""
    return store_host_impostor(col) or store_host_world(col) or unpublished_rank(col)


__all__ = ["awaited_rank", "ranks_past_setup", "store_host_impostor", "store_host_world", "unpublished_rank",
           "wrong_launch"]
