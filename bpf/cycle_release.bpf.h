/* SPDX-License-Identifier: (GPL-2.0-only OR MIT) */
/*
 * cycle (bpf/cycle.bpf.c): when a cycle is released. The release instant
 * from a timer sleep's syscall arguments, on CLOCK_MONOTONIC's scale
 * whatever the sleep's clock, the syscall events' records, and the period
 * detected from release-to-release steps.
 */
#ifndef __CYCLE_RELEASE_BPF_H
#define __CYCLE_RELEASE_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "latmon.h"

#define TIMER_ABSTIME 1 /* include/uapi/linux/time.h */
#define CLOCK_REALTIME 0
#define CLOCK_MONOTONIC 1
#define CLOCK_BOOTTIME 7
#define CLOCK_TAI 11

/* The offsets the kernel adds to monotonic time to expire a
 * CLOCK_REALTIME and a CLOCK_TAI timer (its hrtimer bases' `offset`, which
 * it refreshes at every hrtimer interrupt and when the clock is set),
 * copied from the bases of each expiring hrtimer (clock_offsets_from()).
 * 0: none seen yet. (The per-CPU `hrtimer_bases` cannot be read directly:
 * the kernel resolves a per-CPU ksym through kallsyms, which holds no data
 * symbols without CONFIG_KALLSYMS_ALL.) */
__s64 offs_real;
__s64 offs_tai;

/* Called from hrtimer_expire_entry: the offsets of the expiring timer's
 * CPU, written only when they changed (every CPU runs this). */
static __always_inline void clock_offsets_from(struct hrtimer *timer)
{
	struct hrtimer_cpu_base *cb = timer->base->cpu_base;
	__s64 r = cb->clock_base[HRTIMER_BASE_REALTIME].offset;
	__s64 t = cb->clock_base[HRTIMER_BASE_TAI].offset;

	if (r > 0 && r != offs_real)
		offs_real = r;
	if (t > 0 && t != offs_tai)
		offs_tai = t;
}

/* The syscall exit events' record (struct syscall_trace_exit): ret at
 * offset 16, as tracefs' format says. */
struct sys_exit_rec {
	__u64 common;
	__s32 nr;
	__u32 pad;
	__s64 ret;
};

static __always_inline __u64 timespec_ns(const struct __kernel_timespec *ts)
{
	struct __kernel_timespec v;

	if (bpf_probe_read_user(&v, sizeof(v), ts))
		return 0;
	if (v.tv_sec < 0 || v.tv_nsec < 0)
		return 0;
	return (__u64)v.tv_sec * 1000000000ull + (__u64)v.tv_nsec;
}

/* The syscall events' record (struct syscall_trace_enter, kernel/trace/
 * trace.h): its argument array is at offset 16 as tracefs' format says,
 * the same since syscall tracepoints exist. */
struct sys_enter_rec {
	__u64 common;
	__s32 nr;
	__u32 pad;
	__u64 args[6];
};

/* An absolute time `t` of a clock `off` ahead of CLOCK_MONOTONIC on
 * CLOCK_MONOTONIC's scale. 0: not known. */
static __always_inline __u64 on_monotonic(__u64 t, __s64 off)
{
	if (off <= 0 || t <= (__u64)off)
		return 0;
	return t - (__u64)off;
}

/* The release of a clock_nanosleep entered at `now` (0: not a timer
 * release: no time, or a CPU-time clock). */
static __always_inline __u64 clock_nanosleep_release(struct sys_enter_rec *ctx, __u64 now)
{
	__u64 clk = ctx->args[0], flags = ctx->args[1];
	__u64 req = timespec_ns((const struct __kernel_timespec *)ctx->args[2]);

	if (!req)
		return 0;
	if (!(flags & TIMER_ABSTIME))
		return now + req;
	if (clk == CLOCK_MONOTONIC)
		return req;
	if (clk == CLOCK_BOOTTIME)
		return req - bpf_ktime_get_boot_ns() + now;
	if (clk == CLOCK_REALTIME)
		return on_monotonic(req, offs_real);
	if (clk == CLOCK_TAI)
		return on_monotonic(req, offs_tai);
	return 0;
}

/* A CLOCK_REALTIME/TAI release (`*release` on CLOCK_MONOTONIC's scale,
 * computed with that clock's offset `*off`; 0: not such a release) after
 * the clock was set: the kernel expires the timer at the clock's new
 * time, so the release moves by the offset's change (issue 40: a 2 s
 * backward step read "miss 2.00s: timer irq delay" for a sleep that woke
 * on time by its clock). The offset is the one the last hrtimer expiry
 * saw: the loop's own timer's expiry copies it before it wakes the loop. */
