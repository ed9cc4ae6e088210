// SPDX-License-Identifier: (GPL-2.0-only OR MIT)
/*
 * cycle: the cycles of a periodic thread, passively. A cycle runs from a
 * release (the intended expiry of the timer sleep the thread went into:
 * clock_nanosleep, nanosleep, or the read() of a periodic timerfd) to
 * done (its next such sleep; bpf/cycle_sources.bpf.h). Per cycle:
 * response (release -> done), wakeup (release -> running), exec (running
 * -> done), and when done is after release + deadline, a miss record
 * whose parts sum to the response exactly.
 *
 * Where the time goes (the anatomy of bpf/anatomy.bpf.h, kept across the
 * whole cycle): from its release to done, the thread holds the anatomy
 * slot of the CPU it is woken on or runs on, except while it sleeps
 * voluntarily. While the slot is held, that CPU charges every context
 * change: the loop's own time to the slot's self_ns (`running`), other
 * tasks' (it was runnable behind them), IRQs' and softirqs' to their
 * entries. A voluntary sleep inside the cycle gives the slot back
 * (merged into the cycle's account) and is `blocked`, by what it slept
 * on: futex (the syscall), io (uninterruptible), sleep (a timer sleep
 * syscall other than the cycle's), other. Page faults are counted from
 * the task's own counters (min_flt + maj_flt, what getrusage reports);
 * the kernel has no fault exit point to time them, so their time stays
 * in `running`. What no event covers is `other` (user space: latency
 * minus the parts).
 *
 * Overrun: a cycle still unfinished at its deadline is reported at once
 * from the next event on the loop's CPU that sees the deadline passed:
 * its context switches, IRQs and hrtimer expiries (the scheduler tick is
 * one, so at most a tick late while the CPU is busy). Not bpf_timer: the
 * kernel refuses it on PREEMPT_RT, the kernels this family is for.
 *
 * Unseen: a release whose wakeup and switch-in no program saw (a kernel
 * may keep tracepoints from firing in some tasks' context: this test
 * host's VM agent is one, see docs/probes.md) is caught when the sleep
 * returns (its sys_exit, in the loop's own context): the cycle starts
 * there, counted in `unseen`, its wakeup part being timer_irq_delay up to
 * that point. A wakeup before the release (a signal) is not a release.
 *
 * Threads: a bounded hash keyed by thread id (CYCLE_THREADS), entered at
 * the first timer sleep of a thread that passes the filter (comm=, or
 * pid= the thread id). tp_btf only (trusted task pointers); the syscall
 * entries are classic tracepoints (syscall events have no raw form),
 * which fire only for their own syscalls (read's for every read: its
 * program compares the thread id first).
 */
#include "cycle_state.bpf.h"
#include "cycle_account.bpf.h"
#include "cycle_life.bpf.h"
#include "cycle_rules.bpf.h"
#include "cycle_sources.bpf.h"
#include "cycle_wake.bpf.h"

/* What a thread that blocks now sleeps on. */
static __always_inline __u32 blocked_on(__s64 state, __s32 sys)
{
	if (sys >= 0 && (sys == cfg.nr_futex || sys == cfg.nr_futex_waitv))
		return LATMON_CYCLE_BLOCKED_FUTEX;
	if (state & TASK_UNINTERRUPTIBLE)
		return LATMON_CYCLE_BLOCKED_IO;
	if (sys >= 0 && (sys == cfg.nr_nanosleep || sys == cfg.nr_clock_nanosleep))
		return LATMON_CYCLE_BLOCKED_SLEEP;
	return LATMON_CYCLE_BLOCKED_OTHER;
}

/* TP_PROTO(bool preempt, struct task_struct *prev, struct task_struct *next,
 *          unsigned int prev_state) */
