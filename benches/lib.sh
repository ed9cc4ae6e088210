# SPDX-License-Identifier: MIT
# Shared by the benchmark scripts (sourced; needs $tmp and bash).
#
# measure NAME WORKLOAD_CMD -- TOOL_CMD...
#   Start the tool, wait until its BPF programs are loaded and attached,
#   snapshot their kernel run statistics (benches/bpfstats.py), run the
#   workload once (it prints ns per operation and takes the operation count
#   as its last argument), snapshot again, stop the tool with SIGINT.
#   Prints one JSON line: name, ns_per_event (BPF ns per program run),
#   events, bpf_ns_per_op, workload_ns_per_op, programs (per-program text).
measure() {
  local name=$1 workload=$2; shift 3
  "$@" >"$tmp/$name.out" 2>&1 &
  local pid=$!
  for _ in $(seq 100); do
    python3 benches/bpfstats.py x "$pid" >"$tmp/$name.before" 2>/dev/null && break
    sleep 0.1
  done
  # Let attach complete (programs load before links are made); longer
  # with MEASURE_SETTLE (seconds), e.g. for loop discovery's first scans.
  sleep "${MEASURE_SETTLE:-1}"
  python3 benches/bpfstats.py x "$pid" >"$tmp/$name.before"
  local w; w=$($workload)
  python3 benches/bpfstats.py x "$pid" >"$tmp/$name.after"
  kill -INT "$pid"; wait "$pid" || true
  local ops=${workload##* }
  python3 - "$name" "$w" "$ops" "$tmp/$name.before" "$tmp/$name.after" <<'PY'
import json, sys
name, w, n, b, a = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
before, after = json.load(open(b)), json.load(open(a))
tot_ns = tot_cnt = switches = 0
parts = []
for k, (pname, ns, cnt) in after.items():
    _, ns0, cnt0 = before.get(k, (pname, 0, 0))
    dns, dcnt = ns - ns0, cnt - cnt0
    tot_ns += dns; tot_cnt += dcnt
    # Every sched_switch program runs once per context switch.
    if "switch" in pname:
        switches = max(switches, dcnt)
    if dcnt:
        parts.append(f"{pname} {dns/dcnt:.0f} ns x {dcnt}")
print(json.dumps({"name": name, "ns_per_event": tot_ns / max(tot_cnt, 1), "events": tot_cnt,
                  "bpf_ns_per_op": tot_ns / n, "workload_ns_per_op": w, "switches": switches,
                  "bpf_ns_per_switch": tot_ns / max(switches, 1), "programs": parts}))
PY
}
