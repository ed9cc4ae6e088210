/* SPDX-License-Identifier: (GPL-2.0-only OR MIT) */
/*
 * Outlier anatomy, shared by timer.bpf.c (timer, chain) and runq.bpf.c
 * (its tp_btf and raw_tp programs, and its no-BTF build): while a watched
 * task waits for its CPU, that CPU accounts what held it, so an alert
 * record can say why it was late.
 *
 * One slot per CPU (a per-CPU array): the family claims the slot of the
 * CPU the task is woken on (cpu_woken) at the wakeup, and takes it back
 * when the task runs. While a slot is held, every context change on its
 * CPU charges the time since the last change to what ran in between:
 *   irq_handler_entry   -> the interrupted context (task or softirq)
 *   irq_handler_exit    -> that IRQ's handler, per IRQ number
 *   softirq_entry       -> the interrupted task
 *   softirq_exit        -> that vector
 *   sched_switch        -> prev, per task (the waiter itself and the idle
 *                          task are not causes: their time is `other`)
 * The task running when the wakeup came is charged like any other. What
 * no event covers (the wakeup path, the timer interrupt itself, the
 * scheduler) stays unaccounted: user space reports it as `other`, the
 * latency minus the parts, so the parts sum to the latency exactly.
 *
 * Gate: the irq and softirq programs, and the switch's accounting, test
 * the global `anat_held` (slots held, all CPUs) first: with no watched
 * task waiting their cost is one load and a branch.
 *
 * A waiter that runs on another CPU than it was woken on (cpu_ran !=
 * cpu_woken) takes what its slot accounted until then; the slot's CPU may
 * be writing it at that moment (a torn part only moves time between a
 * part and `other`; user space clamps the parts to the latency).
 *
 * Who a task is: the waiter's key is its task_struct address where BTF
 * gives task pointers (tp_btf, raw_tp), its thread id in the no-BTF build
 * (tracepoint records carry pids, not tasks). raw_tp's task arguments
 * are untrusted: read through CO-RE (anat_switch_raw). The no-BTF build
 * takes what sched_switch's record says of prev (pid, comm, priority) and
 * the current task's ids (bpf_get_current_*): see its section below.
 *
 * The including object declares its family's `cfg` (bpf/latmon.h) before
 * including: cfg.common.anatomy (constant at load) says whether anything
 * is accounted.
 */
#ifndef __ANATOMY_BPF_H
#define __ANATOMY_BPF_H

#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "latmon.h"
#ifdef LATMON_NO_BTF
#include "tpfield.bpf.h"
#endif

#define LATMON_SCHED_FIFO 1 /* include/uapi/linux/sched.h */
#define LATMON_SCHED_RR 2

struct anat_slot {
	__u64 waiter;	/* key of the waiting task (see above), 0: free */
	__u64 since_ns; /* claimed at */
	__u64 last_ns;	/* time charged up to */
	__s32 in_irq;	/* hardirq handler running (IRQ number), -1: none */
	__s32 in_vec;	/* softirq vector running, -1: none */
	/* The waiter's own time on this CPU (cycle: a running loop holds
	 * its CPU's slot; other families' waiters do not run). */
	__u64 self_ns;
	struct latmon_anatomy acc;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct anat_slot);
} anat_cpu SEC(".maps");

/* Slots held, all CPUs: the gate. */
__s64 anat_held;

/* An anatomy without accounts, for a wait no slot accounted (a task that
 * ran untraced: only the timer's own delay is known). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct latmon_anatomy);
} anat_scratch SEC(".maps");

static __always_inline struct latmon_anatomy *anat_blank(void)
{
	__u32 zero = 0;
	struct latmon_anatomy *an = bpf_map_lookup_elem(&anat_scratch, &zero);

	if (!an)
		return NULL;
	__builtin_memset(an, 0, sizeof(*an));
	an->cpu_woken = bpf_get_smp_processor_id();
	an->cpu_ran = an->cpu_woken;
	return an;
}

static __always_inline struct anat_slot *anat_local(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&anat_cpu, &zero);
}

/* Any CPU's slot. Guarded by the constant cfg.common.anatomy: user space
 * leaves it 0 on kernels without bpf_map_lookup_percpu_elem (5.19), and the
 * verifier then never sees the call. */
