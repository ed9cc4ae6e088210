// SPDX-License-Identifier: (GPL-2.0-only OR MIT)
/*
 * timer: for tasks sleeping on a high-resolution timer (clock_nanosleep,
 * nanosleep, the sleeps of a periodic control loop), the latency from the
 * timer's intended expiry to the task running on a CPU - what cyclictest
 * reports for its own thread, measured passively on the real workload.
 *
 *   hrtimer_expire_entry  the expiring timer is an hrtimer_sleeper (its
 *                         function is hrtimer_wakeup): remember per CPU the
 *                         sleeping task and the intended expiry
 *                         (_softexpires, moved to CLOCK_MONOTONIC by the
 *                         clock base's offset)
 *   sched_waking          hrtimer_wakeup() wakes exactly that task on this
 *                         CPU: copy the expiry into the task's storage
 *   sched_switch          the task runs: record now - expiry
 *
 * A task can be woken while it is still on a CPU (the timer fired between
 * arming and schedule(), or it was woken on its way out of the CPU and
 * picked again by the same __schedule(), which traces no switch): then it
 * ran from the wakeup on. The wakeup sees that (on_rq and on_cpu); where
 * the race hides it, the stamp is still in flight when the task next
 * leaves the CPU or is woken again - proof it ran untraced - and is
 * recorded then with the wakeup as its run time.
 *
 * Not seen at all: a sleep whose absolute deadline has passed before the
 * kernel arms its timer (the task was delayed on its way into
 * clock_nanosleep). Recent kernels then complete the sleep without
 * expiring a timer and without a wakeup; cyclictest records such a cycle
 * as an overrun, latmon has no event for it.
 *
 * _softexpires is the time the sleeper asked for; the kernel may fire the
 * timer up to the task's timer slack later (50 us by default for
 * SCHED_OTHER, 0 for real-time tasks): that delay is part of the latency,
 * as it is in cyclictest's numbers.
 *
 * chain (a second mode of the same object): for a named thread, each wakeup
 * caused by a timer or by a hard interrupt handler is split into stages
 * whose sums are the end-to-end latency, event by event:
 *   CHAIN_TIMER  intended expiry -> sched_waking   (timer stage)
 *   CHAIN_IRQ    irq_handler_entry -> sched_waking (IRQ stage; the waking
 *                happens inside a hard interrupt handler on this CPU)
 *   CHAIN_RUN    sched_waking -> sched_switch      (wakeup -> running)
 *   CHAIN_IRQ_THREAD  irq_handler_entry -> sched_waking of the thread by
 *                a kernel thread the IRQ woke (PREEMPT_RT: the IRQ thread;
 *                then up to LATMON_CHAIN_MAX_HOPS kernel threads, e.g. the
 *                workqueue worker a tty's receive path hands over to). A
 *                kernel thread woken inside a hardirq handler (or by such a
 *                thread) carries that handler's entry time until it next
 *                sleeps; whatever it wakes meanwhile is attributed to it.
 *   CHAIN        event -> running                  (end to end)
 * and, with a response function (chain,...,response=/bin:SYMBOL), from the
 * first return of that function after the thread ran:
 *   CHAIN_RESPONSE     running -> the function returns (uretprobe)
 *   CHAIN_TO_RESPONSE  event -> the function returns (end to end)
 * An event whose thread is woken by the next event before the function
 * returned has no response: counted as a drop of CHAIN_RESPONSE.
 *
 * The sleeper's task is read from the hrtimer_sleeper that contains the
 * timer with bpf_probe_read_kernel: container_of() on the trusted hrtimer
 * pointer is refused by the verifier. hrtimer_wakeup's address comes from
 * kallsyms through libbpf's typeless __ksym. tp_btf only (task slots;
 * the uretprobe reads the same slot through bpf_get_current_task_btf).
 *
 * Per-task state (the stamps, chain's carriers) lives in task slots
 * (task_slot.bpf.h): task storage, or on PREEMPT_RT kernels where
 * creating it in sched_waking is unsafe (CVE-2024-58070) a tid hash,
 * emptied by timer_task_exit_btf as each task exits.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "latmon.h"
#include "gate.bpf.h"
#include "maps.bpf.h"
#include "filter.bpf.h"
#include "core_fixes.bpf.h"
/* Before the shared headers, which read cfg.common. */
const volatile struct latmon_timer_config cfg = {};
#define LATMON_ALERT_IDS LATMON_TIMER_SERIES
#define LATMON_ALERT_ANATOMY
/* The tally as global functions: see causes.bpf.h (chain's verifier limit). */
#define LATMON_CAUSES_GLOBAL
#include "alerts.bpf.h"
#include "anatomy.bpf.h"
#include "task_slot.bpf.h"

