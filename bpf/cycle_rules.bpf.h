/* SPDX-License-Identifier: (GPL-2.0-only OR MIT) */
/*
 * cycle (bpf/cycle.bpf.c): the RT sleep rules of every watched thread, in
 * any phase (inside a cycle or not), latmon's own on any kernel, after
 * the kernel's RV rtapp `sleep` monitor (6.17, kernel/trace/rv/monitors/
 * sleep): an RT thread sleeps only in a futex wait or an absolute
 * CLOCK_MONOTONIC / CLOCK_TAI clock_nanosleep, and is woken by a thread of
 * its priority or higher, or by an interrupt.
 *
 *  - sleep_relative, sleep_realtime_clock: at the entry of nanosleep (a
 *    relative sleep) and clock_nanosleep (no TIMER_ABSTIME: relative;
 *    absolute on CLOCK_REALTIME: realtime_clock; absolute on another
 *    clock than MONOTONIC and TAI: sleep_other). Per call, whether it
 *    sleeps or returns at once.
 *  - sleep_other: per sleep, at the switch of a watched thread that
 *    blocks (TASK_INTERRUPTIBLE or TASK_UNINTERRUPTIBLE; not a task that
 *    dies, stops for a signal or a tracer, or waits for a PREEMPT_RT
 *    sleeping spinlock) in anything but a futex or a timer sleep syscall:
 *    one fdatasync that sleeps twice (the writeback, the cache flush) is
 *    two, a blocking read() (of a timerfd too) one.
 *  - woken_by_lower: a futex wait ended by a waker (current at
 *    sched_waking, which runs in the waker's context; sched_wakeup may run
 *    on the woken CPU from its wake list) that is in a futex call itself
 *    (FUTEX_WAKE, a requeue, an unlock: not a timeout's timer nor a
 *    signal) and whose effective priority (task->prio, boosts included)
 *    is numerically above the woken thread's. PI waits (LOCK_PI,
 *    LOCK_PI2, WAIT_REQUEUE_PI) never count, as RV's allowlist has
 *    FUTEX_LOCK_PI: the owner was boosted while it held the lock, and the
 *    kernel deboosts it before the wakeup (mark_wakeup_next_waiter), so
 *    no priority seen at the wakeup can tell.
 *
 * Records: one per rule per thread per RULE_GAP_NS, under its own alert
 * id's token bucket; the counts (the thread's stats) are exact.
 */
#ifndef __CYCLE_RULES_BPF_H
#define __CYCLE_RULES_BPF_H

#include "cycle_state.bpf.h"

#define TASK_INTERRUPTIBLE 0x1 /* include/linux/sched.h */
#define RULE_FUTEX_LOCK_PI 6   /* include/uapi/linux/futex.h */
#define RULE_FUTEX_WAIT_REQUEUE_PI 11
#define RULE_FUTEX_LOCK_PI2 13
/* ~(FUTEX_PRIVATE_FLAG | FUTEX_CLOCK_REALTIME), the kernel's own mask:
 * an op with another bit set is no command (ENOSYS). */
#define RULE_FUTEX_CMD_MASK (~(128u | 256u))

/* Test builds only (bpf/test_hooks.bpf.h): every timer sleep judged
 * relative and every futex wait not PI, which the live tests must catch. */
#define MUTATE_RULES 2