static __always_inline struct anat_slot *anat_slot_of(__u32 cpu)
{
	__u32 zero = 0;

	if (!cfg.common.anatomy)
		return NULL;
	return bpf_map_lookup_percpu_elem(&anat_cpu, &zero, cpu);
}

/* The time since the last change, moving the mark to now. */
static __always_inline __u64 anat_elapsed(struct anat_slot *s, __u64 now)
{
	__u64 d = now > s->last_ns ? now - s->last_ns : 0;

	s->last_ns = now;
	return d;
}

/* Charge the time since the last change to task `pid` (waiter key
 * `key`): its entry - a new one has tgid 0, the caller says who it is -
 * or NULL: no time, the idle task or the waiter itself (their time is
 * `other`), or folded into the rest.
 *
 * With every entry taken, a newcomer whose run is longer than the
 * smallest entry takes that entry's place (its time goes to the rest):
 * the record names the largest holders, not the first ANAT_TASKS seen.
 * Before, a 7 ms SCHED_OTHER competitor that ran after four short ones
 * (a kworker, latmon's own threads) went wholly into the rest and the
 * wait named none of its cause. A named task's time is never more than
 * it ran in the wait (an evicted task seen again starts from zero). */
static __always_inline struct latmon_anat_task *anat_charge_pid(struct anat_slot *s, __u64 key, __u32 pid, __u64 now)
{
	struct latmon_anat_task *small = NULL;
	__u64 d = anat_elapsed(s, now);

	if (key == s->waiter) {
		s->self_ns += d;
		return NULL;
	}
	if (!d || !pid)
		return NULL;
	for (int i = 0; i < LATMON_ANAT_TASKS; i++) {
		struct latmon_anat_task *e = &s->acc.task[i];

		if (e->ns && e->pid == pid) {
			e->ns += d;
			return e;
		}
		if (!e->ns) {
			e->ns = d;
			e->pid = pid;
			return e;
		}
		if (!small || e->ns < small->ns)
			small = e;
	}
	if (small && d > small->ns) {
		s->acc.task_rest_ns += small->ns;
		__builtin_memset(small, 0, sizeof(*small));
		small->ns = d;
		small->pid = pid;
		return small;
	}
	s->acc.task_rest_ns += d;
	return NULL;
}

#ifndef LATMON_NO_BTF
/* t: a trusted task pointer (tp_btf, bpf_get_current_task_btf). */
static __always_inline void anat_charge_task(struct anat_slot *s, struct task_struct *t, __u64 now)
{
	struct latmon_anat_task *e = anat_charge_pid(s, (__u64)t, t->pid, now);

	if (!e || e->tgid)
		return;
	e->tgid = t->tgid;
	e->policy = t->policy;
	e->prio = (e->policy == LATMON_SCHED_FIFO || e->policy == LATMON_SCHED_RR) ? (__s32)t->rt_priority
										   : t->static_prio - 120;
	bpf_probe_read_kernel(e->comm, sizeof(e->comm), t->comm);
}

/* The same for an untrusted task pointer (raw_tp arguments): CO-RE reads. */
static __always_inline void anat_charge_task_raw(struct anat_slot *s, struct task_struct *t, __u64 now)
{
	struct latmon_anat_task *e = anat_charge_pid(s, (__u64)t, BPF_CORE_READ(t, pid), now);

	if (!e || e->tgid)
		return;
	e->tgid = BPF_CORE_READ(t, tgid);
	e->policy = BPF_CORE_READ(t, policy);
	e->prio = (e->policy == LATMON_SCHED_FIFO || e->policy == LATMON_SCHED_RR)
			  ? (__s32)BPF_CORE_READ(t, rt_priority)
			  : BPF_CORE_READ(t, static_prio) - 120;
	bpf_probe_read_kernel(e->comm, sizeof(e->comm), &t->comm);
}
#endif

