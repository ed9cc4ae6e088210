/* SPDX-License-Identifier: (GPL-2.0-only OR MIT) */
/*
 * lock (bpf/lock.bpf.c): the object's state - its configuration, a
 * watched thread's wait and the owner it follows, their maps, the series
 * slots and tallies user space reads, and the gates every lock program
 * reads first. lock_owner.bpf.h and lock.bpf.c include it: the one place
 * the object's `cfg` is defined, before the shared headers that read
 * cfg.common.
 */
#ifndef __LOCK_STATE_BPF_H
#define __LOCK_STATE_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "latmon.h"
#include "gate.bpf.h"
#include "test_hooks.bpf.h"
#include "maps.bpf.h"
/* Before the shared headers, which read cfg.common. */
const volatile struct latmon_lock_config cfg = {};
/* Alert ids are histogram slots: a record names its lock's series. */
#define LATMON_ALERT_IDS LATMON_LOCK_SERIES
#include "alerts.bpf.h"
#include "core_fixes.bpf.h"
#include "filter.bpf.h"
#include "lock_cycle.bpf.h"

#define TASK_RUNNING 0
#define SCHED_FIFO 1 /* include/uapi/linux/sched.h */
#define SCHED_RR 2
/* include/uapi/linux/futex.h */
#define FUTEX_WAIT 0
#define FUTEX_LOCK_PI 6
#define FUTEX_WAIT_BITSET 9
#define FUTEX_WAIT_REQUEUE_PI 11
#define FUTEX_LOCK_PI2 13
/* ~(FUTEX_PRIVATE_FLAG | FUTEX_CLOCK_REALTIME), the kernel's own mask
 * (kernel/futex/syscalls.c): an op with any other bit set is no command
 * (ENOSYS), not a wait. 127 took 0x200|FUTEX_WAIT for a wait (issue 40). */
#define FUTEX_CMD_MASK (~(128u | 256u))
#define FUTEX_TID_MASK 0x3fffffff
/* struct futex_waitv { __u64 val; __u64 uaddr; __u32 flags; __u32 __reserved; } */
#define FUTEX_WAITV_UADDR_OFFSET 8
#define FUTEX_WAITV_SIZE 24

/* Kernel 6.2 (commit 3f0e6f2b41d3): a task by its pid, referenced. */
extern struct task_struct *bpf_task_from_pid(s32 pid) __ksym __weak;
extern void bpf_task_release(struct task_struct *p) __ksym __weak;

/* A watched thread's phases. */
#define T_NONE 0
#define T_IN 1	    /* in a futex wait call, running */
#define T_BLOCKED 2 /* asleep in it */
#define T_RAN 3	    /* switched in again, the call not yet returned */

struct lock_thread {
	__u64 start_ns;
	__u64 end_ns; /* its switch-in after the block */
	__u64 uaddr;
	__u32 tgid;
	__u32 op;
	__u32 phase;
	__u32 owner_tid; /* the candidate read at the entry, 0: none */
	__u32 owner_from;
	__u32 owner_live; /* lock_owners follows owner_tid for this wait */
	__u32 waker_tid;
	__u32 waker_tgid;
	char waker_comm[LATMON_COMM_LEN];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LATMON_LOCK_THREADS);
	__type(key, __u32);
	__type(value, struct lock_thread);
} lock_threads SEC(".maps");

struct lock_owner {
	__u64 run_ns;
	__u64 running_since; /* on a CPU since, 0: not running */
	__u64 rest_ns;
	__u64 rest_inv_ns;
	__u32 tgid;
	__u32 policy;
	__s32 prio;	       /* rt_priority, or the nice value */
	__s32 prio_eff;	       /* task_struct::prio, as last seen */
	__s32 waiter_prio_eff; /* the waiter's, at its block */
	__u32 closed;	       /* the wait ended: no more charges */
	__u32 cpu_held;	       /* CPU + 1 whose lock_cpu names it, 0: none */
	__u32 pad;
	char comm[LATMON_COMM_LEN];
	struct latmon_lock_task pre[LATMON_LOCK_PREEMPTERS];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LATMON_LOCK_OWNERS);
	__type(key, __u32);
	__type(value, struct lock_owner);
} lock_owners SEC(".maps");

/* A new owner's entry starts from zero (larger than the BPF stack wants). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lock_owner);
} lock_zero SEC(".maps");

/* Per CPU: the owner that is runnable here but preempted, and since when
 * the task now running here is charged to it. */
struct lock_cpu {
	__u32 owner_tid; /* 0: none */
	__u32 pad;
	__u64 since;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lock_cpu);
} lock_cpu SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LATMON_LOCK_SERIES);
	__type(key, __u32);
	__type(value, struct latmon_hist);
} lock_hist SEC(".maps");

/* (tgid, address) -> its histogram slot. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LATMON_LOCK_SERIES);
	__type(key, struct latmon_lock_key);
	__type(value, __u32);
} lock_slot_of SEC(".maps");

/* Per CPU: the record being built. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct latmon_alert_lock);
} lock_scratch SEC(".maps");

/* slot -> its lock, for user space to name the series (tgid 0: free). */
struct latmon_lock_key lock_slot_key[LATMON_LOCK_SERIES];
/* slot -> its waits' owners and inversions (atomic adds: two CPUs may end
 * waits on one lock at once). */
struct latmon_lock_tally lock_tally[LATMON_LOCK_SERIES];
__u32 lock_nslots;
/* Threads watched; the gate of the switch and wakeup programs: the one
 * thread watched, or watched_many once a second one is. */
__s64 lock_live;
__u32 watched_one;
__u32 watched_many;
/* Owners followed now (open entries of lock_owners). */
__s64 owners_live;
/* Owners named by their waiter's entry but not followed: not alive in the
 * waiter's thread group (implausible), or no room. */
__u64 owners_refused;

static __always_inline void count_drop(void)
{
	struct latmon_hist *h = latmon_hist_get(&lock_hist, 0);

	if (h)
		h->drops++;
}

static __always_inline struct lock_thread *thread_of(__u32 tid)
{
	if (lock_live <= 0 || (!watched_many && tid != watched_one))
		return NULL;
	return bpf_map_lookup_elem(&lock_threads, &tid);
}

static __always_inline __s32 prio_of(struct task_struct *p, __u32 policy)
{
	return (policy == SCHED_FIFO || policy == SCHED_RR) ? (__s32)p->rt_priority : p->static_prio - 120;
}

#endif /* __LOCK_STATE_BPF_H */
