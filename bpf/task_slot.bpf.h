/* SPDX-License-Identifier: (GPL-2.0-only OR MIT) */
/*
 * task_slot.bpf.h - a task's slot of per-task state that programs create
 * in atomic context (sched_waking, sched_switch: rq lock held, preemption
 * off): in task storage, or in a preallocated hash keyed by thread id.
 *
 * Why two stores: on PREEMPT_RT, bpf_task_storage_get(.., F_CREATE)
 * allocates with kmalloc, whose locks sleep there - "BUG: sleeping
 * function called from invalid context" under the rq lock, and hangs
 * (CVE-2024-58070; fixed by 8eef6ac4d70e "bpf: bpf_local_storage: Always
 * use bpf_mem_alloc in PREEMPT_RT", 6.14, stable 6.12.16 and 6.13.4). A
 * preallocated hash allocates nothing at update: its elements come from a
 * free list under raw spinlocks, safe in any context on RT too. User
 * space judges the kernel (src/rtkernel.rs) and sets cfg.common.task_slot
 * (rodata: the verifier prunes the store not taken).
 *
 * LATMON_TASK_SLOT(name, vtype, max) declares both maps - `name` (task
 * storage) and `name_by_tid` (the hash, `max` entries; user space shrinks
 * it to one entry when task storage is used) - and
 *   vtype *name_get(t)     t's slot, or NULL
 *   vtype *name_create(t)  t's slot, zeroed when new; NULL: none could be
 *                          made (storage allocation failed, hash full, or
 *                          t exiting) - the caller counts a drop. Two
 *                          CPUs making t's entry at once: BPF_NOEXIST
 *                          keeps the first, both then use it
 *   void name_delete(t)    hash: t's entry goes (sched_process_exit)
 * `cfg` (with `common` first) must be defined before the expansion.
 *
 * An entry lives from its task's first stamp until the task exits: each
 * object with slots deletes them from its sched_process_exit program,
 * which runs in the exiting task while its thread id is still its own,
 * as task storage is freed with its task. A task already exiting
 * (PF_EXITING, set before sched_process_exit) gets no new entry, which
 * would outlive it and be found by the next task given its thread id.
 * Not an LRU hash: an LRU makes room by evicting the least recently used
 * entry - another task's state, possibly a stamp in flight - without a
 * trace; a full plain hash refuses the newcomer, a counted drop.
 */
#ifndef __TASK_SLOT_BPF_H
#define __TASK_SLOT_BPF_H

#define LATMON_PF_EXITING 0x00000004 /* include/linux/sched.h, unchanged since 2.6 */

/* The key of task t's entry. LATMON_TASK_SLOT_HASH_MUTATED (test builds
 * only: bpf/test_hooks.bpf.h) keys new entries by the current task
 * instead: the waker, not the woken. */
static __always_inline __u32 latmon_slot_new_tid(struct task_struct *t)
{
#ifdef LATMON_TEST_HOOKS
	if (cfg.common.task_slot == LATMON_TASK_SLOT_HASH_MUTATED)
		return (__u32)bpf_get_current_pid_tgid();
#endif
	return t->pid;
}

#define LATMON_TASK_SLOT(name, vtype, max)                                                        \
	struct {                                                                                  \
		__uint(type, BPF_MAP_TYPE_TASK_STORAGE);                                          \
		__uint(map_flags, BPF_F_NO_PREALLOC);                                             \
		__type(key, int);                                                                 \
		__type(value, vtype);                                                             \
	} name SEC(".maps");                                                                      \
	struct {                                                                                  \
		__uint(type, BPF_MAP_TYPE_HASH);                                                  \
		__uint(max_entries, max);                                                         \
		__type(key, __u32);                                                               \
		__type(value, vtype);                                                             \
	} name##_by_tid SEC(".maps");                                                             \
	static __always_inline vtype *name##_get(struct task_struct *t)                           \
	{                                                                                         \
		__u32 tid;                                                                        \
                                                                                                  \
		if (cfg.common.task_slot == LATMON_TASK_SLOT_STORAGE)                             \
			return bpf_task_storage_get(&name, t, 0, 0);                              \
		tid = t->pid;                                                                     \
		return bpf_map_lookup_elem(&name##_by_tid, &tid);                                 \
	}                                                                                         \
	static __always_inline vtype *name##_create(struct task_struct *t)                        \
	{                                                                                         \
		vtype zero = {};                                                                  \
		vtype *v;                                                                         \
		__u32 tid;                                                                        \
                                                                                                  \
		if (cfg.common.task_slot == LATMON_TASK_SLOT_STORAGE)                             \
			return bpf_task_storage_get(&name, t, 0, BPF_LOCAL_STORAGE_GET_F_CREATE); \
		tid = latmon_slot_new_tid(t);                                                     \
		v = bpf_map_lookup_elem(&name##_by_tid, &tid);                                    \
		if (v || (t->flags & LATMON_PF_EXITING))                                          \
			return v;                                                                 \
		bpf_map_update_elem(&name##_by_tid, &tid, &zero, BPF_NOEXIST);                    \
		return bpf_map_lookup_elem(&name##_by_tid, &tid);                                 \
	}                                                                                         \
	static __always_inline void name##_delete(struct task_struct *t)                          \
	{                                                                                         \
		__u32 tid = t->pid;                                                               \
                                                                                                  \
		bpf_map_delete_elem(&name##_by_tid, &tid);                                        \
	}

#endif /* __TASK_SLOT_BPF_H */
