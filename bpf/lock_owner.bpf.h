/* SPDX-License-Identifier: (GPL-2.0-only OR MIT) */
/*
 * lock (bpf/lock.bpf.c): the owner of a watched thread's wait, followed
 * while the waiter is blocked - found (the PI word, glibc's mutex owner,
 * checked alive in the waiter's thread group), its own time on a CPU, and
 * the tasks that ran on its CPU while it was runnable (its preempters),
 * those of a priority between the owner's and the waiter's being the
 * inversion's.
 */
#ifndef __LOCK_OWNER_BPF_H
#define __LOCK_OWNER_BPF_H

#include "lock_state.bpf.h"

/* prio_of for a task pointer that may not be trusted (the group walk's). */
static __always_inline __s32 prio_of_core(struct task_struct *p, __u32 policy)
{
	if (policy == SCHED_FIFO || policy == SCHED_RR)
		return (__s32)BPF_CORE_READ(p, rt_priority);
	return BPF_CORE_READ(p, static_prio) - 120;
}

/* Threads of the waiter's group looked at for its owner where
 * bpf_task_from_pid is not (kernels before 6.2, the boards' 6.1): a
 * controller process has tens of threads; an owner beyond is not
 * followed (counted in owners_refused, named by its wakeup instead). */
#define LOCK_GROUP_WALK 256

/* Thread `tid` of task w's thread group, NULL: not found within
 * LOCK_GROUP_WALK. signal->thread_head links the group's threads through
 * thread_node (RCU; a BPF program runs inside an RCU read section), the
 * same list on 6.1 and 6.18. The pointer is read, not trusted: use
 * BPF_CORE_READ on it. */
static __always_inline struct task_struct *group_thread(struct task_struct *w, __u32 tid)
{
	struct signal_struct *sig = BPF_CORE_READ(w, signal);
	struct list_head *head, *pos;

	if (!sig)
		return NULL;
	head = &sig->thread_head;
	pos = BPF_CORE_READ(sig, thread_head.next);
	for (int i = 0; i < LOCK_GROUP_WALK && pos && pos != head; i++) {
		struct task_struct *p =
			(struct task_struct *)((__u64)pos - bpf_core_field_offset(struct task_struct, thread_node));

		if ((__u32)BPF_CORE_READ(p, pid) == tid)
			return p;
		pos = BPF_CORE_READ(p, thread_node.next);
	}
	return NULL;
}

/* `ns` of task p on a preempted owner's CPU. */
static __always_inline void charge(struct lock_owner *o, struct task_struct *p, __u64 ns)
{
	/* Kernel priorities: lower is more urgent. */
	bool between = p->prio > o->waiter_prio_eff && p->prio < o->prio_eff;
	__u32 pid = p->pid;

	if (LATMON_MUTATED(1)) {
		/* The preempter's time charged to the owner, the wrong
		 * attribution the live test must catch. */
		o->run_ns += ns;
		return;
	}
	for (int i = 0; i < LATMON_LOCK_PREEMPTERS; i++) {
		struct latmon_lock_task *e = &o->pre[i];

		if (e->ns && e->pid != pid)
			continue;
		if (!e->ns) {
			e->pid = pid;
			e->tgid = p->tgid;
			e->policy = p->policy;
			e->prio = prio_of(p, e->policy);
			bpf_probe_read_kernel_str(e->comm, sizeof(e->comm), p->comm);
		}
		e->ns += ns;
		if (between)
			e->inv_ns += ns;
		return;
	}
	o->rest_ns += ns;
	if (between)
		o->rest_inv_ns += ns;
}

/* The owner leaves the CPU `cpu`; still runnable, it waits behind the
 * next task there. */
static __always_inline void owner_out(struct lock_owner *o, struct task_struct *prev, __u32 cpu, __u64 now)
{
	struct lock_cpu *c;
	__u32 zero = 0;

	if (o->running_since) {
		o->run_ns += now - o->running_since;
		o->running_since = 0;
	}
	o->prio_eff = prev->prio;
	if (latmon_task_state(prev) != TASK_RUNNING)
		return;
	c = bpf_map_lookup_elem(&lock_cpu, &zero);
	if (c && !c->owner_tid) {
		c->owner_tid = prev->pid;
		c->since = now;
		o->cpu_held = cpu + 1;
	}
}

