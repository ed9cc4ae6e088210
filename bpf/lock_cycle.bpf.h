/* SPDX-License-Identifier: (GPL-2.0-only OR MIT) */
/*
 * lock -> cycle: a cycle miss whose loop blocked on a lock says who held
 * it and what held the owner off, as the lock probe's own record does.
 * The two probes are separate objects; user space creates this map once
 * and gives it to both before load (src/probes/lock_cycle.rs):
 *   lock.bpf.c, at each futex wait's end with an owner: keeps the
 *     thread's longest such wait since the entry was last cleared;
 *   cycle.bpf.c, at each release of a watched loop: clears the loop's
 *     entry (the cycle starts with none); at a miss or slow response:
 *     copies the entry into the record if the wait began in this cycle.
 * An LRU hash: threads the lock probe watches but no cycle probe does
 * (nothing clears theirs) are evicted oldest first instead of filling
 * it; LOCK_CYCLE_THREADS is twice LOCK_THREADS, so a loop's entry
 * written microseconds before its done is not the oldest.
 */
#ifndef __LATMON_LOCK_CYCLE_BPF_H
#define __LATMON_LOCK_CYCLE_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "latmon.h"

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, LATMON_LOCK_CYCLE_THREADS);
	__type(key, __u32);
	__type(value, struct latmon_lock_record);
} lock_cycle SEC(".maps");

#endif /* __LATMON_LOCK_CYCLE_BPF_H */
