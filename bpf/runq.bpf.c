// SPDX-License-Identifier: (GPL-2.0-only OR MIT)
/*
 * runq: run-queue latency, the time a runnable task waits for a CPU - from
 * its wakeup (sched_wakeup, sched_wakeup_new) or from being preempted while
 * still runnable, to the sched_switch that puts it on a CPU. Same definition
 * as libbpf-tools' runqlat.
 *
 * Two designs in one object; user space autoloads exactly one set after
 * reading the kernel's BTF (probes/runq.rs):
 *
 *  switch-only (default): the scheduler already stamps the enqueue time in
 *    task->sched_info.last_queued (CONFIG_SCHED_INFO) using the runqueue
 *    clock, and __schedule() has just refreshed rq->clock when sched_switch
 *    fires (context_switch() -> sched_info_arrive() clears the stamp only
 *    after the tracepoint). So one program computes
 *    rq->clock - next->sched_info.last_queued: no wakeup programs, no stamp
 *    map, no timestamp helper (findings.md: 44 ns vs runqlat's 113 + 184).
 *    rq is reached as prev->se.cfs_rq->rq (CONFIG_FAIR_GROUP_SCHED); the
 *    per-CPU `runqueues` symbol is not resolvable without KALLSYMS_ALL.
 *    Caveat: last_queued restarts when a queued task migrates, so time
 *    queued before a migration is not counted (it is in run_delay).
 *
 *  stamp (fallback for kernels without those fields): runqlat's design, a
 *    bounded hash of wakeup stamps keyed by pid; a full map is a counted drop.
 *
 * Each design has a tp_btf and a raw_tp variant (raw_tp for kernels without
 * tp_btf, i.e. < 5.5 or BTF-less); raw_tp pointers are untrusted, so those
 * read through BPF_CORE_READ.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "latmon.h"
#include "maps.bpf.h"
#include "core_fixes.bpf.h"

#define TASK_RUNNING 0

/* Filters, set before load. 0 / empty means "all". */
const volatile __u32 filter_tgid = 0;
const volatile char filter_comm[LATMON_COMM_LEN] = {};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct latmon_hist);
} runq_hist SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LATMON_MAX_STAMPS);
	__type(key, __u32);
	__type(value, __u64);
} runq_stamps SEC(".maps");

static __always_inline bool comm_wanted(struct task_struct *t)
{
	char comm[LATMON_COMM_LEN];

	if (!filter_comm[0])
		return true;
	if (bpf_probe_read_kernel_str(comm, sizeof(comm), &t->comm) < 0)
		return false;
	for (int i = 0; i < LATMON_COMM_LEN; i++) {
		if (comm[i] != filter_comm[i])
			return false;
		if (!comm[i])
			break;
	}
	return true;
}

static __always_inline bool wanted(__u32 tgid, struct task_struct *t)
{
	if (filter_tgid && tgid != filter_tgid)
		return false;
	return comm_wanted(t);
}

static __always_inline void record(__s64 delta_ns)
{
	struct latmon_hist *h = latmon_hist_get(&runq_hist, 0);

	if (!h)
		return;
	if (delta_ns < 0) {
		h->drops++;
		return;
	}
	latmon_hist_record(h, delta_ns);
}

static __always_inline void count_drop(void)
{
	struct latmon_hist *h = latmon_hist_get(&runq_hist, 0);

	if (h)
		h->drops++;
}

/* ---- switch-only design ------------------------------------------------ */

static __always_inline int switch_only(__u32 pid, __u32 tgid, struct task_struct *next,
				       __u64 clock_ns, __u64 queued_ns)
{
	/* The idle task is never queued; last_queued == 0 means the task was
	 * not waiting on a run queue (e.g. it was already running). */
	if (!pid || !queued_ns)
		return 0;
	if (!wanted(tgid, next))
		return 0;
	record((__s64)(clock_ns - queued_ns));
	return 0;
}

/* TP_PROTO(bool preempt, struct task_struct *prev, struct task_struct *next,
 *          unsigned int prev_state) */
SEC("tp_btf/sched_switch")
int BPF_PROG(runq_switch_btf, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	return switch_only(next->pid, next->tgid, next, prev->se.cfs_rq->rq->clock,
			   next->sched_info.last_queued);
}

SEC("raw_tp/sched_switch")
int BPF_PROG(runq_switch_raw, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	return switch_only(BPF_CORE_READ(next, pid), BPF_CORE_READ(next, tgid), next,
			   BPF_CORE_READ(prev, se.cfs_rq, rq, clock),
			   BPF_CORE_READ(next, sched_info.last_queued));
}

/* ---- stamp design (fallback) ------------------------------------------- */

static __always_inline void stamp(__u32 pid, __u32 tgid, struct task_struct *t)
{
	__u64 now_ns;

	if (!pid || !wanted(tgid, t))
		return;
	now_ns = bpf_ktime_get_ns();
	if (bpf_map_update_elem(&runq_stamps, &pid, &now_ns, BPF_ANY))
		count_drop();
}

static __always_inline int stamp_switch(struct task_struct *prev, struct task_struct *next)
{
	__u32 pid = BPF_CORE_READ(next, pid);
	__u64 *start_ns;

	/* A preempted task stays runnable: its wait starts now. */
	if (latmon_task_state(prev) == TASK_RUNNING)
		stamp(BPF_CORE_READ(prev, pid), BPF_CORE_READ(prev, tgid), prev);
	start_ns = bpf_map_lookup_elem(&runq_stamps, &pid);
	if (!start_ns)
		return 0;
	record((__s64)(bpf_ktime_get_ns() - *start_ns));
	bpf_map_delete_elem(&runq_stamps, &pid);
	return 0;
}

/* TP_PROTO(struct task_struct *p) for sched_wakeup and sched_wakeup_new */
SEC("tp_btf/sched_wakeup")
int BPF_PROG(runq_wakeup_btf, struct task_struct *p)
{
	stamp(p->pid, p->tgid, p);
	return 0;
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(runq_wakeup_new_btf, struct task_struct *p)
{
	stamp(p->pid, p->tgid, p);
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(runq_stamp_switch_btf, bool preempt, struct task_struct *prev,
	     struct task_struct *next)
{
	return stamp_switch(prev, next);
}

SEC("raw_tp/sched_wakeup")
int BPF_PROG(runq_wakeup_raw, struct task_struct *p)
{
	stamp(BPF_CORE_READ(p, pid), BPF_CORE_READ(p, tgid), p);
	return 0;
}

SEC("raw_tp/sched_wakeup_new")
int BPF_PROG(runq_wakeup_new_raw, struct task_struct *p)
{
	stamp(BPF_CORE_READ(p, pid), BPF_CORE_READ(p, tgid), p);
	return 0;
}

SEC("raw_tp/sched_switch")
int BPF_PROG(runq_stamp_switch_raw, bool preempt, struct task_struct *prev,
	     struct task_struct *next)
{
	return stamp_switch(prev, next);
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
