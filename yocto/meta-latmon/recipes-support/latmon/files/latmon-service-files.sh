#!/bin/sh
# SPDX-License-Identifier: MIT
# Render the latmon service files for one board config (TOML):
#   latmon-service-files.sh BOARD.toml TEMPLATE_DIR OUT_DIR BINDIR SYSCONFDIR CAPABILITIES
# writes OUT_DIR/latmon.service and OUT_DIR/latmon.init from TEMPLATE_DIR's
# templates, and prints what it took from the config:
#   LINK_TTY=ttyAMA1              the first serial output's device under /dev
#   LINK_UNIT=dev-ttyAMA1.device  its systemd device unit (systemd-escape -p)
#   HOUSEKEEPING_CPUS=0,1         housekeeping_cpus as a CPU list
# (each empty when the config has none; the unit's lines naming them are
# then dropped). The latmon recipe runs it in do_install; tests/yocto/check.sh
# runs it on every board config and checks the result (systemd-analyze
# verify; the values against a real TOML parser). It needs only sed, grep
# and tr: it runs inside bitbake, where no TOML parser is assured. Limits
# (the check enforces them): housekeeping_cpus written on one line; serial
# outputs written as "serial:/dev/NAME[@BAUD][,OPT=V...]".
set -eu
[ $# -eq 6 ] || { echo "usage: $0 BOARD.toml TEMPLATE_DIR OUT_DIR BINDIR SYSCONFDIR CAPABILITIES" >&2; exit 2; }
cfg=$1 tmpl=$2 out=$3 bindir=$4 sysconfdir=$5 caps=$6

# Drop comments (no value in a latmon config contains '#').
body=$(sed 's/#.*$//' "$cfg")
tty=$(printf '%s\n' "$body" | grep -o '"serial:/dev/[^"@,]*' | head -n 1 | sed 's|^"serial:/dev/||') || true
cpus=$(printf '%s\n' "$body" \
  | sed -n 's/^[[:space:]]*housekeeping_cpus[[:space:]]*=[[:space:]]*\[\([0-9,[:space:]]*\)\][[:space:]]*$/\1/p' \
  | tr -d ' \t' | sed 's/,$//')
unit=""
if [ -n "$tty" ]; then
  # systemd-escape --path --suffix=device: '-' -> \x2d, then '/' -> '-'.
  unit="dev-$(printf '%s' "$tty" | sed -e 's/-/\\x2d/g' -e 's|/|-|g').device"
fi

# Values escaped for a sed replacement with '|' as the delimiter.
esc() { printf '%s' "$1" | sed 's/[\\|&]/\\&/g'; }
if [ -n "$unit" ]; then link_rule="s|@LINK_UNIT@|$(esc "$unit")|g"; else link_rule='/@LINK_UNIT@/d'; fi
if [ -n "$cpus" ]; then cpu_rule="s|@CPU_AFFINITY@|$(echo "$cpus" | tr ',' ' ')|g"; else cpu_rule='/@CPU_AFFINITY@/d'; fi

mkdir -p "$out"
sed -e "s|@BINDIR@|$(esc "$bindir")|g" \
    -e "s|@SYSCONFDIR@|$(esc "$sysconfdir")|g" \
    -e "s|@CAPABILITIES@|$(esc "$caps")|g" \
    -e "$link_rule" -e "$cpu_rule" \
    "$tmpl/latmon.service" > "$out/latmon.service"
sed -e "s|@BINDIR@|$(esc "$bindir")|g" \
    -e "s|@SYSCONFDIR@|$(esc "$sysconfdir")|g" \
    -e "s|@LINK_TTY@|$(esc "$tty")|g" \
    -e "s|@HOUSEKEEPING_CPUS@|$cpus|g" \
    "$tmpl/latmon.init" > "$out/latmon.init"

echo "LINK_TTY=$tty"
echo "LINK_UNIT=$unit"
echo "HOUSEKEEPING_CPUS=$cpus"
