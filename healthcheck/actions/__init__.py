"""Actions on the scheduler: Slurm drain/resume policy, the blast-radius guard, the audit log.

Actions consume reports, never check internals.
"""
