/* SPDX-License-Identifier: (GPL-2.0-only OR MIT) */
/* Bucket index maths shared by every probe family. */
#ifndef __BITS_BPF_H
#define __BITS_BPF_H

#include "latmon.h"

/* floor(log2(v)) for v > 0, as a branchless shift cascade: clang 14 spins
 * forever on __builtin_clzll for the BPF target (seen with Debian's clang 14). */
static __always_inline __u32 latmon_log2_u32(__u32 v)
{
	__u32 r, s;

	r = (v > 0xffff) << 4;
	v >>= r;
	s = (v > 0xff) << 3;
	v >>= s;
	r |= s;
	s = (v > 0xf) << 2;
	v >>= s;
	r |= s;
	s = (v > 0x3) << 1;
	v >>= s;
	r |= s;
	return r | (v >> 1);
}

static __always_inline __u32 latmon_log2_u64(__u64 v)
{
	__u32 hi = v >> 32;

	return hi ? latmon_log2_u32(hi) + 32 : latmon_log2_u32((__u32)v);
}

/* Log-linear bucket of a value in ns; mirrored by hist::bucket_index() in
 * Rust and proven equal by a BPF_PROG_TEST_RUN test (selftest.bpf.c). */
static __always_inline __u32 latmon_bucket(__u64 v)
{
	__u32 msb;

	if (v < LATMON_HIST_SUBS)
		return v;
	msb = latmon_log2_u64(v);
	if (msb >= LATMON_HIST_MAX_LOG2)
		return LATMON_HIST_BUCKETS - 1;
	return ((msb - LATMON_HIST_SUB_BITS + 1) << LATMON_HIST_SUB_BITS) +
	       ((v >> (msb - LATMON_HIST_SUB_BITS)) & (LATMON_HIST_SUBS - 1));
}

#endif /* __BITS_BPF_H */
