// SPDX-License-Identifier: (GPL-2.0-only OR MIT)
/*
 * irq and softirq: how long interrupt work runs, and - where handlers run
 * in threads, as on PREEMPT_RT - how long a hard interrupt waits for its
 * thread.
 *
 *  - handler, per IRQ number: irq_handler_entry -> irq_handler_exit of one
 *    action (shared lines: each action separately, under the line's
 *    number). Hard interrupt handlers do not nest on a CPU, so the entry
 *    stamp is per CPU.
 *  - thread, per IRQ number: irq_handler_entry of an action that has an
 *    IRQ thread (action->thread) -> that thread running (sched_switch),
 *    and its two stages: hardirq entry -> the thread's sched_waking
 *    (THREAD_HARDIRQ), sched_waking -> running (THREAD_WAKEUP).
 *    The primary handler wakes the thread right after irq_handler_exit on
 *    the same CPU (__irq_wake_thread), so sched_waking of exactly that task
 *    on this CPU ties the wakeup to the interrupt; the entry time then rides
 *    in the thread's task slot to its switch-in (task_slot.bpf.h: task
 *    storage, or a tid hash on PREEMPT_RT kernels where creating task
 *    storage in sched_waking is unsafe, CVE-2024-58070). Only with tp_btf.
 *  - softirq, per vector: softirq_entry -> softirq_exit. Softirqs do not
 *    nest on a CPU (on PREEMPT_RT they run in task context under a per-CPU
 *    lock, so the time can include preemption by higher-priority tasks).
 *
 * Maps: handler and thread histograms in a per-CPU hash keyed by
 * (irq, kind) - IRQ numbers are sparse - created on first use from a zero
 * template; softirqs in a per-CPU array indexed by vector.
 *
 * threshold_ns: an event above it counts in its histogram's `alerts`; a
 * handler, a threaded path end to end (not its stages) and a softirq also
 * become alert records (alerts.bpf.h). Record ids: a softirq's vector, or
 * the id an (irq, kind) pair gets on its first alert (irq_alert_id).
 * Who: the task current at the end - the one a handler or softirq
 * interrupted (or ksoftirqd) - and for the threaded path the IRQ thread.
 *
 * Kernels without BTF: classic tracepoints irq/irq_handler_entry, _exit
 * (`irq`) and irq/softirq_entry, _exit (`vec`), at the offsets and sizes
 * user space took from their tracefs format files. No threaded path there
 * (it needs task slots, hence BTF).
 */
/* LATMON_NO_BTF_VARIANT: build.rs also builds this file as irq_nobtf
 * (-DLATMON_NO_BTF, nobtf.h instead of vmlinux.h, no CO-RE relocation):
 * only the classic tracepoint programs. */
#ifdef LATMON_NO_BTF
#include "nobtf.h"
#else
#include "vmlinux.h"
#endif
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "latmon.h"
#include "gate.bpf.h"
#include "maps.bpf.h"
#include "tpfield.bpf.h"
#ifndef LATMON_NO_BTF
#include <bpf/bpf_core_read.h>
#include "core_fixes.bpf.h"
#endif
/* Before the shared headers, which read cfg.common. */
const volatile struct latmon_irq_config cfg = {};
#define LATMON_ALERT_IDS (LATMON_SOFTIRQ_VECS + LATMON_IRQ_ALERT_SLOTS)
#include "alerts.bpf.h"

/* Histogram entries that could not be created (hash full). */
__u64 irq_lost;
/* Alert ids handed out to (irq, kind) pairs so far. A pair that found
 * none left sends no records: user space counts all its alerts as
 * records dropped. */
__u32 irq_alert_next;
/* Thread stamps waiting for their thread to run; lets sched_switch skip
 * the storage lookup when nothing is in flight. */
__s64 irq_thread_pending;

struct irq_cpu {
	__u64 entry_ns;	       /* handler running since (0: none) */
	__u64 thread_entry_ns; /* entry of the last action that has a thread */
	__u64 thread;	       /* that action's thread (task_struct address) */
	__u32 irq;
	__u32 thread_irq;
	__u64 soft_ns[LATMON_SOFTIRQ_VECS];
};

struct thread_stamp {
	__u64 entry_ns; /* hardirq entry (0: none in flight) */
	__u64 wake_ns;	/* sched_waking of the thread */
	__u32 irq;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct irq_cpu);
} irq_cpu SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, LATMON_IRQ_SLOTS);
	__type(key, struct latmon_irq_key);
	__type(value, struct latmon_hist);
} irq_hist SEC(".maps");

