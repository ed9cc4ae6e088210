#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Cost of outlier anatomy (docs/probes.md): BPF ns per measured event with
# the anatomy on and off, side by side in one run. Four agents run at once
# on the same workload, each with its own BPF objects:
#   off      the probe without anatomy (LATMON_ANATOMY=off: today's cost)
#   on       the probe with anatomy: every event is a watched task waiting
#   off-idle / on-idle  the same probe following no task (comm= matching
#            nothing): what the anatomy costs when nothing watched waits
# Each agent's BPF run time (kernel.bpf_stats_enabled, all its programs:
# for `on` also the irq and softirq ones) is divided by the events the
# busy agents measured. threshold=1s: the accounting runs, alerts do not.
# Per agent it also prints the anatomy's interrupt programs (irq and
# softirq entry/exit) apart: their runs per event and ns per run. They run
# on every interrupt of the machine whatever the gate says, so their share
# per event scales with the machine's interrupt rate over the event rate;
# and each run's figure holds the statistics' own clock reads
# (kernel.bpf_stats_enabled times every run with two sched_clock() calls),
# which weigh most on programs that do least (the gated path is 4
# instructions).
#   usage (root): benches/anatomy-cost.sh pingpong|cyclictest|chain [SECONDS]
#   chain: cyclictest's loop through `chain` (hardirq and timer events)
# LATMON_BIN=path runs another build of latmon (e.g. a before/after pair).
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:?usage: $0 pingpong|cyclictest|chain [SECONDS]}
secs=${2:-10}
[ "$(id -u)" = 0 ] || { echo "run as root" >&2; exit 1; }
latmon=${LATMON_BIN:-target/release/latmon}
[ -x "$latmon" ] || cargo build --release --locked
tmp=$(mktemp -d)
old_stats=$(sysctl -n kernel.bpf_stats_enabled)
trap 'sysctl -qw kernel.bpf_stats_enabled=$old_stats; kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT
sysctl -qw kernel.bpf_stats_enabled=1
case "$what" in
  pingpong)
    cc -O2 -o "$tmp/pingpong" benches/pingpong.c
    family=runq comm=pingpong ;;
  cyclictest|chain)
    command -v cyclictest >/dev/null || { echo "cyclictest missing: apt-get install rt-tests" >&2; exit 1; }
    family=timer comm=cyclictest
    if [ "$what" = chain ]; then family=chain; fi ;;
  *) echo "usage: $0 pingpong|cyclictest|chain [SECONDS]" >&2; exit 2 ;;
esac
start_agent() { # NAME ANATOMY COMM
  LATMON_ANATOMY=$2 "$latmon" -v run --probe "$family,comm=$3,threshold=1s" --interval 60m \
    --format json >"$tmp/$1.json" 2>"$tmp/$1.err" &
  echo $! >"$tmp/$1.pid"
  for _ in $(seq 100); do grep -q "attached via" "$tmp/$1.err" && break; sleep 0.1; done
}
start_agent off off "$comm"
start_agent on on "$comm"
start_agent off-idle off nosuchtask
start_agent on-idle on nosuchtask
for a in off on off-idle on-idle; do python3 benches/bpfstats.py x "$(cat "$tmp/$a.pid")" >"$tmp/$a.before"; done
case "$what" in
  pingpong) "$tmp/pingpong" $((secs * 40000)) >/dev/null ;;
  cyclictest|chain) cyclictest -t1 -p80 -i1000 -q -D "$secs" >/dev/null ;;
esac
for a in off on off-idle on-idle; do python3 benches/bpfstats.py x "$(cat "$tmp/$a.pid")" >"$tmp/$a.after"; done
for a in off on off-idle on-idle; do kill -INT "$(cat "$tmp/$a.pid")"; done
wait || true
python3 - "$tmp" "$what" "$family" "$secs" <<'PY'
import json, sys
tmp, what, family, secs = sys.argv[1:]
secs = float(secs)
def bpf_ns(a):
    before, after = json.load(open(f"{tmp}/{a}.before")), json.load(open(f"{tmp}/{a}.after"))
    progs = {}
    for k, (name, ns, cnt) in after.items():
        _, ns0, cnt0 = before.get(k, (name, 0, 0))
        progs[name] = (ns - ns0, cnt - cnt0)
    return progs
def events(a):
    rep = json.loads(open(f"{tmp}/{a}.json").read().splitlines()[-1])
    return rep["probes"][0]["total_count"]
n = {a: events(a) for a in ("off", "on")}
ev = max(1, min(n.values()))
print(f"{what}: {family} probe, {n['off']} / {n['on']} events measured (anatomy off / on)")
for a in ("off", "on", "off-idle", "on-idle"):
    p = bpf_ns(a)
    tot = sum(ns for ns, _ in p.values())
    detail = ", ".join(f"{k} {ns / max(c, 1):.0f} ns x {c}" for k, (ns, c) in sorted(p.items()))
    print(f"  {a:<9} {tot / ev:8.1f} ns of BPF per event   ({detail})")
    # The anatomy's interrupt programs (and chain's, which also account
    # the anatomy's hardirqs): what runs on every interrupt.
    ints = {k: v for k, v in p.items() if "irq_e" in k}
    if ints:
        ins, runs = sum(ns for ns, _ in ints.values()), sum(c for _, c in ints.values())
        print(f"  {'':<9} of which interrupt programs {ins / ev:6.1f} ns per event: {runs / ev:.2f} runs per event "
              f"({runs / secs:.0f}/s) at {ins / max(runs, 1):.0f} ns per run; all BPF {tot / secs / 1e3:.0f} us/s")
PY
