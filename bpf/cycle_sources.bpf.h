/* SPDX-License-Identifier: (GPL-2.0-only OR MIT) */
/*
 * cycle (bpf/cycle.bpf.c): the programs of the release sources, each
 * ending a cycle (done) and telling the next release: the timer sleeps
 * (clock_nanosleep, nanosleep; their returns catch unseen releases), and
 * a periodic CLOCK_MONOTONIC timerfd, the loop that blocks in read() on it.
 *
 * The timer's expiry (hrtimer_expire_entry, the timer's function being
 * timerfd_tmrproc) names its reader: the task of the first waiters on the
 * timerfd's wait queue that a blocking read() queued (their wake function
 * is autoremove_wake_function; epoll's and poll's entries are not tasks).
 * That reader is entered (the filter decides), learns which timerfd is its
 * loop's, and its release is this expiry. Done is its next read() of that
 * timerfd (sys_enter_read, the fd looked up in its file table); the next
 * release is read from the timer there: its expiry if still queued, else
 * (the loop overran and the read returns at once) the latest expiry that
 * passed, as `now` rounded down to the timer's interval.
 *
 * sys_enter_read runs for every read on the machine: it compares the
 * thread id with the watched one before anything else, like the switch
 * and wakeup programs. Addresses of the two static functions come from
 * kallsyms (typeless __ksym: text symbols are there; data symbols are not
 * on kernels without CONFIG_KALLSYMS_ALL, so no timerfd_fops compare).
 */
#ifndef __CYCLE_SOURCES_BPF_H
#define __CYCLE_SOURCES_BPF_H

#include "cycle_account.bpf.h"
#include "cycle_life.bpf.h"
#include "cycle_rules.bpf.h"

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

SEC("tracepoint/syscalls/sys_enter_clock_nanosleep")
int cycle_clock_nanosleep(struct sys_enter_rec *ctx)
{
	LATMON_GATE();
	__u64 now = bpf_ktime_get_ns();

	struct cycle_thread *t;

	timer_sleep(ctx, clock_nanosleep_release(ctx, now), now, false);
	/* A CLOCK_REALTIME/TAI release: the offset it was put on
	 * CLOCK_MONOTONIC's scale with, to follow a clock set. */
	t = (ctx->args[1] & TIMER_ABSTIME) && (ctx->args[0] == CLOCK_REALTIME || ctx->args[0] == CLOCK_TAI)
		    ? thread_of((__u32)bpf_get_current_pid_tgid())
		    : NULL;
	if (t && t->phase == P_SLEEP) {
		t->clk_tai = ctx->args[0] == CLOCK_TAI;
		t->clk_off = t->clk_tai ? offs_tai : offs_real;
	}
	rule_timer_sleep(ctx, ctx->args[0], ctx->args[1], ctx->nr);
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_nanosleep")
int cycle_nanosleep(struct sys_enter_rec *ctx)
{
	LATMON_GATE();
	__u64 now = bpf_ktime_get_ns();
	__u64 req = timespec_ns((const struct __kernel_timespec *)ctx->args[0]);

	timer_sleep(ctx, req ? now + req : 0, now, false);
	rule_timer_sleep(ctx, CLOCK_MONOTONIC, 0, ctx->nr);
	return 0;
}

/* The current thread returns from a timer sleep. Still asleep by the
 * events: its release's wakeup and switch-in were not seen; it runs, so
 * it was released (ret 0), no later than now. An error (EINTR, a restart:
 * the timer did not fire, do_nanosleep returns 0 once it has) is no
 * release, even if a wakeup at or past the release time - the signal's,
 * ahead of the timer's interrupt - was taken for it: P_INTR. */
static __always_inline void sleep_exit(struct sys_exit_rec *ctx)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct cycle_thread *t = thread_of(tid);
	struct cycle_watch *w;
	__u32 zero = 0;
	__u64 now;

	if (!t || !t->release_ns)
		return;
	if (ctx->ret != 0) {
		if (t->phase != P_SLEEP && t->phase != P_WAIT && t->phase != P_RUN)
			return;
		slot_return(t);
		w = bpf_map_lookup_elem(&cycle_watch, &zero);
		if (w && w->tid == tid && __sync_val_compare_and_swap(&w->tid, tid, 0) == tid)
			__sync_fetch_and_add(&watches, -1);
		t->phase = P_INTR;
		return;
	}
	if (t->phase != P_SLEEP)
		return;
	now = bpf_ktime_get_ns();
	release_rescale(&t->release_ns, &t->clk_off, t->clk_tai);
	if (now < t->release_ns)
		return;
	release_init(t, bpf_get_current_task_btf(), bpf_get_smp_processor_id(), now);
	run_start(t, now);
	t->phase = P_RUN;
	t->st.unseen++;
	slot_hold(t, tid, bpf_get_smp_processor_id(), now);
}

SEC("tracepoint/syscalls/sys_exit_clock_nanosleep")
int cycle_clock_nanosleep_exit(struct sys_exit_rec *ctx)
{
	LATMON_GATE();
	sleep_exit(ctx);
	return 0;
}