/* Per CPU: hard IRQ handlers, softirqs and hrtimer expiries running now
 * (their entry and exit tracepoints, which cycle.bpf.c attaches anyway
 * for the anatomy and the overrun check; hrtimer_expire_exit for this).
 * A wakeup in one of them is the interrupt's, never a task's: `current`
 * is whatever task the interrupt hit. A futex wait that times out is
 * woken by its hrtimer (hrtimer_wakeup, hard IRQ), and a loop beside a
 * futex-heavy load was judged woken_by_lower by the task the timer
 * interrupted whenever that task was in a futex call (issue 40: 17 870
 * of 19 999 timed-out waits). Entries count only while a thread is
 * watched; exits always, never below 0: the count stays exact across a
 * thread's entry or exit mid-interrupt. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} cycle_irq_depth SEC(".maps");

static __always_inline void irq_ctx_enter(void)
{
	__u32 zero = 0, *d;

	if (cycle_live <= 0)
		return;
	d = bpf_map_lookup_elem(&cycle_irq_depth, &zero);
	if (d)
		*d += 1;
}

static __always_inline void irq_ctx_exit(void)
{
	__u32 zero = 0, *d = bpf_map_lookup_elem(&cycle_irq_depth, &zero);

	if (d && *d)
		*d -= 1;
}

static __always_inline bool in_irq_ctx(void)
{
	__u32 zero = 0, *d = bpf_map_lookup_elem(&cycle_irq_depth, &zero);

	return d && *d;
}

/* The second argument of the syscall task t is in (futex's op). */
static __always_inline __u64 syscall_arg1(struct task_struct *t)
{
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(t);

	if (!regs)
		return 0;
#if defined(__TARGET_ARCH_x86)
	return BPF_CORE_READ(regs, si);
#elif defined(__TARGET_ARCH_arm64)
	return BPF_CORE_READ(regs, regs[1]);
#else
	return 0;
#endif
}

static __always_inline void waker_fill(struct latmon_cycle_record *c, struct task_struct *w)
{
	c->waker_pid = w->tgid;
	c->waker_tid = w->pid;
	c->waker_policy = w->policy;
	c->waker_prio = (w->policy == LATMON_SCHED_FIFO || w->policy == LATMON_SCHED_RR) ? (__s32)w->rt_priority
											 : w->static_prio - 120;
	bpf_probe_read_kernel_str(c->waker_comm, sizeof(c->waker_comm), &w->comm);
}

/* Send a rule record of thread `tid` (t): from its own context, or for
 * woken_by_lower from its waker's (current). */
static __noinline int send_rule(void *ctx, struct cycle_thread *t, __u32 tid, __u32 rule, __s32 sys)
{
	struct latmon_alert_cycle *r;
	__u64 now = bpf_ktime_get_ns();

	if (!latmon_alert_admit(LATMON_CYCLE_RULE_ALERT_ID, now)) {
		latmon_alert_dropped(LATMON_CYCLE_RULE_ALERT_ID, false);
		return 0;
	}
	r = cycle_scratch_take();
	if (!r) {
		latmon_alert_dropped(LATMON_CYCLE_RULE_ALERT_ID, false);
		return 0;
	}
	__builtin_memset(&r->anat, 0, sizeof(r->anat));
	__builtin_memset(&r->cycle, 0, sizeof(r->cycle));
	__builtin_memset(&r->lock, 0, sizeof(r->lock));
	r->alert.time_ns = now;
	r->alert.latency_ns = 0;
	r->alert.probe_id = LATMON_CYCLE_RULE_ALERT_ID;
	r->alert.cpu = bpf_get_smp_processor_id();
	r->alert.tid = tid;
	/* The thread as it entered: in the waker's context it is not current. */
	r->alert.pid = t->tgid;
	__builtin_memcpy(r->alert.comm, t->comm, sizeof(r->alert.comm));
	r->cycle.event = LATMON_CYCLE_RULE;
	r->cycle.release_ns = t->release_ns;
	r->cycle.doing_syscall = -1;
	r->cycle.rule = rule;
	r->cycle.rule_syscall = sys;
	if (rule == LATMON_RULE_WOKEN_BY_LOWER)
		waker_fill(&r->cycle, bpf_get_current_task_btf());
	if (cfg.common.use_ringbuf) {
		if (bpf_ringbuf_output(&alerts, r, sizeof(*r), 0))
			latmon_alert_dropped(LATMON_CYCLE_RULE_ALERT_ID, true);
	} else if (bpf_perf_event_output(ctx, &alerts_perf, BPF_F_CURRENT_CPU, r, sizeof(*r))) {
		latmon_alert_dropped(LATMON_CYCLE_RULE_ALERT_ID, true);
	}
	cycle_scratch_put();
	return 0;
}

/* Thread `tid` (t) broke `rule` in syscall `sys`: counted, and a record
 * unless one of this rule went out for it within RULE_GAP_NS. */
