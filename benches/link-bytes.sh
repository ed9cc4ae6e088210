#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Bytes per second per output, the current cumulative encoding next to the
# budgeted delta encoding (docs/wire-format.md, "Budgeted links"): one
# agent, the default probes (or --config FILE), under the stress-ng mix of
# a busy controller, writing the same summaries to several file outputs at
# once:
#   cumulative     file:,budget=none        (every probe's cumulative state each interval)
#   115200 baud    file:,budget=5760B/s     (a serial line's default budget)
#   19200 baud     file:,budget=960B/s
#   9600 baud      file:,budget=480B/s
# and printing, every 10 s, each output's bytes per second over those 10 s.
#   usage (root): benches/link-bytes.sh [SECONDS] [latmon run options...]
#   e.g.  benches/link-bytes.sh 300
#         benches/link-bytes.sh 120 --config board-configs/x86_64-generic.toml
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-120}; shift || true
[ "$(id -u)" = 0 ] || { echo "run as root" >&2; exit 1; }
command -v stress-ng >/dev/null || { echo "needs stress-ng (apt-get install -y stress-ng)" >&2; exit 1; }
# LATMON=path uses another build (bytes do not depend on the profile).
latmon=${LATMON:-target/release/latmon}
[ -x "$latmon" ] || cargo build --release --locked
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT
names=(cumulative 115200 19200 9600)
budgets=(none 5760B/s 960B/s 480B/s)
outs=()
for i in "${!names[@]}"; do
  outs+=(--output "file:$tmp/${names[$i]}.bin,format=frames,budget=${budgets[$i]}")
done
stress-ng --cpu 1 --cpu-load 20 --sock 1 --timer 1 --fork 1 --hdd 1 --msg 1 --timeout "$((secs + 5))s" --quiet &
"$latmon" run "$@" --duration "${secs}s" --output "file:/dev/null,format=json" "${outs[@]}" 2>"$tmp/err" &
pid=$!
printf '%8s' "t (s)"
for n in "${names[@]}"; do printf ' %14s' "$n B/s"; done
printf '\n'
declare -A last
for n in "${names[@]}"; do last[$n]=0; done
t=0
while kill -0 "$pid" 2>/dev/null && [ "$t" -lt "$secs" ]; do
  sleep 10; t=$((t + 10))
  printf '%8d' "$t"
  for n in "${names[@]}"; do
    size=$(stat -c %s "$tmp/$n.bin" 2>/dev/null || echo 0)
    printf ' %14d' "$(( (size - last[$n]) / 10 ))"
    last[$n]=$size
  done
  printf '\n'
done
wait "$pid" || true
printf '%8s' "average"
for n in "${names[@]}"; do
  size=$(stat -c %s "$tmp/$n.bin" 2>/dev/null || echo 0)
  printf ' %14d' "$(( size / secs ))"
done
printf '\n'
# The degradation step each budgeted output took, from its last Status.
for n in "${names[@]:1}"; do
  step=$("$latmon" decode "file:$tmp/$n.bin" 2>/dev/null | grep '"type":"status"' | tail -1 |
    python3 -c 'import json,sys; l=json.loads(sys.stdin.read() or "{}").get("link",{}); print("step %s merge %s rolled %s interval %s ms keyframes %s ms" % (l.get("step"), l.get("merge"), l.get("rolled"), l.get("interval_ms"), l.get("keyframe_ms")))')
  echo "$n: $step"
done
