#!/bin/sh
# Slurm Prolog=: hc's quick checks before every job, on every node of the allocation
# (with PrologFlags=Alloc). On FAIL hc drains this node with reason "hc: <finding ids>"
# and exits 2, so Slurm requeues the job elsewhere and keeps hc's reason.
#
# Slurm drains the node itself ("Prolog error") on any non-zero exit, so only 0 and 2
# leave here: whatever else hc exits with (a crash Python cannot catch, the OOM killer,
# HC_BIN missing) is logged and the job goes on. hc's own guard does the same inside.
. "${0%/*}/hc-env.sh"
"$HC_BIN" prologue
rc=$?
case $rc in
    0|2) exit $rc ;;
    *) echo "hc prologue: exited $rc unexpectedly ($HC_BIN); job not affected" >&2; exit 0 ;;
esac
