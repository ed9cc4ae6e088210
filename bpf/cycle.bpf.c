// SPDX-License-Identifier: (GPL-2.0-only OR MIT)
/*
 * cycle: the cycles of a periodic thread, passively. A cycle runs from a
 * release (the intended expiry of the timer sleep the thread went into:
 * clock_nanosleep, nanosleep, or the read() of a periodic timerfd) to
 * done (its next such sleep; bpf/cycle_sources.bpf.h). Per cycle:
 * response (release -> done), wakeup (release -> running), exec (running
 * -> done), and when done is after release + deadline, a miss record
 * whose parts sum to the response exactly.
 *
 * Where the time goes (the anatomy of bpf/anatomy.bpf.h, kept across the
 * whole cycle): from its release to done, the thread holds the anatomy
 * slot of the CPU it is woken on or runs on, except while it sleeps
 * voluntarily. While the slot is held, that CPU charges every context
 * change: the loop's own time to the slot's self_ns (`running`), other
 * tasks' (it was runnable behind them), IRQs' and softirqs' to their
 * entries. A voluntary sleep inside the cycle gives the slot back
 * (merged into the cycle's account) and is `blocked`, by what it slept
 * on: futex (the syscall), io (uninterruptible), sleep (a timer sleep
 * syscall other than the cycle's), other. Page faults are counted from
 * the task's own counters (min_flt + maj_flt, what getrusage reports);
 * the kernel has no fault exit point to time them, so their time stays
 * in `running`. What no event covers is `other` (user space: latency
 * minus the parts).
 *
 * Overrun: a cycle still unfinished at its deadline is reported at once
 * from the next event on the loop's CPU that sees the deadline passed:
 * its context switches, IRQs and hrtimer expiries (the scheduler tick is
 * one, so at most a tick late while the CPU is busy). Not bpf_timer: the
 * kernel refuses it on PREEMPT_RT, the kernels this family is for.
 *
 * Unseen: a release whose wakeup and switch-in no program saw (a kernel
 * may keep tracepoints from firing in some tasks' context: this test
 * host's VM agent is one, see docs/probes.md) is caught when the sleep
 * returns (its sys_exit, in the loop's own context): the cycle starts
 * there, counted in `unseen`, its wakeup part being timer_irq_delay up to
 * that point. A wakeup before the release (a signal) is not a release.
 *
 * Threads: a bounded hash keyed by thread id (CYCLE_THREADS), entered at
 * the first timer sleep of a thread that passes the filter (comm=, or
 * pid= the thread id). tp_btf only (trusted task pointers); the syscall
 * entries are classic tracepoints (syscall events have no raw form),
 * which fire only for their own syscalls (read's for every read: its
 * program compares the thread id first).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "latmon.h"
#include "gate.bpf.h"
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

/* Give back the slot t holds, its account merged into the cycle's. */
static __always_inline void slot_return(struct cycle_thread *t)
{
	struct anat_slot *s = anat_take_key(t->key, t->anat);

	t->anat = 0;
	if (!s)
		return;
	merge_anat(&t->acc, &s->acc);
	if (cfg.mutate)
		/* Tests only: the loop's own time charged to other tasks,
		 * which the live test must catch. */
		t->acc.task_rest_ns += s->self_ns;
	else
		t->exec.running_ns += s->self_ns;
	anat_release(s);
}

/* t's thread runs, or is runnable, on `cpu` from `now`: it holds that
 * CPU's slot, and the CPU watches its deadline. */
static __always_inline void slot_hold(struct cycle_thread *t, __u32 tid, __u32 cpu, __u64 now)
{
	struct cycle_watch *w;
	__u32 zero = 0;

	if (t->anat && t->anat != cpu + 1) {
		t->exec.migrations++;
		slot_return(t);
	}
	if (!t->anat)
		t->anat = anat_claim_key(t->key, cpu, now);
	/* cfg.common.anatomy: user space's "kernel has bpf_map_lookup_percpu_elem". */
	w = cfg.common.anatomy ? bpf_map_lookup_percpu_elem(&cycle_watch, &zero, cpu) : NULL;
	if (w && !t->reported && t->deadline_ns) {
		w->deadline_ns = t->deadline_ns;
		w->release_ns = t->release_ns;
		if (!__sync_lock_test_and_set(&w->tid, tid))
			__sync_fetch_and_add(&watches, 1);
	}
}

static __always_inline void record_series(__u32 series, __u64 ns, bool alert)
{
	struct latmon_hist *h = latmon_hist_get(&cycle_hist, series);

	if (!h)
		return;
	latmon_hist_record(h, ns);
	if (alert)
		h->alerts++;
}