/* The owner (thread tid) stops being preempted: its CPU's claim ends. */
static __always_inline void owner_unhold(struct lock_owner *o, __u32 tid)
{
	struct lock_cpu *c;
	__u32 zero = 0;

	if (!o->cpu_held)
		return;
	c = bpf_map_lookup_percpu_elem(&lock_cpu, &zero, o->cpu_held - 1);
	if (c && c->owner_tid == tid)
		c->owner_tid = 0;
	o->cpu_held = 0;
}

/* Start following owner p (thread tid of the waiter's group; a trusted
 * or a read pointer: BPF_CORE_READ only) of the waiter w, entry t. */
static __always_inline void owner_follow(struct lock_thread *t, struct task_struct *w, struct task_struct *p, __u32 tid,
					 __u64 now)
{
	struct lock_owner *o, *z;
	struct lock_cpu *c;
	__u32 zero = 0;

	z = bpf_map_lookup_elem(&lock_zero, &zero);
	if (!z || bpf_map_update_elem(&lock_owners, &tid, z, BPF_NOEXIST)) {
		owners_refused++; /* followed for another waiter, or no room */
		return;
	}
	o = bpf_map_lookup_elem(&lock_owners, &tid);
	if (!o)
		return;
	o->tgid = BPF_CORE_READ(p, tgid);
	o->policy = BPF_CORE_READ(p, policy);
	o->prio = prio_of_core(p, o->policy);
	o->prio_eff = BPF_CORE_READ(p, prio);
	o->waiter_prio_eff = w->prio;
	bpf_probe_read_kernel_str(o->comm, sizeof(o->comm), &p->comm);
	if (BPF_CORE_READ(p, on_rq) &&
	    (bpf_core_field_exists(p->on_cpu) ? BPF_CORE_READ(p, on_cpu) : (__u64)p == (__u64)bpf_get_current_task())) {
		o->running_since = now;
	} else if (latmon_task_state(p) == TASK_RUNNING) {
		__u32 cpu = latmon_task_cpu_btf(p);

		c = bpf_map_lookup_percpu_elem(&lock_cpu, &zero, cpu);
		if (c && !c->owner_tid) {
			c->owner_tid = tid;
			c->since = now;
			o->cpu_held = cpu + 1;
		}
	}
	t->owner_live = 1;
	__sync_fetch_and_add(&owners_live, 1);
}

/* The waiter (task w, entry t) blocked at `now`: follow its owner, if it
 * is a thread of w's group. */
static __always_inline void owner_begin(struct lock_thread *t, struct task_struct *w, __u64 now)
{
	struct task_struct *p;
	__u32 tid = t->owner_tid;

	if (!tid)
		return;
	if (cfg.owner_walk || !bpf_ksym_exists(bpf_task_from_pid)) {
		/* Found in the group: of the waiter's process by construction. */
		p = group_thread(w, tid);
		if (!p) {
			t->owner_from = LATMON_LOCK_OWNER_NONE;
			owners_refused++;
			return;
		}
		owner_follow(t, w, p, tid, now);
		return;
	}
	p = bpf_task_from_pid(tid);
	if (!p) {
		t->owner_from = LATMON_LOCK_OWNER_NONE;
		owners_refused++;
		return;
	}
	if (p->tgid != t->tgid) {
		/* Not a thread of the waiter's process: not a mutex owner. */
		t->owner_from = LATMON_LOCK_OWNER_NONE;
		owners_refused++;
	} else {
		owner_follow(t, w, p, tid, now);
	}
	bpf_task_release(p);
}

/* The wait of t ended at `now`: its owner's account is closed. */
static __always_inline void owner_close(struct lock_thread *t, __u64 now)
{
	__u32 tid = t->owner_tid;
	struct lock_owner *o;

	if (!t->owner_live)
		return;
	o = bpf_map_lookup_elem(&lock_owners, &tid);
	if (!o || o->closed)
		return;
	if (o->running_since) {
		o->run_ns += now - o->running_since;
		o->running_since = 0;
	}
	owner_unhold(o, tid);
	o->closed = 1;
	/* Open owners gate the switch program's lookups: a closed one no
	 * longer counts, even if its waiter never returns from the call (the
	 * entry then stays, bounded by LOCK_OWNERS). */
	__sync_fetch_and_add(&owners_live, -1);
}

/* The owner entry of task p, if it is a followed owner still open. */
static __always_inline struct lock_owner *owner_of(struct task_struct *p)
{
	__u32 tid = p->pid;
	struct lock_owner *o = bpf_map_lookup_elem(&lock_owners, &tid);

	return o && !o->closed && o->tgid == (__u32)p->tgid ? o : NULL;
}

#endif /* __LOCK_OWNER_BPF_H */
