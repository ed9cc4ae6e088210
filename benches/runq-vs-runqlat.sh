#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Benchmark: latmon's runq probe vs libbpf-tools' runqlat on the same pipe
# ping-pong, one after the other in one run, with kernel BPF statistics on.
# Prints ns per BPF program run (events), BPF ns per round trip, the
# workload's ns per round trip, and latmon/runqlat ratios.
#   usage (root): benches/runq-vs-runqlat.sh [ROUND_TRIPS]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-200000}
[ "$(id -u)" = 0 ] || { echo "run as root" >&2; exit 1; }
command -v runqlat >/dev/null || { echo "runqlat missing: apt-get install libbpf-tools" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'sysctl -qw kernel.bpf_stats_enabled=$old_stats; kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT
old_stats=$(sysctl -n kernel.bpf_stats_enabled)
cc -O2 -o "$tmp/pingpong" benches/pingpong.c
[ -x target/release/latmon ] || cargo build --release --locked
sysctl -qw kernel.bpf_stats_enabled=1

baseline=$("$tmp/pingpong" "$n")

. benches/lib.sh

r1=$(measure runqlat "$tmp/pingpong $n" -- runqlat)
r2=$(measure latmon "$tmp/pingpong $n" -- target/release/latmon run --probe runq --interval 10s)
python3 - "$baseline" "$n" "$r1" "$r2" <<'PY'
import json, sys
base, n = float(sys.argv[1]), int(sys.argv[2])
a, b = json.loads(sys.argv[3]), json.loads(sys.argv[4])
print(f"pipe ping-pong, {n} round trips on one CPU; no tracing: {base:.0f} ns per round trip")
for r in (a, b):
    print(f"{r['name']:>8}: {r['ns_per_event']:6.1f} ns/event ({r['events']} program runs), "
          f"BPF {r['bpf_ns_per_op']:6.1f} ns per round trip, workload {r['workload_ns_per_op']:.0f} ns per round trip")
    for p in r["programs"]:
        print(f"          {p}")
print(f"ratio latmon/runqlat: ns/event {b['ns_per_event']/a['ns_per_event']:.2f}, "
      f"BPF ns per round trip {b['bpf_ns_per_op']/a['bpf_ns_per_op']:.2f}, "
      f"added workload ns {(b['workload_ns_per_op']-base)/max(a['workload_ns_per_op']-base,1):.2f}")
PY
