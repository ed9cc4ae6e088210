#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Check what a virtual board sent over its link UART; print what was proved.

usage: verify.py BOARD UART_LOG END_EPOCH START_EPOCH [QEMU_SECONDS]
The UART carries one section per config the board ran (tests/board/run.sh):
  === config NAME / === check / JSON / === check-rc N / === check-stderr /
  === run / JSON summary lines / === run-rc N / === run-stderr /
  === workload / === end NAME
Exit 0 only when every expectation for the board holds.
"""
import json
import re
import sys

import cycle
import lock
from splats import splat_lines

# argv: BOARD CONSOLE_LOG FRAMES_JSONL LINK_STATS END START [QEMU_S]
# The console holds the script's markers, latmon check and logs; FRAMES_JSONL
# is `latmon decode` of the link UART (one latmon session per config, in
# order, told apart by boot id); LINK_STATS is decode's link-quality line.
board, path, frames_path, link_path = sys.argv[1:5]
t_end, t_start = int(sys.argv[5]), int(sys.argv[6])
qemu_s = int(sys.argv[7]) if len(sys.argv) > 7 else None
frames = [json.loads(l) for l in open(frames_path) if l.strip()]
link = open(link_path, encoding="utf-8", errors="replace").read().strip()
sessions = []  # summaries per latmon session (boot id), in UART order
for f in frames:
    if f.get("type") == "summary":
        if not sessions or sessions[-1][0] != f["boot_id"]:
            sessions.append((f["boot_id"], []))
        sessions[-1][1].append(f)
console = open(path, encoding="utf-8", errors="replace").read().replace("\r", "")
# The kernel's own console lines ("[  12.345678] ..."; loglevel=5 on the
# boards' command line, tests/board/lib.sh, so warnings print) are cut out
# of the text the sections are parsed from: printk writes to the console
# wherever the cursor is, even inside a line of latmon check's JSON.
text = re.sub(r"\[ *\d+\.\d{6}\] [^\n]*\n", "", console)
failures, proved = [], []



def status_count_of(frames, probe, field, key):
    """A per-probe cumulative count of the Status frames (`field`, a list
    of {id, key}) for `probe`, named through the Hello of the same session:
    its largest value."""
    names = {}
    for f in frames:
        if f.get("type") == "hello":
            for p in f.get("probes", []):
                names[(f["boot_id"], p["id"])] = p["name"]
    best = 0
    for f in frames:
        if f.get("type") == "status":
            for m in f.get(field) or []:
                if names.get((f["boot_id"], m["id"])) == probe:
                    best = max(best, m[key])
    return best


def shed_of(frames, probe):
    """Alert records of `probe` a budgeted link shed over its fair part of
    the alerts' share (Status `shed`, revision 4, docs/wire-format.md)."""
    return status_count_of(frames, probe, "shed", "alerts_shed")


def dropped_of(frames, probe, summary):
    """Alert records of `probe` lost before any output (token bucket,
    kernel buffer, agent queue): Status `dropped` (revision 6; the final
    Status follows the final summary, whose count is the one before)."""
    return max(status_count_of(frames, probe, "dropped", "alerts_dropped"), summary.get("total_alerts_dropped", 0))


def records_accounted(recs, dropped, alerts, shed, slack=0):
    """Every alert is a record over the UART, a counted drop in the kernel,
    or one of this probe's records the link shed (counted per probe); some
    records arrive; no record without its alert."""
    return alerts > 0 and len(recs) > 0 and alerts - slack <= len(recs) + dropped + shed and len(recs) + dropped <= alerts

def expect(cond, what):
    (proved if cond else failures).append(what)
    return cond


def between(body, start, end):
    if f"=== {start}\n" not in body:
        return None
    return body.split(f"=== {start}\n", 1)[1].split(f"=== {end}", 1)[0]


class Section:
    """One config's run on the board."""

    def __init__(self, name, index=0):
        self.name = name
        body = between(text, f"config {name}", f"end {name}")
        self.ok = body is not None
        if not self.ok:
            return
        self.check = json.loads(between(body, "check", "check-rc"))
        self.check_rc = int(body.split("=== check-rc ")[1].split()[0])
        self.run_rc = int(body.split("=== run-rc ")[1].split()[0])
        self.run_err = between(body, "run-stderr", "workload") or ""
        self.workload = between(body, "workload", f"end {name}") or ""
        self.feats = {f["kind"]: f["ok"] for f in self.check["features"]}
        self.plan = {p["name"]: p for p in self.check["probes"]}
        self.summaries = sessions[index][1] if index < len(sessions) else []
        # The final summary (SIGINT) holds the totals; its probes carry
        # the whole run's histogram only as totals, so keep the last report
        # of each probe and the sum of interval buckets.
        self.last = {}
        self.buckets = {}
        for s in self.summaries:
            for p in s["probes"]:
                self.last[p["name"]] = p
                for lo, hi, c in p["buckets"]:
                    b = self.buckets.setdefault(p["name"], {})
                    b[(lo, hi)] = b.get((lo, hi), 0) + c

    def total(self, probe):
        return self.last.get(probe, {}).get("total_count", 0)

    def drops(self, probe):
        return self.last.get(probe, {}).get("total_drops", 0)

    def quantile(self, probe, q):
        """The bucket [lo, hi) holding quantile q of the whole run (the
        interval summaries' buckets added up)."""
        b = sorted(self.buckets.get(probe, {}).items())
        n = sum(c for _, c in b)
        seen = 0
        for (lo, hi), c in b:
            seen += c
            if seen >= q * n:
                return lo, hi
        return 0, 0

    def count_at_least(self, probe, value):
        """Calls whose bucket reaches `value` or beyond (bucket hi > value)."""
        return sum(c for (lo, hi), c in self.buckets.get(probe, {}).items() if hi > value)

    def mean_ns(self, probe):
        """Mean over the whole run (the intervals' means weighted by count)."""
        ps = [p for s in self.summaries for p in s["probes"] if p["name"] == probe]
        n = sum(p["count"] for p in ps)
        return sum(p["mean_ns"] * p["count"] for p in ps) / n if n else 0

    def min_ns(self, probe):
        mins = [p["min_ns"] for s in self.summaries for p in s["probes"] if p["name"] == probe and p["count"] > 0]
        return min(mins) if mins else 0

    def max_ns(self, probe):
        return max((p["max_ns"] for s in self.summaries for p in s["probes"] if p["name"] == probe), default=0)

    def p50_ns(self, probe):
        """The whole run's median, interpolated in its bucket and kept
        within the exact min and max (as latmon computes percentiles)."""
        b = sorted(self.buckets.get(probe, {}).items())
        n, seen = sum(c for _, c in b), 0
        for (lo, hi), c in b:
            if seen + c >= n / 2:
                v = lo + (hi - lo) * (n / 2 - seen) / c
                return int(min(max(v, self.min_ns(probe)), self.max_ns(probe)))
            seen += c
        return 0

    def lm_target(self, mode):
        """lm-target's own account of a workload: {'calls': .., 'mean_ns': ..,
        'self_ns': [each traced call's duration measured inside its body]}."""
        m = re.search(rf"^lm-target {mode}\b.*$", self.workload, re.M)
        if not m:
            return {}
        own = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)\b(?!,)", m.group(0))}
        body = re.search(r"\bself_ns=([\d,]+)", m.group(0))
        own["self_ns"] = [int(v) for v in body.group(1).split(",") if v] if body else []
        return own

    def say(self, cond, what):
        return expect(cond, f"[{self.name}] {what}")

    def ran_to_the_end(self):
        return self.say(self.ok, "the board ran this config and reported over its UART")