/* Send a record of thread `tid`: a miss or slow response from the loop
 * itself (current), an overrun from whatever runs on the loop's CPU (the
 * record names the loop by its entry's tgid and comm). Five arguments: the
 * BPF calling convention's limit. */
static __noinline int send_record(void *ctx, struct cycle_thread *t, __u32 tid, __u32 event, __u64 now)
{
	struct latmon_alert_cycle *r;
	__u64 latency = now - t->release_ns;

	if (!latmon_alert_admit(0, now)) {
		latmon_alert_dropped(0, false);
		return 0;
	}
	r = cycle_scratch_take();
	if (!r) {
		latmon_alert_dropped(0, false);
		return 0;
	}
	r->alert.time_ns = now;
	r->alert.latency_ns = latency;
	r->alert.probe_id = 0;
	r->alert.cpu = bpf_get_smp_processor_id();
	r->alert.tid = tid;
	/* The thread as it entered (not its task: an overrun is sent from
	 * another context, and a task is not read past its life). */
	r->alert.pid = t->tgid;
	__builtin_memcpy(r->alert.comm, t->comm, sizeof(r->alert.comm));
	__builtin_memcpy(&r->anat, &t->acc, sizeof(r->anat));
	__builtin_memset(&r->cycle, 0, sizeof(r->cycle));
	__builtin_memcpy(&r->cycle.exec, &t->exec, sizeof(r->cycle.exec));
	r->cycle.release_ns = t->release_ns;
	r->cycle.deadline_ns = t->deadline_ns;
	r->cycle.event = event;
	r->cycle.late = t->late;
	r->cycle.doing_syscall = -1;
	__builtin_memset(&r->lock, 0, sizeof(r->lock));
	if (event != LATMON_CYCLE_OVERRUN) {
		struct latmon_lock_record *l = cfg.lock_join ? bpf_map_lookup_elem(&lock_cycle, &tid) : NULL;

		/* Cleared at the release, but a wait may straddle it. */
		if (l && l->start_ns >= t->release_ns)
			__builtin_memcpy(&r->lock, l, sizeof(r->lock));
		r->cycle.done_ns = now;
	} else if (t->phase == P_RUN) {
		r->cycle.doing = LATMON_CYCLE_DOING_RUNNING;
	} else if (t->phase == P_BLOCKED) {
		r->cycle.doing = LATMON_CYCLE_DOING_BLOCKED;
		r->cycle.doing_on = t->blocked_on;
		r->cycle.doing_syscall = t->blocked_sys;
	} else {
		/* Runnable: behind whatever runs on this CPU now. */
		r->cycle.doing = LATMON_CYCLE_DOING_RUNNABLE;
		r->cycle.doing_pid = (__u32)bpf_get_current_pid_tgid();
		bpf_get_current_comm(r->cycle.doing_comm, sizeof(r->cycle.doing_comm));
	}
	if (cfg.common.use_ringbuf) {
		if (bpf_ringbuf_output(&alerts, r, sizeof(*r), 0))
			latmon_alert_dropped(0, true);
	} else if (bpf_perf_event_output(ctx, &alerts_perf, BPF_F_CURRENT_CPU, r, sizeof(*r))) {
		latmon_alert_dropped(0, true);
	}
	cycle_scratch_put();
	return 0;
}

/* The current thread (t) finished its cycle at `now`. */
static __always_inline void cycle_done(void *ctx, struct cycle_thread *t, __u32 tid, __u64 now)
{
	struct task_struct *cur = bpf_get_current_task_btf();
	struct anat_slot *s = anat_held_here();
	__u64 response, deadline;
	bool miss, slow;

	/* The loop's time up to now, on this CPU. */
	if (s && s->waiter == t->key)
		anat_charge_current(s, now);
	slot_return(t);
	t->acc.cpu_ran = bpf_get_smp_processor_id();
	t->exec.fault_count = faults_of(cur) - t->faults;
	response = now > t->release_ns ? now - t->release_ns : 0;
	deadline = deadline_of(t);
	miss = deadline && response > deadline;
	slow = cfg.threshold_ns && response > cfg.threshold_ns;
	/* The family's alerts: misses, and responses above threshold=. */
	record_series(LATMON_CS_RESPONSE, response, miss || slow);
	record_series(LATMON_CS_EXEC, now > t->run_ns ? now - t->run_ns : 0, false);
	t->st.cycles++;
	if (miss)
		t->st.misses++;
	if (miss || slow) {
		if (!t->deadline_ns && deadline)
			t->deadline_ns = t->release_ns + deadline;
		send_record(ctx, t, tid, miss ? LATMON_CYCLE_MISS : LATMON_CYCLE_RESPONSE, now);
	}
}