SEC("tp_btf/sched_switch")
int BPF_PROG(cycle_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	LATMON_GATE();
	struct cycle_thread *t;
	struct anat_slot *s;
	__u64 now = 0;

	/* Nothing to do (no slot held, no watch armed, neither task
	 * watched): five loads and compares. */
	if (cycle_live <= 0 ||
	    (anat_held <= 0 && watches <= 0 && !watched_many && prev->pid != watched_one && next->pid != watched_one))
		return 0;
	/* anat_switch, with the clock read only where a slot is held. */
	s = anat_held_here();
	if (s) {
		now = bpf_ktime_get_ns();
		anat_charge_task(s, prev, now);
		s->in_irq = -1;
		s->in_vec = -1;
	}
	overrun_check(ctx);
	t = thread_of(prev->pid);
	if (t && (t->phase == P_WAIT || t->phase == P_BLOCKED)) {
		/* It ran (it is switched out), yet no wakeup or switch-in
		 * said so: the block (or the wait) ends now, its upper bound. */
		if (!now)
			now = bpf_ktime_get_ns();
		if (t->phase == P_BLOCKED) {
			__u32 k = t->blocked_on & (LATMON_CYCLE_BLOCKED_KINDS - 1);

			t->exec.blocked[k].ns += now > t->blocked_ns ? now - t->blocked_ns : 0;
			t->exec.blocked[k].syscall = t->blocked_sys;
		}
		run_start(t, now);
		t->phase = P_RUN;
		t->st.unseen++;
	}
	if (t && t->phase == P_RUN) {
		__s64 state = latmon_task_state(prev);

		if (!now)
			now = bpf_ktime_get_ns();
		if (state == TASK_RUNNING) {
			t->phase = P_WAIT; /* preempted: keeps its slot */
		} else {
			/* The time up to now is in the slot: merged, given back. */
			slot_return(t);
			t->blocked_sys = syscall_of(prev);
			t->blocked_on = blocked_on(state, t->blocked_sys);
			t->blocked_ns = now;
			t->phase = P_BLOCKED;
		}
	}
	if (t) {
		/* Stopped or traced (__TASK_STOPPED, __TASK_TRACED): what
		 * follows until it runs again is the stop's. */
		if (latmon_task_state(prev) & (TASK_STOPPED | TASK_TRACED))
			t->stopped = 1;
		rule_block(ctx, t, prev);
	}
	t = thread_of(next->pid);
	if (t && t->phase == P_BLOCKED) {
		/* Switched in while blocked by the events: its wakeup came
		 * as it was going to sleep (sched_waking saw it still queued,
		 * the switch out then saw it block). The block ends now. */
		__u32 k = t->blocked_on & (LATMON_CYCLE_BLOCKED_KINDS - 1);

		if (!now)
			now = bpf_ktime_get_ns();
		t->exec.blocked[k].ns += now > t->blocked_ns ? now - t->blocked_ns : 0;
		t->exec.blocked[k].syscall = t->blocked_sys;
		t->phase = P_WAIT;
		t->st.unseen++;
	}
	if (t && t->phase == P_SLEEP && t->release_ns) {
		/* Switched in past its release before any wakeup was seen:
		 * the release is now. */
		if (!now)
			now = bpf_ktime_get_ns();
		release_rescale(&t->release_ns, &t->clk_off, t->clk_tai);
		if (now >= t->release_ns) {
			release_init(t, next, bpf_get_smp_processor_id(), now);
			t->phase = P_WAIT;
			t->st.unseen++;
		}
	}
	if (t && t->phase == P_WAIT) {
		if (!now)
			now = bpf_ktime_get_ns();
		run_start(t, now);
		t->phase = P_RUN;
		slot_hold(t, next->pid, bpf_get_smp_processor_id(), now);
	}
	return 0;
}

/* ---- the anatomy's interrupts, and the overrun check's ticks ---------- */

/* TP_PROTO(int irq, struct irqaction *action) */
SEC("tp_btf/irq_handler_entry")
int BPF_PROG(cycle_irq_entry, int irq)
{
	irq_ctx_enter();
	LATMON_GATE();
	anat_irq_entry(irq);
	overrun_check(ctx);
	return 0;
}

SEC("tp_btf/irq_handler_exit")
int BPF_PROG(cycle_irq_exit, int irq)
{
	irq_ctx_exit();
	LATMON_GATE();
	anat_irq_exit(irq);
	return 0;
}

/* TP_PROTO(unsigned int vec_nr) */
SEC("tp_btf/softirq_entry")
int BPF_PROG(cycle_softirq_entry, unsigned int vec_nr)
{
	irq_ctx_enter();
	LATMON_GATE();
	anat_softirq_entry(vec_nr);
	return 0;
}

SEC("tp_btf/softirq_exit")
int BPF_PROG(cycle_softirq_exit, unsigned int vec_nr)
{
	irq_ctx_exit();
	LATMON_GATE();
	anat_softirq_exit(vec_nr);
	return 0;
}

/* Every hrtimer expiry, the scheduler tick's included: the overrun check
 * runs at least once a tick on a busy CPU. TP_PROTO(struct hrtimer *timer,
 * ktime_t *now) */
SEC("tp_btf/hrtimer_expire_entry")
int BPF_PROG(cycle_hrtimer_expire, struct hrtimer *timer)
{
	/* Before the gate: the interrupt-context count must stay balanced
	 * across certify's gate switches, or a wakeup would be misjudged. */
	irq_ctx_enter();
	LATMON_GATE();
	if (cycle_live > 0)
		clock_offsets_from(timer);
	timerfd_expiry(timer);
	overrun_check(ctx);
	return 0;
}

/* The expiry's function returned (the sleep rules' interrupt context
 * ends). TP_PROTO(struct hrtimer *timer) */
SEC("tp_btf/hrtimer_expire_exit")
int BPF_PROG(cycle_hrtimer_expire_exit)
{
	irq_ctx_exit();
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
