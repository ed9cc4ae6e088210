/* SPDX-License-Identifier: (GPL-2.0-only OR MIT) */
/*
 * Task filters shared by the syscall, irq and timer families. Each object
 * declares its own `const volatile` filter globals (set before load) and
 * passes them in; with no filter set the verifier removes the checks.
 *
 * pid=N matches the process N (every thread whose thread-group id is N) or,
 * when N is the id of a non-leader thread, exactly that thread: thread and
 * process ids share one number space, so the two readings never collide.
 * That lets a filter single out cyclictest's measuring thread from its main
 * thread, which shares the comm.
 */
#ifndef __FILTER_BPF_H
#define __FILTER_BPF_H

#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "latmon.h"

static __always_inline bool latmon_ids_wanted(__u32 pid, __u32 tgid, __u32 filter_pid)
{
	return !filter_pid || tgid == filter_pid || pid == filter_pid;
}

static __always_inline bool latmon_comm_equal(const char *comm, const volatile char *want)
{
	for (int i = 0; i < LATMON_COMM_LEN; i++) {
		if (comm[i] != want[i])
			return false;
		if (!comm[i])
			break;
	}
	return true;
}

/* The current task (any program type: helpers only). */
static __always_inline bool latmon_current_wanted(__u32 filter_pid, const volatile char *filter_comm)
{
	char comm[LATMON_COMM_LEN];

	if (filter_pid) {
		__u64 id = bpf_get_current_pid_tgid();

		if (!latmon_ids_wanted((__u32)id, id >> 32, filter_pid))
			return false;
	}
	if (!filter_comm[0])
		return true;
	if (bpf_get_current_comm(comm, sizeof(comm)))
		return false;
	return latmon_comm_equal(comm, filter_comm);
}

#ifndef LATMON_NO_BTF
/* Any task, read through CO-RE (raw_tp, or pointers tp_btf cannot load). */
static __always_inline bool latmon_task_wanted(struct task_struct *t, __u32 filter_pid,
					       const volatile char *filter_comm)
{
	char comm[LATMON_COMM_LEN];

	if (filter_pid && !latmon_ids_wanted(BPF_CORE_READ(t, pid), BPF_CORE_READ(t, tgid), filter_pid))
		return false;
	if (!filter_comm[0])
		return true;
	if (bpf_probe_read_kernel_str(comm, sizeof(comm), &t->comm) < 0)
		return false;
	return latmon_comm_equal(comm, filter_comm);
}

/* Any task through a trusted pointer (a tp_btf argument): plain loads the
 * verifier turns into checked memory reads - no helper calls. */
static __always_inline bool latmon_task_wanted_btf(struct task_struct *t, __u32 filter_pid,
						   const volatile char *filter_comm)
{
	if (filter_pid && !latmon_ids_wanted(t->pid, t->tgid, filter_pid))
		return false;
	if (!filter_comm[0])
		return true;
	for (int i = 0; i < LATMON_COMM_LEN; i++) {
		char c = t->comm[i];

		if (c != filter_comm[i])
			return false;
		if (!c)
			break;
	}
	return true;
}
#endif /* !LATMON_NO_BTF */

#endif /* __FILTER_BPF_H */