/* The cycle of t's thread (task p, woken onto `cpu`) is released: its
 * accounts start over. */
static __always_inline void release_init(struct cycle_thread *t, struct task_struct *p, __u32 cpu, __u64 now)
{
	__u32 tid = p->pid;

	__builtin_memset(&t->acc, 0, sizeof(t->acc));
	__builtin_memset(&t->exec, 0, sizeof(t->exec));
	t->acc.timer_irq_delay_ns = now > t->release_ns ? now - t->release_ns : 0;
	/* A stop (SIGSTOP, a tracer) since the sleep began, not the timer,
	 * kept it from running (issue 40: "timer irq delay 5.00s"). */
	t->late = t->stopped ? LATMON_CYCLE_LATE_STOPPED : 0;
	t->acc.cpu_woken = cpu;
	t->faults = faults_of(p);
	t->deadline_ns = deadline_of(t) ? t->release_ns + deadline_of(t) : 0;
	t->reported = 0;
	t->started = 0;
	t->wake_ns = now;
	if (cfg.lock_join)
		bpf_map_delete_elem(&lock_cycle, &tid);
}

/* The thread runs from `now`: the cycle's first run, if it is. */
static __always_inline void run_start(struct cycle_thread *t, __u64 now)
{
	if (t->started)
		return;
	t->started = 1;
	t->run_ns = now;
	/* No wakeup when the release found the loop running (backlog) or
	 * stopped: their gap is not a wakeup latency (issue 40: a backlog
	 * took cycle:wakeup's p99 to 714 us against a p50 of 56 us). */
	if (!t->late)
		record_series(LATMON_CS_WAKEUP, now > t->release_ns ? now - t->release_ns : 0, false);
}

#include "cycle_life.bpf.h"

/* The current thread goes into a timer sleep that ends at `release`
 * (0: unknown). `blocks`: it sleeps until the timer fires even if
 * `release` has passed (a timerfd whose expiry is due but not yet run);
 * else a release at or before now is released at once. */
static __always_inline void timer_sleep(void *ctx, __u64 release, __u64 now, bool blocks)
{
	struct task_struct *cur = bpf_get_current_task_btf();
	__u32 tid = cur->pid;
	struct cycle_thread *t = bpf_map_lookup_elem(&cycle_threads, &tid);
	struct cycle_watch *w;
	__u32 zero = 0;

	if (!t) {
		t = thread_enter(cur, tid);
		if (!t)
			return;
	}
	/* It runs (it makes this syscall), yet the events say otherwise: a
	 * wakeup or switch-in no program saw. The cycle still counts, with
	 * what was seen; counted in `unseen`. */
	if (t->phase == P_SLEEP)
		release_rescale(&t->release_ns, &t->clk_off, t->clk_tai);
	if (t->phase == P_SLEEP && t->release_ns && now >= t->release_ns) {
		release_init(t, cur, bpf_get_smp_processor_id(), now);
		t->phase = P_RUN;
		t->st.unseen++;
	} else if (t->phase == P_BLOCKED) {
		__u32 k = t->blocked_on & (LATMON_CYCLE_BLOCKED_KINDS - 1);

		t->exec.blocked[k].ns += now > t->blocked_ns ? now - t->blocked_ns : 0;
		t->phase = P_RUN;
		t->st.unseen++;
	} else if (t->phase == P_WAIT && !t->started) {
		t->st.unseen++;
	}
	/* The step to the next release first: the cycle done now is judged
	 * against the period that step confirms (a new rate's first cycles
	 * are not misses of the old one). */
	if (release && t->release_ns && release > t->release_ns) {
		period_step(&t->st, cfg.period_ns, release - t->release_ns);
		period_follow(&t->st, &t->cand, cfg.period_ns, release - t->release_ns,
			      release > now ? release - now : 0);
	}
	if (t->phase == P_RUN || t->phase == P_WAIT) {
		/* Done: claimed before done's clock read, so that an overrun
		 * check run inside this program (an IRQ's) or on another CPU
		 * either went out before done or sends nothing; a cycle already
		 * finished gets no overrun record (issue 40). */
		__sync_lock_test_and_set(&t->reported, 1);
		now = bpf_ktime_get_ns();
		run_start(t, t->wake_ns);
		cycle_done(ctx, t, tid, now);
	} else {
		slot_return(t);
	}
	w = bpf_map_lookup_elem(&cycle_watch, &zero);
	if (w && w->tid == tid && __sync_val_compare_and_swap(&w->tid, tid, 0) == tid)
		__sync_fetch_and_add(&watches, -1);
	if (!release) {
		t->phase = P_NONE;
		return;
	}
	t->release_ns = release;
	t->clk_off = 0; /* the caller sets it for a CLOCK_REALTIME/TAI release */
	t->phase = P_SLEEP;
	if (release <= now && !blocks) {
		/* Armed in the past: released at once, still running. Its
		 * gap is the loop's backlog (or the stop that made it), not
		 * the timer's. */
		release_init(t, cur, bpf_get_smp_processor_id(), now);
		if (!t->late)
			t->late = LATMON_CYCLE_LATE_BACKLOG;
		run_start(t, now);
		t->phase = P_RUN;
		slot_hold(t, tid, bpf_get_smp_processor_id(), now);
	}
	t->stopped = 0;
}

