#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The floor under benches/cycle-cost.sh's figure: empty programs
# (benches/floor.bpf.c) on sched_switch, sched_waking and sched_wakeup,
# the tracepoints the cycle family's per-switch programs use, costed
# like cycle-cost.sh costs them (the kernel's BPF statistics over the
# pipe ping-pong, divided by the switches). What an empty program costs
# per run is the kernel's dispatch plus the statistics' own two clock
# reads: no body can go below it. Medians of ROUNDS.
#   usage (root): benches/cycle-floor.sh [ROUNDS] [ROUND_TRIPS]
#   Needs clang and libbpf's headers and libbpf.a: LIBBPF_OUT (default:
#   the libbpf-sys build output under $CARGO_TARGET_DIR or target/).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
n=${2:-100000}
[ "$(id -u)" = 0 ] || { echo "run as root" >&2; exit 1; }
if [ -z "${LIBBPF_OUT:-}" ]; then
  LIBBPF_OUT=$(dirname "$(find "${CARGO_TARGET_DIR:-target}" -path '*libbpf-sys-*/out/libbpf.a' | head -1)")
fi
[ -f "$LIBBPF_OUT/libbpf.a" ] || { echo "no libbpf.a: set LIBBPF_OUT" >&2; exit 1; }
case $(uname -m) in x86_64) arch=x86 ;; aarch64) arch=arm64 ;; *) arch=arm ;; esac
tmp=$(mktemp -d)
old_stats=$(sysctl -n kernel.bpf_stats_enabled)
trap 'sysctl -qw kernel.bpf_stats_enabled=$old_stats; kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT
cc -O2 -o "$tmp/pingpong" benches/pingpong.c
cc -O2 -I"$LIBBPF_OUT/include" -o "$tmp/load" benches/floor-load.c "$LIBBPF_OUT/libbpf.a" -lelf -lz
clang -O2 -g -target bpf -D__TARGET_ARCH_$arch -I"$LIBBPF_OUT/include" -Ibpf/vmlinux/$arch \
  -c benches/floor.bpf.c -o "$tmp/floor.o"
sysctl -qw kernel.bpf_stats_enabled=1
for r in $(seq "$rounds"); do
  "$tmp/load" "$tmp/floor.o" >"$tmp/load.out" 2>&1 &
  agent=$!
  for _ in $(seq 100); do grep -q attached "$tmp/load.out" 2>/dev/null && break; sleep 0.1; done
  python3 benches/bpfstats.py x $agent >"$tmp/before"
  "$tmp/pingpong" "$n" >/dev/null
  python3 benches/bpfstats.py x $agent >"$tmp/after"
  kill $agent; wait $agent 2>/dev/null || true
  python3 - "$tmp/before" "$tmp/after" <<'PY'
import json, sys
b, a = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
progs = {}
for k, (prog, t, c) in a.items():
    _, t0, c0 = b.get(k, (prog, 0, 0))
    progs[prog] = [t - t0, c - c0]
print(json.dumps(progs))
PY
done >"$tmp/rounds"
python3 - "$tmp/rounds" "$rounds" "$n" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"{sys.argv[2]} rounds of {sys.argv[3]} ping-pong round trips, medians")
sw = lambda r: max(r["floor_switch"][1], 1)
total = 0
for p in ("floor_switch", "floor_waking", "floor_wakeup"):
    per_run = statistics.median(r[p][0] / max(r[p][1], 1) for r in rows)
    runs = statistics.median(r[p][1] / sw(r) for r in rows)
    per_sw = statistics.median(r[p][0] / sw(r) for r in rows)
    total += per_sw
    print(f"  {p}: {per_run:.1f} ns/run x {runs:.2f} runs/switch = {per_sw:.1f} ns/switch")
print(f"empty programs on the three tracepoints: {statistics.median(sum(v[0] for v in r.values()) / sw(r) for r in rows):.1f} ns per switch")
PY
