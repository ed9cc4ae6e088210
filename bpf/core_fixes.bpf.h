/* SPDX-License-Identifier: (GPL-2.0-only OR MIT) */
/* CO-RE shims for kernel differences; each cites the change it handles. */
#ifndef __CORE_FIXES_BPF_H
#define __CORE_FIXES_BPF_H

#include <bpf/bpf_core_read.h>

/* Kernel 5.14 (commit 2f064a59a11f, "sched: Change task_struct::state")
 * renamed task_struct::state to __state. */
struct task_struct___pre_5_14 {
	long state;
} __attribute__((preserve_access_index));

static __always_inline __s64 latmon_task_state(struct task_struct *t)
{
	if (bpf_core_field_exists(t->__state))
		return BPF_CORE_READ(t, __state);
	return BPF_CORE_READ((struct task_struct___pre_5_14 *)t, state);
}

/* Is a task that is being woken on a CPU right now (running, not merely
 * queued)? A wakeup of a task that has not finished going to sleep - it is
 * still on its CPU, possibly another one than the waker's - leads to no
 * sched_switch: it just keeps running. task_struct::on_cpu exists only on
 * SMP kernels (CONFIG_SMP); on UP the running task is the current one.
 * on_rq: TASK_ON_RQ_QUEUED (1) or _MIGRATING (2); 0 once dequeued, when a
 * switch-in will follow. */
static __always_inline bool latmon_task_on_cpu(struct task_struct *p)
{
	if (!BPF_CORE_READ(p, on_rq))
		return false;
	if (bpf_core_field_exists(p->on_cpu))
		return BPF_CORE_READ(p, on_cpu);
	return p == (struct task_struct *)bpf_get_current_task();
}

/* The same through a trusted pointer (tp_btf argument): plain loads. */
static __always_inline bool latmon_task_on_cpu_btf(struct task_struct *p)
{
	if (!p->on_rq)
		return false;
	if (bpf_core_field_exists(p->on_cpu))
		return p->on_cpu;
	return p == bpf_get_current_task_btf();
}

/* task_cpu(): thread_info::cpu since kernel 5.16 moved it back there
 * (THREAD_INFO_IN_TASK kernels), task_struct::cpu before. */
struct task_struct___pre_5_16 {
	unsigned int cpu;
} __attribute__((preserve_access_index));

static __always_inline __u32 latmon_task_cpu_btf(struct task_struct *p)
{
	if (bpf_core_field_exists(p->thread_info.cpu))
		return BPF_CORE_READ(p, thread_info.cpu);
	return BPF_CORE_READ((struct task_struct___pre_5_16 *)p, cpu);
}

#endif /* __CORE_FIXES_BPF_H */
