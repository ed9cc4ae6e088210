#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Validation: latmon's timer probe against cyclictest's own numbers, with
# cyclictest as the workload (one SCHED_FIFO thread, 1 kHz clock_nanosleep).
#
# cyclictest measures, in user space, clock_gettime() after the wakeup minus
# the intended wakeup time; latmon measures in the kernel, from the timer's
# intended expiry to the thread's sched_switch. latmon follows only the
# measuring thread (pid=TID: cyclictest's main thread shares the comm and
# sleeps with 50 us of timer slack). latmon attaches after cyclictest has
# started and stops after it ended, so it sees the last N cycles: cyclictest
# prints every sample (-v) and the comparison uses exactly those N.
#   usage (root): benches/timer-vs-cyclictest.sh [SECONDS] [EXTRA CYCLICTEST ARGS]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}; shift || true
[ "$(id -u)" = 0 ] || { echo "run as root" >&2; exit 1; }
command -v cyclictest >/dev/null || { echo "cyclictest missing: apt-get install rt-tests" >&2; exit 1; }
[ -x target/release/latmon ] || cargo build --release --locked
tmp=$(mktemp -d); [ -n "${KEEP:-}" ] && echo "keeping $tmp" >&2
trap 'kill $(jobs -p) 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT

cyclictest -t1 -p80 -i1000 -v -D "$secs" "$@" >"$tmp/ct.out" 2>&1 &
ct=$!
tid=
for _ in $(seq 50); do
  for t in /proc/$ct/task/*; do
    # field 41 of stat: scheduling policy (1 = SCHED_FIFO)
    [ "$(awk '{print $41}' "$t/stat" 2>/dev/null)" = 1 ] && tid=${t##*/}
  done
  [ -n "$tid" ] && break
  sleep 0.1
done
[ -n "$tid" ] || { echo "cyclictest's measuring thread not found" >&2; exit 1; }
target/release/latmon -v run --probe "timer,pid=$tid" --interval 60m --format json >"$tmp/lm.json" 2>"$tmp/lm.err" &
lm=$!
wait "$ct" || true
kill -0 "$lm" 2>/dev/null || { echo "latmon stopped early:" >&2; cat "$tmp/lm.err" >&2; exit 1; }
kill -INT "$lm"; wait "$lm" || true

python3 - "$tmp/ct.out" "$tmp/lm.json" "$tid" <<'PY'
import json, sys
ct_path, lm_path, tid = sys.argv[1:]
samples = []
for line in open(ct_path):
    f = line.replace(":", " ").split()
    if len(f) == 3 and all(x.isdigit() for x in f):
        samples.append(int(f[2]) * 1000)  # us -> ns
rep = json.loads(open(lm_path).read().splitlines()[-1])["probes"][0]
n = rep["total_count"]
last = sorted(samples[-n:]) if n else []

def pct(sorted_vals, q):
    return sorted_vals[min(len(sorted_vals) - 1, int(q * len(sorted_vals)))] if sorted_vals else 0

print(f"cyclictest -t1 -p80 -i1000: {len(samples)} cycles; latmon timer,pid={tid} ({rep['attach']}): "
      f"{n} samples = cyclictest's last {len(last)} cycles")
print(f"{'':>12} {'min':>9} {'p50':>9} {'p90':>9} {'p99':>9} {'p99.9':>9} {'max':>9} {'mean':>9}")
ct = dict(min=last[0], p50=pct(last, .5), p90=pct(last, .9), p99=pct(last, .99), p999=pct(last, .999),
          max=last[-1], mean=sum(last) / len(last))
lm = dict(min=rep["min_ns"], p50=rep["p50_ns"], p90=rep["p90_ns"], p99=rep["p99_ns"], p999=rep["p999_ns"],
          max=rep["max_ns"], mean=rep["mean_ns"])
keys = ["min", "p50", "p90", "p99", "p999", "max", "mean"]
row = lambda name, d: print(f"{name:>12} " + " ".join(f"{d[k]/1000:8.1f}u" for k in keys))
row("cyclictest", ct)
row("latmon", lm)
row("difference", {k: ct[k] - lm[k] for k in keys})
print("(cyclictest truncates to whole microseconds; latmon percentiles are interpolated in "
      "log-linear buckets <= 12.5 % wide)")
PY
