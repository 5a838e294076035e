#!/bin/sh
# Slurm Prolog=: hc's quick checks before every job, on every node of the allocation
# (with PrologFlags=Alloc). On FAIL hc drains this node with reason "hc: <finding ids>"
# and exits 2, so Slurm requeues the job elsewhere and keeps hc's reason.
#
# Slurm drains the node itself ("Prolog error") on any non-zero exit, so only 0 and 2
# leave here: whatever else happens (a crash Python cannot catch, the OOM killer, HC_BIN
# missing, hc-env.sh or the settings file missing or broken, even an `exit` in it) is
# said (stderr, syslog) and the job goes on. The EXIT trap holds that for every way out;
# hc's own guard does the same inside.

# said on stderr and to syslog: slurmd logs nothing of a prolog or epilog that exits 0
hc_say() {
    echo "$*" >&2
    logger -t hc -p daemon.err -- "$*" 2>/dev/null
}
hc_rc=
hc_exit() {
    case $hc_rc in
        0|2) exit "$hc_rc" ;;
        '') hc_say "hc prologue: the wrapper stopped before hc ran: this node is NOT checked; job not affected" ;;
        *) hc_say "hc prologue: exited $hc_rc unexpectedly ($HC_BIN); job not affected" ;;
    esac
    exit 0
}
trap hc_exit EXIT
# --- settings (the same in prolog.sh, epilog.sh and healthcheck.sh) ---
# hc-env.sh beside this file's real path (Slurm may name a link into a checkout); copied
# without it, the settings files hc-env.sh would read, exported, and its defaults
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/opt/hc/bin
export PATH
hc_here=$(readlink -f -- "$0") && hc_here=${hc_here%/*} || hc_here=${0%/*}
if [ -r "$hc_here/hc-env.sh" ]; then
    command . "$hc_here/hc-env.sh"
else
    set -a
    for hc_settings in "${HC_SETTINGS:-}" "${0%/*}/hc-slurm.env" /etc/hc/slurm.env; do
        [ -n "$hc_settings" ] && [ -r "$hc_settings" ] && { command . "$hc_settings"; break; }
    done
    set +a
fi
HC_BIN=${HC_BIN:-hc}
# --- end of settings ---
case $HC_BIN in */*) [ -f "$HC_BIN" ] && [ -x "$HC_BIN" ] ;; *) command -v "$HC_BIN" >/dev/null ;; esac || {
    hc_say "hc prologue: HC_BIN=$HC_BIN is not an executable file: this node is NOT checked" \
           "(set HC_BIN in /etc/hc/slurm.env); job not affected"
    hc_rc=0
    exit 0
}
"$HC_BIN" prologue
hc_rc=$?
exit "$hc_rc"
