#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Cost of one latmon probe under a workload, from the kernel's BPF
# statistics: ns per run and runs of each of its programs while WORKLOAD
# runs (the figures in docs/probes.md).
#   usage (root): benches/probe-cost.sh 'PROBE SPEC' WORKLOAD [ARGS...]
#   e.g.  benches/probe-cost.sh softirq python3 benches/loopback.py 200
#         benches/probe-cost.sh irq dd if=/dev/zero of=/var/tmp/x bs=256k count=400 oflag=dsync
set -euo pipefail
cd "$(dirname "$0")/.."
spec=${1:?usage: $0 'PROBE SPEC' WORKLOAD [ARGS...]}; shift
[ $# -gt 0 ] || { echo "usage: $0 'PROBE SPEC' WORKLOAD [ARGS...]" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "run as root" >&2; exit 1; }
[ -x target/release/latmon ] || cargo build --release --locked
tmp=$(mktemp -d)
old_stats=$(sysctl -n kernel.bpf_stats_enabled)
trap 'sysctl -qw kernel.bpf_stats_enabled=$old_stats; kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT
sysctl -qw kernel.bpf_stats_enabled=1
target/release/latmon -v run --probe "$spec" --interval 60m --format json >"$tmp/out" 2>"$tmp/err" &
pid=$!
for _ in $(seq 100); do grep -q "attached via" "$tmp/err" && break; sleep 0.1; done
python3 benches/bpfstats.py x "$pid" >"$tmp/before"
start=$(date +%s%N)
"$@" >/dev/null 2>&1 || true
secs=$(( $(date +%s%N) - start ))
python3 benches/bpfstats.py x "$pid" >"$tmp/after"
kill -INT "$pid"; wait "$pid" || true
python3 - "$spec" "$secs" "$tmp/before" "$tmp/after" "$tmp/out" <<'PY'
import json, sys
spec, secs, b, a, out = sys.argv[1], int(sys.argv[2]) / 1e9, *sys.argv[3:]
before, after = json.load(open(b)), json.load(open(a))
print(f"probe {spec}: {secs:.1f} s of workload")
tot = 0
for k, (name, ns, cnt) in sorted(after.items(), key=lambda kv: kv[1][0]):
    _, ns0, cnt0 = before.get(k, (name, 0, 0))
    d, c = ns - ns0, cnt - cnt0
    tot += d
    print(f"  {name:<24} {d / max(c, 1):7.1f} ns/run  {c:>9} runs  {c / secs:>10.0f} runs/s")
print(f"  all programs: {tot / secs / 1e6:.3f} ms of CPU per second ({tot / secs / 1e7:.3f} % of one CPU)")
rep = json.loads(open(out).read().splitlines()[-1])
for p in rep["probes"][:12]:
    print(f"  {p['name']:<32} count {p['total_count']:>9}  p50 {p['p50_ns']:>9} ns  p99 {p['p99_ns']:>10} ns")
PY