extern const void hrtimer_wakeup __ksym;

/* Stamps waiting for their task to run; sched_switch skips the storage
 * lookup while there are none (nearly always). */
__s64 timer_pending;
/* chain: kernel threads carrying an IRQ's entry time (see below). */
__s64 chain_carriers;

#define PF_KTHREAD 0x00200000 /* include/linux/sched.h, unchanged since 2.6 */

/* Expiring sleepers per CPU, one per expiry context: soft timers (on
 * PREEMPT_RT every SCHED_OTHER sleeper) expire with interrupts enabled, so
 * a hard timer's expiry can nest inside a soft one's, before its wakeup. */
struct expiring {
	__u64 sleeper;	  /* task the expiring hrtimer_sleeper wakes (address) */
	__u64 expires_ns; /* its intended expiry, CLOCK_MONOTONIC */
	__u64 entry_ns;	  /* anatomy: when the expiry was handled */
};

struct timer_cpu {
	struct expiring exp[2]; /* [hrtimer::is_soft] */
	__u64 irq_ns;		/* chain: a hardirq handler runs since (0: none) */
	__u64 thread_irq_ns;	/* chain: a handler that returned IRQ_WAKE_THREAD
				 * began then; its IRQ thread's wakeup follows */
};

/* wake_stamp::running */
enum { WAITING = 0, RAN = 1, RESPONDED = 2 };

struct wake_stamp {
	__u64 start_ns; /* the event: intended expiry or hardirq entry (0: none) */
	__u64 wake_ns;	/* sched_waking */
	__u64 run_ns;	/* chain: the task ran */
	__u32 cause;	/* LATMON_TS_CHAIN_TIMER or LATMON_TS_CHAIN_IRQ */
	__u32 running;	/* WAITING, RAN (chain: awaiting the response), RESPONDED */
	__u32 anat;	/* anatomy slot held (anat_claim), 0: none */
	__u32 pad;
	__u64 irq_delay_ns; /* anatomy: intended expiry -> expiry handled */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct timer_cpu);
} timer_cpu SEC(".maps");

/* chain: a kernel thread woken by an IRQ (directly, or through other
 * kernel threads) until it next sleeps. */
struct irq_carry {
	__u64 irq_ns; /* the hardirq handler's entry (0: carries nothing) */
	__u32 hops;   /* kernel threads from the handler to this one */
	__u32 pad;
};

LATMON_TASK_SLOT(chain_carry, struct irq_carry, LATMON_KTHREAD_SLOTS)

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LATMON_TIMER_SERIES);
	__type(key, __u32);
	__type(value, struct latmon_hist);
} timer_hist SEC(".maps");

LATMON_TASK_SLOT(timer_stamp, struct wake_stamp, LATMON_MAX_STAMPS)

static __always_inline struct timer_cpu *cpu_state(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&timer_cpu, &zero);
}

static __always_inline void record(__u32 series, __u64 delta)
{
	struct latmon_hist *h = latmon_hist_get(&timer_hist, series);

	if (h)
		latmon_hist_record(h, delta);
}

/* An end-to-end series (timer, chain, chain to response): recorded, and
 * above the threshold an alert record about task `t` (NULL: current). */
static __always_inline void record_end(void *ctx, __u32 series, __u64 delta, struct task_struct *t,
				       const struct latmon_anatomy *an)
{
	struct latmon_hist *h = latmon_hist_get(&timer_hist, series);
	struct latmon_alert_who who = {};

	if (!h)
		return;
	latmon_hist_record(h, delta);
	if (!cfg.threshold_ns || delta <= cfg.threshold_ns)
		return;
	h->alerts++;
	if (t) {
		who.pid = t->tgid;
		who.tid = t->pid;
		who.comm = &t->comm;
	}
	latmon_alert_anat(ctx, series, delta, t ? &who : NULL, an);
}

static __always_inline void count_drop(__u32 series)
{
	struct latmon_hist *h = latmon_hist_get(&timer_hist, series);

	if (h)
		h->drops++;
}

/* The woken task `t` (NULL: current) runs at `now` (a subprogram: four
 * callers; inlined, each would carry the alert path). Stages are recorded
 * all or nothing, so their sums stay equal to the end-to-end sum. A task
 * that ran untraced (now == its wakeup) gets an anatomy of the timer's
 * delay only: its slot's accounts are of a wait that did not happen. */
