"""Diagnose a hung or failed distributed job: the odd rank, the failure class, the evidence.

evidence.py  the typed evidence collectors fill (RankEvidence, JobEvidence)
sources.py   saved files -> evidence (`hc diagnose logs`); walk.py the bounded walk over them
stacks.py    STAT-like grouping of the ranks' stacks
classify.py  the ordered rules -> findings
findings.py  JobFinding: a kernel finding about a job (diag.E0xx)
verdict.py   findings -> the Verdict (table, hc.diagnosis/2 JSON), a report's job result
health.py    the culprits' hosts' health in the job's window (kernel events, hc's history)
collect.py   one node's live collection (`hc diagnose collect`), composing discovery.py
             (the job's rank processes), procs.py (/proc), rankenv.py (a rank's environment),
             stackdump.py and sampling.py (py-spy), kernel_log.py, ras_client.py and
             launchers.py (torchrun agents whose ranks never started); nodeschema.py is
             what it reports; live.py turns the nodes' reports into evidence
"""

# The bounds of the live commands' numbers, shared by `hc diagnose job|hosts|pids` and the
# per-node helper they start (`hc diagnose collect`, which gets --timeout passed on): here,
# so the CLI reads them without importing the collector.
MAX_PARALLEL = 4096  # as ssh.max_parallel: nodes, or ranks, at once
MAX_TIMEOUT_S = 3600.0  # one node's collection