/* All zeros: the initial value of a new irq_hist entry (too big for the
 * BPF stack). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct latmon_hist);
} irq_zero SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LATMON_SOFTIRQ_VECS);
	__type(key, __u32);
	__type(value, struct latmon_hist);
} softirq_hist SEC(".maps");

/* (irq, kind) -> its alert id (see latmon.h). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LATMON_IRQ_ALERT_SLOTS);
	__type(key, struct latmon_irq_key);
	__type(value, __u32);
} irq_alert_id SEC(".maps");

#ifndef LATMON_NO_BTF
#include "task_slot.bpf.h"
/* Only IRQ threads get one. */
LATMON_TASK_SLOT(irq_thread_stamp, struct thread_stamp, LATMON_KTHREAD_SLOTS)
#endif

static __always_inline struct irq_cpu *cpu_state(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&irq_cpu, &zero);
}

/* Records delta; true when it is above the threshold. */
static __always_inline bool record_into(struct latmon_hist *h, __s64 delta)
{
	if (delta < 0) {
		h->drops++;
		return false;
	}
	latmon_hist_record(h, delta);
	if (cfg.threshold_ns && delta > cfg.threshold_ns) {
		h->alerts++;
		return true;
	}
	return false;
}

/* The alert record of an (irq, kind) pair, under its alert id (handed out
 * here on the pair's first alert). */
static __always_inline void irq_alert(void *ctx, struct latmon_irq_key *key, __u64 delta,
				      const struct latmon_alert_who *who)
{
	__u32 *idp = bpf_map_lookup_elem(&irq_alert_id, key);
	__u32 id, n;

	if (idp) {
		id = *idp;
	} else {
		n = __sync_fetch_and_add(&irq_alert_next, 1);
		if (n >= LATMON_IRQ_ALERT_SLOTS)
			return;
		id = LATMON_SOFTIRQ_VECS + n;
		if (bpf_map_update_elem(&irq_alert_id, key, &id, BPF_NOEXIST)) {
			/* Another CPU gave the pair its id first: ours stays unused. */
			idp = bpf_map_lookup_elem(&irq_alert_id, key);
			if (!idp)
				return;
			id = *idp;
		}
	}
	latmon_alert(ctx, id, delta, bpf_ktime_get_ns(), who);
}

/* `who`: NULL for the current task. Only a handler and a threaded path end
 * to end alert with records; the path's stages only count. */
static __always_inline void record_irq(void *ctx, __u32 irq, __u32 kind, __s64 delta,
				       const struct latmon_alert_who *who)
{
	struct latmon_irq_key key = {.irq = irq, .kind = kind};
	struct latmon_hist *h = bpf_map_lookup_elem(&irq_hist, &key);

	if (!h) {
		__u32 zero = 0;
		struct latmon_hist *z = bpf_map_lookup_elem(&irq_zero, &zero);

		if (!z)
			return;
		/* -EEXIST when another CPU created it first: fine. */
		bpf_map_update_elem(&irq_hist, &key, z, BPF_NOEXIST);
		h = bpf_map_lookup_elem(&irq_hist, &key);
		if (!h) {
			__sync_fetch_and_add(&irq_lost, 1);
			return;
		}
	}
	if (record_into(h, delta) && (kind == LATMON_IRQ_KIND_HANDLER || kind == LATMON_IRQ_KIND_THREAD))
		irq_alert(ctx, &key, delta, who);
}

/* ---- hard interrupt handlers ------------------------------------------- */

/* thread: the action's IRQ thread (task_struct address), 0 for none. */
static __always_inline void handler_entry(int irq, __u64 thread)
{
	struct irq_cpu *c = cpu_state();
	__u64 now = bpf_ktime_get_ns();

	if (!c)
		return;
	c->entry_ns = now;
	c->irq = irq;
	if (thread) {
		c->thread_entry_ns = now;
		c->thread = thread;
		c->thread_irq = irq;
	}
}

#define IRQ_WAKE_THREAD_BIT 2 /* enum irqreturn: IRQ_WAKE_THREAD */

static __always_inline void handler_exit(void *ctx, int irq, int ret)
{
	struct irq_cpu *c = cpu_state();

	if (!c)
		return;
	/* No thread wakeup follows unless the primary handler asked for it. */
	if (!(ret & IRQ_WAKE_THREAD_BIT))
		c->thread = 0;
	if (!c->entry_ns || c->irq != irq)
		return;
	record_irq(ctx, irq, LATMON_IRQ_KIND_HANDLER, bpf_ktime_get_ns() - c->entry_ns, NULL);
	c->entry_ns = 0;
}

