#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Cost of the lock family (issue 26 item 6), from the kernel's BPF
# statistics, on two workloads pinned to CPU 0:
#   pingpong  benches/pingpong.c, a pipe ping-pong: every hand-over a
#             wakeup and a switch (what every task on the machine pays)
#   futexpp   benches/futexpp.c, a futex ping-pong between two threads:
#             every hand-over a FUTEX_WAKE and a FUTEX_WAIT that blocks
# Agents, one after the other on the same workloads:
#   none     no agent: the workloads' own ns per round trip
#   idle     `lock,comm=nosuchtask`: the programs loaded, no thread watched
#   watched  `lock,comm=futexpp`: the futex ping-pong's threads watched
#            (each of their waits followed and put in its lock's series)
# Per agent and workload: the BPF ns of all its programs divided by the
# context switches (runs of its sched_switch program) and by the futex
# calls (runs of its sys_enter_futex program), and the round trip against
# `none`. Medians of ROUNDS.
#   usage (root): benches/lock-cost.sh [ROUNDS] [ROUND_TRIPS]
#   LATMON_BIN picks the binary (default target/release/latmon).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
n=${2:-100000}
[ "$(id -u)" = 0 ] || { echo "run as root" >&2; exit 1; }
latmon=${LATMON_BIN:-target/release/latmon}
[ -x "$latmon" ] || cargo build --release --locked
tmp=$(mktemp -d)
old_stats=$(sysctl -n kernel.bpf_stats_enabled)
trap 'sysctl -qw kernel.bpf_stats_enabled=$old_stats; rm -rf "$tmp"' EXIT
cc -O2 -o "$tmp/pingpong" benches/pingpong.c
cc -O2 -pthread -o "$tmp/futexpp" benches/futexpp.c
sysctl -qw kernel.bpf_stats_enabled=1

# NAME WORKLOAD AGENT_PID: one measured run of WORKLOAD (pingpong or futexpp).
measure() {
  python3 benches/bpfstats.py x "$3" >"$tmp/before"
  local w; w=$(taskset -c 0 "$tmp/$2" "$n")
  python3 benches/bpfstats.py x "$3" >"$tmp/after"
  python3 - "$1" "$2" "$w" "$tmp/before" "$tmp/after" <<'PY'
import json, sys
name, load, w, b, a = sys.argv[1], sys.argv[2], float(sys.argv[3]), json.load(open(sys.argv[4])), json.load(open(sys.argv[5]))
ns = switches = futexes = 0
progs = {}
for k, (prog, t, c) in a.items():
    _, t0, c0 = b.get(k, (prog, 0, 0))
    ns += t - t0
    progs[prog] = [t - t0, c - c0]
    if prog.endswith("_switch"):
        switches += c - c0
    if "futex_en" in prog:
        futexes += c - c0
print(json.dumps({"name": name, "load": load, "rt_ns": w, "bpf_ns": ns, "switches": switches, "futexes": futexes, "progs": progs}))
PY
}

one() { # NAME PROBE
  "$latmon" -v run --probe "$2" --interval 60m --format json >/dev/null 2>"$tmp/$1.err" &
  local agent=$!
  for _ in $(seq 100); do grep -q "attached via" "$tmp/$1.err" 2>/dev/null && break; sleep 0.1; done
  measure "$1" pingpong $agent
  measure "$1" futexpp $agent
  kill -INT $agent; wait $agent || true
}

for r in $(seq "$rounds"); do
  for load in pingpong futexpp; do
    echo "{\"name\": \"none\", \"load\": \"$load\", \"rt_ns\": $(taskset -c 0 "$tmp/$load" "$n"), \"bpf_ns\": 0, \"switches\": 0, \"futexes\": 0}"
  done
  one idle lock,comm=nosuchtask
  one watched lock,comm=futexpp
done >"$tmp/rounds"
python3 - "$tmp/rounds" "$rounds" "$n" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rounds, n = int(sys.argv[2]), int(sys.argv[3])
def med(name, load, f):
    return statistics.median(f(r) for r in rows if r["name"] == name and r["load"] == load)
print(f"{rounds} rounds of {n} round trips per workload, medians")
print(f"{'agent':>8} {'workload':>9} {'BPF ns/switch':>14} {'BPF ns/futex':>13} {'futex/rt':>9} {'rt ns':>8} {'rt vs none':>11}")
for load in ("pingpong", "futexpp"):
    none = med("none", load, lambda r: r["rt_ns"])
    print(f"{'none':>8} {load:>9} {'-':>14} {'-':>13} {'-':>9} {none:8.0f} {1:11.3f}")
    for name in ("idle", "watched"):
        sw = med(name, load, lambda r: r["bpf_ns"] / max(r["switches"], 1))
        fx = med(name, load, lambda r: r["bpf_ns"] / r["futexes"] if r["futexes"] else float("nan"))
        fr = med(name, load, lambda r: r["futexes"] / n)
        rt = med(name, load, lambda r: r["rt_ns"])
        print(f"{name:>8} {load:>9} {sw:14.1f} {fx:13.1f} {fr:9.2f} {rt:8.0f} {rt / none:11.3f}")
for name in ("idle", "watched"):
    for load in ("pingpong", "futexpp"):
        last = [r for r in rows if r["name"] == name and r["load"] == load][-1]
        print(f"  {name} {load}, last round, per program ns/run x runs: " + ", ".join(
            f"{p} {t / max(c, 1):.0f} x {c}" for p, (t, c) in sorted(last["progs"].items(), key=lambda kv: -kv[1][0]) if c))
PY
