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

#endif /* __CORE_FIXES_BPF_H */