#include "cycle_rules.bpf.h"
#include "cycle_sources.bpf.h"

/* The overrun check: this CPU's watched cycle is past its deadline. */
static __always_inline void overrun_check(void *ctx)
{
	struct cycle_watch *w;
	struct cycle_thread *t;
	__u32 zero = 0, tid;
	__u64 now;

	if (watches <= 0)
		return;
	w = bpf_map_lookup_elem(&cycle_watch, &zero);
	if (!w || !w->tid)
		return;
	now = bpf_ktime_get_ns();
	if (now <= w->deadline_ns)
		return;
	tid = __sync_lock_test_and_set(&w->tid, 0);
	if (!tid)
		return;
	__sync_fetch_and_add(&watches, -1);
	t = bpf_map_lookup_elem(&cycle_threads, &tid);
	if (!t || t->release_ns != w->release_ns || t->phase < P_WAIT || t->phase == P_INTR)
		return;
	/* Two CPUs can watch one cycle (woken on one, run on the other) and
	 * check it at once (both resuming from a vCPU stall): one record. */
	if (__sync_val_compare_and_swap(&t->reported, 0, 1))
		return;
	t->st.overruns++;
	send_record(ctx, t, tid, LATMON_CYCLE_OVERRUN, now);
}

#include "cycle_wake.bpf.h"

/* What a thread that blocks now sleeps on. */
static __always_inline __u32 blocked_on(__s64 state, __s32 sys)
{
	if (sys >= 0 && (sys == cfg.nr_futex || sys == cfg.nr_futex_waitv))
		return LATMON_CYCLE_BLOCKED_FUTEX;
	if (state & TASK_UNINTERRUPTIBLE)
		return LATMON_CYCLE_BLOCKED_IO;
	if (sys >= 0 && (sys == cfg.nr_nanosleep || sys == cfg.nr_clock_nanosleep))
		return LATMON_CYCLE_BLOCKED_SLEEP;
	return LATMON_CYCLE_BLOCKED_OTHER;
}

/* TP_PROTO(bool preempt, struct task_struct *prev, struct task_struct *next,
 *          unsigned int prev_state) */
