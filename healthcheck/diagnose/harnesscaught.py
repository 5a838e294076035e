"""torch's distributed test harness catching a rank's exception: that rank's death.

`MultiProcessTestCase.run_test` (torch/testing/_internal/common_distributed.py) runs each
rank's test in its own process; what the test raises it catches, logs (`[rankN]:E...`
`common_distributed.py:NNN] Caught exception:` then the traceback under the same prefix)
and ends the process with the harness's error exit code. The parser reads that line as the
rank's caught exception (parsers/torch_log/rankends.py, HarnessCaught) even where the paste
ends inside the traceback, before its exception line: what was raised is unknown, that the
rank's test raised and its process ended is what the harness says.

Named (dead-rank, medium: the exception itself may not be in the text) only where one rank
alone was caught, no rank timed out (a rank that waited in vain may raise first while
another hangs), the rank's own first error is not a collective's (a victim's; where its
exception is in the text the other rules read it), and no other rank's word says it failed
in a collective because of it (victims.spoke_of_failure).
"""

from __future__ import annotations

from healthcheck.diagnose.analysis import fact_rank, log_evidence
from healthcheck.diagnose.findings import Evidence
from healthcheck.diagnose.logfacts import RankError, any_timed_out
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.victims import spoke_of_failure


def harness_caught(col: Collected, firsts: dict[int, RankError]) -> tuple[int, str, Evidence] | None:
    """(rank, how, the harness's line) for the one rank the test harness caught raising, or
    None (see the module's docstring)."""
    caught = [(f.source, c, fact_rank(c, f.rank)) for f in col.evidence.torch_logs if f.log is not None
              for c in f.log.harness_caught]
    ranks = {rank for _, _, rank in caught}
    if len(ranks) != 1 or None in ranks or any_timed_out(col, firsts):
        return None
    source, c, rank = caught[0]
    assert rank is not None
    own = firsts.get(rank)
    if (own is not None and own.victim) or rank in spoke_of_failure(col):
        return None
    text = (f"rank {rank}: torch's test harness caught its test's exception and ended its process"
            + (f" ({own.text[:160]})" if own is not None else "; the exception itself is not in the text"))
    return rank, "its test raised; the harness ended its process", log_evidence(col, source, c.line, text, rank)


__all__ = ["harness_caught"]
