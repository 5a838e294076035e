"""Who is a victim: a rank whose error a collective raised, or that waited where its peers
waited, failed because of another rank and is never named as the cause.

* raised_by_collective: an exception is a rank's own-code death only where its
  traceback's innermost frames are the job's own code. One raised inside a
  torch.distributed collective (gloo's size check, a peer's `Connection closed`, a
  timeout) is the collective's, whatever its words say; init_process_group's own checks
  (a launch variable not set) are the rank's, unless their words are a peer's (a store
  timeout).
* spoke_of_failure: ranks whose own output holds a collective's failure (a gloo transport
  error, a watchdog timeout, a backend error) or the store's connection lost under it
  (`recvValue failed on SocketImpl(...): Connection reset by peer`: the store's host died
  first): a rank that printed gloo's size abort did not "leave the job without a word",
  even where the launcher's prefixes cut its C++ `terminate called` line apart so no
  exception is read from it.

A rank whose first error is a peer error inside a collective within a second of its
peers' timeouts waited with them (postmortem.cut_short): the stuck rule's "ranks that did
not time out" leaves it out (stuck.py).
"""

from __future__ import annotations

from healthcheck.diagnose.analysis import fact_rank
from healthcheck.diagnose.sources import Collected
from healthcheck.parsers.torch_log.mpireports import INIT_CALL

# gloo facts that are a collective's failure seen by the rank that printed them
_GLOO_FAILURES = ("size-mismatch", "timeout", "peer-closed", "read-error", "write-error")


# torch.distributed functions that set a rank up rather than wait on its peers: an exception
# they raise without a collective's words (`environment variable RANK expected, but not
# set`) is the rank's own launch failing, not a peer's doing
# MPI_Init is MPI's (an MPI runtime's fatal error in PMPI_Init: parsers/torch_log/mpireports.py)
_SETUP = frozenset({"init_process_group", "_new_process_group_helper", "new_group", "new_subgroups", INIT_CALL})


# torch.distributed functions that turn the rank's own objects into bytes before any
# exchange (all_gather_object, gather_object, broadcast_object_list, send_object_list...
# pickle through them): an exception they raise ("cannot pickle 'generator' object") is
# the rank's own argument refused, not a peer's doing
_OWN_INPUT = frozenset({"_object_to_tensor"})


def raised_by_collective(words_say_collective: bool, collective: str) -> bool:
    """An exception a collective raised: its words are a collective's error, or its
    traceback ends inside a torch.distributed function (`collective`: the function the
    innermost frames are in, empty where the job's own code is innermost) that waits on
    peers (not one that sets the rank up, _SETUP, nor one that pickles its own objects,
    _OWN_INPUT)."""
    return words_say_collective or (bool(collective) and collective not in _SETUP | _OWN_INPUT)


def spoke_of_failure(col: Collected) -> set[int]:
    """Ranks whose own lines report a collective's failure (see the module's docstring)."""
    out: set[int] = set()
    for f in col.evidence.torch_logs:
        if f.log is None:
            continue
        log = f.log
        facts: list[object] = [g for g in log.gloo if g.kind in _GLOO_FAILURES]
        facts += [*log.timeouts, *log.backend_errors, *log.aborts, *log.mismatches, *log.store_lost]
        out |= {r for r in (fact_rank(x, f.rank) for x in facts) if r is not None}
    return out


__all__ = ["raised_by_collective", "spoke_of_failure"]
