/* SPDX-License-Identifier: (GPL-2.0-only OR MIT) */
/* Map helpers: histogram recording into per-CPU array slots. */
#ifndef __MAPS_BPF_H
#define __MAPS_BPF_H

#include <bpf/bpf_helpers.h>
#include "bits.bpf.h"

/* Record one latency into a per-CPU histogram. The map is per CPU and
 * tracing programs do not nest on one CPU for the same program, so plain
 * read-modify-write is exact without atomics. */
static __always_inline void latmon_hist_record(struct latmon_hist *h, __u64 delta_ns)
{
	__u32 idx = latmon_bucket(delta_ns);

	if (h->count == 0 || delta_ns < h->min_ns)
		h->min_ns = delta_ns;
	if (delta_ns > h->max_ns)
		h->max_ns = delta_ns;
	h->count++;
	h->sum_ns += delta_ns;
	/* Redundant for the maths, needed by the verifier to bound the index. */
	if (idx < LATMON_HIST_BUCKETS)
		h->slots[idx]++;
}

/* The same for programs that can be preempted by another run of the same
 * program on the same CPU (uprobes run with only migration disabled; on
 * PREEMPT_RT tracing programs too): counts, sum and buckets are atomic
 * adds and stay exact; min/max may in a race miss an update. */
static __always_inline void latmon_hist_record_atomic(struct latmon_hist *h, __u64 delta_ns)
{
	__u32 idx = latmon_bucket(delta_ns);

	if (h->count == 0 || delta_ns < h->min_ns)
		h->min_ns = delta_ns;
	if (delta_ns > h->max_ns)
		h->max_ns = delta_ns;
	__sync_fetch_and_add(&h->sum_ns, delta_ns);
	if (idx < LATMON_HIST_BUCKETS)
		__sync_fetch_and_add(&h->slots[idx], 1);
	/* count last, after the bucket it counts. */
	__sync_fetch_and_add(&h->count, 1);
}

static __always_inline struct latmon_hist *latmon_hist_get(void *map, __u32 key)
{
	return bpf_map_lookup_elem(map, &key);
}

#endif /* __MAPS_BPF_H */