def irq_counts(text):
    """/proc/interrupts text -> {irq number: count summed over CPUs}."""
    lines = text.strip().splitlines()
    ncpus = len(lines[0].split()) if lines else 0
    out = {}
    for line in lines[1:]:
        head, _, rest = line.partition(":")
        if head.strip().isdigit():
            out[int(head)] = sum(int(v) for v in rest.split()[:ncpus] if v.isdigit())
    return out


def threaded_irq_rx(s):
    """The threaded path on PREEMPT_RT, driven by receive traffic: the host
    wrote bytes into the console UART during the workload (run.sh rx_tty,
    uart-feed.py); its force-threaded handler must show up as the series
    `irq:N NAME thread` with its stages, consistent with each other and
    with the kernel's own count for that IRQ."""
    w = s.workload

    def part(name):
        m = re.search(rf"^--- {name}\n(.*?)^--- ", w, re.M | re.S)
        return m.group(1) if m else ""

    sent = re.search(r"^rx-sent (\d+) gap-ms (\d+)", w, re.M)
    got = re.search(r"^rx-received (\d+)", w, re.M)
    if not s.say(sent and got, "the workload section reports the UART receive traffic"):
        return
    sent, gap, got = int(sent.group(1)), int(sent.group(2)), int(got.group(1))
    s.say(got == sent, f"the guest read {got} of the {sent} bytes the host wrote into its console UART, {gap} ms apart")
    port = re.search(r"^0: .*?\birq:(\d+) tx:(\d+) rx:(\d+)", part("tty before"), re.M)
    port1 = re.search(r"^0: .*?\birq:(\d+) tx:(\d+) rx:(\d+)", part("tty after"), re.M)
    if not s.say(port and port1, "the serial driver names the console UART's IRQ (/proc/tty/driver)"):
        return
    irq = int(port.group(1))
    rx_bytes = int(port1.group(3)) - int(port.group(3))
    tx_bytes = int(port1.group(2)) - int(port.group(2))
    delta = irq_counts(part("interrupts after")).get(irq, 0) - irq_counts(part("interrupts before")).get(irq, 0)
    print(f"  observed: console UART IRQ {irq}: /proc/interrupts +{delta}, driver rx +{rx_bytes} tx +{tx_bytes} bytes "
          f"in the window; irq threads: {re.search(r'^irq threads: (.*)$', text, re.M).group(1) if re.search(r'^irq threads: ', text, re.M) else '?'}")
    s.say(delta >= sent // 2, f"IRQ {irq} fired {delta} times for {rx_bytes} received bytes while latmon ran "
          f"(kernel's count, /proc/interrupts before/after; expected about one per byte sent {gap} ms apart)")
    handler = next((n for n in s.last if n.startswith(f"irq:{irq} ") and not n.endswith(("thread", ":hardirq", ":wakeup"))), None)
    thread = f"{handler} thread" if handler else None
    stages = (f"{thread}:hardirq", f"{thread}:wakeup") if thread else ()
    if not s.say(handler and thread in s.last and all(x in s.last for x in stages),
                 f"latmon reported IRQ {irq}'s handler series ({handler}), its threaded path ({thread}) and both stages "
                 f"(thread:hardirq, thread:wakeup)"):
        return
    h, t = s.total(handler), s.total(thread)
    sh, sw = s.total(stages[0]), s.total(stages[1])
    # The snapshots were taken inside latmon's run: every interrupt they
    # count was traced, and little else drives this line (console output:
    # the script's few lines), so handler runs = the kernel's count within
    # a few. Each interrupt asks for the thread, but on an edge-triggered
    # line (x86 IO-APIC; not masked while the thread runs) interrupts that
    # come before the thread has started are served by one thread run: the
    # thread count is at most the handler's, and at least one per received
    # byte (they came far apart).
    s.say(delta <= h <= delta + 10 and rx_bytes * 95 // 100 <= t <= h,
          f"counts vs the kernel's: handler {h} for /proc/interrupts +{delta} in a window inside latmon's run "
          f"(expected +{delta}..+{delta + 10}); threaded path {t} (expected {rx_bytes * 95 // 100}..{h}: one per "
          f"received byte at least, at most one per handler run)")
    s.say(sh == t and sw == t and all(s.drops(x) == 0 for x in (thread,) + stages),
          f"every threaded event counted in each stage: thread {t}, thread:hardirq {sh}, thread:wakeup {sw}; "
          f"drops {[s.drops(x) for x in (thread,) + stages]}")
    mt, mh, mw, mhandler = (s.mean_ns(x) for x in (thread,) + stages + (handler,))
    # Stages share timestamps (recorded all or nothing): per event
    # hardirq + wakeup = thread, so the sums agree up to the interval means'
    # integer rounding (< 1 ns each).
    s.say(abs(mt - (mh + mw)) < 3,
          f"stage sums: mean thread {mt / 1e3:.1f} us = hardirq->wakeup {mh / 1e3:.1f} us + wakeup->running "
          f"{mw / 1e3:.1f} us (difference {mt - mh - mw:+.2f} ns)")
    # Ordering, from exact minima and maxima: thread >= each stage per
    # event; the wakeup follows irq_handler_exit, so the hardirq stage
    # holds the primary handler's run (same events: counts equal).
    mins = [s.min_ns(x) for x in (thread,) + stages]
    maxs = [s.max_ns(x) for x in (thread,) + stages]
    s.say(mins[0] >= mins[1] + mins[2] and maxs[0] <= maxs[1] + maxs[2] and maxs[0] >= max(maxs[1:]),
          f"ordering hardirq -> wakeup -> running: min thread {mins[0]} >= min hardirq {mins[1]} + min wakeup {mins[2]} ns, "
          f"max thread {maxs[0]} within [{max(maxs[1:])}, {maxs[1] + maxs[2]}] ns")
    if h == t:
        s.say(mh >= mhandler, f"the hardirq stage ({mh / 1e3:.1f} us mean) holds the primary handler's run "
              f"({mhandler / 1e3:.1f} us mean, {handler})")
    # Quantiles: thread >= stage per event, so each quantile of the thread
    # series is >= the stage's; in buckets, the thread's bucket ends above
    # the start of the stage's.
    for q in (0.5, 0.9):
        tq, hq, wq = (s.quantile(x, q) for x in (thread,) + stages)
        s.say(tq[1] > hq[0] and tq[1] > wq[0],
              f"p{int(q * 100)} buckets: thread {tq}, hardirq {hq}, wakeup {wq} ns (thread's not below either stage's)")
    if "alerts above" in (s.plan.get("irq", {}).get("mode") or ""):
        # irq,threshold=: threaded paths above it become alert records
        # about the IRQ thread (not the task current at the switch-in's
        # program, nor the interrupted one). The final summary drains
        # records before its last read of the counts; interrupts keep
        # coming meanwhile, so a few counted alerts may have no record yet.
        p = s.last.get(thread, {})
        alerts, dropped = p.get("total_alerts", 0), dropped_of(frames, thread, p)
        recs = [f for f in frames if f.get("type") == "alert" and f.get("probe") == thread]
        shed = shed_of(frames, thread)
        s.say(records_accounted(recs, dropped, alerts, shed, slack=3)
              and all(r["comm"].startswith(f"irq/{irq}-") for r in recs),
              f"{thread}: {alerts} of {t} threaded paths above the threshold -> {len(recs)} alert records over the "
              f"UART naming {sorted({r['comm'] for r in recs})} + {dropped} counted drops (+ {shed} of its records shed by the link)")
    if "chain-rx" in s.plan:
        chain_through_irq_threads(s, irq, rx_bytes, mh)


