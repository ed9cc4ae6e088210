/* SPDX-License-Identifier: (GPL-2.0-only OR MIT) */
/*
 * latmon.h - the single truth for everything the BPF programs and user space
 * share: histogram layout, limits and record structs.
 *
 * Rules (build.rs and the Rust side depend on them):
 *  - Every limit is a `#define LATMON_<NAME> <decimal literal>`. build.rs reads
 *    exactly those lines and emits Rust `pub const`s, so a limit is written
 *    once, here. Derived relations are checked with _Static_assert below.
 *  - Structs use fixed-width types and explicit padding; Rust reads them via
 *    the skeleton's generated types (never a hand-written twin).
 */
#ifndef __LATMON_H
#define __LATMON_H

/* Log-linear histogram: values below 2^SUB_BITS get one bucket each; every
 * power of two above is split into 2^SUB_BITS linear sub-buckets, so a
 * bucket is never wider than 1/8 (12.5 %) of its lower bound. */
#define LATMON_HIST_SUB_BITS 3
#define LATMON_HIST_SUBS 8
/* Values >= 2^MAX_LOG2 ns (68.7 s) land in the last bucket; min/max/sum stay
 * exact, and percentiles never go beyond the exact max. */
#define LATMON_HIST_MAX_LOG2 36
#define LATMON_HIST_BUCKETS 272

/* Bounded map sizes. */
#define LATMON_MAX_STAMPS 10240 /* in-flight start stamps (threads) */
#define LATMON_COMM_LEN 16      /* TASK_COMM_LEN */
#define LATMON_SELFTEST_VALUES 512

#if !defined(__cplusplus)
_Static_assert(LATMON_HIST_SUBS == 1 << LATMON_HIST_SUB_BITS, "SUBS = 2^SUB_BITS");
_Static_assert(LATMON_HIST_BUCKETS ==
	       (LATMON_HIST_MAX_LOG2 - LATMON_HIST_SUB_BITS + 1) << LATMON_HIST_SUB_BITS,
	       "BUCKETS must cover every power of two up to MAX_LOG2");
#endif

/* One histogram; stored per CPU, summed by user space. All times in ns.
 * min_ns is meaningful only when count > 0. */
struct latmon_hist {
	__u64 count;
	__u64 sum_ns;
	__u64 min_ns;
	__u64 max_ns;
	__u64 drops;   /* events lost to a full map or a clock that went back */
	__u64 alerts;  /* events above the probe's threshold */
	__u64 slots[LATMON_HIST_BUCKETS];
};

#endif /* __LATMON_H */
