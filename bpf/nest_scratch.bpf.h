/* SPDX-License-Identifier: (GPL-2.0-only OR MIT) */
/*
 * A per-CPU scratch record that programs nesting on one CPU do not share.
 *
 * Why: the kernel keeps a tracing program from running inside itself on
 * one CPU (prog->active; the nested run is skipped and counted in the
 * program's recursion_misses), and a classic tracepoint's program from
 * running inside another classic one (bpf_prog_active), but nothing keeps
 * a tp_btf program from running inside another program: a hard IRQ that
 * arrives while a syscall event's program builds a record runs
 * irq_handler_entry's and hrtimer_expire_entry's programs on top of it.
 * With one scratch entry per CPU the inner program's record overwrote the
 * outer's half-built one, which then went out with the inner's latency
 * and time: issue 40, a cycle miss record whose latency was 27 us past
 * its done - release (an overrun record built by the tick's
 * hrtimer_expire_entry inside the sleep's sys_enter program, a vCPU stall
 * between the two clock reads).
 *
 * Levels: task, softirq, hardirq, NMI - what can nest on one CPU. A
 * program takes the next entry (a per-CPU depth) and gives it back when
 * its record is out; the nesting is strictly last-in first-out on one
 * CPU, so the depth is exact. Beyond NEST_LEVELS: no entry, the caller
 * counts a drop.
 *
 * NESTED_SCRATCH(name, vtype) declares the maps `name` and `name_depth`
 * and
 *   vtype *name_take(void)  this level's entry, NULL: none (then nothing
 *                           to give back)
 *   void name_put(void)     gives the entry taken back
 */
#ifndef __NEST_SCRATCH_BPF_H
#define __NEST_SCRATCH_BPF_H

#define NEST_LEVELS 4

#define NESTED_SCRATCH(name, vtype)                                                  \
	struct {                                                                     \
		__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);                             \
		__uint(max_entries, NEST_LEVELS);                                    \
		__type(key, __u32);                                                  \
		__type(value, vtype);                                                \
	} name SEC(".maps");                                                         \
	struct {                                                                     \
		__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);                             \
		__uint(max_entries, 1);                                              \
		__type(key, __u32);                                                  \
		__type(value, __u32);                                                \
	} name##_depth SEC(".maps");                                                 \
	static __always_inline vtype *name##_take(void)                              \
	{                                                                            \
		__u32 zero = 0, level, *d;                                           \
		vtype *r;                                                            \
                                                                                     \
		d = bpf_map_lookup_elem(&name##_depth, &zero);                       \
		if (!d)                                                              \
			return NULL;                                                 \
		level = __sync_fetch_and_add(d, 1);                                  \
		r = level < NEST_LEVELS ? bpf_map_lookup_elem(&name, &level) : NULL; \
		if (!r)                                                              \
			__sync_fetch_and_add(d, -1);                                 \
		return r;                                                            \
	}                                                                            \
	static __always_inline void name##_put(void)                                 \
	{                                                                            \
		__u32 zero = 0, *d = bpf_map_lookup_elem(&name##_depth, &zero);      \
                                                                                     \
		if (d)                                                               \
			__sync_fetch_and_add(d, -1);                                 \
	}

#endif /* __NEST_SCRATCH_BPF_H */