#ifndef LATMON_NO_BTF
/* TP_PROTO(int irq, struct irqaction *action) */
SEC("tp_btf/irq_handler_entry")
int BPF_PROG(irq_entry_btf, int irq, struct irqaction *action)
{
	LATMON_GATE();
	handler_entry(irq, (__u64)action->thread);
	return 0;
}

/* TP_PROTO(int irq, struct irqaction *action, int ret) */
SEC("tp_btf/irq_handler_exit")
int BPF_PROG(irq_exit_btf, int irq, struct irqaction *action, int ret)
{
	LATMON_GATE();
	handler_exit(ctx, irq, ret);
	return 0;
}

SEC("raw_tp/irq_handler_entry")
int BPF_PROG(irq_entry_raw, int irq, struct irqaction *action)
{
	LATMON_GATE();
	/* No thread path on raw_tp: it needs task storage. */
	handler_entry(irq, 0);
	return 0;
}

SEC("raw_tp/irq_handler_exit")
int BPF_PROG(irq_exit_raw, int irq, struct irqaction *action, int ret)
{
	LATMON_GATE();
	handler_exit(ctx, irq, ret);
	return 0;
}

/* ---- threaded path: hardirq entry -> IRQ thread running (tp_btf) -------- */

/* The IRQ thread t runs at `now`: the end-to-end time and its two
 * stages, all or nothing, so that per event hardirq + wakeup = thread
 * exactly. */
static __always_inline void thread_ran(void *ctx, struct thread_stamp *st, __u64 now, struct task_struct *t)
{
	__s64 stage = st->wake_ns - st->entry_ns, run = now - st->wake_ns;
	struct latmon_alert_who who = {};

	if (cfg.threshold_ns) {
		who.pid = t->tgid;
		who.tid = t->pid;
		who.comm = &t->comm;
	}
	if (stage < 0 || run < 0) {
		record_irq(ctx, st->irq, LATMON_IRQ_KIND_THREAD, -1, NULL); /* a drop */
	} else {
		record_irq(ctx, st->irq, LATMON_IRQ_KIND_THREAD, stage + run, &who);
		record_irq(ctx, st->irq, LATMON_IRQ_KIND_THREAD_HARDIRQ, stage, NULL);
		record_irq(ctx, st->irq, LATMON_IRQ_KIND_THREAD_WAKEUP, run, NULL);
	}
	st->entry_ns = 0;
	__sync_fetch_and_add(&irq_thread_pending, -1);
}

