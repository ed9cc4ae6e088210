# SPDX-License-Identifier: MIT
"""The cycle family's checks on the virtual boards (tests/board/verify.py).

rt-arm64: a 1 kHz loop (tests/fixtures/lm_cycle.c, SCHED_FIFO 10) pinned
with the console UART's IRQ thread while the host feeds that UART; the
loop's own rows are the ground truth. armmp: no BTF, so the family is
refused with its reason while the other probes run.
"""
import re


def loop_rows(workload):
    """The fixture's account, as run.sh reports it: (its line's fields,
    [(release, response) of each cycle slower than the deadline - 100 us],
    the loop's responses in 100 us buckets)."""
    m = re.search(r"^lm_cycle (\d+) (\d+): done misses=(\d+) rows (\d+) deadline-us (\d+) first-release (\d+) "
                  r"last-release (\d+)$",
                  workload, re.M)
    keys = ("cycles", "period_us", "period_misses", "rows", "deadline_us", "first_release", "last_release")
    line = {k: int(v) for k, v in zip(keys, m.groups())} if m else {}
    slow = [tuple(int(x) for x in r) for r in re.findall(r"^lm_cycle-slow (\d+) (\d+)$", workload, re.M)]
    hist = re.search(r"^lm_cycle-hist100us ([\d ]+)$", workload, re.M)
    return line, slow, [int(x) for x in hist.group(1).split()] if hist else []


