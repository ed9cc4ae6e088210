#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Cost of the cycle family per context switch, machine-wide (issue 25 item
# 6), from the kernel's BPF statistics on the pipe ping-pong
# (benches/pingpong.c: every hand-over a wakeup and a switch). In each
# round, one after the other on the same workload:
#   none     no agent: the ping-pong's own ns per round trip
#   watched  `cycle,comm=lm_cycle` while tests/fixtures/lm_cycle.c runs a
#            1 kHz loop on the other CPU (no injected misses): the probe's
#            programs follow one thread, and every switch, wakeup, IRQ and
#            hrtimer expiry on the machine runs them
#   idle     `cycle,comm=nosuchtask`: the same programs, no thread watched
#   timerfd  `cycle,comm=lm_cycle,timerfd=true`: watched, plus the read()
#            program that follows timerfd loops (the ping-pong reads a pipe
#            at every hand-over, so it pays that program per switch)
#   runq     `runq` (the default per-switch probe), for scale
# Per agent: the BPF ns of all its programs over the ping-pong divided by
# the context switches in that time (the runs of its sched_switch program),
# and the ping-pong's ns per round trip against `none`. Medians of ROUNDS.
#   usage (root): benches/cycle-cost.sh [ROUNDS] [ROUND_TRIPS]
#   LATMON_BIN picks the binary (default target/release/latmon).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
n=${2:-200000}
[ "$(id -u)" = 0 ] || { echo "run as root" >&2; exit 1; }
latmon=${LATMON_BIN:-target/release/latmon}
[ -x "$latmon" ] || cargo build --release --locked
tmp=$(mktemp -d)
old_stats=$(sysctl -n kernel.bpf_stats_enabled)
trap 'sysctl -qw kernel.bpf_stats_enabled=$old_stats; kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT
cc -O2 -o "$tmp/pingpong" benches/pingpong.c
cc -O2 -o "$tmp/lm_cycle" tests/fixtures/lm_cycle.c
sysctl -qw kernel.bpf_stats_enabled=1
# The watched loop: 1 kHz, no injected miss (EVERY beyond its cycles), on
# CPU 1 (the ping-pong is pinned to CPU 0), for as long as the bench runs
# (at most 10 min: its log of 600 000 cycles is 24 MB).
taskset -c 1 "$tmp/lm_cycle" 600000 1000 1000000000 0 1 "$tmp/io" >/dev/null 2>&1 &

one() { # NAME PROBE: one measured ping-pong under `latmon run --probe PROBE`
  "$latmon" -v run --probe "$2" --interval 60m --format json >/dev/null 2>"$tmp/$1.err" &
  local agent=$!
  for _ in $(seq 100); do grep -q "attached via" "$tmp/$1.err" 2>/dev/null && break; sleep 0.1; done
  sleep 0.5 # the loop's first sleeps enter it in the watched threads
  python3 benches/bpfstats.py x $agent >"$tmp/before"
  local w; w=$("$tmp/pingpong" "$n")
  python3 benches/bpfstats.py x $agent >"$tmp/after"
  kill -INT $agent; wait $agent || true
  python3 - "$1" "$w" "$tmp/before" "$tmp/after" <<'PY'
import json, sys
name, w, b, a = sys.argv[1], float(sys.argv[2]), json.load(open(sys.argv[3])), json.load(open(sys.argv[4]))
ns = switches = 0
progs = {}
for k, (prog, t, c) in a.items():
    _, t0, c0 = b.get(k, (prog, 0, 0))
    ns += t - t0
    progs[prog] = [t - t0, c - c0]
    if "_switch" in prog:
        switches += c - c0
print(json.dumps({"name": name, "pp_ns": w, "bpf_ns": ns, "switches": switches, "progs": progs}))
PY
}

for r in $(seq "$rounds"); do
  echo "{\"name\": \"none\", \"pp_ns\": $("$tmp/pingpong" "$n"), \"bpf_ns\": 0, \"switches\": 0}"
  one watched cycle,comm=lm_cycle
  one idle cycle,comm=nosuchtask
  one timerfd cycle,comm=lm_cycle,timerfd=true
  one runq runq
done >"$tmp/rounds"
python3 - "$tmp/rounds" "$rounds" "$n" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rounds, n = int(sys.argv[2]), int(sys.argv[3])
def med(name, f):
    return statistics.median(f(r) for r in rows if r["name"] == name)
none = med("none", lambda r: r["pp_ns"])
print(f"{rounds} rounds of {n} ping-pong round trips, medians")
print(f"{'agent':>8} {'BPF ns/switch':>14} {'switches/rt':>12} {'rt ns':>8} {'rt vs none':>11}")
print(f"{'none':>8} {'-':>14} {'-':>12} {none:8.0f} {1:11.3f}")
for name in ("watched", "idle", "timerfd", "runq"):
    per = med(name, lambda r: r["bpf_ns"] / max(r["switches"], 1))
    sw = med(name, lambda r: r["switches"] / n)
    rt = med(name, lambda r: r["pp_ns"])
    print(f"{name:>8} {per:14.1f} {sw:12.2f} {rt:8.0f} {rt / none:11.3f}")
w = med("watched", lambda r: r["bpf_ns"] / max(r["switches"], 1))
q = med("runq", lambda r: r["bpf_ns"] / max(r["switches"], 1))
print(f"cycle watching one loop: {w:.1f} ns per switch machine-wide (target <= 40), {w / q:.2f}x runq's")
for name in ("watched", "idle", "timerfd", "runq"):
    print(f"  {name} rounds (ns/switch): " + " ".join(
        f"{r['bpf_ns'] / max(r['switches'], 1):.1f}" for r in rows if r["name"] == name))
    last = [r for r in rows if r["name"] == name][-1]
    print("    last round, per program: ns/run x runs/switch = ns/switch: " + ", ".join(
        f"{p} {t / max(c, 1):.0f} x {c / max(last['switches'], 1):.2f} = {t / max(last['switches'], 1):.1f}"
        for p, (t, c) in sorted(last["progs"].items(), key=lambda kv: -kv[1][0]) if c))
PY
