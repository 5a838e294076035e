"""The TUNING set of the measured detector: labelled gloo jobs (job.py) with their truth.

Rules may be tuned on these; the HELD_OUT set (tests/fixtures/diagnose-jobs/held-out/) is
other worlds, ranks, launchers and variants of the same failure mechanisms, never tuned on.
CI_SUBSET: the few small, quick ones test_diagnose_jobs.py runs on every CI.

Truth classes (harness.CLASSES): dead (a rank died: exception, signal, exited early),
stuck (a rank blocked outside the collective its peers wait in, or stopped), desync (a
rank in another collective, or in none its group waits in), shape (size or dtype of one
rank's tensor), init (a rank's launch: port, world size), none (healthy or merely slow).
"""

from __future__ import annotations

from diagnose_jobs.harness import Scenario

TUNING: list[Scenario] = [
    # a Python exception in one rank's own code
    Scenario("raise plain r2", "raise", 4, "dead", (2,), note="ValueError; peers: Connection closed by peer"),
    Scenario("raise torchrun @record r1", "raise", 4, "dead", (1,), launcher="torchrun", args=("--record",)),
    Scenario("raise torchrun r0 unlabelled", "raise", 3, "dead", (0,), launcher="torchrun", labelled=False),
    Scenario("raise mpirun r1", "raise", 4, "dead", (1,), launcher="mpirun"),
    Scenario("raise hc-run torchrun r3", "raise", 4, "dead", (3,), launcher="torchrun", hcrun=True),
    Scenario("raise hc-run mpirun r2", "raise", 3, "dead", (2,), launcher="mpirun", hcrun=True),
    # several ranks raise their own exception at the same step: each is a culprit
    Scenario("two raise torchrun @record w5 r0,r3", "raise", 5, "dead", (0, 3), launcher="torchrun",
             args=("--record",)),
    Scenario("two raise torchrun w4 r1,r2", "raise", 4, "dead", (1, 2), launcher="torchrun"),
    Scenario("two raise srun-labelled w6 r2,r5", "raise", 6, "dead", (2, 5), launcher="srun"),
    Scenario("three raise plain w5 r1,r2,r4", "raise", 5, "dead", (1, 2, 4)),
    # ran out of data: exit 0 early, the peers fail after
    Scenario("exit0 plain r3", "exit0", 4, "dead", (3,)),
    # blocked outside the collective while the others wait in it
    Scenario("loader plain r1 live", "loader", 4, "stuck", (1,), mode="live"),
    Scenario("loader plain r2 logs", "loader", 4, "stuck", (2,)),
    Scenario("busy plain r0 live", "busy", 3, "stuck", (0,), mode="live"),
    Scenario("loader hc-run plain r2 live", "loader", 4, "stuck", (2,), mode="live", hcrun=True),
    Scenario("two loaders plain r1,r3 live", "loader", 6, "stuck", (1, 3), mode="live"),
    Scenario("node stuck plain r3-5 live", "loader", 6, "stuck", (3, 4, 5), mode="live",
             note="a whole node's ranks (3 of 6)"),
    Scenario("world 2 stuck plain r1 live", "sleep", 2, "stuck", (1,), mode="live"),
    # death by signal
    Scenario("kill torchrun r2", "kill", 4, "dead", (2,), launcher="torchrun"),
    Scenario("kill hc-run torchrun w3 r1", "kill", 3, "dead", (1,), launcher="torchrun", hcrun=True),
    Scenario("kill torchrun hc-run inside w5 r4", "kill", 5, "dead", (4,), launcher="torchrun", hcrun_inside=True),
    Scenario("kill hc-run both torchrun w4 r0", "kill", 4, "dead", (0,), launcher="torchrun", hcrun=True,
             hcrun_inside=True),
    Scenario("kill hc-run torchrun unlabelled w4 r3", "kill", 4, "dead", (3,), launcher="torchrun", hcrun=True,
             labelled=False),
    Scenario("kill torchrun hc-run inside unlabelled w4 r1", "kill", 4, "dead", (1,), launcher="torchrun",
             hcrun_inside=True, labelled=False),
    Scenario("stop plain r3 live", "stop", 4, "stuck", (3,), mode="live"),
    # mismatches
    Scenario("op mismatch plain r1 live", "op", 4, "desync", (1,), mode="live", note="all_gather vs all_reduce"),
    Scenario("size mismatch plain r3", "size", 4, "shape", (3,)),
    Scenario("dtype mismatch plain w2 r1", "dtype", 2, "shape", (1,), truth_ranks=(),
             note="two ranks, two dtypes: no majority says which is odd, so none is named"),
    Scenario("size mismatch torchrun w3 r1", "size", 3, "shape", (1,), launcher="torchrun"),
    Scenario("dtype mismatch plain w3 r0", "dtype", 3, "shape", (0,)),
    Scenario("dtype mismatch srun-labelled w5 r4", "dtype", 5, "shape", (4,), launcher="srun"),
    Scenario("small size plain w4 r1", "small", 4, "shape", (1,), note="the odd tensor is the smaller"),
    Scenario("small size torchrun w3 r2", "small", 3, "shape", (2,), launcher="torchrun"),
    Scenario("size mismatch plain w2 r0", "size", 2, "shape", (0,), truth_ranks=(),
             note="two ranks, two sizes: no majority says which is odd, so none is named"),
    Scenario("op mismatch torchrun w4 r2 logs", "op", 4, "desync", (2,), launcher="torchrun"),
    Scenario("op mismatch torchrun w6 r3 logs", "op", 6, "desync", (3,), launcher="torchrun"),
    Scenario("op mismatch torchrun w5 r1 logs", "op", 5, "desync", (1,), launcher="torchrun"),
    Scenario("op mismatch mpirun w3 r0 logs", "op", 3, "desync", (0,), launcher="mpirun"),
    Scenario("broadcast source plain r0", "bcast", 4, "shape", (0,), note="the source sends 48 floats, not 32"),
    Scenario("wrong group plain r1 live", "group", 4, "desync", (1,), mode="live",
             note="rank 1 passes group [2,3]: skipped; rank 0 waits alone in group [0,1]"),
    # launch
    Scenario("world size plain r2", "none", 4, "init", (2,), rank_env=((2, "WORLD_SIZE", "5"),)),
    Scenario("port in use plain", "none", 3, "init", (), truth_ranks=(0,), port_taken=True,
             note="rank 0 cannot listen on MASTER_PORT"),
    # round 3 (issue 19): victims, launchers' signal reports, deaths before init, a wrong RANK/WORLD_SIZE
    Scenario("size mismatch mpirun w4 r2", "size", 4, "shape", (2,), launcher="mpirun", truth_ranks=(),
             note="one gloo report (2 ranks' sizes, no majority): none named; the aborted reporter is no dead rank"),
    Scenario("lock hc-run plain w4 r1 logs", "lock", 4, "stuck", (1,), hcrun=True,
             note="a peer's wait cut short by Connection closed is a victim, not a second stuck rank"),
    Scenario("segv mpirun w4 r2", "segv", 4, "dead", (2,), launcher="mpirun", note="Open MPI's exited-on-signal box"),
    Scenario("segv mpirun w5 r1 live", "segv", 5, "dead", (1,), launcher="mpirun", mode="live",
             note="mpirun stops the others: none of them named"),
    Scenario("sigterm hc-run torchrun w3 r2", "term", 3, "dead", (2,), launcher="torchrun", hcrun=True,
             note="torchrun's box says SIGTERM for every rank; it sent no closing signal to rank 2"),
    Scenario("preinit config plain w3 r1", "preinit", 3, "dead", (1,)),
    Scenario("preinit config mpirun w4 r2", "preinit", 4, "dead", (2,), launcher="mpirun"),
    Scenario("p2p order plain w6 r4,r5 live", "p2p", 6, "desync", (4, 5), mode="live"),
    Scenario("extra all_reduce plain w5 r3 live", "extra", 5, "desync", (3,), mode="live",
             note="rank 3 reduces one tensor more than its peers"),
    Scenario("wrong RANK plain w3 r2", "none", 3, "init", (2,), rank_env=((2, "RANK", "0"),)),
    Scenario("wrong WORLD_SIZE plain w4 r0", "none", 4, "init", (0,), rank_env=((0, "WORLD_SIZE", "6"),)),
    # healthy or merely slow
    Scenario("healthy plain w3 live", "none", 3, "none", mode="live"),
    Scenario("straggler plain r1 live", "straggler", 4, "none", (1,), mode="live", args=("--slow", "1.5"),
             note="1.5 s slower every step, progressing"),
    Scenario("jitter torchrun live", "none", 4, "none", launcher="torchrun", mode="live", args=("--jitter", "0.8")),
]

# small worlds, a few seconds each: what CI runs against the committed floor
CI_SUBSET = ["raise torchrun r0 unlabelled", "busy plain r0 live", "dtype mismatch plain w2 r1",
             "world 2 stuck plain r1 live", "healthy plain w3 live"]
# of those, the ones CI replays from their saved output (tests/fixtures/diagnose-jobs/tuning/)
# instead of running: torchrun's start is the most of the subset's time a logs-mode job
# costs, and a real torchrun job dying of an exception is diagnosed in CI already
# (tests/unit/jobwrap/test_run_wrapper_output.py); the plain logs-mode job still runs for real
CI_REPLAYED = ["raise torchrun r0 unlabelled"]
