#!/bin/sh
# Slurm Epilog=: what the job left behind (GPU processes and memory, Xid and ECC since
# the job started). Drains on FAIL; always exits 0, so the job's state never changes
# and Slurm never drains the node for an Epilog error, whatever happened to hc or to
# this script (HC_BIN missing, hc-env.sh or the settings file missing or broken, even an
# `exit` in it): the EXIT trap holds that for every way out.

# said on stderr and to syslog: slurmd logs nothing of a prolog or epilog that exits 0
hc_say() {
    echo "$*" >&2
    logger -t hc -p daemon.err -- "$*" 2>/dev/null
}
hc_rc=
hc_exit() {
    case $hc_rc in
        0) ;;
        '') hc_say "hc epilogue: the wrapper stopped before hc ran: this node is NOT checked" ;;
        *) hc_say "hc epilogue: exited $hc_rc unexpectedly ($HC_BIN)" ;;
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
    hc_say "hc epilogue: HC_BIN=$HC_BIN is not an executable file: this node is NOT checked" \
           "(set HC_BIN in /etc/hc/slurm.env)"
    hc_rc=0
    exit 0
}
"$HC_BIN" epilogue
hc_rc=$?
exit 0
