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

# measure NAME CMD... : start the tool, wait until its programs are loaded,
# snapshot stats, run the workload, snapshot again; prints a JSON line.
measure() {
  local name=$1; shift
  "$@" >"$tmp/$name.out" 2>&1 &
  local pid=$!
  for _ in $(seq 100); do
    python3 benches/bpfstats.py x "$pid" >"$tmp/$name.before" 2>/dev/null && break
    sleep 0.1
  done
  sleep 1 # let attach complete (programs load before links are made)
  python3 benches/bpfstats.py x "$pid" >"$tmp/$name.before"
  local rt; rt=$("$tmp/pingpong" "$n")
  python3 benches/bpfstats.py x "$pid" >"$tmp/$name.after"
  kill -INT "$pid"; wait "$pid" || true
  python3 - "$name" "$rt" "$n" "$tmp/$name.before" "$tmp/$name.after" <<'PY'
import json, sys
name, rt, n, b, a = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
before, after = json.load(open(b)), json.load(open(a))
tot_ns = tot_cnt = 0
parts = []
for k, (pname, ns, cnt) in after.items():
    _, ns0, cnt0 = before.get(k, (pname, 0, 0))
    dns, dcnt = ns - ns0, cnt - cnt0
    tot_ns += dns; tot_cnt += dcnt
    if dcnt:
        parts.append(f"{pname} {dns/dcnt:.0f} ns x {dcnt}")
print(json.dumps({"name": name, "ns_per_event": tot_ns / max(tot_cnt, 1), "events": tot_cnt,
                  "bpf_ns_per_round_trip": tot_ns / n, "workload_ns_per_round_trip": rt,
                  "programs": parts}))
PY
}

r1=$(measure runqlat runqlat)
r2=$(measure latmon target/release/latmon run --probe runq --interval 10s)
python3 - "$baseline" "$n" "$r1" "$r2" <<'PY'
import json, sys
base, n = float(sys.argv[1]), int(sys.argv[2])
a, b = json.loads(sys.argv[3]), json.loads(sys.argv[4])
print(f"pipe ping-pong, {n} round trips on one CPU; no tracing: {base:.0f} ns per round trip")
for r in (a, b):
    print(f"{r['name']:>8}: {r['ns_per_event']:6.1f} ns/event ({r['events']} program runs), "
          f"BPF {r['bpf_ns_per_round_trip']:6.1f} ns per round trip, workload {r['workload_ns_per_round_trip']:.0f} ns per round trip")
    for p in r["programs"]:
        print(f"          {p}")
print(f"ratio latmon/runqlat: ns/event {b['ns_per_event']/a['ns_per_event']:.2f}, "
      f"BPF ns per round trip {b['bpf_ns_per_round_trip']/a['bpf_ns_per_round_trip']:.2f}, "
      f"added workload ns {(b['workload_ns_per_round_trip']-base)/max(a['workload_ns_per_round_trip']-base,1):.2f}")
PY
