/* SPDX-License-Identifier: (GPL-2.0-only OR MIT) */
/*
 * cycle (bpf/cycle.bpf.c): the wakeup path. One program on sched_waking
 * (every wakeup on the machine runs it: the thread-id gate first) for the
 * sleep rules' waker check (bpf/cycle_rules.bpf.h) and the cycle's
 * release or block end; a second tracepoint on the wakeup path would cost
 * every wakeup its dispatch again (benches/cycle-floor.sh: about 35 ns
 * per run of an empty program here). sched_waking runs before the kernel
 * picks the woken task's CPU: sched_migrate_task, rare beside wakeups,
 * moves the claim when the wakeup places the task elsewhere.
 */
#ifndef __CYCLE_WAKE_BPF_H
#define __CYCLE_WAKE_BPF_H

#include "cycle_account.bpf.h"
#include "cycle_rules.bpf.h"

/* The release (or a block's end) of t's thread, task p, woken now:
 * from sched_waking, in the waker's context, before the kernel picks the
 * CPU. The slot is claimed on p's CPU now; cycle_migrate moves the claim
 * if the wakeup places p on another. */
static __always_inline void cycle_woken(struct cycle_thread *t, struct task_struct *p)
{
	__u64 now;

	if (t->phase != P_SLEEP && t->phase != P_BLOCKED)
		return;
	now = bpf_ktime_get_ns();
	if (t->phase == P_SLEEP) {
		/* A timer wakes at or after its expiry: earlier is a signal
		 * (the sleep returns -EINTR, the loop sleeps again or not). */
		release_rescale(&t->release_ns, &t->clk_off, t->clk_tai);
		if (now < t->release_ns)
			return;
		release_init(t, p, latmon_task_cpu_btf(p), now);
	} else if (t->phase == P_BLOCKED) {
		__u32 k = t->blocked_on & (LATMON_CYCLE_BLOCKED_KINDS - 1);

		t->exec.blocked[k].ns += now > t->blocked_ns ? now - t->blocked_ns : 0;
		t->exec.blocked[k].syscall = t->blocked_sys;
	}
	/* Still queued and on its CPU: the wakeup finds it before its switch
	 * out (ttwu_runnable), it runs on, no switch. */
	if (latmon_task_on_cpu_btf(p)) {
		run_start(t, now);
		t->phase = P_RUN;
	} else {
		t->phase = P_WAIT;
	}
	slot_hold(t, p->pid, latmon_task_cpu_btf(p), now);
}

/* TP_PROTO(struct task_struct *p): in the waker's context. */
SEC("tp_btf/sched_waking")
int BPF_PROG(cycle_waking, struct task_struct *p)
{
	LATMON_GATE();
	struct cycle_thread *t = thread_of(p->pid);

	if (!t)
		return 0;
	rule_waking(ctx, t, p);
	cycle_woken(t, p);
	return 0;
}

/* A wakeup that places its task on another CPU than it slept on
 * (try_to_wake_up's set_task_cpu, after sched_waking; the task is off
 * every run queue, which tells it from a load balancer's move of a
 * runnable task): the woken thread's slot moves with it, as if claimed
 * there. Runs at every migration on the machine, far rarer than switches.
 * TP_PROTO(struct task_struct *p, int dest_cpu) */
SEC("tp_btf/sched_migrate_task")
int BPF_PROG(cycle_migrate, struct task_struct *p, int dest_cpu)
{
	LATMON_GATE();
	struct cycle_thread *t = thread_of(p->pid);

	if (!t || t->phase != P_WAIT || p->on_rq || latmon_task_cpu_btf(p) == (__u32)dest_cpu)
		return 0;
	if (!t->started)
		t->acc.cpu_woken = dest_cpu;
	slot_return(t);
	slot_hold(t, p->pid, dest_cpu, bpf_ktime_get_ns());
	return 0;
}

#endif /* __CYCLE_WAKE_BPF_H */