def chain_through_irq_threads(s, irq, rx_bytes, irq_thread_wake_mean_ns):
    """chain,comm=cat: the reader of the console UART is woken, per byte,
    by the tty worker the IRQ thread handed the byte to - the chain follows
    hardirq -> IRQ thread -> worker -> cat (chain:irq-thread)."""
    names = ("chain-rx", "chain-rx:irq-thread", "chain-rx:wakeup")
    n, ni, nw = (s.total(x) for x in names)
    s.say(rx_bytes * 95 // 100 <= ni <= n and nw == n and all(s.drops(x) == 0 for x in names),
          f"chain,comm=cat: {ni} of its {n} events came from IRQ {irq} through kernel threads (IRQ thread, tty "
          f"worker) for {rx_bytes} received bytes (expected at least 95 %); every event has its wakeup stage ({nw})")
    # Per event: cause stage + wakeup = end to end (all or nothing), so the
    # sums agree up to the interval means' rounding (< 1 ns per event each).
    cause = [x for x in s.last if x.startswith("chain-rx:") and x not in names[2:]]
    total = s.mean_ns(names[0]) * n
    parts = sum(s.mean_ns(x) * s.total(x) for x in cause) + s.mean_ns(names[2]) * nw
    s.say(abs(total - parts) <= 3 * n,
          f"chain-rx stage sums: event -> running {total / 1e6:.3f} ms = causes {cause} + wakeup "
          f"{parts / 1e6:.3f} ms (difference {total - parts:+.0f} ns over {n} events)")
    mi = s.mean_ns(names[1])
    s.say(mi >= irq_thread_wake_mean_ns,
          f"hardirq -> cat's wakeup ({mi / 1e3:.1f} us mean) comes after hardirq -> the IRQ thread's wakeup "
          f"({irq_thread_wake_mean_ns / 1e3:.1f} us mean)")


def ms(ns):
    return f"{ns / 1e6:.2f} ms"


def irq_names(text):
    """/proc/interrupts text -> {irq number: the handler's name (last column)}."""
    out = {}
    for line in text.strip().splitlines()[1:]:
        head, _, rest = line.partition(":")
        if head.strip().isdigit() and rest.split():
            out[int(head)] = rest.split()[-1]
    return out