SEC("tp_btf/sched_switch")
int BPF_PROG(cycle_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	LATMON_GATE();
	struct cycle_thread *t;
	struct anat_slot *s;
	__u64 now = 0;

	/* Nothing to do (no slot held, no watch armed, neither task
	 * watched): five loads and compares. */
	if (cycle_live <= 0 ||
	    (anat_held <= 0 && watches <= 0 && !watched_many && prev->pid != watched_one && next->pid != watched_one))
		return 0;
	/* anat_switch, with the clock read only where a slot is held. */
	s = anat_held_here();
	if (s) {
		now = bpf_ktime_get_ns();
		anat_charge_task(s, prev, now);
		s->in_irq = -1;
		s->in_vec = -1;
	}
	overrun_check(ctx);
	t = thread_of(prev->pid);
	if (t && (t->phase == P_WAIT || t->phase == P_BLOCKED)) {
		/* It ran (it is switched out), yet no wakeup or switch-in
		 * said so: the block (or the wait) ends now, its upper bound. */
		if (!now)
			now = bpf_ktime_get_ns();
		if (t->phase == P_BLOCKED) {
			__u32 k = t->blocked_on & (LATMON_CYCLE_BLOCKED_KINDS - 1);

			t->exec.blocked[k].ns += now > t->blocked_ns ? now - t->blocked_ns : 0;
			t->exec.blocked[k].syscall = t->blocked_sys;
		}
		run_start(t, now);
		t->phase = P_RUN;
		t->st.unseen++;
	}
	if (t && t->phase == P_RUN) {
		__s64 state = latmon_task_state(prev);

		if (!now)
			now = bpf_ktime_get_ns();
		if (state == TASK_RUNNING) {
			t->phase = P_WAIT; /* preempted: keeps its slot */
		} else {
			/* The time up to now is in the slot: merged, given back. */
			slot_return(t);
			t->blocked_sys = syscall_of(prev);
			t->blocked_on = blocked_on(state, t->blocked_sys);
			t->blocked_ns = now;
			t->phase = P_BLOCKED;
		}
	}
	if (t) {
		/* Stopped or traced (__TASK_STOPPED, __TASK_TRACED): what
		 * follows until it runs again is the stop's. */
		if (latmon_task_state(prev) & (TASK_STOPPED | TASK_TRACED))
			t->stopped = 1;
		rule_block(ctx, t, prev);
	}
	t = thread_of(next->pid);
	if (t && t->phase == P_BLOCKED) {
		/* Switched in while blocked by the events: its wakeup came
		 * as it was going to sleep (sched_waking saw it still queued,
		 * the switch out then saw it block). The block ends now. */
		__u32 k = t->blocked_on & (LATMON_CYCLE_BLOCKED_KINDS - 1);

		if (!now)
			now = bpf_ktime_get_ns();
		t->exec.blocked[k].ns += now > t->blocked_ns ? now - t->blocked_ns : 0;
		t->exec.blocked[k].syscall = t->blocked_sys;
		t->phase = P_WAIT;
		t->st.unseen++;
	}
	if (t && t->phase == P_SLEEP && t->release_ns) {
		/* Switched in past its release before any wakeup was seen:
		 * the release is now. */
		if (!now)
			now = bpf_ktime_get_ns();
		release_rescale(&t->release_ns, &t->clk_off, t->clk_tai);
		if (now >= t->release_ns) {
			release_init(t, next, bpf_get_smp_processor_id(), now);
			t->phase = P_WAIT;
			t->st.unseen++;
		}
	}
	if (t && t->phase == P_WAIT) {
		if (!now)
			now = bpf_ktime_get_ns();
		run_start(t, now);
		t->phase = P_RUN;
		slot_hold(t, next->pid, bpf_get_smp_processor_id(), now);
	}
	return 0;
}

/* ---- the anatomy's interrupts, and the overrun check's ticks ---------- */

/* TP_PROTO(int irq, struct irqaction *action) */
SEC("tp_btf/irq_handler_entry")
int BPF_PROG(cycle_irq_entry, int irq)
{
	irq_ctx_enter();
	LATMON_GATE();
	anat_irq_entry(irq);
	overrun_check(ctx);
	return 0;
}

SEC("tp_btf/irq_handler_exit")
int BPF_PROG(cycle_irq_exit, int irq)
{
	irq_ctx_exit();
	LATMON_GATE();
	anat_irq_exit(irq);
	return 0;
}

/* TP_PROTO(unsigned int vec_nr) */
SEC("tp_btf/softirq_entry")
int BPF_PROG(cycle_softirq_entry, unsigned int vec_nr)
{
	irq_ctx_enter();
	LATMON_GATE();
	anat_softirq_entry(vec_nr);
	return 0;
}

SEC("tp_btf/softirq_exit")
int BPF_PROG(cycle_softirq_exit, unsigned int vec_nr)
{
	irq_ctx_exit();
	LATMON_GATE();
	anat_softirq_exit(vec_nr);
	return 0;
}

/* Every hrtimer expiry, the scheduler tick's included: the overrun check
 * runs at least once a tick on a busy CPU. TP_PROTO(struct hrtimer *timer,
 * ktime_t *now) */
SEC("tp_btf/hrtimer_expire_entry")
int BPF_PROG(cycle_hrtimer_expire, struct hrtimer *timer)
{
	/* Before the gate: the interrupt-context count must stay balanced
	 * across certify's gate switches, or a wakeup would be misjudged. */
	irq_ctx_enter();
	LATMON_GATE();
	if (cycle_live > 0)
		clock_offsets_from(timer);
	timerfd_expiry(timer);
	overrun_check(ctx);
	return 0;
}

/* The expiry's function returned (the sleep rules' interrupt context
 * ends). TP_PROTO(struct hrtimer *timer) */
SEC("tp_btf/hrtimer_expire_exit")
int BPF_PROG(cycle_hrtimer_expire_exit)
{
	irq_ctx_exit();
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
