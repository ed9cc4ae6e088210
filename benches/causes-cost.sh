#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Cost of the per-interval cause tally (bpf/causes.bpf.h, docs/probes.md
# "Top causes of the alerted time"): BPF ns per event of two agents on one
# cyclictest loop, side by side, all with anatomies, two without the
# tally (LATMON_CAUSES=off). threshold=1us: every event alerts, so the
# difference is the tally's cost per alert; below the threshold it never
# runs (it is part of the alert path).
#   usage (root): benches/causes-cost.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
[ "$(id -u)" = 0 ] || { echo "run as root" >&2; exit 1; }
command -v cyclictest >/dev/null || { echo "cyclictest missing: apt-get install rt-tests" >&2; exit 1; }
[ -x target/release/latmon ] || cargo build --release --locked
tmp=$(mktemp -d)
old_stats=$(sysctl -n kernel.bpf_stats_enabled)
trap 'sysctl -qw kernel.bpf_stats_enabled=$old_stats; kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT
sysctl -qw kernel.bpf_stats_enabled=1
start_agent() { # NAME CAUSES
  LATMON_CAUSES=$2 target/release/latmon -v run --probe "timer,comm=cyclictest,threshold=1us" --interval 1s \
    --format json >"$tmp/$1.json" 2>"$tmp/$1.err" &
  echo $! >"$tmp/$1.pid"
  for _ in $(seq 100); do grep -q "attached via" "$tmp/$1.err" && break; sleep 0.1; done
}
# Attach order matters (the first attached program of a tracepoint runs
# first, and pays for the cold caches): off, on, on, off, averaged.
agents="off1 on1 on2 off2"
for a in $agents; do start_agent "$a" "${a%[12]}"; done
for a in $agents; do python3 benches/bpfstats.py x "$(cat "$tmp/$a.pid")" >"$tmp/$a.before"; done
cyclictest -t1 -p80 -i1000 -q -D "$secs" >/dev/null
for a in $agents; do python3 benches/bpfstats.py x "$(cat "$tmp/$a.pid")" >"$tmp/$a.after"; done
for a in $agents; do kill -INT "$(cat "$tmp/$a.pid")"; done
wait || true
python3 - "$tmp" <<'PY'
import json, sys
tmp = sys.argv[1]
def bpf_ns(a):
    before, after = json.load(open(f"{tmp}/{a}.before")), json.load(open(f"{tmp}/{a}.after"))
    return sum(ns - before.get(k, (name, 0, 0))[1] for k, (name, ns, cnt) in after.items())
def probe(a, line=-1):
    return json.loads(open(f"{tmp}/{a}.json").read().splitlines()[line])["probes"][0]
agents = ("off1", "on1", "on2", "off2")
p = {a: probe(a) for a in agents}
ev = max(1, min(q["total_count"] for q in p.values()))
print(f"cyclictest, timer probe threshold=1us: {ev} events, {min(q['total_alerts'] for q in p.values())} alerts")
ns = {a: bpf_ns(a) / ev for a in agents}
for a in agents:
    print(f"  {a:<4} {ns[a]:8.1f} ns of BPF per event")
off, on = (ns["off1"] + ns["off2"]) / 2, (ns["on1"] + ns["on2"]) / 2
print(f"  tally off {off:.1f}, on {on:.1f}: the tally {on - off:+.1f} ns per alert")
c = probe("on1", -2).get("alert_causes", {})
print(f"  an interval's alerted time (on): {c.get('alerted_ns')} ns in {c.get('alerts')} alerts, top: {json.dumps(c.get('causes', [])[:2])}")
PY
