#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Check what a virtual board sent over its link UART; print what was proved.

usage: verify.py BOARD CONSOLE_LOG FRAMES_JSONL LINK_STATS END_EPOCH START_EPOCH
CONSOLE_LOG holds the script's markers, `latmon check --json` and latmon's
log; FRAMES_JSONL is `latmon decode` of the link UART; LINK_STATS its
link-quality line. Exit 0 only when every expectation for the board holds.
"""
import json
import sys

board, path, frames_path, link_path = sys.argv[1:5]
t_end, t_start = int(sys.argv[5]), int(sys.argv[6])
text = open(path, encoding="utf-8", errors="replace").read().replace("\r", "")
frames = [json.loads(l) for l in open(frames_path) if l.strip()]
link = open(link_path, encoding="utf-8", errors="replace").read().strip()
failures, proved = [], []


def expect(cond, what):
    (proved if cond else failures).append(what)
    return cond


def section(name, end):
    if f"=== {name}\n" not in text:
        return None
    body = text.split(f"=== {name}\n", 1)[1]
    return body.split(end, 1)[0]


if not expect("=== done" in text, "the board ran its script to the end (console)"):
    print(f"board {board}: FAIL: no complete report on the console ({len(text)} bytes):\n{text[-2000:]}")
    sys.exit(1)

check = json.loads(section("check", "=== check-rc"))
check_rc = int(text.split("=== check-rc ")[1].split()[0])
run_rc = int(text.split("=== run-rc ")[1].split()[0])
feats = {f["kind"]: f["ok"] for f in check["features"]}
summaries = [f for f in frames if f.get("type") == "summary"]
hellos = [f for f in frames if f.get("type") == "hello"]
totals, attach, last = {}, {}, {}
for s in summaries:
    for p in s["probes"]:
        totals[p["name"]] = p["total_count"]
        attach[p["name"]] = p["attach"]
        if p["count"]:
            last[p["name"]] = p


def p50_of(name):
    """Median over the whole run: merge every interval's buckets."""
    buckets = {}
    for s in summaries:
        for p in s["probes"]:
            if p["name"] == name:
                for lo, hi, c in p["buckets"]:
                    buckets[(lo, hi)] = buckets.get((lo, hi), 0) + c
    total = sum(buckets.values())
    seen = 0
    for (lo, hi), c in sorted(buckets.items()):
        seen += c
        if seen * 2 >= total:
            return lo, hi
    return None

expect(check["config_ok"], "latmon check validated the board config")
print(f"board {board}: kernel {check['kernel']}, btf={check['btf']}, "
      f"attach kinds: {', '.join(k for k, ok in feats.items() if ok)}")

if board in ("rt-arm64", "rt-amd64"):
    expect(check["btf"], "the kernel has BTF")
    expect(feats.get("kprobe") is True, "kprobes attach on this kernel")
    expect(feats.get("tp_btf") is True, "tp_btf attaches")
    expect(check_rc == 0, "latmon check: every configured probe loads (exit 0)")
    expect(run_rc == 0, "latmon run exited 0 after its duration")
    expect(len(summaries) >= 5 and hellos,
           f"{len(summaries)} summaries and {len(hellos)} hello frames arrived over the link UART "
           f"and decoded on the host ({link.splitlines()[-1] if link else 'no link stats'})")
    expect("0 CRC errors" in link, "no CRC errors on the link")
    expect(attach.get("runq") == "tp_btf" and totals.get("runq", 0) > 0,
           f"runq attached via {attach.get('runq')} and counted {totals.get('runq')} run-queue events")
    expect(totals.get("runq-sleep", 0) >= 300,
           f"runq filtered by comm=sleep counted {totals.get('runq-sleep')} wakeups of 300 sleep processes")
    # kfunc: 300 busybox `sleep 0.01` calls, each one do_nanosleep of 10 ms.
    for name, mechs in (("nanosleep", ("fentry", "kprobe")), ("nanosleep-kprobe", ("kprobe",))):
        n = totals.get(name, 0)
        expect(attach.get(name) in mechs and n == 300,
               f"kfunc:do_nanosleep ({name}) attached via {attach.get(name)} and counted {n} of 300 calls")
        med = p50_of(name)
        expect(med is not None and 10_000_000 <= med[1] and med[0] <= 14_000_000,
               f"{name}: median bucket {med} ns holds the 10 ms sleep (plus timer slack, under emulation)")
    plan = {p["name"]: p for p in check["probes"]}
    expect(all(plan.get(n, {}).get("ok") for n in ("nanosleep", "nanosleep-kprobe")),
           "latmon check: both kfunc probes attach on this kernel")
elif board == "armmp":
    expect(not check["btf"], "the armmp kernel has no BTF")
    expect(feats.get("kprobe") is True, "kprobes attach on this kernel")
    runq = [p for p in check["probes"] if p["name"] == "runq"]
    expect(runq and "no BTF" in (runq[0].get("error") or ""),
           "runq (CO-RE) is refused with a clear no-BTF message")

for p in proved:
    print(f"  proved: {p}")
for f in failures:
    print(f"  FAILED: {f}")
print(f"board {board}: {'PASS' if not failures else 'FAIL'} in {t_end - t_start} s")
sys.exit(1 if failures else 0)
