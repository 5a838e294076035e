"""A torch.distributed rendezvous that leaves its port free when it ends.

Two users open a process group on a port something else will listen on right after:
the job wrapper's straggler test (the job's own store comes next, on MASTER_PORT) and
the pair workers of a deep sweep (`hc bw serve`: the next test's store, on the fabric's
pair port, possibly in the same process a moment later). Rank 0 serves a TCPStore there
itself, under a key prefix of the caller's, so nothing written by one rendezvous can be
read by another; when done, no rank may leave before rank 0's store is gone: each tells
rank 0 it is done and waits until the store stops answering (`part`), rank 0 waits for
all of them, drops its store and checks that the port can be listened on again
(`wait_port_free`). Both waits are bounded.
"""

from __future__ import annotations

import errno
import gc
import socket
import time
from datetime import timedelta
from typing import Any

HANDSHAKE_S = 15.0  # the most the closing handshake and the port's release may take


def open_store(dist: Any, addr: str, port: int, world_size: int, serve: bool, timeout_s: float,
               prefix: str) -> tuple[Any, Any]:
    """(the TCPStore, a PrefixStore over it): `serve` (rank 0, unless torchrun's agent
    serves one already) listens on addr:port, the others connect."""
    base = dist.TCPStore(addr, port, world_size if serve else None, serve, timeout=timedelta(seconds=timeout_s),
                         wait_for_workers=False)
    return base, dist.PrefixStore(prefix, base)


def part(store: Any, rank: int, world: int, limit_s: float = HANDSHAKE_S) -> None:
    """Leave the store rank 0 serves: no rank leaves before it is gone (module doc)."""
    deadline = time.monotonic() + limit_s
    try:
        if rank != 0:
            store.add("hc/left", 1)
            while time.monotonic() < deadline:  # until rank 0's store stops answering
                store.check(["hc/left"])
                time.sleep(0.02)
            return
        while store.add("hc/left", 0) < world - 1 and time.monotonic() < deadline:
            time.sleep(0.02)
    except Exception:
        return  # the store is gone: what a leaving rank waits for


def wait_port_free(port: int, limit_s: float = HANDSHAKE_S) -> None:
    """Rank 0, its store dropped: until the port can be listened on again (bounded)."""

    gc.collect()  # the store's last reference may sit in a cycle: its socket closes with it
    deadline = time.monotonic() + limit_s
    while port_in_use(port) and time.monotonic() < deadline:
        time.sleep(0.05)


def port_in_use(port: int, addresses: tuple[str, ...] = ("0.0.0.0", "::")) -> str | None:
    """Why `port` cannot be listened on as torch's TCPStore does (SO_REUSEADDR, the wildcard
    address), or None when it can. An address family this host lacks is skipped."""
    for address in addresses:
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        try:
            s = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue
        with s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((address, port))
                s.listen(1)
            except OSError as exc:
                if exc.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
                    continue
                return exc.strerror or str(exc)
    return None