static __noinline int task_ran(void *ctx, struct task_struct *t, struct wake_stamp *st, __u64 now)
{
	__s64 total = now - st->start_ns, stage = st->wake_ns - st->start_ns, run = now - st->wake_ns;
	struct anat_slot *slot = NULL;
	const struct latmon_anatomy *an = NULL;

	__sync_fetch_and_add(&timer_pending, -1);
	if (st->anat) {
		slot = anat_take(t ? t : bpf_get_current_task_btf(), st->anat);
		st->anat = 0;
		if (slot && now != st->wake_ns) {
			slot->acc.timer_irq_delay_ns = st->irq_delay_ns;
			an = &slot->acc;
		}
	}
	if (!an && cfg.common.anatomy && now == st->wake_ns && total > cfg.threshold_ns) {
		struct latmon_anatomy *blank = anat_blank();

		if (blank) {
			blank->timer_irq_delay_ns = st->irq_delay_ns;
			an = blank;
		}
	}
	if (!cfg.chain) {
		if (total < 0)
			count_drop(LATMON_TS_TIMER);
		else
			record_end(ctx, LATMON_TS_TIMER, total, t, an);
		st->start_ns = 0;
		anat_release(slot);
		return 0;
	}
	if (stage < 0 || run < 0) {
		count_drop(LATMON_TS_CHAIN);
	} else {
		record_end(ctx, LATMON_TS_CHAIN, total, t, an);
		record(st->cause, stage);
		record(LATMON_TS_CHAIN_RUN, run);
	}
	anat_release(slot);
	st->run_ns = now;
	st->running = RAN;
	return 0;
}

/* TP_PROTO(struct hrtimer *hrtimer, ktime_t *now) */
SEC("tp_btf/hrtimer_expire_entry")
int BPF_PROG(timer_expire_btf, struct hrtimer *hrtimer, ktime_t *now)
{
	LATMON_GATE();
	struct timer_cpu *c;
	struct expiring *e;
	struct task_struct *task = NULL;

	if ((__u64)hrtimer->function != (__u64)&hrtimer_wakeup)
		return 0;
	c = cpu_state();
	if (!c)
		return 0;
	/* hrtimer_sleeper { struct hrtimer timer; struct task_struct *task; } */
	bpf_probe_read_kernel(&task, sizeof(task),
			      (void *)((__u64)hrtimer + bpf_core_field_offset(struct hrtimer_sleeper, task)));
	e = &c->exp[hrtimer->is_soft & 1];
	e->sleeper = (__u64)task;
	e->expires_ns = hrtimer->_softexpires - hrtimer->base->offset;
	if (cfg.common.anatomy)
		e->entry_ns = bpf_ktime_get_ns();
	return 0;
}

