#!/bin/sh
# Slurm HealthCheckProgram=: checks this node every HealthCheckInterval, drains on FAIL
# and resumes nodes hc drained once the checks named in their reason pass again.
# slurmd only logs this program's exit code (and, when it is not 0, what it printed);
# hc acts through scontrol itself. Exits as `hc health` does; when hc cannot be run
# (HC_BIN missing, the wrapper stopped by a broken settings file) 3, UNKNOWN: nothing
# was judged, and nothing is drained for it.

# said on stderr (slurmd logs it with the exit code 3) and to syslog
hc_say() {
    echo "$*" >&2
    logger -t hc -p daemon.err -- "$*" 2>/dev/null
}
hc_exit() {
    hc_say "hc health: the wrapper stopped before hc ran: this node is NOT checked"
    exit 3
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
    trap - EXIT
    hc_say "hc health: HC_BIN=$HC_BIN is not an executable file: this node is NOT checked" \
           "(set HC_BIN in /etc/hc/slurm.env)"
    exit 3
}
trap - EXIT
exec "$HC_BIN" health
