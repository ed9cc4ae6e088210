/* SPDX-License-Identifier: (GPL-2.0-only OR MIT) */
/*
 * Top causes of alerted time (timer, chain, runq with an anatomy): every
 * alert adds its anatomy's parts to its alert id's cause table before the
 * token bucket decides on its record, so a refused record's time still
 * counts. User space reads the tables once an interval and takes deltas
 * (src/probes/alerts.rs, crates/latmon-core/src/causes.rs).
 *
 * One table per alert id, shared by all CPUs: atomic adds, and an entry
 * is claimed with a compare-and-swap of its key. Causes are kept as kind
 * + id (thread id, IRQ number, softirq vector); names are resolved by
 * user space. A cause finding no free entry among LATMON_CAUSE_SLOTS is
 * added, counted, to folded_ns. An entry whose last addition is two
 * epochs old (user space advances the id's cause_epoch before each read) is
 * free again: the read after its last addition has seen all of its old
 * cause's time, so what it gains from then on is its new cause's.
 *
 * The parts are taken in a fixed order, each clamped to what is left of
 * the latency, and the rest is `other`: the tally's parts sum to the
 * alerts' latencies exactly. (Parts exceed the latency only when a
 * migrated waiter's slot was torn; the record then clamps its smallest
 * parts, the tally its last.) Two CPUs taking over the same stale entry
 * in the same instant may move one part between their two causes.
 *
 * Runs only when an alert fires: the cost per event is unchanged.
 * Kernel helpers only (no kernel types). The entry points are global
 * functions where an object defines LATMON_CAUSES_GLOBAL (timer: its chain
 * programs exceed the verifier's limit when every path to an alert checks
 * the tally again); a global function is checked at load even when
 * cfg.common.tally_causes is off, and its pointer argument and the
 * compare-and-swap need kernel 5.12. Elsewhere (runq, whose raw_tp and
 * no-BTF rungs serve kernels from 4.17) they are static subprograms: with
 * the tally off (user space sets it only with the anatomy, kernel 5.19)
 * the verifier never walks them and the older kernels load the object.
 * The including object declares its family's `cfg` first (alerts.bpf.h).
 */
#ifndef __CAUSES_BPF_H
#define __CAUSES_BPF_H

#include <bpf/bpf_helpers.h>
#include "latmon.h"

#ifndef LATMON_ALERT_IDS
#error "define LATMON_ALERT_IDS before including causes.bpf.h"
#endif

/* Parts of an anatomy: tasks, IRQs, softirq vectors, the two rests and the
 * timer's delay (`other` is what is left). */
#define LATMON_CAUSE_PARTS (LATMON_ANAT_TASKS + LATMON_ANAT_IRQS + LATMON_SOFTIRQ_VECS + 3)

/* Per alert id: advanced by user space before each read (a map, not a
 * global: user space writes one id's without touching the rest). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LATMON_ALERT_IDS);
	__type(key, __u32);
	__type(value, __u64);
} cause_epoch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LATMON_ALERT_IDS);
	__type(key, __u32);
	__type(value, struct latmon_cause_tally);
} cause_tally SEC(".maps");

static __always_inline __u64 cause_key(__u32 kind, __u32 id) { return (__u64)kind << 32 | id; }

/* Part n (< LATMON_CAUSE_PARTS) of an anatomy: its ns, and its key. */
static __always_inline __u64 anat_part(const struct latmon_anatomy *an, __u32 n, __u64 *key)
{
	if (n == 0) {
		*key = cause_key(LATMON_CAUSE_TIMER_IRQ_DELAY, 0);
		return an->timer_irq_delay_ns;
	}
	n -= 1;
	if (n < LATMON_ANAT_TASKS) {
		*key = cause_key(LATMON_CAUSE_TASK, an->task[n].pid);
		return an->task[n].ns;
	}
	n -= LATMON_ANAT_TASKS;
	if (n < LATMON_ANAT_IRQS) {
		*key = cause_key(LATMON_CAUSE_IRQ, an->irq[n].irq);
		return an->irq[n].ns;
	}
	n -= LATMON_ANAT_IRQS;
	if (n < LATMON_SOFTIRQ_VECS) {
		*key = cause_key(LATMON_CAUSE_SOFTIRQ, n);
		return an->softirq_ns[n];
	}
	n -= LATMON_SOFTIRQ_VECS;
	if (n == 0) {
		*key = cause_key(LATMON_CAUSE_TASK_REST, 0);
		return an->task_rest_ns;
	}
	*key = cause_key(LATMON_CAUSE_IRQ_REST, 0);
	return n == 1 ? an->irq_rest_ns : 0;
}