static __always_inline void anat_charge_irq(struct anat_slot *s, __u32 irq, __u64 now)
{
	__u64 d = anat_elapsed(s, now);

	if (!d)
		return;
	for (int i = 0; i < LATMON_ANAT_IRQS; i++) {
		struct latmon_anat_irq *e = &s->acc.irq[i];

		if (e->ns && e->irq == irq) {
			e->ns += d;
			return;
		}
		if (!e->ns) {
			e->ns = d;
			e->irq = irq;
			return;
		}
	}
	s->acc.irq_rest_ns += d;
}

static __always_inline void anat_charge_softirq(struct anat_slot *s, __u32 vec, __u64 now)
{
	__u64 d = anat_elapsed(s, now);

	if (vec < LATMON_SOFTIRQ_VECS)
		s->acc.softirq_ns[vec] += d;
}

#ifndef LATMON_NO_BTF
static __always_inline void anat_charge_current_task(struct anat_slot *s, __u64 now)
{
	anat_charge_task(s, bpf_get_current_task_btf(), now);
}
#else
/* No BTF: the current task's ids and comm; its policy and priority come
 * with its sched_switch (anat_switch_tp), if it switches out in the wait. */
static __always_inline void anat_charge_current_task(struct anat_slot *s, __u64 now)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct latmon_anat_task *e = anat_charge_pid(s, (__u32)id, (__u32)id, now);

	if (!e || e->tgid)
		return;
	e->tgid = id >> 32;
	e->policy = LATMON_ANAT_POLICY_UNSET;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
}
#endif

/* Charge the context running since the last change: an IRQ handler, a
 * softirq, or the current task. */
static __always_inline void anat_charge_current(struct anat_slot *s, __u64 now)
{
	if (s->in_irq >= 0)
		anat_charge_irq(s, s->in_irq, now);
	else if (s->in_vec >= 0)
		anat_charge_softirq(s, s->in_vec, now);
	else
		anat_charge_current_task(s, now);
}

/* The local slot if held (after the gate). */
static __always_inline struct anat_slot *anat_held_here(void)
{
	struct anat_slot *s;

	if (anat_held <= 0)
		return NULL;
	s = anat_local();
	return s && s->waiter ? s : NULL;
}

static __always_inline void anat_irq_entry(int irq)
{
	struct anat_slot *s = anat_held_here();

	if (!s)
		return;
	anat_charge_current(s, bpf_ktime_get_ns());
	s->in_irq = irq;
}

/* The handler's time since its entry, or since the claim when the claim
 * came from inside it (a wakeup in the handler). */
static __always_inline void anat_irq_exit(int irq)
{
	struct anat_slot *s = anat_held_here();

	if (!s)
		return;
	anat_charge_irq(s, irq, bpf_ktime_get_ns());
	s->in_irq = -1;
}

static __always_inline void anat_softirq_entry(__u32 vec)
{
	struct anat_slot *s = anat_held_here();

	if (!s)
		return;
	anat_charge_current(s, bpf_ktime_get_ns());
	s->in_vec = vec;
}

static __always_inline void anat_softirq_exit(__u32 vec)
{
	struct anat_slot *s = anat_held_here();

	if (!s)
		return;
	anat_charge_softirq(s, vec, bpf_ktime_get_ns());
	s->in_vec = -1;
}

#ifndef LATMON_NO_BTF
/* sched_switch on this CPU: prev ran until now. */
static __always_inline void anat_switch(struct task_struct *prev, __u64 now)
{
	struct anat_slot *s = anat_held_here();

	if (!s)
		return;
	anat_charge_task(s, prev, now);
	s->in_irq = -1;
	s->in_vec = -1;
}

/* The same for raw_tp, whose prev is not a trusted pointer. */
static __always_inline void anat_switch_raw(struct task_struct *prev, __u64 now)
{
	struct anat_slot *s = anat_held_here();

	if (!s)
		return;
	anat_charge_task_raw(s, prev, now);
	s->in_irq = -1;
	s->in_vec = -1;
}
#endif

