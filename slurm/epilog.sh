#!/bin/sh
# Slurm Epilog=: what the job left behind (GPU processes and memory, Xid and ECC since
# the job started). Drains on FAIL; always exits 0, so the job's state never changes.
. "${0%/*}/hc-env.sh"
exec "$HC_BIN" epilogue