/* Add ns to cause `key` of table t (a subprogram: one copy of the two
 * scans for all parts). */
static __noinline int cause_add(struct latmon_cause_tally *t, __u64 key, __u64 ns, __u64 epoch)
{
	/* Both scans unrolled: clang rotates the second into a loop entered
	 * in its middle, whose back-edge is then a plain fall-through. The
	 * 6.1 kernels of the virtual boards (check_cfg there takes a back-edge
	 * only from a jump) reject that with "back-edge from insn N to N+1"
	 * (-EINVAL); this host's 6.18 accepts it. So the loop is not left to
	 * the compiler's layout. */
#pragma unroll
	for (int i = 0; i < LATMON_CAUSE_SLOTS; i++) {
		struct latmon_cause_entry *e = &t->slot[i];

		if (e->key == key) {
			__sync_fetch_and_add(&e->ns, ns);
			e->epoch = epoch;
			return 0;
		}
	}
#pragma unroll
	for (int i = 0; i < LATMON_CAUSE_SLOTS; i++) {
		struct latmon_cause_entry *e = &t->slot[i];
		__u64 k = e->key;

		if (k && e->epoch + 2 > epoch)
			continue;
		if (__sync_val_compare_and_swap(&e->key, k, key) != k)
			continue;
		e->epoch = epoch;
		__sync_fetch_and_add(&e->ns, ns);
		return 0;
	}
	__sync_fetch_and_add(&t->folded_ns, ns);
	__sync_fetch_and_add(&t->folded_parts, 1);
	return 0;
}

#ifdef LATMON_CAUSES_GLOBAL
#define LATMON_CAUSES_FN __noinline
#else
#define LATMON_CAUSES_FN static __noinline
#endif

/* One alert of id with latency delta and its anatomy. With
 * LATMON_CAUSES_GLOBAL a global function: the verifier checks it once, not
 * again on every path to an alert (the chain programs exceed its limit
 * otherwise); global functions take pointers to structs from kernel 5.12,
 * as the atomics here need too. */
LATMON_CAUSES_FN int latmon_cause_tally(__u32 id, __u64 delta, const struct latmon_anatomy *an)
{
	struct latmon_cause_tally *t;
	__u64 epoch, left = delta, key = 0, ns, *ep;

	if (!an)
		return 0;
	t = bpf_map_lookup_elem(&cause_tally, &id);
	ep = bpf_map_lookup_elem(&cause_epoch, &id);
	if (!t || !ep)
		return 0;
	epoch = *ep;
	__sync_fetch_and_add(&t->alerts, 1);
	__sync_fetch_and_add(&t->alerted_ns, delta);
	for (__u32 n = 0; n < LATMON_CAUSE_PARTS; n++) {
		ns = anat_part(an, n, &key);
		if (ns > left)
			ns = left;
		if (!ns)
			continue;
		left -= ns;
		cause_add(t, key, ns, epoch);
	}
	if (left)
		cause_add(t, cause_key(LATMON_CAUSE_OTHER, 0), left, epoch);
	return 0;
}

/* An alert without an anatomy: all of it is `other`. */
LATMON_CAUSES_FN int latmon_cause_tally_whole(__u32 id, __u64 delta)
{
	struct latmon_cause_tally *t = bpf_map_lookup_elem(&cause_tally, &id);
	__u64 *ep = bpf_map_lookup_elem(&cause_epoch, &id);

	if (!t || !ep)
		return 0;
	__sync_fetch_and_add(&t->alerts, 1);
	__sync_fetch_and_add(&t->alerted_ns, delta);
	if (delta)
		cause_add(t, cause_key(LATMON_CAUSE_OTHER, 0), delta, *ep);
	return 0;
}

#endif /* __CAUSES_BPF_H */