/* The task of waiter key `p` is woken onto `cpu` at `now`: claim that
 * CPU's slot. Returns what the waiter keeps (cpu + 1), 0 when no anatomy
 * is accounted. */
static __always_inline __u32 anat_claim_key(__u64 p, __u32 cpu, __u64 now)
{
	struct anat_slot *s;

	if (!cfg.common.anatomy)
		return 0;
	s = anat_slot_of(cpu);
	if (!s)
		return 0;
	if (s->waiter && s->waiter != p && now - s->since_ns < LATMON_ANAT_STALE_NS)
		return 0;
	if (!s->waiter)
		__sync_fetch_and_add(&anat_held, 1);
	__builtin_memset(&s->acc, 0, sizeof(s->acc));
	s->self_ns = 0;
	s->since_ns = now;
	s->last_ns = now;
	s->in_irq = -1;
	s->in_vec = -1;
	s->acc.cpu_woken = cpu;
	s->waiter = p;
	return cpu + 1;
}

/* The waiter of key p runs (on this CPU): its slot, if it still holds
 * it. The caller sends the slot's `acc` with the alert, then releases it. */
static __always_inline struct anat_slot *anat_take_key(__u64 p, __u32 held)
{
	struct anat_slot *s;

	if (!held)
		return NULL;
	s = anat_slot_of(held - 1);
	if (!s || s->waiter != p)
		return NULL;
	s->acc.cpu_ran = bpf_get_smp_processor_id();
	return s;
}

#ifndef LATMON_NO_BTF
static __always_inline __u32 anat_claim(struct task_struct *p, __u32 cpu, __u64 now)
{
	return anat_claim_key((__u64)p, cpu, now);
}

static __always_inline struct anat_slot *anat_take(struct task_struct *p, __u32 held)
{
	return anat_take_key((__u64)p, held);
}
#endif

static __always_inline void anat_release(struct anat_slot *s)
{
	if (!s)
		return;
	s->waiter = 0;
	__sync_fetch_and_add(&anat_held, -1);
}

#ifdef LATMON_NO_BTF
/* ---- no BTF: what sched_switch's record says of prev -----------------
 *
 * At sched_switch the current task is still prev: its tgid is the current
 * one's. Its policy is not in the record, only its priority (the kernel's
 * p->prio: -1 deadline, 0..98 real-time as 99 - rt_priority, 100..139
 * fair as 120 + nice), which gives the policy's class. */
static __always_inline void anat_class_of_prio(struct latmon_anat_task *e, __s64 kprio)
{
	if (kprio < 0) {
		e->policy = 6; /* SCHED_DEADLINE */
		e->prio = 0;
	} else if (kprio < 100) {
		e->policy = LATMON_ANAT_POLICY_RT;
		e->prio = 99 - kprio;
	} else {
		e->policy = LATMON_ANAT_POLICY_FAIR;
		e->prio = kprio - 120;
	}
}

/* sched_switch on this CPU (record `ctx`): prev (thread id `prev`,
 * priority `kprio`, comm at field `comm_f`) ran until now. */
static __always_inline void anat_switch_tp(void *ctx, __u32 prev, __s64 kprio,
					   const volatile struct latmon_tp_field *comm_f, __u64 now)
{
	struct anat_slot *s = anat_held_here();
	struct latmon_anat_task *e;

	if (!s)
		return;
	e = anat_charge_pid(s, prev, prev, now);
	s->in_irq = -1;
	s->in_vec = -1;
	if (!e)
		return;
	if (!e->tgid) {
		e->tgid = bpf_get_current_pid_tgid() >> 32;
		bpf_probe_read_kernel(e->comm, sizeof(e->comm), ctx + comm_f->offset);
	} else if (e->policy != LATMON_ANAT_POLICY_UNSET) {
		return;
	}
	anat_class_of_prio(e, kprio);
}
#endif /* LATMON_NO_BTF */

#endif /* __ANATOMY_BPF_H */
