#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Cost of a ufunc probe: latmon's uprobe/uretprobe pair against Debian's
# libbpf-tools `funclatency` on the same target, in one run.
#
#   sudo benches/ufunc-vs-funclatency.sh            # CALLS=500000 ROUNDS=3
#   sudo CALLS=2000000 ROUNDS=5 benches/ufunc-vs-funclatency.sh
#
# Target: the empty function lm_nop() of tests/fixtures/lm_target.c
# (compiled here with cc -g -O0), called CALLS times in a loop per round.
# Reported per tool:
#   ns/call        the loop's own wall time per call (median of ROUNDS),
#   overhead/call  minus the loop without any probe: what a traced call
#                  costs the application (uprobe traps + BPF),
#   BPF entry/return ns  kernel BPF statistics (kernel.bpf_stats_enabled=1):
#                  run_time_ns / run_cnt of the tool's programs (includes
#                  the statistics' own ~20 ns clock reads per run).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "$0: run as root (BPF)" >&2; exit 1; }
CALLS=${CALLS:-500000}
ROUNDS=${ROUNDS:-3}
LATMON=${LATMON:-target/release/latmon}
FUNCLATENCY=${FUNCLATENCY:-$(command -v funclatency || echo /usr/sbin/funclatency)}
for tool in cc bpftool python3 "$FUNCLATENCY"; do
  command -v "$tool" >/dev/null || { echo "$0: $tool not found (scripts/install-deps.sh)" >&2; exit 1; }
done
[ -x "$LATMON" ] || cargo build --release --locked

tmp=$(mktemp -d)
old_stats=$(sysctl -n kernel.bpf_stats_enabled)
tool_pid=
cleanup() {
  [ -n "$tool_pid" ] && kill -INT "$tool_pid" 2>/dev/null && wait "$tool_pid" 2>/dev/null || true
  sysctl -qw kernel.bpf_stats_enabled="$old_stats"
  rm -rf "$tmp"
}
trap cleanup EXIT
sysctl -qw kernel.bpf_stats_enabled=1

bin=$tmp/lm-target
cc -g -O0 -pthread -o "$bin" tests/fixtures/lm_target.c

# Median ns/call of ROUNDS loops of CALLS calls.
loop_ns() {
  for _ in $(seq "$ROUNDS"); do "$bin" nop "$CALLS" | sed -n 's/^ns_per_call=//p'; done |
    sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'
}

# "entry_ns entry_cnt return_ns return_cnt" summed over the kprobe-type
# (uprobe) programs process $1 holds, split by name (exit/ret = return).
prog_stats() {
  bpftool prog show --json | python3 -c '
import json, os, sys
pid = sys.argv[1]
ids = set()
for fd in os.listdir(f"/proc/{pid}/fd"):
    try:
        if os.readlink(f"/proc/{pid}/fd/{fd}") != "anon_inode:bpf-prog":
            continue
        for line in open(f"/proc/{pid}/fdinfo/{fd}"):
            if line.startswith("prog_id:"):
                ids.add(int(line.split()[1]))
    except OSError:
        pass
s = {"entry": [0, 0], "return": [0, 0]}
for p in json.load(sys.stdin):
    if p["id"] in ids and p["type"] == "kprobe":
        side = "return" if ("exit" in p["name"] or "ret" in p["name"]) else "entry"
        s[side][0] += p.get("run_time_ns", 0)
        s[side][1] += p.get("run_cnt", 0)
print(*s["entry"], *s["return"])
' "$1"
}

wait_for() { # FILE PATTERN
  for _ in $(seq 200); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done
  echo "$0: timed out waiting for '$2' in $1:" >&2; cat "$1" >&2; exit 1
}

# measure NAME: the tool is running as $tool_pid; prints one result line.
measure() {
  read -r e0 ec0 r0 rc0 < <(prog_stats "$tool_pid")
  local ns; ns=$(loop_ns)
  read -r e1 ec1 r1 rc1 < <(prog_stats "$tool_pid")
  python3 - "$1" "$ns" "$base" $((e1 - e0)) $((ec1 - ec0)) $((r1 - r0)) $((rc1 - rc0)) "$((CALLS * ROUNDS))" <<'PY'
import sys
name, ns, base = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
et, ec, rt, rc, calls = map(int, sys.argv[4:])
en = et / ec if ec else float("nan")
rn = rt / rc if rc else float("nan")
note = "" if ec == calls and rc == calls else f"  (runs {ec}/{rc}, expected {calls}: other callers?)"
print(f"{name:<14} {ns:>9.1f} {ns - base:>14.1f} {en:>13.1f} {rn:>14.1f} {en + rn:>12.1f}{note}")
PY
}

stop_tool() { kill -INT "$tool_pid"; wait "$tool_pid" 2>/dev/null || true; tool_pid=; }

echo "target: lm_nop() in $bin, $CALLS calls x $ROUNDS rounds (median), $(uname -r), $(nproc) CPUs"
printf '%-14s %9s %14s %13s %14s %12s\n' tool ns/call overhead/call "BPF entry ns" "BPF return ns" "BPF ns/call"
base=$(loop_ns)
printf '%-14s %9.1f\n' "no probe" "$base"

"$LATMON" -v run --probe "ufunc:$bin:lm_nop" --interval 60s --format json >"$tmp/latmon.out" 2>"$tmp/latmon.err" &
tool_pid=$!
wait_for "$tmp/latmon.err" "ufunc via uprobe"
latmon_line=$(measure latmon)
echo "$latmon_line"
stop_tool
latmon_count=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])["probes"][0]["total_count"])' "$tmp/latmon.out")

stdbuf -oL "$FUNCLATENCY" "$bin:lm_nop" >"$tmp/funclatency.out" 2>&1 &
tool_pid=$!
wait_for "$tmp/funclatency.out" "Tracing"
fl_line=$(measure funclatency)
echo "$fl_line"
stop_tool

python3 - "$latmon_line" "$fl_line" "$latmon_count" "$((CALLS * ROUNDS))" <<'PY'
import sys
l, f = sys.argv[1].split(), sys.argv[2].split()
print(f"latmon counted {sys.argv[3]} of {sys.argv[4]} calls")
print(f"ratio latmon/funclatency: BPF ns per call {float(l[5]) / float(f[5]):.2f}x, "
      f"overhead per call {float(l[2]) / float(f[2]):.2f}x")
PY