def anatomy_irq_thread(s):
    """The anatomy on PREEMPT_RT (tests/board/rt-arm64-anatomy.toml): a
    SCHED_FIFO control loop below the IRQ threads' priority, pinned to the
    CPU the console UART's interrupt and IRQ thread are pinned to, while
    the host writes bytes into that UART. The bytes' IRQ thread preempts
    the loop or holds the CPU when it wakes: runq's alert records must name
    it as a `task` cause, `irq/N-NAME` (the kernel's thread name, 15
    characters), with its FIFO policy and time, the parts summing to the
    latency. Returns (the thread's comm, its pid) once found, for the
    cycle family's checks of the same loop (tests/board/cycle.py)."""
    w = s.workload

    def part(name):
        m = re.search(rf"^--- {name}\n(.*?)^--- ", w, re.M | re.S)
        return m.group(1) if m else ""

    s.say("anatomy" in (s.plan.get("runq-loop", {}).get("mode") or ""),
          f"latmon check: runq-loop accounts anatomies on kernel {s.check['kernel']} "
          f"(bpf_map_lookup_percpu_elem, 5.19+): mode {s.plan.get('runq-loop', {}).get('mode')}")
    m = re.search(r"^anatomy-irq (\d+) thread (\S+) pid (\d+) rt_priority-policy (\d+) (\d+) "
                  r"irq-affinity (\S+) thread-affinity (\S+)", w, re.M)
    if not s.say(m, "the guest found the console UART's IRQ thread and reported its pinning"):
        return None
    irq, comm, tpid = int(m.group(1)), m.group(2), int(m.group(3))
    rt_prio, policy, irq_aff, thread_aff = int(m.group(4)), int(m.group(5)), m.group(6), m.group(7)
    s.say(policy == 1 and rt_prio == 50 and int(irq_aff, 16) == 1 and int(thread_aff, 16) == 1,
          f"IRQ {irq}'s thread {comm} (pid {tpid}) is SCHED_FIFO {rt_prio} (policy {policy}), above the loop's "
          f"FIFO 10; IRQ affinity {irq_aff}, thread affinity {thread_aff} (CPU 0, the loop's)")
    sent = re.search(r"^rx-sent (\d+)", w, re.M)
    got = re.search(r"^rx-received (\d+)", w, re.M)
    sent, got = (int(x.group(1)) if x else -1 for x in (sent, got))
    s.say(sent > 0 and got == sent, f"the guest read {got} of the {sent} bytes the host wrote into its console UART")
    # The IRQ the bytes made fire, by the kernel's count; its thread's name
    # is the kernel's "irq/%d-%s" cut to 15 characters.
    c0, c1 = irq_counts(part("interrupts before")), irq_counts(part("interrupts after"))
    deltas = {n: c1.get(n, 0) - c0.get(n, 0) for n in c1}
    # (/proc/PID/comm shows a kernel thread's whole name, the task's comm
    # that latmon reads keeps 15 characters.)
    name = irq_names(part("interrupts after")).get(irq, "?")
    want = f"irq/{irq}-{name}"[:15]
    s.say(deltas.get(irq, 0) >= max(sent // 2, 1) and comm[:15] == want,
          f"/proc/interrupts: IRQ {irq} ({name}) fired {deltas.get(irq, 0)} times during the feed; its thread "
          f"{comm} has the task comm {want}")
    loop = re.search(r"^lm_cycle (\d+) .*? rows (\d+) ", w, re.M)
    s.say(loop and loop.group(1) == loop.group(2),
          f"the control loop ran its periods: {loop.group(0) if loop else 'no lm_cycle line'}")
    recs = [f for f in frames if f.get("type") == "alert" and f.get("probe") == "runq-loop"]
    p = s.last.get("runq-loop", {})
    alerts, dropped = p.get("total_alerts", 0), dropped_of(frames, "runq-loop", p)
    # Under TCG most of the loop's own wakeups take over 100 us too: the
    # records are a sample (the token bucket refuses some, the link sheds
    # most of the rest over its budget), and every alert is accounted for
    # exactly: the loop has ended 2 s before the final summary. (Before
    # Status `dropped`, revision 6, the bucket's refusals never reached
    # the UART: 462 of 896 alerts in one boot were unaccounted for.)
    shed = shed_of(frames, "runq-loop")
    s.say(recs and alerts == len(recs) + dropped + shed and all(r["comm"] == "lm_cycle" for r in recs),
          f"runq-loop: {alerts} of {s.total('runq-loop')} waits above 100 us = {len(recs)} alert records of "
          f"lm_cycle over the UART + {dropped} dropped before it (token bucket) + {shed} shed by the link")
    unsummed = [r for r in recs if "causes" not in r or sum(c["ns"] for c in r["causes"]) != r["latency_ns"]]
    s.say(recs and not unsummed,
          f"every runq-loop record carries its anatomy, parts summing to latency_ns exactly "
          f"({len(unsummed)} of {len(recs)} do not)")
    named = []
    for r in recs:
        for c in r.get("causes", []):
            if c.get("kind") == "task" and c.get("comm") == want and c.get("policy") == "fifo" and c.get("ns", 0) > 0:
                named.append((r, c))
    ns = sorted(c["ns"] for _, c in named)
    largest = sum(1 for r, c in named if c["ns"] == max(x["ns"] for x in r["causes"]))
    s.say(named and largest > 0 and all(c.get("pid") == tpid and c.get("prio") == rt_prio for _, c in named),
          f"{len(named)} of {len(recs)} runq-loop records name the IRQ thread {want} as a task cause "
          f"(pid {tpid}, fifo {rt_prio}); its ns min/median/max "
          f"{ns[0] if ns else 0}/{ns[len(ns) // 2] if ns else 0}/{ns[-1] if ns else 0}; largest cause in {largest}")
    return want, tpid


# A splat is a failure (issue 39): whatever the checks below prove, a
# kernel that logged a BUG, a WARNING, a stall, a lockup, a hung task, an
# Oops or a panic during the boot fails the board, naming the line.
splats = splat_lines(console)
for line in splats:
    failures.append(f"the kernel logged a splat on the console: {line.strip()}")
if not splats:
    proved.append(f"no kernel splat on the console ({len(console.splitlines())} lines; tests/kernel-splats.txt)")
if not expect("=== done" in text, "the board ran the script to the end and reported over its UART"):
    print(f"board {board}: FAIL: no complete report on the UART ({len(text)} bytes):\n{text[-2000:]}")
    for f in failures:
        print(f"  FAILED: {f}")
    sys.exit(1)


def sleep_kfunc(s, btf_mode):
    """kfunc:do_nanosleep,comm=sleep against 300 busybox `sleep 0.01`."""
    p = s.plan.get("kfunc-sleep", {})
    s.say(p.get("ok") and p.get("attach") == "kprobe" and p.get("btf_mode") == btf_mode,
          f"latmon check: kfunc:do_nanosleep attaches with kprobe in {btf_mode} mode "
          f"(attach={p.get('attach')}, btf_mode={p.get('btf_mode')}, error={p.get('error')})")
    n, (p50_lo, p50_hi), lo = s.total("kfunc-sleep"), s.quantile("kfunc-sleep", 0.5), s.min_ns("kfunc-sleep")
    s.say(s.last.get("kfunc-sleep", {}).get("attach") == "kprobe" and n == 300,
          f"kfunc:do_nanosleep counted {n} calls of the 300 `sleep 0.01` processes (exactly 300)")
    # do_nanosleep starts the 10 ms timer itself: a call lasts 10 ms plus
    # wakeup latency under emulation. The median's bucket (at most 1/8 as
    # wide as its lower bound) must overlap 10..12.5 ms.
    s.say(9_900_000 <= lo and p50_hi > 10_000_000 and p50_lo < 12_500_000,
          f"its histogram matches the workload: min {ms(lo)}, p50 {ms(s.p50_ns('kfunc-sleep'))} "
          f"(bucket [{ms(p50_lo)}, {ms(p50_hi)})), max {ms(s.max_ns('kfunc-sleep'))} "
          f"(10 ms sleeps: expected 10..12.5 ms)")
    s.say(s.drops("kfunc-sleep") == 0, f"kfunc-sleep: {s.drops('kfunc-sleep')} drops")


def frames_by_sp(s, btf_mode, how):
    """ufunc lm_recurse and lm_jump_out: frames told apart by the stack
    pointer, read through `how`."""
    for n in ("ufunc-rec", "ufunc-jmp"):
        p = s.plan.get(n, {})
        s.say(p.get("ok") and p.get("attach") == "uprobe" and p.get("btf_mode") == btf_mode,
              f"latmon check: {n} attaches with uprobe in {btf_mode} mode "
              f"(attach={p.get('attach')}, btf_mode={p.get('btf_mode')}, error={p.get('error')})")
    # Recursion: 20 x lm_recurse(3 levels, 2 ms each): level k lasts at
    # least k x 2 ms. A wrong SP would make nested entries look stale
    # (drops) or pair a return with the wrong level (too few long calls).
    n = s.total("ufunc-rec")
    levels = [s.count_at_least("ufunc-rec", k * 2_000_000) for k in (1, 2, 3)]
    s.say(n == 60 and s.drops("ufunc-rec") == 0 and levels[0] == 60 and levels[1] >= 40 and levels[2] >= 20,
          f"ufunc lm_recurse: {n} calls (20 x 3 nested levels of 2 ms), {s.drops('ufunc-rec')} drops; "
          f"calls reaching 2/4/6 ms: {levels} (expected 60, >= 40, >= 20), min {ms(s.min_ns('ufunc-rec'))}, "
          f"max {ms(s.max_ns('ufunc-rec'))}; SP read through {how}")
    # longjmp: 10 calls at the same stack depth that never return. With
    # the real SP each entry finds the previous stamp stale (9 drops, the
    # last at exit): 10. Without an SP they would pile up: 8 stamps + 2 too
    # deep = 12.
    s.say(s.total("ufunc-jmp") == 0 and s.drops("ufunc-jmp") == 10,
          f"ufunc lm_jump_out: 10 calls left by longjmp are {s.drops('ufunc-jmp')} counted drops, "
          f"{s.total('ufunc-jmp')} measured (same-depth frames recognised by SP)")


print(f"board {board}: ", end="")
expect(bool(frames) and "0 CRC errors" in link and "frames good" in link,
       f"link UART: {link.splitlines()[-1] if link else 'no link statistics'}")
# Every entry of every summary carries the name and kind a Hello gave its id
# (a family's series appear mid-run with new ids and a new Hello; an entry
# the receiver cannot label is decoded as `#id`, and a probe whose id moved
# would carry another's name).
unnamed = sorted({p["name"] for f in frames if f.get("type") == "summary" for p in f["probes"]
                  if p["name"].startswith("#") or not p.get("kind")})
expect(not unnamed, f"every summary entry decoded on the host is labelled by a Hello (unlabelled: {unnamed or 'none'})")
if board in ("rt-arm64", "rt-amd64"):
    s = Section("main")
    if s.ran_to_the_end():
        print(f"kernel {s.check['kernel']}, btf={s.check['btf']}, "
              f"attach kinds: {', '.join(k for k, ok in s.feats.items() if ok)}")
        s.say(s.check["config_ok"], "latmon check validated the board config")
        s.say(s.check["btf"], "the kernel has BTF")
        s.say(s.feats.get("kprobe") is True, "kprobes attach on this kernel")
        s.say(s.feats.get("tp_btf") is True, "tp_btf attaches")
        s.say(s.check_rc == 0, "latmon check: every configured probe loads (exit 0)")
        s.say(s.run_rc == 0, "latmon run exited 0 when stopped (SIGINT) after the workload")
        s.say(len(s.summaries) >= 3,
              f"{len(s.summaries)} summaries arrived as frames over the link UART and decoded on the host")
        # Debian bookworm's 6.1 PREEMPT_RT kernels predate the fix of
        # CVE-2024-58070 (6.12.16, 6.13.4, 6.14): creating task storage
        # under the rq lock allocates with sleeping locks there. latmon
        # must see it from uname alone (no override in the guest) and keep
        # per-task state out of task storage (src/rtkernel.rs).
        ts = s.check.get("task_storage") or ""
        s.say(ts.startswith("unsafe (PREEMPT_RT 6.1.") and "CVE-2024-58070" in ts,
              f"latmon check judges task storage in atomic context on kernel {s.check['kernel']}: {ts}")
        # The other hazards (src/rtsafety.rs): Debian's 6.1.176+ RT kernels
        # carry 8b62645b09f8 (stable 6.1.115), so the ring buffer stays;
        # every loaded hash map is preallocated.
        safety = s.check.get("rt_safety") or {}
        rb = (safety.get("ringbuf") or {}).get("verdict") or ""
        s.say(set(safety) >= {"task_storage", "ringbuf", "map_alloc", "percpu"}
              and safety["task_storage"].get("safe") is False
              and rb.startswith("safe (PREEMPT_RT 6.1.") and "8b62645b09f8" in rb
              and (safety.get("map_alloc") or {}).get("safe") is True,
              f"latmon check gives each RT hazard a verdict: {safety}")
        rt_modes = {n: (s.plan.get(n, {}).get("attach"), s.plan.get(n, {}).get("mode") or "")
                    for n in ("runq", "runq-sleep", "irq", "timer-sleep", "chain-rx") if n in s.plan}
        want = {n: ("raw_tp", "tp_btf skipped, PREEMPT_RT: CVE-2024-58070") if n.startswith("runq")
                else ("tp_btf", "tid-hash (PREEMPT_RT: CVE-2024-58070)") for n in rt_modes}
        s.say(all(a == want[n][0] and want[n][1] in m for n, (a, m) in rt_modes.items())
              and "timer-sleep" in rt_modes and "irq" in rt_modes,
              f"no task storage created under the rq lock: runq via raw_tp, timer/chain/irq threads in tid "
              f"hashes: {rt_modes}")
        s.say(s.last.get("runq", {}).get("attach") == "raw_tp" and s.total("runq") > 0,
              f"runq attached via {s.last.get('runq', {}).get('attach')} and counted {s.total('runq')} run-queue events")
        s.say(s.total("runq-sleep") >= 300,
              f"runq filtered by comm=sleep counted {s.total('runq-sleep')} wakeups of 300 sleep processes")
        # kfunc: 300 busybox `sleep 0.01` calls, each one do_nanosleep of 10 ms.
        # On PREEMPT_RT a kprobe program is skipped, uncounted (kernels
        # before 6.7 keep no miss count for kprobes), when it fires while
        # bpf_prog_active is raised on that CPU - which on RT includes
        # latmon's own map reads from user space, preemptible there. Seen:
        # one call of 300 missed by both kprobes at once, in the interval
        # with the UART feed's IRQ-thread traffic, while the timer probe
        # (tp_btf, its own recursion guard) saw all 300 sleeps. So: both
        # kprobes agree call for call, and at most 5 of 300 are missed
        # (seen in CI, 2026-12: 1 on rt-amd64, 2 on both boards in the next
        # boards run - at the old bound of 2).
        counts = {n: s.total(n) for n in ("nanosleep", "nanosleep-kprobe")}
        for name, mechs in (("nanosleep", ("fentry", "kprobe")), ("nanosleep-kprobe", ("kprobe",))):
            at = s.last.get(name, {}).get("attach")
            # Both boards run PREEMPT_RT kernels: rt-amd64's kprobe missed
            # 1 of 300 once in CI too (its fentry twin counted 300).
            exact = at == "fentry" or board not in ("rt-arm64", "rt-amd64")
            s.say(at in mechs and (s.total(name) == 300 if exact else 295 <= s.total(name) <= 300),
                  f"kfunc:do_nanosleep ({name}) attached via {at} and counted {s.total(name)} of 300 calls"
                  + ("" if exact else " (kprobe on PREEMPT_RT: up to 5 uncounted misses allowed, see verify.py)"))
        if board == "rt-arm64":
            s.say(len(set(counts.values())) == 1,
                  f"both kprobes on do_nanosleep counted the same calls: {counts} of 300")
            lo, hi = s.quantile(name, 0.5)
            s.say(hi >= 10_000_000 and lo <= 14_000_000,
                  f"{name}: median bucket [{lo}, {hi}) ns holds the 10 ms sleep (plus slack, under emulation)")
        if "irq" in s.plan:
            s.say(s.last.get("irq", {}).get("attach") == "tp_btf" and s.total("irq") > 0,
                  f"irq handlers counted {s.total('irq')} via {s.last.get('irq', {}).get('attach')}: "
                  + ", ".join(f"{n} {s.total(n)}" for n in s.last if n.startswith("irq:") and " thread" not in n))
            # PREEMPT_RT runs most handlers in IRQ threads; the threaded
            # series (hardirq entry -> IRQ thread running, in stages)
            # appears only when a threaded interrupt fires. On qemu's virt
            # board only the arch timer (IRQF_TIMER, a hardirq) fires by
            # itself: run.sh makes the console UART receive bytes during
            # the workload, and its force-threaded handler must show.
            threaded = {n: s.total(n) for n in s.last if n.startswith("irq:") and " thread" in n}
            print(f"  observed: threaded IRQ series on PREEMPT_RT: {threaded or 'none fired'}")
            if board == "rt-arm64" or "rx-sent" in s.workload:
                threaded_irq_rx(s)
        if "timer-sleep" in s.plan:
            s.say(s.last.get("timer-sleep", {}).get("kind") == "timer" and s.total("timer-sleep") >= 290,
                  f"timer (hrtimer expiry -> running) counted {s.total('timer-sleep')} wakeups of the 300 sleeps, "
                  f"p50 {s.p50_ns('timer-sleep')} ns")
            # threshold=1us: every wakeup is an alert; the token bucket (32,
            # then 100/s) lets some through as records over the UART and
            # counts the rest. Each record names the woken `sleep` process.
            recs = [f for f in frames if f.get("type") == "alert" and f.get("probe") == "timer-sleep"]
            t = s.last.get("timer-sleep", {})
            alerts, dropped = t.get("total_alerts", 0), dropped_of(frames, "timer-sleep", t)
            shed = shed_of(frames, "timer-sleep")
            s.say(alerts == s.total("timer-sleep") and records_accounted(recs, dropped, alerts, shed)
                  and all(r["comm"] == "sleep" and r["latency_ns"] > 1000 for r in recs),
                  f"timer alert records: {alerts} wakeups above 1 us -> {len(recs)} records over the UART "
                  f"(comm {sorted({r['comm'] for r in recs})}) + {dropped} counted drops (+ {shed} of its records shed by the link)")
    if board == "rt-arm64":
        an = Section("anatomy", 1)
        if an.ran_to_the_end():
            an.say(an.check_rc == 0 and an.run_rc == 0, f"latmon check exit {an.check_rc}, run exit {an.run_rc}")
            thread = anatomy_irq_thread(an)
            if thread:
                def accounted(name):
                    p = an.last.get(name, {})
                    return p.get("total_alerts", 0), dropped_of(frames, name, p), shed_of(frames, name)
                cycle.misses_name_irq_thread(an, frames, *thread, accounted)
        lk = Section("lock", 2)
        if lk.ran_to_the_end():
            lk.say(lk.check_rc == 0 and lk.run_rc == 0, f"latmon check exit {lk.check_rc}, run exit {lk.run_rc}")

            def accounted_lock(name):
                p = lk.last.get(name, {})
                return p.get("total_alerts", 0), dropped_of(frames, name, p), shed_of(frames, name)
            lock.inversions_named(lk, frames, accounted_lock)
elif board == "armmp":
    a = Section("nobtf")
    if a.ran_to_the_end():
        c = a.check
        print(f"kernel {c['kernel']}, btf={c['btf']}, attach kinds: {', '.join(k for k, ok in a.feats.items() if ok)}")
        a.say(c["config_ok"], "latmon check validated board-configs/qemu-armv7.toml")
        a.say(not c["btf"] and c.get("btf_source") is None, "the armmp kernel has no BTF, and no btf_path is set")
        a.say(a.feats.get("kprobe") is True and a.feats.get("uprobe") is True, "kprobes and uprobes attach on this kernel")
        # Tracepoint families without BTF: the no-BTF build, the 32-bit
        # record layout read from tracefs format files on the board.
        for n in ("runq", "runq-sleep", "sys-sleep", "irq", "softirq"):
            p = a.plan.get(n, {})
            a.say(p.get("ok") and p.get("attach") == "tracepoint" and p.get("btf_mode") == "no-btf"
                  and "layout from tracefs format" in (p.get("mode") or ""),
                  f"latmon check: {n} loads via {p.get('attach')} in {p.get('btf_mode')} mode "
                  f"({p.get('mode') or p.get('error')})")
        # The 32-bit kernel's records, as latmon read them from tracefs:
        # `long` fields are 4 bytes here (8 on the 64-bit host).
        lay = dict(re.findall(r"(\w+): record layout from tracefs: (.*)", a.run_err))
        a.say("prev_state@" in lay.get("runq", "") and re.search(r"prev_state@\d+\(4\)", lay["runq"])
              and re.search(r"id@\d+\(4\)", lay.get("syscall", "")),
              f"record layouts read from the board's tracefs (32-bit: 4-byte long prev_state and id): "
              f"runq: {lay.get('runq')}; syscall: {lay.get('syscall')}; irq: {lay.get('irq')}; softirq: {lay.get('softirq')}")
        # The cycle family needs tp_btf: refused, the others run.
        cycle.refused_without_btf(a, a.run_err, ("runq", "runq-sleep", "irq", "softirq", "kfunc-sleep", "ufunc-work"))
        a.say(a.run_rc == 0, "latmon run exited 0 on SIGINT")
        a.say(a.last.get("runq", {}).get("attach") == "tracepoint" and a.total("runq") > 0 and a.drops("runq") == 0,
              f"runq counted {a.total('runq')} run-queue events via tracepoint (no BTF), p50 {ms(a.p50_ns('runq'))}, "
              f"{a.drops('runq')} drops")
        a.say(a.total("runq-sleep") >= 300,
              f"runq filtered by comm=sleep counted {a.total('runq-sleep')} wakeups of 300 sleep processes "
              f"(comm read from the sched_wakeup/sched_switch records)")
        sc = {n: a.total(n) for n in a.last if n.startswith("sys-sleep:")}
        ns = [n for n in sc if n.endswith("nanosleep") or n.endswith("nanosleep_time64")]
        nsn = ns[0] if ns else "sys-sleep:?"
        a.say(len(ns) == 1 and sc[nsn] == 300 and a.min_ns(nsn) >= 10_000_000
              and a.quantile(nsn, 0.5)[1] > 10_000_000 and a.drops(nsn) == 0,
              f"syscall via tracepoint counted {sc.get(nsn)} {nsn[len('sys-sleep:'):]} calls of the 300 `sleep 0.01` "
              f"(exactly 300), min {ms(a.min_ns(nsn))}, p50 {ms(a.p50_ns(nsn))} (>= 10 ms); "
              f"sys_enter's id read at its 32-bit offset; series: {sc}")
        # threshold=5ms: every 10 ms nanosleep is an alert record naming
        # the `sleep` process (token bucket: 32, then 100/s); the workload
        # has stopped when the final summary is read, so the accounting
        # is exact.
        p = a.last.get(nsn, {})
        alerts, dropped = p.get("total_alerts", 0), dropped_of(frames, nsn, p)
        recs = [f for f in frames if f.get("type") == "alert" and f.get("probe") == nsn]
        shed = shed_of(frames, nsn)
        a.say(alerts == 300 and records_accounted(recs, dropped, alerts, shed)
              and all(r["comm"] == "sleep" and r["latency_ns"] >= 10_000_000 for r in recs),
              f"syscall alert records (no-BTF build, 32-bit): {alerts} nanosleeps above 5 ms -> {len(recs)} records "
              f"over the UART (comm {sorted({r['comm'] for r in recs})}) + {dropped} counted drops (+ {shed} of its records shed by the link)")
        for n in ("irq", "softirq"):
            a.say("alerts above 1.00ms via ringbuf" in (a.plan.get(n, {}).get("mode") or ""),
                  f"{n} with threshold=1ms loads its alert code on this 32-bit kernel: {a.plan.get(n, {}).get('mode')}")
        a.say(a.total("irq") > 0 and a.total("softirq") > 0,
              f"irq counted {a.total('irq')} handler runs ("
              + ", ".join(f"{n} {a.total(n)}" for n in a.last if n.startswith("irq:"))
              + f"), softirq {a.total('softirq')} ("
              + ", ".join(f"{n} {a.total(n)}" for n in a.last if n.startswith("softirq:")) + ") via tracepoint")
        sleep_kfunc(a, "no-btf")
        # ufunc on arm32 in no-BTF mode: the stack pointer comes from the
        # hand-written struct pt_regs (uregs[13], 4 bytes).
        for n in ("ufunc-work",):
            p = a.plan.get(n, {})
            a.say(p.get("ok") and p.get("attach") == "uprobe" and p.get("btf_mode") == "no-btf",
                  f"latmon check: {n} attaches with uprobe in no-btf mode ({p.get('error') or p.get('btf_mode')})")
        # Under emulation a call is its busy-wait plus whatever interrupts
        # it (TCG timer ticks, the uprobe traps of the calls inside it):
        # durations are bounded below exactly, above only loosely.
        own = a.lm_target("work")
        n, mean, lo = a.total("ufunc-work"), a.mean_ns("ufunc-work"), a.min_ns("ufunc-work")
        p50_lo, p50_hi = a.quantile("ufunc-work", 0.5)
        a.say(own.get("calls") == 50 and n == 50 and a.drops("ufunc-work") == 0,
              f"ufunc lm_work counted {n} of the target's {own.get('calls')} calls, {a.drops('ufunc-work')} drops")
        # latmon's window lies between the call's body (the target's own
        # self_ns, measured inside lm_work) and the caller's clock around the
        # call (mean_ns): the median's bucket must reach the body's median and
        # start below the caller's mean. Both brackets hold whatever the
        # emulator stalled, so the check does not depend on a quiet host (a
        # fixed "p50 below 1.25 ms" failed on a loaded CI machine: p50 1.39 ms
        # with the caller's mean at 1.78 ms).
        truth = own.get("mean_ns", 0)
        body = sorted(own.get("self_ns", []))
        body_p50 = body[len(body) // 2] if body else 0
        a.say(lo >= 1_000_000 and len(body) == 50 and p50_hi > body_p50 and p50_lo < truth
              and 0 <= truth - mean <= 500_000,
              f"ufunc lm_work (1 ms busy-waits): min {ms(lo)}, p50 bucket [{ms(p50_lo)}, {ms(p50_hi)}) "
              f"between the body's own median {ms(body_p50)} ({len(body)} calls) and the caller's mean "
              f"{ms(truth)}; mean {ms(mean)} (the caller's minus the uprobe traps outside latmon's window)")
        frames_by_sp(a, "no-btf", "the hand-written arm32 pt_regs of bpf/nobtf.h (uregs[13], 4 bytes)")
    b = Section("btf", 1)
    if b.ran_to_the_end():
        c = b.check
        b.say(c["config_ok"] and c.get("btf_source") == "/etc/latmon/kernel.btf",
              f"with btf_path, CO-RE takes kernel types from {c.get('btf_source')} (pahole's detached BTF)")
        runq = b.plan.get("runq", {})
        b.say(runq.get("ok") and runq.get("attach") == "raw_tp" and runq.get("btf_mode") == "co-re",
              f"latmon check: runq loads via {runq.get('attach')} in {runq.get('btf_mode')} mode ({runq.get('error')})")
        b.say(b.last.get("runq", {}).get("attach") == "raw_tp" and b.total("runq") > 0,
              f"runq counted {b.total('runq')} run-queue events via raw_tp, p50 {ms(b.last.get('runq', {}).get('p50_ns', 0))} "
              f"in the last interval")
        sc = {n: b.total(n) for n in b.last if n.startswith("sys-sleep:")}
        print(f"  observed: [btf] syscall via {b.last.get('sys-sleep', {}).get('attach')} (CO-RE): {sc}")
        sleep_kfunc(b, "co-re")
        frames_by_sp(b, "co-re", "CO-RE: vmlinux.h's 8-byte uregs[13] relocated to the 32-bit kernel's")
        b.say(b.check_rc == 0 and b.run_rc == 0, f"latmon check exit {b.check_rc}, run exit {b.run_rc}")

for p in proved:
    print(f"  proved: {p}")
for f in failures:
    print(f"  FAILED: {f}")
qemu = f" (qemu boot to poweroff: {qemu_s} s)" if qemu_s is not None else ""
print(f"board {board}: {'PASS' if not failures else 'FAIL'} in {t_end - t_start} s{qemu}")
sys.exit(1 if failures else 0)