/* TP_PROTO(struct task_struct *p) */
SEC("tp_btf/sched_waking")
int BPF_PROG(timer_waking_btf, struct task_struct *p)
{
	LATMON_GATE();
	struct timer_cpu *c = cpu_state();
	struct irq_carry *carry;
	struct wake_stamp *st;
	struct expiring *e;
	__u64 start, now, irq_delay = 0;
	__u32 cause, hops = 0;

	if (!c)
		return 0;
	/* The IRQ thread woken for a handler that returned IRQ_WAKE_THREAD:
	 * __irq_wake_thread() runs after irq_handler_exit, still in the
	 * hardirq. Checked by name: IRQ threads are "irq/N-NAME". */
	if (cfg.chain && c->thread_irq_ns) {
		start = c->thread_irq_ns;
		c->thread_irq_ns = 0;
		if ((p->flags & PF_KTHREAD) && p->comm[0] == 'i' && p->comm[1] == 'r' && p->comm[2] == 'q' &&
		    p->comm[3] == '/') {
			carry = chain_carry_create(p);
			if (!carry) {
				count_drop(LATMON_TS_CHAIN); /* its event may be lost */
				return 0;
			}
			if (!carry->irq_ns)
				__sync_fetch_and_add(&chain_carriers, 1);
			carry->irq_ns = start;
			carry->hops = 1;
			return 0;
		}
	}
	if (c->exp[0].sleeper == (__u64)p || c->exp[1].sleeper == (__u64)p) {
		e = &c->exp[c->exp[1].sleeper == (__u64)p];
		e->sleeper = 0;
		start = e->expires_ns;
		cause = LATMON_TS_CHAIN_TIMER;
		if (e->entry_ns > start)
			irq_delay = e->entry_ns - start;
	} else if (cfg.chain && c->irq_ns) {
		start = c->irq_ns;
		cause = LATMON_TS_CHAIN_IRQ;
		hops = 0;
	} else if (cfg.chain && chain_carriers > 0) {
		carry = chain_carry_get(bpf_get_current_task_btf());
		if (!carry || !carry->irq_ns)
			return 0;
		start = carry->irq_ns;
		cause = LATMON_TS_CHAIN_IRQ_THREAD;
		hops = carry->hops;
	} else {
		return 0;
	}
	if (!latmon_task_wanted_btf(p, cfg.filter_pid, cfg.filter_comm)) {
		/* An IRQ's wakeup of a kernel thread: it carries the event on. */
		if (cause != LATMON_TS_CHAIN_TIMER && (p->flags & PF_KTHREAD) && hops < LATMON_CHAIN_MAX_HOPS) {
			carry = chain_carry_create(p);
			if (!carry) {
				count_drop(LATMON_TS_CHAIN); /* its event may be lost */
				return 0;
			}
			if (!carry->irq_ns)
				__sync_fetch_and_add(&chain_carriers, 1);
			carry->irq_ns = start;
			carry->hops = hops + 1;
		}
		return 0;
	}
	st = timer_stamp_create(p);
	if (!st) {
		count_drop(cfg.chain ? LATMON_TS_CHAIN : LATMON_TS_TIMER);
		return 0;
	}
	now = bpf_ktime_get_ns();
	/* The previous wakeup is still in flight, yet the task has gone to
	 * sleep again since: it ran without a traced switch-in, so it was on a
	 * CPU when woken (see timer_switch_btf). */
	if (st->start_ns && st->running == WAITING)
		task_ran(ctx, p, st, st->wake_ns);
	/* The last event's thread ran but never returned from the response
	 * function before this new event. */
	if (cfg.response && st->start_ns && st->running == RAN)
		count_drop(LATMON_TS_CHAIN_RESPONSE);
	__sync_fetch_and_add(&timer_pending, 1);
	st->start_ns = start;
	st->wake_ns = now;
	st->cause = cause;
	st->running = WAITING;
	st->anat = 0;
	st->irq_delay_ns = irq_delay;
	/* Woken before it finished going to sleep - the timer fired early in
	 * clock_nanosleep, on this CPU or, after a migration, on another: it
	 * is on a CPU now and no switch will follow. */
	if (latmon_task_on_cpu_btf(p)) {
		task_ran(ctx, p, st, now);
		return 0;
	}
	/* It waits on the CPU it is woken on: that CPU accounts why. */
	st->anat = anat_claim(p, latmon_task_cpu_btf(p), now);
	return 0;
}

/* TP_PROTO(bool preempt, struct task_struct *prev, struct task_struct *next,
 *          unsigned int prev_state) */
SEC("tp_btf/sched_switch")
int BPF_PROG(timer_switch_btf, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	LATMON_GATE();
	struct wake_stamp *st;
	__u64 now = 0;

	/* anatomy: prev held a waiting CPU until now. */
	if (anat_held > 0) {
		now = bpf_ktime_get_ns();
		anat_switch(prev, now);
	}
	/* chain: a kernel thread that carried an IRQ goes to sleep - its
	 * activation, and what it wakes for that IRQ, is over. */
	if (chain_carriers > 0 && (prev->flags & PF_KTHREAD) && latmon_task_state(prev) != 0) {
		struct irq_carry *carry = chain_carry_get(prev);

		if (carry && carry->irq_ns) {
			carry->irq_ns = 0;
			__sync_fetch_and_add(&chain_carriers, -1);
		}
	}
	if (timer_pending <= 0)
		return 0;
	st = timer_stamp_get(next);
	if (st && st->start_ns && st->running == WAITING)
		task_ran(ctx, next, st, now ? now : bpf_ktime_get_ns());
	/* prev leaves the CPU with a wakeup still in flight: it ran without
	 * a switch-in, so it never left the CPU - woken while going to sleep
	 * and picked again by the same __schedule() (prev == next is not
	 * traced). It ran from the wakeup on. */
	st = timer_stamp_get(prev);
	if (st && st->start_ns && st->running == WAITING)
		task_ran(ctx, prev, st, st->wake_ns);
	return 0;
}

