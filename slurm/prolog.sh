#!/bin/sh
# Slurm Prolog=: hc's quick checks before every job, on every node of the allocation
# (with PrologFlags=Alloc). On FAIL hc drains this node with reason "hc: <finding ids>"
# and exits non-zero, so Slurm requeues the job elsewhere and keeps hc's reason.
. "${0%/*}/hc-env.sh"
exec "$HC_BIN" prologue