static __always_inline void release_rescale(__u64 *release, __s64 *off, __u32 tai)
{
	__s64 now_off = tai ? offs_tai : offs_real;

	if (!*off || now_off <= 0 || now_off == *off)
		return;
	*release = (__u64)((__s64)*release + *off - now_off);
	*off = now_off;
}

/* One release-to-release step into the period bins of `st`; `fixed`:
 * the period given (period=), 0: detect it. */
static __always_inline void period_step(struct latmon_cycle_stats *st, __u64 fixed, __u64 step)
{
	int hit = -1, least = 0;
	__u64 best = 0;

	if (fixed) {
		st->period_ns = fixed;
		return;
	}
	for (int i = 0; i < LATMON_CYCLE_STEP_BINS; i++) {
		struct latmon_cycle_bin *b = &st->bin[i];
		__u64 d = b->first_ns > step ? b->first_ns - step : step - b->first_ns;

		if (b->first_ns && d * 100 <= b->first_ns) {
			hit = i;
			break;
		}
		if (b->count < st->bin[least & (LATMON_CYCLE_STEP_BINS - 1)].count)
			least = i;
	}
	if (hit < 0) {
		/* A new step replaces the emptiest bin (skipped releases and
		 * one-off steps never fill one). */
		hit = least;
		st->bin[hit & (LATMON_CYCLE_STEP_BINS - 1)].first_ns = step;
		st->bin[hit & (LATMON_CYCLE_STEP_BINS - 1)].count = 0;
		st->bin[hit & (LATMON_CYCLE_STEP_BINS - 1)].sum_ns = 0;
	}
	st->bin[hit & (LATMON_CYCLE_STEP_BINS - 1)].count++;
	st->bin[hit & (LATMON_CYCLE_STEP_BINS - 1)].sum_ns += step;
	st->period_ns = 0;
	for (int i = 0; i < LATMON_CYCLE_STEP_BINS; i++) {
		struct latmon_cycle_bin *b = &st->bin[i];

		if (b->count >= LATMON_CYCLE_PERIOD_MIN_STEPS && b->count > best) {
			best = b->count;
			st->period_ns = b->sum_ns / b->count;
		}
	}
}

/* The candidate of a period change: a run of steps off the period. */
struct period_cand {
	__u64 first_ns; /* its first step */
	__u64 sum_ns;
	__u32 count;
	__u32 pad;
};

static __always_inline bool within_1pct(__u64 a, __u64 ref)
{
	__u64 d = a > ref ? a - ref : ref - a;

	return d * 100 <= ref;
}

/* Issue 40: the fullest bin never lost to a new rate (1 kHz -> 100 Hz was
 * judged against 1 ms forever, every cycle a miss). The detected period
 * follows the loop's recent steps: FOLLOW_STEPS consecutive steps within
 * 1 % of each other, off the period, make the new period, its bin the
 * only one (as full as a detected period needs). A longer step counts
 * only when the loop asked to sleep at least the old period (`asked`:
 * release - now at the sleep): an overrunning loop skipping to its next
 * boundary sleeps less, and its skips stay misses, not a new period. */
static __always_inline void period_follow(struct latmon_cycle_stats *st, struct period_cand *c, __u64 fixed, __u64 step,
					  __u64 asked)
{
	__u64 cur = st->period_ns, mean;

	if (fixed || !cur || within_1pct(step, cur) || (step > cur && asked < cur)) {
		c->count = 0;
		return;
	}
	if (!c->count || !within_1pct(step, c->first_ns)) {
		c->first_ns = step;
		c->sum_ns = 0;
		c->count = 0;
	}
	c->sum_ns += step;
	if (++c->count < LATMON_CYCLE_PERIOD_FOLLOW_STEPS)
		return;
	mean = c->sum_ns / c->count;
	for (int i = 0; i < LATMON_CYCLE_STEP_BINS; i++) {
		st->bin[i].first_ns = 0;
		st->bin[i].count = 0;
		st->bin[i].sum_ns = 0;
	}
	st->bin[0].first_ns = c->first_ns;
	st->bin[0].count = LATMON_CYCLE_PERIOD_MIN_STEPS;
	st->bin[0].sum_ns = mean * LATMON_CYCLE_PERIOD_MIN_STEPS;
	st->period_ns = mean;
	c->count = 0;
}

#endif /* __CYCLE_RELEASE_BPF_H */