/* TP_PROTO(struct task_struct *p): tid-hash slots only (task storage goes
 * with its task by itself). The exiting task's entries go while its
 * thread id is still its own; a wakeup still in flight is recorded first,
 * as its final switch would record it (it ran untraced, from the wakeup
 * on: see timer_switch_btf). */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(timer_task_exit_btf, struct task_struct *p)
{
	LATMON_GATE();
	struct wake_stamp *st = timer_stamp_get(p);
	struct irq_carry *carry = chain_carry_get(p);

	if (st && st->start_ns && st->running == WAITING)
		task_ran(ctx, p, st, st->wake_ns);
	if (carry && carry->irq_ns) {
		carry->irq_ns = 0;
		__sync_fetch_and_add(&chain_carriers, -1);
	}
	timer_stamp_delete(p);
	chain_carry_delete(p);
	return 0;
}

/* ---- chain: which wakeups happen inside a hard interrupt handler ------- */

/* TP_PROTO(int irq, struct irqaction *action) */
SEC("tp_btf/irq_handler_entry")
int BPF_PROG(chain_irq_entry_btf, int irq, struct irqaction *action)
{
	LATMON_GATE();
	struct timer_cpu *c = cpu_state();

	/* anatomy: chain's own hardirq programs do its accounting (no second
	 * pair of programs on every interrupt: src/probes/timer.rs). */
	if (cfg.common.anatomy)
		anat_irq_entry(irq);
	if (c) {
		c->irq_ns = bpf_ktime_get_ns();
		c->thread_irq_ns = 0;
	}
	return 0;
}

/* TP_PROTO(int irq, struct irqaction *action, int ret) */
SEC("tp_btf/irq_handler_exit")
int BPF_PROG(chain_irq_exit_btf, int irq, struct irqaction *action, int ret)
{
	LATMON_GATE();
	struct timer_cpu *c = cpu_state();

	if (cfg.common.anatomy)
		anat_irq_exit(irq);
	if (!c)
		return 0;
	if (ret & 2 /* IRQ_WAKE_THREAD */)
		c->thread_irq_ns = c->irq_ns;
	c->irq_ns = 0;
	return 0;
}

/* ---- anatomy: hard and soft interrupts on a waiting CPU ---------------- */

/* The hardirq pair is for timer only: chain's programs above call the same
 * functions. */

/* TP_PROTO(int irq, struct irqaction *action) */
SEC("tp_btf/irq_handler_entry")
int BPF_PROG(anat_irq_entry_btf, int irq, struct irqaction *action)
{
	LATMON_GATE();
	anat_irq_entry(irq);
	return 0;
}

/* TP_PROTO(int irq, struct irqaction *action, int ret) */
SEC("tp_btf/irq_handler_exit")
int BPF_PROG(anat_irq_exit_btf, int irq, struct irqaction *action, int ret)
{
	LATMON_GATE();
	anat_irq_exit(irq);
	return 0;
}

/* TP_PROTO(unsigned int vec_nr) */
SEC("tp_btf/softirq_entry")
int BPF_PROG(anat_softirq_entry_btf, unsigned int vec_nr)
{
	LATMON_GATE();
	anat_softirq_entry(vec_nr);
	return 0;
}

SEC("tp_btf/softirq_exit")
int BPF_PROG(anat_softirq_exit_btf, unsigned int vec_nr)
{
	LATMON_GATE();
	anat_softirq_exit(vec_nr);
	return 0;
}

/* ---- chain: the response function returns ----------------------------- */

/* Attached as a uretprobe on the response function (for the chain's pid,
 * or every process: the slot lookup finds only the followed thread). */
SEC("uretprobe")
int chain_response(struct pt_regs *ctx)
{
	LATMON_GATE();
	struct wake_stamp *st;
	__u64 now;

	st = timer_stamp_get(bpf_get_current_task_btf());
	if (!st || !st->start_ns)
		return 0;
	/* Running user code with the wakeup still in flight: it ran without
	 * a traced switch-in (see timer_switch_btf), from the wakeup on. */
	if (st->running == WAITING)
		task_ran(ctx, NULL, st, st->wake_ns);
	if (st->running != RAN)
		return 0;
	now = bpf_ktime_get_ns();
	/* Stages all or nothing, as in task_ran(): to-response = event ->
	 * wakeup + wakeup -> running + response, event by event. */
	if (now < st->run_ns) {
		count_drop(LATMON_TS_CHAIN_RESPONSE);
	} else {
		record(LATMON_TS_CHAIN_RESPONSE, now - st->run_ns);
		record_end(ctx, LATMON_TS_CHAIN_TO_RESPONSE, now - st->start_ns, NULL, NULL);
	}
	st->running = RESPONDED;
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
