/* SPDX-License-Identifier: (GPL-2.0-only OR MIT) */
/*
 * cycle (bpf/cycle.bpf.c): the object's state - its configuration, a
 * watched thread's entry and its phases, the maps and the gates every
 * cycle program reads first - and the shared headers it is built on.
 * Every cycle_*.bpf.h includes it: the one place the object's `cfg` is
 * defined, before the shared headers that read cfg.common.
 */
#ifndef __CYCLE_STATE_BPF_H
#define __CYCLE_STATE_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "latmon.h"
#include "gate.bpf.h"
#include "test_hooks.bpf.h"
#include "maps.bpf.h"
/* Before the shared headers, which read cfg.common. 0 is a syscall number
 * (read on x86_64): "none" is -1 until user space sets the numbers. */
const volatile struct latmon_cycle_config cfg = {
	.nr_futex = -1,
	.nr_futex_waitv = -1,
	.nr_nanosleep = -1,
	.nr_clock_nanosleep = -1,
};
/* 0: misses, overruns, slow responses; LATMON_CYCLE_RULE_ALERT_ID: rules. */
#define LATMON_ALERT_IDS 2
#include "alerts.bpf.h"
#include "core_fixes.bpf.h"
#include "anatomy.bpf.h"
#include "anatomy_merge.bpf.h"
#include "cycle_release.bpf.h"
#include "lock_cycle.bpf.h"
#include "nest_scratch.bpf.h"

#define TASK_RUNNING 0
#define TASK_UNINTERRUPTIBLE 0x2 /* include/linux/sched.h */
#define TASK_STOPPED 0x4
#define TASK_TRACED 0x8

/* Phases of a watched thread. */
#define P_NONE 0    /* no cycle known yet */
#define P_SLEEP 1   /* in the timer sleep that releases the next cycle */
#define P_WAIT 2    /* in a cycle, runnable, not running */
#define P_RUN 3	    /* in a cycle, running */
#define P_BLOCKED 4 /* in a cycle, sleeping voluntarily */
/* Its timer sleep returned early, its timer not fired (a signal: EINTR,
 * or a restart the kernel makes): no release until it sleeps again, and a
 * sleep again to the same release is that release's (issue 40: without
 * it, a signal's wakeup just past the release time, before the timer's
 * interrupt, released the cycle, and the loop's sleep again to the same
 * release counted a second cycle). */
#define P_INTR 5

struct cycle_thread {
	struct latmon_cycle_stats st; /* first: user space reads it */
	__u64 release_ns;	      /* of the current cycle */
	__u64 deadline_ns;	      /* absolute, 0: not judged */
	__u64 run_ns;		      /* the cycle's first run */
	__u64 blocked_ns;	      /* blocked since */
	__u64 faults;		      /* min_flt + maj_flt at the release */
	__u64 wake_ns;		      /* the release's wakeup */
	__u64 key;		      /* the task's address: its anatomy key */
	__u64 tfd;		      /* its timerfd's context, 0: none seen */
	struct period_cand cand;      /* a period change under way */
	__s64 clk_off;		      /* the offset its release was computed with, 0: none */
	__u32 clk_tai;		      /* that offset is CLOCK_TAI's, else CLOCK_REALTIME's */
	__u32 stopped;		      /* stopped or traced since its last timer sleep began */
	__u32 late;		      /* LATMON_CYCLE_LATE_* of the current release */
	__u32 tgid;		      /* its process, and its comm, at its entry */
	char comm[LATMON_COMM_LEN];
	__u32 phase;
	__u32 started; /* ran since the release */
	__u32 anat;    /* slot held: CPU + 1, 0: none */
	__u32 blocked_on;
	__s32 blocked_sys;
	__u32 reported;	  /* overrun record sent for this cycle, or it is done */
	__u32 futex_wait; /* asleep in a futex wait that is not PI (rules) */
	__s32 futex_sys;
	__u64 rule_sent_ns[LATMON_RULES]; /* the last record of each rule */
	struct latmon_anatomy acc;
	struct latmon_cycle_exec exec;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LATMON_CYCLE_THREADS);
	__type(key, __u32);
	__type(value, struct cycle_thread);
} cycle_threads SEC(".maps");

/* cycle,auto: the thread ids user space watches (the periodic RT loops
 * discovery found), rewritten when its list changes. A thread enters
 * cycle_threads only if its id is here; one that leaves the list stays
 * watched until it exits or execs (cycle_life.bpf.h). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LATMON_CYCLE_AUTO);
	__type(key, __u32);
	__type(value, __u8);
} cycle_auto SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LATMON_CYCLE_SERIES);
	__type(key, __u32);
	__type(value, struct latmon_hist);
} cycle_hist SEC(".maps");

/* Per CPU: the watched thread whose open cycle last ran (or was woken)
 * here and its absolute deadline: the overrun check's one lookup. */
struct cycle_watch {
	__u32 tid;
	__u32 pad;
	__u64 deadline_ns;
	__u64 release_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cycle_watch);
} cycle_watch SEC(".maps");

/* Per CPU and nesting level: the record being built (too large for the
 * BPF stack; an overrun's, from an IRQ, may be built inside a miss's). */
NESTED_SCRATCH(cycle_scratch, struct latmon_alert_cycle)

/* A new thread's entry starts from zero (a hash value cannot be built on
 * the stack: it is larger than the BPF stack). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cycle_thread);
} cycle_zero SEC(".maps");

/* Threads watched (entries of cycle_threads): the switch and wakeup
 * programs' gate. */
__s64 cycle_live;
/* The hot path's gate before any hash lookup (every switch and wakeup on
 * the machine runs it): the one thread watched, or `watched_many` once a
 * second one is (then the hash decides). */
__u32 watched_one;
__u32 watched_many;
/* CPUs whose cycle_watch is armed: the overrun check's gate before its
 * per-CPU lookup (every switch, IRQ and hrtimer expiry on the machine
 * runs it). Changed only by whoever moves a watch's tid between 0 and a
 * thread with an atomic exchange, so it stays exact. */
__s64 watches;

static __always_inline void count_drop(void)
{
	struct latmon_hist *h = latmon_hist_get(&cycle_hist, LATMON_CS_RESPONSE);

	if (h)
		h->drops++;
}

static __always_inline struct cycle_thread *thread_of(__u32 tid)
{
	if (cycle_live <= 0 || (!watched_many && tid != watched_one))
		return NULL;
	return bpf_map_lookup_elem(&cycle_threads, &tid);
}

/* The syscall task t is in (its user registers' syscall number). */
static __always_inline __s32 syscall_of(struct task_struct *t)
{
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(t);

	if (!regs)
		return -1;
#if defined(__TARGET_ARCH_x86)
	return (__s32)BPF_CORE_READ(regs, orig_ax);
#elif defined(__TARGET_ARCH_arm64)
	return (__s32)BPF_CORE_READ(regs, syscallno);
#else
	return -1;
#endif
}

static __always_inline __u64 faults_of(struct task_struct *t) { return t->min_flt + t->maj_flt; }

/* The period misses are judged against: period=, else the fullest bin's
 * mean once it has PERIOD_MIN_STEPS steps. */
static __always_inline __u64 deadline_of(struct cycle_thread *t)
{
	if (cfg.deadline_ns)
		return cfg.deadline_ns;
	return t->st.period_ns;
}

#endif /* __CYCLE_STATE_BPF_H */
