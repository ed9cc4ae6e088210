#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Benchmark: latmon's syscall probe vs libbpf-tools' `syscount -L` on the
# same getppid loop, alternating in one run, kernel BPF statistics on.
# Both tools time every syscall of every task (no filter). Prints, per tool,
# ns per BPF program run (events), BPF ns per getppid call, the workload's
# ns per call, and the latmon/syscount ratios (median of ROUNDS rounds).
#   usage (root): benches/syscall-vs-syscount.sh [CALLS] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-2000000}
rounds=${2:-3}
[ "$(id -u)" = 0 ] || { echo "run as root" >&2; exit 1; }
command -v syscount >/dev/null || { echo "syscount missing: apt-get install libbpf-tools" >&2; exit 1; }
tmp=$(mktemp -d)
old_stats=$(sysctl -n kernel.bpf_stats_enabled)
trap 'sysctl -qw kernel.bpf_stats_enabled=$old_stats; kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT
cc -O2 -o "$tmp/getppid" benches/getppid.c
[ -x target/release/latmon ] || cargo build --release --locked
sysctl -qw kernel.bpf_stats_enabled=1

. benches/lib.sh

results=()
base=()
for r in $(seq "$rounds"); do
  base+=("$("$tmp/getppid" "$n")")
  results+=("$(measure syscount "$tmp/getppid $n" -- syscount -L)")
  results+=("$(measure latmon "$tmp/getppid $n" -- target/release/latmon run --probe syscall --interval 10s)")
done
python3 - "$n" "${base[*]}" "${results[@]}" <<'PY'
import json, statistics, sys
n = int(sys.argv[1])
base = statistics.median(float(b) for b in sys.argv[2].split())
runs = [json.loads(a) for a in sys.argv[3:]]
print(f"getppid loop, {n} calls per run, {len(runs)//2} rounds (medians); no tracing: {base:.0f} ns per call")
med = {}
for name in ("syscount", "latmon"):
    rs = [r for r in runs if r["name"] == name]
    m = {k: statistics.median(r[k] for r in rs) for k in ("ns_per_event", "bpf_ns_per_op", "workload_ns_per_op")}
    med[name] = m
    print(f"{name:>8}: {m['ns_per_event']:6.1f} ns/event, BPF {m['bpf_ns_per_op']:6.1f} ns per call, "
          f"workload {m['workload_ns_per_op']:.0f} ns per call (+{m['workload_ns_per_op']-base:.0f})")
    for r in rs:
        print(f"          round: {r['ns_per_event']:.1f} ns/event; " + "; ".join(r["programs"]))
s, l = med["syscount"], med["latmon"]
print(f"ratio latmon/syscount: ns/event {l['ns_per_event']/s['ns_per_event']:.2f}, "
      f"BPF ns per call {l['bpf_ns_per_op']/s['bpf_ns_per_op']:.2f}, "
      f"added workload ns per call {(l['workload_ns_per_op']-base)/max(s['workload_ns_per_op']-base,1):.2f}")
PY