/* TP_PROTO(struct task_struct *p) */
SEC("tp_btf/sched_waking")
int BPF_PROG(irq_thread_waking_btf, struct task_struct *p)
{
	LATMON_GATE();
	struct irq_cpu *c = cpu_state();
	struct thread_stamp *st;

	if (!c || !c->thread || c->thread != (__u64)p)
		return 0;
	c->thread = 0;
	st = irq_thread_stamp_create(p);
	if (!st) {
		record_irq(ctx, c->thread_irq, LATMON_IRQ_KIND_THREAD, -1, NULL); /* a drop */
		return 0;
	}
	/* Still in flight from the previous interrupt, yet the thread has
	 * gone to sleep again since: it ran without a traced switch-in (see
	 * irq_thread_switch_btf), from that wakeup on. */
	if (st->entry_ns)
		thread_ran(ctx, st, st->wake_ns, p);
	__sync_fetch_and_add(&irq_thread_pending, 1);
	st->wake_ns = bpf_ktime_get_ns();
	st->entry_ns = c->thread_entry_ns;
	st->irq = c->thread_irq;
	/* Woken before it finished going to sleep (interrupted on its way
	 * there): it is on a CPU now and no switch will follow. */
	if (latmon_task_on_cpu_btf(p))
		thread_ran(ctx, st, st->wake_ns, p);
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(irq_thread_switch_btf, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	LATMON_GATE();
	struct thread_stamp *st;

	if (irq_thread_pending <= 0)
		return 0;
	st = irq_thread_stamp_get(next);
	if (st && st->entry_ns)
		thread_ran(ctx, st, bpf_ktime_get_ns(), next);
	/* prev leaves the CPU with a wakeup in flight: it was woken while
	 * still on its way to sleep and picked again without a switch
	 * (prev == next is not traced); it ran from the wakeup on. */
	st = irq_thread_stamp_get(prev);
	if (st && st->entry_ns)
		thread_ran(ctx, st, st->wake_ns, prev);
	return 0;
}

/* TP_PROTO(struct task_struct *p): tid-hash slots only. An exiting IRQ
 * thread's entry goes while its thread id is its own, its wakeup in
 * flight recorded first, as its final switch would (see above). */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(irq_thread_exit_btf, struct task_struct *p)
{
	LATMON_GATE();
	struct thread_stamp *st = irq_thread_stamp_get(p);

	if (st && st->entry_ns)
		thread_ran(ctx, st, st->wake_ns, p);
	irq_thread_stamp_delete(p);
	return 0;
}

#endif /* !LATMON_NO_BTF */

/* ---- softirqs ------------------------------------------------------------ */

/* barrier_var: clang otherwise bounds-checks a copy of vec and indexes
 * with the original register, which the verifier sees as unbounded. */
static __always_inline void soft_entry(unsigned int vec)
{
	struct irq_cpu *c = cpu_state();

	barrier_var(vec);
	if (c && vec < LATMON_SOFTIRQ_VECS)
		c->soft_ns[vec] = bpf_ktime_get_ns();
}

static __always_inline void soft_exit(void *ctx, unsigned int vec)
{
	struct irq_cpu *c = cpu_state();
	struct latmon_hist *h;
	__u64 start, now;
	__s64 delta;

	barrier_var(vec);
	if (!c || vec >= LATMON_SOFTIRQ_VECS)
		return;
	start = c->soft_ns[vec];
	if (!start)
		return;
	c->soft_ns[vec] = 0;
	h = latmon_hist_get(&softirq_hist, vec);
	if (!h)
		return;
	now = bpf_ktime_get_ns();
	delta = now - start;
	if (record_into(h, delta))
		latmon_alert(ctx, vec, delta, now, NULL);
}

#ifndef LATMON_NO_BTF
/* TP_PROTO(unsigned int vec_nr) for softirq_entry and softirq_exit */
SEC("tp_btf/softirq_entry")
int BPF_PROG(softirq_entry_btf, unsigned int vec)
{
	LATMON_GATE();
	soft_entry(vec);
	return 0;
}

SEC("tp_btf/softirq_exit")
int BPF_PROG(softirq_exit_btf, unsigned int vec)
{
	LATMON_GATE();
	soft_exit(ctx, vec);
	return 0;
}

SEC("raw_tp/softirq_entry")
int BPF_PROG(softirq_entry_raw, unsigned int vec)
{
	LATMON_GATE();
	soft_entry(vec);
	return 0;
}

SEC("raw_tp/softirq_exit")
int BPF_PROG(softirq_exit_raw, unsigned int vec)
{
	LATMON_GATE();
	soft_exit(ctx, vec);
	return 0;
}

#endif /* !LATMON_NO_BTF */

#ifdef LATMON_NO_BTF
/* ---- tracepoint: record layout from tracefs format files ---------------- */

const volatile struct latmon_tp_field entry_irq = {};
const volatile struct latmon_tp_field exit_irq = {};
const volatile struct latmon_tp_field soft_entry_vec = {};
const volatile struct latmon_tp_field soft_exit_vec = {};

SEC("tracepoint/irq/irq_handler_entry")
int irq_entry_tp(void *ctx)
{
	LATMON_GATE();
	handler_entry(latmon_tp_read(ctx, &entry_irq), 0);
	return 0;
}

SEC("tracepoint/irq/irq_handler_exit")
int irq_exit_tp(void *ctx)
{
	LATMON_GATE();
	/* ret only matters to the threaded path, which is not here. */
	handler_exit(ctx, latmon_tp_read(ctx, &exit_irq), 0);
	return 0;
}

SEC("tracepoint/irq/softirq_entry")
int softirq_entry_tp(void *ctx)
{
	LATMON_GATE();
	soft_entry(latmon_tp_read(ctx, &soft_entry_vec));
	return 0;
}

SEC("tracepoint/irq/softirq_exit")
int softirq_exit_tp(void *ctx)
{
	LATMON_GATE();
	soft_exit(ctx, latmon_tp_read(ctx, &soft_exit_vec));
	return 0;
}
#endif /* LATMON_NO_BTF */

char LICENSE[] SEC("license") = "Dual MIT/GPL";
