#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Benchmark: two latmon builds (before and after a change) against the same
# reference tools, interleaved in one run, with kernel BPF statistics on:
#   pipe ping-pong: runqlat, latmon A, latmon B (`run --probe runq`)
#   getppid loop:   syscount -L, latmon A, latmon B (`run --probe syscall`)
#   pipe ping-pong: latmon A, latmon B with their default sets (`run`, no
#                   --probe), while one 1 kHz SCHED_FIFO loop
#                   (tests/fixtures/lm_cycle.c) runs on CPU 1 the whole
#                   bench: a default that watches the loops it finds
#                   (issue 42, cycle,auto) watches it. BPF ns per context
#                   switch (the runs of a sched_switch program) side by side.
# Each round measures the three one after the other on the same workload, so
# drift of the machine (other load, frequency) shows in all three alike; the
# medians over the rounds and the ratios (B/A, and each against the
# reference tool) are what to compare, not one round's ns.
#   usage (root): benches/before-after.sh LATMON_A [LATMON_B] [ROUNDS]
#   LATMON_B defaults to target/release/latmon, ROUNDS to 5.
#   e.g. git worktree add /tmp/before REV && (cd /tmp/before && cargo build --release)
#        benches/before-after.sh /tmp/before/target/release/latmon
set -euo pipefail
cd "$(dirname "$0")/.."
a=${1:?usage: $0 LATMON_A [LATMON_B] [ROUNDS]}
b=${2:-target/release/latmon}
rounds=${3:-5}
pp_n=${PINGPONG_ROUND_TRIPS:-200000}
sc_n=${GETPPID_CALLS:-2000000}
[ "$(id -u)" = 0 ] || { echo "run as root" >&2; exit 1; }
for t in runqlat syscount; do
  command -v $t >/dev/null || { echo "$t missing: apt-get install libbpf-tools" >&2; exit 1; }
done
for x in "$a" "$b"; do [ -x "$x" ] || { echo "not an executable: $x" >&2; exit 1; }; done
tmp=$(mktemp -d)
old_stats=$(sysctl -n kernel.bpf_stats_enabled)
trap 'sysctl -qw kernel.bpf_stats_enabled=$old_stats; kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT
cc -O2 -o "$tmp/pingpong" benches/pingpong.c
cc -O2 -o "$tmp/getppid" benches/getppid.c
cc -O2 -o "$tmp/lm_cycle" tests/fixtures/lm_cycle.c
sysctl -qw kernel.bpf_stats_enabled=1
# The loop the default sets may watch: 1 kHz, no injected miss (EVERY
# beyond its cycles), on CPU 1, for as long as the bench runs (10 min at
# most: its log of 600 000 cycles is 24 MB).
taskset -c 1 "$tmp/lm_cycle" 600000 1000 1000000000 0 1 "$tmp/io" >/dev/null 2>&1 &

. benches/lib.sh

results=()
for r in $(seq "$rounds"); do
  results+=("$(measure pp-runqlat "$tmp/pingpong $pp_n" -- runqlat)")
  results+=("$(measure pp-A "$tmp/pingpong $pp_n" -- "$a" run --probe runq --interval 10s)")
  results+=("$(measure pp-B "$tmp/pingpong $pp_n" -- "$b" run --probe runq --interval 10s)")
  results+=("$(measure sc-syscount "$tmp/getppid $sc_n" -- syscount -L)")
  results+=("$(measure sc-A "$tmp/getppid $sc_n" -- "$a" run --probe syscall --interval 10s)")
  results+=("$(measure sc-B "$tmp/getppid $sc_n" -- "$b" run --probe syscall --interval 10s)")
  # 1 s intervals and 3 s to settle: discovery's scans find the loop and
  # the agent hands it over at a tick, before the ping-pong starts.
  results+=("$(MEASURE_SETTLE=3 measure df-A "$tmp/pingpong $pp_n" -- "$a" run --interval 1s)")
  results+=("$(MEASURE_SETTLE=3 measure df-B "$tmp/pingpong $pp_n" -- "$b" run --interval 1s)")
done
python3 - "$a" "$b" "$rounds" "${results[@]}" <<'PY'
import json, statistics, sys
a, b, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
runs = [json.loads(x) for x in sys.argv[4:]]
print(f"A = {a}\nB = {b}\n{rounds} rounds, medians (ns per BPF program run; BPF ns per workload op)")
def med(name, key):
    return statistics.median(r[key] for r in runs if r["name"] == name)
for bench, ref, what in (("pp", "runqlat", "pipe ping-pong, runq"), ("sc", "syscount", "getppid loop, syscall")):
    print(f"{what}:")
    for who in (ref, "A", "B"):
        n = f"{bench}-{who}"
        per_round = " ".join(f"{r['ns_per_event']:.1f}" for r in runs if r["name"] == n)
        print(f"  {who:>8}: {med(n, 'ns_per_event'):7.1f} ns/event, BPF {med(n, 'bpf_ns_per_op'):7.1f} ns/op"
              f"   (rounds: {per_round})")
    ea, eb, er = (med(f"{bench}-{w}", "ns_per_event") for w in ("A", "B", ref))
    oa, ob, orf = (med(f"{bench}-{w}", "bpf_ns_per_op") for w in ("A", "B", ref))
    print(f"  B/A: ns/event {eb/ea:.3f}, BPF ns/op {ob/oa:.3f};  vs {ref}: A {ea/er:.2f}, B {eb/er:.2f} (ns/event)")
print("pipe ping-pong, the default sets, one 1 kHz FIFO loop running:")
for who in ("A", "B"):
    n = f"df-{who}"
    per_round = " ".join(f"{r['bpf_ns_per_switch']:.1f}" for r in runs if r["name"] == n)
    print(f"  {who:>8}: {med(n, 'bpf_ns_per_switch'):7.1f} BPF ns/switch, {med(n, 'switches'):.0f} switches"
          f"   (rounds: {per_round})")
sa, sb = (med(f"df-{w}", "bpf_ns_per_switch") for w in ("A", "B"))
print(f"  B/A: BPF ns/switch {sb/sa:.3f} ({sb - sa:+.1f} ns per switch)")
for who in ("A", "B"):
    last = [r for r in runs if r["name"] == f"df-{who}"][-1]
    print(f"  {who} programs (last round): " + "; ".join(last["programs"]))
PY
