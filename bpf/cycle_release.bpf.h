/* SPDX-License-Identifier: (GPL-2.0-only OR MIT) */
/*
 * cycle (bpf/cycle.bpf.c): when a cycle is released. The release instant
 * from a timer sleep's syscall arguments, on CLOCK_MONOTONIC's scale
 * whatever the sleep's clock, the syscall events' records, and the period
 * detected from release-to-release steps.
 */
#ifndef __CYCLE_RELEASE_BPF_H
#define __CYCLE_RELEASE_BPF_H

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

#endif /* __CYCLE_RELEASE_BPF_H */
