"""A rank whose own exception was raised while its process group was being set up failed
to initialise: init-failure of that rank, not dead-rank.

The dead-rank rule (deaths.py) names the rank whose own exception ended it. Where that
exception's traceback ends inside torch.distributed's setup (init_process_group,
new_group, the process group's construction: gloo's device looking up the interface
GLOO_SOCKET_IFNAME names, the store's rendezvous), the rank never joined the job: the job
failed while starting, and that rank is the one that could not. A store wait that timed
out there is a peer's consequence (the rank waited for one that never came), never this
rank's own setup failing, and keeps the verdict dead-rank. Where MPI_Init failed in the
processes' exchange through the launcher (its error stack's PMI KVS get or fence,
parsers/torch_log/mpireports.py), the rank waited on its peers' entries: the job could not
start, and nothing says whose set-up failed, so no rank is named. A rank dying in its own code
before init_process_group is not this rule's (preinit.py): its traceback never enters
the process group's setup. Nor is a rank that had started: one that logged a training
step, or whose peers' first errors were raised inside a collective past the setup (they
were training with it), and then called init_process_group again on a recovery path
(`ValueError: trying to initialize the default process group twice!`, captured with torch
2.13, tests/fixtures/diagnose/rules8): the job had started, and that rank died in it.
"""

from __future__ import annotations

from healthcheck.diagnose.analysis import fact_rank, log_evidence
from healthcheck.diagnose.findings import Evidence, JobFinding, job_finding
from healthcheck.diagnose.logfacts import first_errors
from healthcheck.diagnose.outofstep import last_steps
from healthcheck.diagnose.setupframes import shared_build
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.stacks import rank_words
from healthcheck.parsers.torch_log.mpireports import EXCHANGE_WORDS, INIT_CALL

# torch.distributed functions (distributed_c10d.py) that set a process group up, and MPI_Init
# (an MPI runtime's fatal error in PMPI_Init: the rank never joined its world, mpireports.py)
SETUP_FUNCTIONS = frozenset({"init_process_group", "_new_process_group_helper", "new_group", "new_subgroups",
                             "_store_based_barrier", "_create_process_group_wrapper", INIT_CALL})
# a wait in the store that ran out: the rank waited for a peer, its own setup did not fail
_WAITED = ("DistStoreError", "timed out", "timeout", "Connection was likely closed", "Connection reset")


def setup_failures(col: Collected) -> dict[int, Evidence]:
    """Rank -> its own exception raised in the process group's setup (the first of each)."""
    found: dict[int, Evidence] = {}
    for f in col.evidence.torch_logs:
        assert f.log is not None
        # gloo's pair could not connect to a peer (meshconnect.py): the peer's side, not this rank's setup
        connects = {g.line for g in f.log.gloo if g.kind == "connect"}
        for e in f.log.exceptions:
            rank = fact_rank(e, f.rank)
            if rank is None or rank in found or e.collective not in SETUP_FUNCTIONS or e.line in connects:
                continue
            if any(w in f"{e.type}: {e.message}" for w in _WAITED):
                continue
            found[rank] = log_evidence(col, f.source, e.line, f"in {e.collective}: {e.type}: {e.message}", rank)
    return found


def started(col: Collected, ranks: tuple[int, ...]) -> bool:
    """The job had started: one of `ranks` logged a training step, or another rank's first
    error was raised inside a collective past the process group's setup."""
    if set(last_steps(col)) & set(ranks):
        return True
    return any(e.collective and e.collective not in SETUP_FUNCTIONS
               for r, e in first_errors(col).items() if r not in ranks)


def died_in_setup(col: Collected, dead: JobFinding | None) -> JobFinding | None:
    """The init-failure of the dead ranks, where every one of them died of its own
    exception in the process group's setup before the job started; else None (see the
    module's docstring)."""
    if dead is None or not dead.ranks or started(col, dead.ranks):
        return None
    failed = setup_failures(col)
    if not set(dead.ranks) <= set(failed):
        return None
    own = [failed[r] for r in dead.ranks]
    others = [e for e in dead.lines if e.rank not in dead.ranks]
    if all(shared_build(e.text) for e in own):  # setupframes.py: the build's, which every process shares
        return job_finding(cls="init-failure", confidence="medium", ranks=(), evidence=tuple(own + others)[:20],
                           summary=f"the job could not start: the process group's backend is missing from this "
                                   f"build ({own[0].text[:160]}); every process would fail alike, no rank is at fault")
    if all(EXCHANGE_WORDS in e.text for e in own):  # mpireports.py: it waited on its peers' entries
        return job_finding(cls="init-failure", confidence="medium", ranks=(), evidence=tuple(own + others)[:20],
                           summary=f"the job could not start: MPI_Init failed {EXCHANGE_WORDS} ({own[0].text[:200]}); "
                                   "a process that waited on its peers' entries says nothing of whose set-up failed, "
                                   "no rank is at fault")
    summary = (f"{rank_words(dead.ranks)} could not start: its own process group's setup failed "
               f"({own[0].text[:160]}); the other ranks' errors in init followed it")
    return job_finding(cls="init-failure", summary=summary, confidence="high", ranks=dead.ranks,
                       evidence=tuple(own + others)[:20])


__all__ = ["SETUP_FUNCTIONS", "died_in_setup", "setup_failures", "started"]