static __always_inline void rule_broken(void *ctx, struct cycle_thread *t, __u32 tid, __u32 rule, __s32 sys)
{
	__u32 k = rule & (LATMON_RULES - 1);
	__u64 now;

	t->st.rules[k]++;
	now = bpf_ktime_get_ns();
	if (t->rule_sent_ns[k] && now - t->rule_sent_ns[k] < LATMON_CYCLE_RULE_GAP_NS)
		return;
	t->rule_sent_ns[k] = now;
	send_rule(ctx, t, tid, k, sys);
}

/* The current thread enters a timer sleep syscall `sys` on clock `clk`
 * with `flags` (nanosleep: relative, flags 0). After timer_sleep(),
 * which enters a thread the filter names. */
static __always_inline void rule_timer_sleep(void *ctx, __u64 clk, __u64 flags, __s32 sys)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct cycle_thread *t = thread_of(tid);

	if (!t)
		return;
	if (!(flags & TIMER_ABSTIME) || LATMON_MUTATED(MUTATE_RULES))
		rule_broken(ctx, t, tid, LATMON_RULE_SLEEP_RELATIVE, sys);
	else if (clk == CLOCK_REALTIME)
		rule_broken(ctx, t, tid, LATMON_RULE_SLEEP_REALTIME_CLOCK, sys);
	else if (clk != CLOCK_MONOTONIC && clk != CLOCK_TAI)
		rule_broken(ctx, t, tid, LATMON_RULE_SLEEP_OTHER, sys);
}

/* sched_switch: watched thread `prev` (t) is switched out. A sleep other
 * than a futex wait or a timer sleep breaks sleep_other; a futex wait
 * that is not PI is judged at its wakeup. */
static __always_inline void rule_block(void *ctx, struct cycle_thread *t, struct task_struct *prev)
{
	__s64 state = latmon_task_state(prev);
	__s32 sys;
	__u32 cmd;

	t->futex_wait = 0;
	if (!(state & (TASK_INTERRUPTIBLE | TASK_UNINTERRUPTIBLE)))
		return;
	/* Asleep to its next release: the cycle's own sleep. A timer sleep
	 * is judged at its entry; a timerfd loop's blocking read (cycle_read
	 * set P_SLEEP) is its release and breaks no rule - it counted as
	 * sleep_other on every cycle before (issue 42). */
	if (t->phase == P_SLEEP)
		return;
	sys = syscall_of(prev);
	if (sys >= 0 && sys == cfg.nr_futex) {
		cmd = (__u32)syscall_arg1(prev) & RULE_FUTEX_CMD_MASK;
		t->futex_wait =
			LATMON_MUTATED(MUTATE_RULES) ||
			(cmd != RULE_FUTEX_LOCK_PI && cmd != RULE_FUTEX_LOCK_PI2 && cmd != RULE_FUTEX_WAIT_REQUEUE_PI);
		t->futex_sys = sys;
		return;
	}
	if (sys >= 0 && sys == cfg.nr_futex_waitv) {
		t->futex_wait = 1; /* no PI op */
		t->futex_sys = sys;
		return;
	}
	if (sys >= 0 && (sys == cfg.nr_nanosleep || sys == cfg.nr_clock_nanosleep))
		return; /* judged at its entry */
	rule_broken(ctx, t, prev->pid, LATMON_RULE_SLEEP_OTHER, sys);
}

/* sched_waking of watched thread p (t), in the waker's context (current):
 * a plain futex wait ended by a lower-priority futex caller breaks
 * woken_by_lower. */
static __always_inline void rule_waking(void *ctx, struct cycle_thread *t, struct task_struct *p)
{
	struct task_struct *cur;

	if (!t->futex_wait)
		return;
	t->futex_wait = 0;
	cur = bpf_get_current_task_btf();
	/* An interrupt's wakeup (a timeout's hrtimer, a softirq), or one from
	 * the idle task's context: no task woke it. */
	if (in_irq_ctx() || !cur->pid)
		return;
	/* Lower: a larger effective prio number (0..99 real-time, 100..139
	 * fair); a waker boosted to the waiter's priority is not lower. */
	if (syscall_of(cur) != cfg.nr_futex || cur->prio <= p->prio)
		return;
	rule_broken(ctx, t, p->pid, LATMON_RULE_WOKEN_BY_LOWER, t->futex_sys);
}

#endif /* __CYCLE_RULES_BPF_H */
