#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# How the BPF run statistics' per-run figure (run_time_ns / run_cnt, what
# benches/anatomy-cost.sh divides) compares with what the programs cost
# the workload (docs/probes.md, "Gate and cost"). latmon turns the
# statistics on itself for as long as it runs (BPF_ENABLE_STATS, to report
# its own cost: src/cost/mod.rs), so they are part of what an agent costs.
# Ping-pong (benches/pingpong.c: per round trip 2 wakeups and 2 switches,
# each running one program of an agent that follows no task) is timed in
# alternating rounds without an agent and with one (`runq,comm=nosuchtask`).
# Per program run (4 per round trip), the difference is what dispatch,
# body and the statistics' clock reads cost the workload; the statistics'
# own figure is printed beside it.
#   usage (root): benches/bpf-stats-cost.sh [ROUNDS] [ROUND_TRIPS]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-7}
n=${2:-200000}
[ "$(id -u)" = 0 ] || { echo "run as root" >&2; exit 1; }
latmon=${LATMON_BIN:-target/release/latmon}
[ -x "$latmon" ] || cargo build --release --locked
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT
cc -O2 -o "$tmp/pingpong" benches/pingpong.c
for r in $(seq "$rounds"); do
  none=$("$tmp/pingpong" "$n")
  "$latmon" run --probe runq,comm=nosuchtask --interval 60m --format json >/dev/null 2>"$tmp/agent.err" &
  agent=$!
  for _ in $(seq 100); do grep -q "attached via" "$tmp/agent.err" 2>/dev/null && break; sleep 0.1; done
  python3 benches/bpfstats.py x $agent > "$tmp/before"
  with=$("$tmp/pingpong" "$n")
  python3 benches/bpfstats.py x $agent > "$tmp/after"
  kill -INT $agent; wait $agent || true
  per_run=$(python3 - "$tmp" <<'PY'
import json, sys
t = sys.argv[1]
b, a = json.load(open(f"{t}/before")), json.load(open(f"{t}/after"))
ns = sum(v[1] - b.get(k, [0, 0, 0])[1] for k, v in a.items())
cnt = sum(v[2] - b.get(k, [0, 0, 0])[2] for k, v in a.items())
print(f"{ns / max(cnt, 1):.1f} {cnt}")
PY
)
  echo "$none $with $per_run"
done > "$tmp/rounds"
python3 - "$tmp/rounds" "$n" <<'PY'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
none, with_, rep, runs = (statistics.median(c) for c in zip(*rows))
print(f"ping-pong ns per round trip, median of {len(rows)} rounds: no agent {none:.0f}, agent {with_:.0f}; "
      f"{runs / int(sys.argv[2]):.2f} program runs per round trip")
print(f"per program run: {(with_ - none) / (runs / int(sys.argv[2])):.1f} ns added to the workload; "
      f"the statistics report {rep:.1f} ns")
for r in rows:
    print("  round (none, agent, reported ns/run, runs): " + " ".join(f"{v:.1f}" for v in r))
PY
