# SPDX-License-Identifier: MIT
"""The lock family's checks on rt-arm64 (tests/board/verify.py): a
priority inversion on demand (tests/fixtures/lm_lock.c) on PREEMPT_RT 6.1,
a kernel without bpf_task_from_pid, so the probe finds each wait's owner
by walking the waiter's thread group. The fixture's own rows, reduced in
the guest (tests/board/run.sh), are the ground truth.
"""
import re

SERIES = "lm_lock:ctrl_mutex"


def fixture(workload):
    """(tids (high, low, med) or None, [(start, acquired, med_spin_ns,
    med_most_ns)] of each of the high thread's lock calls that waited over
    500 us: how long the medium thread spun inside the wait, and the most
    it can have run there (tests/board/run.sh)."""
    m = re.search(r"^lm_lock 2000 20: done tids (\d+) (\d+) (\d+)$", workload, re.M)
    waits = [tuple(int(x) for x in w) for w in re.findall(r"^lm_lock-wait (\d+) (\d+) (\d+) (\d+)$", workload, re.M)]
    return (tuple(int(x) for x in m.groups()) if m else None), waits


def inversions_named(s, frames, accounted):
    """The lock probe loads (tp_btf), its series is named by the mutex's
    symbol in the static glibc binary, counts every inversion's wait, and
    each wait record that crossed the link (wire revision 10: an
    inversion's own cause kind, one cause per preempter) names the
    inversion with the medium thread among its preempters, its share
    within -20 % .. +40 % or 200 us (20 % or 100 us on the host,
    tests/live/lock.rs) of the fixture's measure of its spin inside the wait, and the low thread as
    the owner; the parts sum to the latency. The host feeds no UART bytes
    in this section (run.sh): the console's IRQ thread (FIFO 50) would lie
    between the owner's and the waiter's priorities too.
    """
    plan = s.plan.get("lm_lock", {})
    s.say(plan.get("ok") and plan.get("attach") == "tp_btf",
          f"latmon check: lm_lock loads via {plan.get('attach')} ({plan.get('mode') or plan.get('error')})")
    tids, waits = fixture(s.workload)
    inv = [w for w in waits if w[2] > 0]
    # The checks below hold latmon to the inversions the fixture says it
    # made, however many: under TCG on a busy host the medium thread's spin
    # lands outside some of the 100 planned waits (74 once: a fixed ">= 80"
    # failed a board on the fixture's own timing, not on latmon). Ten is
    # what the naming check needs to mean something.
    if not s.say(tids and len(inv) >= 10,
                 f"the fixture ran: tids {tids}, {len(waits)} waits over 500 us, {len(inv)} of the 100 planned with "
                 f"the medium thread spinning inside (at least 10 to check)"):
        return
    high, low, med = tids
    n = s.total(SERIES)
    # The lock probe's futex hooks are classic syscall tracepoints: the
    # kernel skips them while the CPU's bpf_prog_active is raised, which a
    # BPF map syscall does - latmon's own interval reads, on this one-CPU
    # board the fixture's CPU - and before 6.7 it counts no such skip
    # (docs/probes.md, "Runs the kernel skips"; seen once: 98 waits of 99
    # inversions, no drop, no miss counted). latmon must say so at start;
    # the count may then fall short of the fixture's by 2.
    warned = re.search(r"probe lm_lock: kernel \S+ does not count the runs it skips", s.run_err)
    s.say(warned, "latmon warned at start that this kernel (before 6.7) does not count the lock probe's skipped "
          "futex hooks")
    short = 2 if warned else 0
    s.say(len(inv) - short <= n <= len(inv) + 10,
          f"{SERIES} counted {n} waits (the series named by the mutex's ELF symbol); the fixture: {len(inv)} inversions "
          f"(up to {short} unseen for the kernel's uncounted skips); "
          f"series seen: {sorted(p for p in s.last if p.startswith('lm_lock'))}")
    recs = [f for f in frames if f.get("type") == "alert" and f.get("probe") == SERIES]
    alerts, dropped, shed = accounted(SERIES)
    s.say(recs and alerts == len(recs) + dropped + shed and all(r.get("tid") == high for r in recs),
          f"{SERIES}: {alerts} waits over 500 us = {len(recs)} records over the UART + {dropped} counted drops + "
          f"{shed} shed by the link, all of the high thread {high}")
    unsummed = [r for r in recs if sum(c["ns"] for c in r.get("causes", [])) != r["latency_ns"]]
    s.say(recs and not unsummed, f"every record's parts sum to its latency_ns ({len(unsummed)} of {len(recs)} do not)")
    named, wrong, unmatched = [], [], 0
    for r in recs:
        start, end = r["time_ns"] - r["latency_ns"], r["time_ns"]
        w = next((w for w in inv if w[0] <= start and end <= w[1] and start - w[0] < 300_000), None)
        if w is None:
            unmatched += 1
            continue
        inversion = next((c for c in r.get("causes", []) if c.get("kind") == "inversion"), {})
        c = next((p for p in inversion.get("preempted_by", []) if p.get("pid") == med), None)
        # latmon's share is the medium thread's whole run while the owner
        # was preempted: the fixture's timed spin plus the thread's own
        # wake and sleep path around it, which under TCG adds up to ~40 %
        # of a 2 ms spin and, with a vCPU stall inside, more (1.47 and
        # 1.75 once: 29 of 32 within a fixed +40 %). So between the spin
        # and the most med can have run in the wait (from low's taking the
        # mutex to its write to med returning), 20 % or 200 us either side
        # (tests/live/lock.rs: the same bounds, 20 % or 100 us).
        if c and w[2] - max(w[2] // 5, 200_000) <= c["ns"] <= w[3] + max(w[3] // 5, 200_000):
            named.append(c["ns"] / w[2])
        else:
            wrong.append((w[2], w[3], r.get("causes")))
    named.sort()
    s.say(recs and len(named) >= max(10, len(recs) * 9 // 10),
          f"{len(named)} of {len(recs)} wait records name the medium thread {med} with its time in the wait between the "
          f"fixture's spin and the most it can have run (ratio min/median/max {named[0] if named else 0:.3f}/{named[len(named) // 2] if named else 0:.3f}/"
          f"{named[-1] if named else 0:.3f}); {unmatched} match no inversion; "
          f"first wrong: {wrong[:2]}")
    owner = [r for r in recs
             if any(c.get("kind") == "owner" and c.get("owner", {}).get("tid") == low for c in r.get("causes", []))]
    s.say(recs and len(owner) * 10 >= len(recs) * 9,
          f"{len(owner)} of {len(recs)} records name the owner, the low thread {low} (found without "
          f"bpf_task_from_pid), with its own running time")