SEC("tracepoint/syscalls/sys_exit_nanosleep")
int cycle_nanosleep_exit(struct sys_exit_rec *ctx)
{
	LATMON_GATE();
	sleep_exit(ctx);
	return 0;
}

/* ---- timerfd --------------------------------------------------------- */

extern const void timerfd_tmrproc __ksym __weak;
extern const void autoremove_wake_function __ksym __weak;

#define HRTIMER_STATE_ENQUEUED 0x01 /* include/linux/hrtimer.h */
/* Wait queue entries looked at per expiry: a loop's own blocking read is
 * nearly always alone on its timerfd. */
#define TFD_WAITERS 2

/* The timerfd's timer, at `c` (struct timerfd_ctx, read with probe reads:
 * container_of on a trusted pointer is refused). */
static __always_inline __u64 tfd_expires(struct timerfd_ctx *c) { return BPF_CORE_READ(c, t.tmr._softexpires); }

/* hrtimer_expire_entry: if `timer` is a CLOCK_MONOTONIC timerfd's, its
 * blocked reader's release is now (the timer's expiry). */
static __always_inline void timerfd_expiry(struct hrtimer *timer)
{
	struct timerfd_ctx *c;
	struct list_head *head, *pos;

	/* Without timerfd=true or cycle,auto cycle_read is not attached: a
	 * reader found here would never be done. (cycle,auto attaches it
	 * before it lists a timerfd loop in cycle_auto, and lists none if
	 * the attach failed.) */
	if ((!cfg.timerfd && !cfg.auto_watch) || !&timerfd_tmrproc || (__u64)timer->function != (__u64)&timerfd_tmrproc)
		return;
	c = (struct timerfd_ctx *)((__u64)timer - bpf_core_field_offset(struct timerfd_ctx, t.tmr));
	if (BPF_CORE_READ(c, clockid) != CLOCK_MONOTONIC)
		return;
	head = &c->wqh.head;
	pos = BPF_CORE_READ(c, wqh.head.next);
	for (int i = 0; i < TFD_WAITERS && pos && pos != head; i++) {
		struct wait_queue_entry *e =
			(struct wait_queue_entry *)((__u64)pos - bpf_core_field_offset(struct wait_queue_entry, entry));
		struct task_struct *p;
		struct cycle_thread *t;
		__u32 tid;

		pos = BPF_CORE_READ(e, entry.next);
		if ((__u64)BPF_CORE_READ(e, func) != (__u64)&autoremove_wake_function)
			continue;
		p = BPF_CORE_READ(e, private);
		if (!p)
			continue;
		tid = BPF_CORE_READ(p, pid);
		t = bpf_map_lookup_elem(&cycle_threads, &tid);
		if (!t)
			t = thread_enter(p, tid);
		if (!t)
			continue;
		t->tfd = (__u64)c;
		if (t->phase == P_NONE) {
			/* Its first release: the wakeup that follows starts it. */
			t->release_ns = tfd_expires(c);
			t->phase = P_SLEEP;
		}
	}
}

/* The file of descriptor `fd` of the current task (NULL: none). */
static __always_inline struct file *fd_file(struct task_struct *cur, __u64 fd)
{
	struct fdtable *fdt = BPF_CORE_READ(cur, files, fdt);
	struct file **fds;
	struct file *f = NULL;

	if (!fdt || fd >= BPF_CORE_READ(fdt, max_fds))
		return NULL;
	fds = BPF_CORE_READ(fdt, fd);
	if (bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]))
		return NULL;
	return f;
}

SEC("tracepoint/syscalls/sys_enter_read")
int cycle_read(struct sys_enter_rec *ctx)
{
	LATMON_GATE();
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct cycle_thread *t = thread_of(tid);
	struct timerfd_ctx *c;
	struct file *f;
	__u64 now, exp, iv, release = 0;
	bool blocks = false;

	if (!t || !t->tfd)
		return 0;
	f = fd_file(bpf_get_current_task_btf(), ctx->args[0]);
	if (!f || (__u64)BPF_CORE_READ(f, private_data) != t->tfd)
		return 0;
	c = (struct timerfd_ctx *)t->tfd;
	now = bpf_ktime_get_ns();
	exp = tfd_expires(c);
	iv = BPF_CORE_READ(c, tintv);
	if (BPF_CORE_READ(c, ticks)) {
		/* Expired while the loop ran: the read returns at once, the
		 * cycle released at the latest expiry passed. */
		release = exp;
		if (iv > 0 && now > exp)
			release = exp + (now - exp) / iv * iv;
	} else if (BPF_CORE_READ(c, t.tmr.state) & HRTIMER_STATE_ENQUEUED) {
		/* Queued: the read blocks until it fires, even if its expiry
		 * is due and not yet run (soft expiry on PREEMPT_RT). */
		release = exp;
		blocks = true;
	} else if (iv > 0 && now >= exp) {
		/* Neither queued nor expired: its expiry runs now on another
		 * CPU (a timer is off its queue while its function runs),
		 * whose wakeup the read waits for. */
		release = exp + (now - exp) / iv * iv;
		blocks = true;
	}
	timer_sleep(ctx, release, now, blocks);
	return 0;
}

#endif /* __CYCLE_SOURCES_BPF_H */
