# Sourced by hc's Slurm wrappers (prolog.sh, epilog.sh, healthcheck.sh); not run alone.
#
# Slurm runs Prolog and Epilog with no PATH at all, and HealthCheckProgram with only
# SLURMD_NODENAME (no PATH, no SLURM_CONF, so scontrol cannot find the cluster). This
# sets both from one settings file, the first of:
#   $HC_SETTINGS
#   hc-slurm.env beside the wrapper as Slurm names it, then beside the file it links to
#   /etc/hc/slurm.env
# The settings file is sourced by /bin/sh: VAR=value lines, e.g.
#   HC_BIN=/opt/hc/bin/hc              # the hc to run (default: hc on PATH, /opt/hc/bin last)
#   SLURM_CONF=/etc/slurm/slurm.conf
#   HC_CONFIG=/etc/hc/hc.yaml
#   PATH=/opt/hc/bin:/usr/sbin:/usr/bin:/sbin:/bin
# The wrappers find this file beside their real path ($hc_here: a link into a checkout's
# slurm/ works) and work without it (copied alone): they then read /etc/hc/slurm.env
# themselves. A settings file that cannot be read through is reported and the rest kept;
# it never changes how a wrapper exits (`command .`: an error in it is not fatal).
# Only builtins are used before PATH is set (no dirname: it may not be found).

PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/opt/hc/bin
export PATH
for hc_settings in "${HC_SETTINGS:-}" "${0%/*}/hc-slurm.env" "${hc_here:-${0%/*}}/hc-slurm.env" /etc/hc/slurm.env; do
    if [ -n "$hc_settings" ] && [ -r "$hc_settings" ]; then
        command . "$hc_settings" || echo "hc: $hc_settings: an error in the settings file (the rest kept)" >&2
        break
    fi
done
unset hc_settings
SLURM_CONF=${SLURM_CONF:-/etc/slurm/slurm.conf}
HC_BIN=${HC_BIN:-hc}
export PATH SLURM_CONF
[ -n "${HC_CONFIG:-}" ] && export HC_CONFIG
[ -n "${HC_NVML_REPLAY:-}" ] && export HC_NVML_REPLAY
:
