#!/bin/sh
# Slurm Epilog=: what the job left behind (GPU processes and memory, Xid and ECC since
# the job started). Drains on FAIL; always exits 0, so the job's state never changes
# and Slurm never drains the node for an Epilog error, whatever happened to hc.
. "${0%/*}/hc-env.sh"
"$HC_BIN" epilogue
rc=$?
[ "$rc" -eq 0 ] || echo "hc epilogue: exited $rc unexpectedly ($HC_BIN)" >&2
exit 0