def misses_name_irq_thread(s, frames, want, tpid, accounted):
    """rt-arm64: the cycle probe counts the loop's cycles and misses as the
    loop itself does, each miss record matches one of the loop's own slow
    cycles by its release (time_ns - latency_ns over the wire: the record
    is sent at done), its parts sum to its latency, and the IRQ thread the
    host's bytes woke is named as a `task` cause. `accounted(probe)`: that
    probe's (alerts, counted drops, records shed by the link)."""
    name = "cycle-loop"
    plan = s.plan.get(name, {})
    s.say(plan.get("ok") and plan.get("attach") == "tp_btf",
          f"latmon check: {name} loads via {plan.get('attach')} ({plan.get('mode') or plan.get('error')})")
    line, slow, hist = loop_rows(s.workload)
    print(f"  observed: [{s.name}] the loop's responses in 100 us steps from 0 (the last: 2 ms and up): {hist}")
    if not s.say(line and line["rows"] == line["cycles"],
                 f"the fixture ran and reported its cycles: {line or 'no lm_cycle line in the workload'}"):
        return
    deadline = line["deadline_us"] * 1000
    truth = {rel for rel, response in slow if response > deadline}
    near = {rel for rel, _ in slow}
    # The loop's done is its clock read before the next clock_nanosleep,
    # the probe's is that sleep: the probe's response is a little longer,
    # so a cycle within 100 us under the deadline may count as a miss.
    n, alerts = s.total(name), s.last.get(name, {}).get("total_alerts", 0)
    # Uncounted: the last cycle (no next sleep), runs of the probe's
    # programs the kernel skipped (its recursion misses: total_bpf_missed,
    # each at most one cycle's sleep or release unseen), and under TCG
    # cycles whose wakeup, switch-in and sleep return all went unseen in a
    # vCPU stall: the stalls the loop itself timed as overruns (its
    # `misses`, period_misses here). The bound is what those say was
    # skipped, not a fixed share: 3 of 4000 with 81 loop overruns, 13 of
    # 4000 with 126 (CI 2026-12-05), 28 of 4000 once (against a fixed
    # allowance of 20).
    missed = s.last.get(name, {}).get("total_bpf_missed", 0)
    skipped = 1 + missed + line["period_misses"]
    s.say(line["cycles"] - skipped <= n <= line["cycles"],
          f"{name} counted {n} cycles of the loop's {line['cycles']}, {line['cycles'] - n} uncounted of at most "
          f"{skipped} skipped: its last (no next sleep), {missed} runs the kernel skipped (recursion misses), "
          f"{line['period_misses']} the loop overran (under TCG a stall may hide a cycle's every event)")
    s.say(truth and len(truth) * 95 // 100 - 2 <= alerts <= len(near) + 2,
          f"{name} counted {alerts} misses; the loop's own clock: {len(truth)} cycles over the {line['deadline_us']} us "
          f"deadline, {len(near)} within 100 us of it or over")
    recs = [f for f in frames if f.get("type") == "alert" and f.get("probe") == name]
    misses = [r for r in recs if r.get("causes")]
    _, dropped, shed = accounted(name)
    # Overrun records (at the deadline, no parts yet) share the bucket and
    # the link's budget with the misses; only misses are counted alerts.
    s.say(misses and len(misses) <= alerts <= len(recs) + dropped + shed and all(r["comm"] == "lm_cycle" for r in recs),
          f"{name}: {alerts} misses = {len(misses)} miss records of {sorted({r['comm'] for r in recs})} over the UART "
          f"(+ {len(recs) - len(misses)} overrun records) + {dropped} counted drops + {shed} shed by the link")
    # The loop's releases are a grid (it skips a missed release to the
    # next period boundary): a record's release off it is not one of the
    # loop's cycles. On it, most are cycles the loop timed slow itself;
    # the rest were late between the loop's own clock read and its next
    # sleep (seen: preempted there for 1.5 ms, the next sleep armed in the
    # past), which only the probe sees: at most 10 % of them, or 2.
    period, first, last = line["period_us"] * 1000, line["first_release"], line["last_release"]
    releases = [r["time_ns"] - r["latency_ns"] for r in misses]
    off = [x for x in releases if not (first <= x <= last and (x - first) % period == 0)]
    slow_too = sum(1 for x in releases if x in near)
    s.say(misses and not off and len(misses) - slow_too <= max(2, len(misses) // 10),
          f"every miss record's release (time_ns - latency_ns) is one of the loop's (its grid of {line['period_us']} us "
          f"from {first}; off it: {off[:5]}), {slow_too} of {len(misses)} releases of cycles the loop itself timed over "
          f"the deadline - 100 us (all but 10 % or 2 at most)")
    unsummed = [r for r in misses if sum(c["ns"] for c in r["causes"]) != r["latency_ns"]]
    s.say(misses and not unsummed,
          f"every miss record's parts sum to its latency_ns exactly ({len(unsummed)} of {len(misses)} do not)")
    s.say(misses and all(any(c["kind"] == "running" and c["ns"] > 0 for c in r["causes"]) for r in misses),
          "every miss record charges the loop's own time on the CPU as `running`")
    named = [(r, c) for r in misses for c in r["causes"]
             if c.get("kind") == "task" and c.get("comm") == want and c.get("ns", 0) > 0]
    ns = sorted(c["ns"] for _, c in named)
    s.say(named and all(c.get("pid") == tpid and c.get("policy") == "fifo" for _, c in named),
          f"{len(named)} of {len(misses)} miss records name the IRQ thread {want} (pid {tpid}, fifo) as a task cause; "
          f"its ns min/median/max {ns[0] if ns else 0}/{ns[len(ns) // 2] if ns else 0}/{ns[-1] if ns else 0}")


def refused_without_btf(s, run_err, others):
    """armmp without BTF: `latmon check` refuses the cycle probe, naming
    why (exit 1: not every probe runs), `latmon run` says so and runs the
    others (`others`: their names, checked by the board's other tests)."""
    name = "cycle-loop"
    p = s.plan.get(name, {})
    why = p.get("error") or ""
    s.say(p.get("ok") is False and "cycle needs tp_btf" in why and "BTF" in why.replace("btf", "BTF"),
          f"latmon check refuses {name} without kernel types, naming why: {why!r}")
    bad = sorted(n for n, q in s.plan.items() if not q.get("ok") and n != name)
    s.say(s.check_rc == 1 and not bad, f"latmon check exits {s.check_rc} (1: one probe refused); others refused: {bad}")
    m = re.search(r"running: (\d+) of (\d+) probes attached", run_err)
    said = [l for l in run_err.splitlines() if name in l and "cycle needs tp_btf" in l]
    s.say(m and int(m.group(1)) == int(m.group(2)) - 1 and said and all(n in s.last for n in others),
          f"latmon run says {said[0] if said else 'nothing'!r}, then "
          f"{m.group(0) if m else 'no running line'}; the others report: {[n for n in others if n in s.last]}")
