#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# How late the cycle family's overrun records are (issue 25 item 3: within
# 2 ms of the deadline, or one scheduler tick where HZ < 500), idle and
# under load. Per load, a 1 kHz lm_cycle loop (tests/fixtures/lm_cycle.c,
# SCHED_FIFO 80, its misses injected every 25th cycle: busy 1.5 periods,
# page faults, write + fdatasync, spin 8 periods) runs CYCLES cycles under
# `latmon run --probe cycle,comm=lm_cycle`; each overrun record's delay is
# its time_ns - deadline_ns (both CLOCK_MONOTONIC, the agent's JSON). Loads
# (stress-ng, normal priority unless said):
#   idle     none
#   cpu      --cpu 2
#   mix      --cpu 2 --io 1 --vm 1
#   heavy    --cpu 2 --io 2 --hdd 1 --timer 2 --switch 2 --vm 1
#   fifo90   --cpu 1 at SCHED_FIFO 90 (above the loop), 50 % load
# A record is sent from the next event on the loop's CPU that sees the
# deadline passed (docs/probes.md, cycle): the tick bounds it on a busy
# CPU. The tick is read from CONFIG_HZ (/proc/config.gz), else TICK_MS.
#   usage (root): benches/overrun-delay.sh [CYCLES] [LOADS...]
#   LATMON_BIN picks the binary (default target/release/latmon); KEEP=1
#   keeps the scratch directory (its JSON and the loop's rows), named at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
cycles=${1:-3000}
shift || true
loads=("$@")
[ ${#loads[@]} -gt 0 ] || loads=(idle cpu mix heavy fifo90)
[ "$(id -u)" = 0 ] || { echo "run as root" >&2; exit 1; }
command -v stress-ng >/dev/null || { echo "needs stress-ng (apt-get install stress-ng)" >&2; exit 1; }
latmon=${LATMON_BIN:-target/release/latmon}
[ -x "$latmon" ] || cargo build --release --locked
hz=$(zcat /proc/config.gz 2>/dev/null | sed -n 's/^CONFIG_HZ=//p')
tick_ms=${TICK_MS:-$([ -n "$hz" ] && python3 -c "print(1000 / $hz)" || echo 4)}
tmp=$(mktemp -d)
trap 'for j in $(jobs -p); do kill -KILL -- -$j $j 2>/dev/null; done; [ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
cc -O2 -o "$tmp/lm_cycle" tests/fixtures/lm_cycle.c
steal() { awk '$1 == "cpu" {print $9}' /proc/stat; } # USER_HZ ticks the host ran no vCPU
load_cmd() {
  case $1 in
    idle) ;;
    cpu) echo "stress-ng --cpu 2" ;;
    mix) echo "stress-ng --cpu 2 --io 1 --vm 1 --vm-bytes 256M" ;;
    heavy) echo "stress-ng --cpu 2 --io 2 --hdd 1 --hdd-bytes 64M --timer 2 --switch 2 --vm 1 --vm-bytes 512M" ;;
    fifo90) echo "stress-ng --cpu 1 --sched fifo --sched-prio 90 --cpu-load 50" ;;
    *) echo "unknown load $1" >&2; return 1 ;;
  esac
}
for l in "${loads[@]}"; do
  cmd=$(load_cmd "$l")
  if [ -n "$cmd" ]; then
    # Its own process group, killed whole; --timeout in case this script
    # is killed first (a stress-ng worker can outlive its parent).
    (cd "$tmp" && exec setsid $cmd --timeout 300) >/dev/null 2>&1 &
    load=$!
    sleep 1
  fi
  steal0=$(steal)
  "$latmon" -v run --probe cycle,comm=lm_cycle --interval 1s --format json >"$tmp/$l.json" 2>"$tmp/$l.err" &
  agent=$!
  # Loaded and attached before the loop starts (slow under load).
  for _ in $(seq 600); do grep -q "attached via" "$tmp/$l.err" 2>/dev/null && break; sleep 0.1; done
  grep -q "attached via" "$tmp/$l.err" || { echo "$l: latmon did not attach in 60 s" >&2; cat "$tmp/$l.err" >&2; exit 1; }
  sleep 0.5
  "$tmp/lm_cycle" "$cycles" 1000 25 100 3000 "$tmp/io" >"$tmp/$l.rows"
  sleep 1.5 # the last interval's records
  kill -INT $agent; wait $agent || true
  if [ -n "$cmd" ]; then
    kill -TERM -- -$load 2>/dev/null || true
    sleep 1
    kill -KILL -- -$load 2>/dev/null || true
    wait $load 2>/dev/null || true
  fi
  python3 - "$l" "$tmp/$l.json" "$tmp/$l.rows" "$tick_ms" "$steal0" "$(steal)" <<'PY'
import json, os, sys
name, path, rows, tick = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
steal_ms = (int(sys.argv[6]) - int(sys.argv[5])) * 1000 / os.sysconf("SC_CLK_TCK")
recs = []
for line in open(path):
    try:
        o = json.loads(line)
    except ValueError:
        continue
    recs += [r for r in (o.get("alert_records", []) if isinstance(o, dict) else []) if r.get("probe") == "cycle"]
over = [r for r in recs if r.get("event") == "overrun"]
lines = [json.loads(l) for l in open(path) if l.startswith("{")]
counted = max((p.get("cycle", {}).get("total_cycles", 0) for o in lines for p in o.get("probes", []) if p.get("name") == "cycle"), default=0)
ran = sum(1 for l in open(rows) if not l.startswith("done"))
dup = len(over) - len({(r["release_ns"], r["tid"]) for r in over})
delays = sorted((r["time_ns"] - r["deadline_ns"]) / 1e6 for r in over)
misses = next((l.split("=")[1].strip() for l in open(rows) if l.startswith("done")), "?")
if not delays:
    print(f"{name:>7}: no overrun record (the fixture's misses: {misses})")
    sys.exit(0)
p99 = delays[min(len(delays) - 1, int(len(delays) * 0.99))]
bound = max(2.0, tick)
print(f"{name:>7}: {len(delays):4d} overrun records (fixture misses {misses}), delay ms p50 {delays[len(delays) // 2]:.2f} "
      f"p99 {p99:.2f} max {delays[-1]:.2f}; over max(2 ms, tick {tick:g} ms): "
      f"{sum(1 for d in delays if d > bound)}; cycles {counted} of {ran}; duplicates {dup}; vCPU steal {steal_ms:.0f} ms")
# A late record's cycle: its miss record's timer_irq_delay says how late
# the loop CPU's timer interrupt itself was (the CPU ran nothing, no tick
# either: a host that did not run the vCPU shows it as steal).
misses_by_release = {r["release_ns"]: r for r in recs if r.get("event") == "miss"}
for r in over:
    d = (r["time_ns"] - r["deadline_ns"]) / 1e6
    if d <= bound:
        continue
    m = misses_by_release.get(r["release_ns"], {})
    irq = next((c["ns"] / 1e6 for c in m.get("causes", []) if c.get("kind") == "timer_irq_delay"), None)
    print(f"         late record: {d:.2f} ms after the deadline, doing {r.get('doing')}; its cycle's timer IRQ "
          + (f"{irq:.2f} ms late" if irq is not None else "unknown (no miss record)"))
PY
done
[ -z "${KEEP:-}" ] || echo "kept: $tmp"
