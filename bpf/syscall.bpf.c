// SPDX-License-Identifier: (GPL-2.0-only OR MIT)
/*
 * syscall: per-syscall latency, from raw_syscalls:sys_enter to the
 * raw_syscalls:sys_exit of the same task (what `syscount -L` times), one
 * histogram per syscall id.
 *
 * Designed to cost little more than its two timestamps (measured in
 * docs/probes.md). The straightforward design - the entry stamp in task
 * storage, looked up at entry and at exit - spends its time in two
 * bpf_task_storage_get() calls per syscall. Here the entry stamp goes to a
 * per-CPU slot instead: between a task's sys_enter and sys_exit nothing
 * else can run on that CPU unless the task is switched out, and only then
 * (tp_btf/sched_switch: prev is the slot's owner) is the stamp parked in
 * the task's storage. So a syscall that does not block costs two per-CPU
 * array accesses (the verifier inlines them); one that blocks pays one
 * storage write at the switch and one lookup at exit - once per blocking,
 * not per syscall.
 *
 * Histograms: a per-CPU array of LATMON_SYSCALL_SLOTS, slots handed out
 * on first use through sc_slot_of[] (id -> slot, a .bss array user space
 * reads to name its series); slot 0 collects ids without a slot.
 *
 * threshold_ns: a syscall above it counts in the slot's `alerts` and, at
 * sys_exit (current is the caller), becomes an alert record whose id is
 * the slot (alerts.bpf.h: one token bucket per slot).
 *
 * Variants, autoloaded by user space: tp_btf parks in task storage (5.11+,
 * freed with the task); raw_tp parks in a hash keyed by thread id.
 *
 * The tid hash holds a stamp only while its task lives: every exiting task
 * stamps its exit/exit_group, which never returns, and its final switch
 * would park that stamp for good. sched_process_exit (in the exiting task,
 * before that switch) empties the CPU slot and deletes the task's entry.
 * The hash is a plain one, not LRU: an LRU evicted the oldest entries -
 * the threads blocked longest - silently once ~10k exits had filled it
 * with stale stamps. Full now means LATMON_MAX_STAMPS threads blocked at
 * once inside syscalls; a stamp that finds no room is counted in slot 0's
 * drops, and so is a stale entry found at sys_exit (one whose task died
 * without the exit hook, e.g. before it was attached).
 *
 * Kernels without BTF: classic tracepoints raw_syscalls/sys_enter,
 * sys_exit and sched/sched_switch park like raw_tp does; the only record
 * field read, sys_enter's `id` (a long: 8 bytes, or 4 on 32-bit kernels),
 * at the offset and size user space took from its tracefs format file.
 */
/* LATMON_NO_BTF_VARIANT: build.rs also builds this file as syscall_nobtf
 * (-DLATMON_NO_BTF, nobtf.h instead of vmlinux.h, no CO-RE relocation):
 * only the classic tracepoint programs. */
#ifdef LATMON_NO_BTF
#include "nobtf.h"
#else
#include "vmlinux.h"
#endif
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "latmon.h"
#include "gate.bpf.h"
#include "maps.bpf.h"
#include "filter.bpf.h"
#include "tpfield.bpf.h"
/* Before the shared headers, which read cfg.common. The -1s stand until
 * the loader sets them: no syscall filter, no futex. */
const volatile struct latmon_syscall_config cfg = {
	.filter_id = -1,
	.futex_nr = -1,
	.futex_time64_nr = -1,
};
/* Alert ids are histogram slots: a record names its syscall's series. */
#define LATMON_ALERT_IDS LATMON_SYSCALL_SLOTS
#include "alerts.bpf.h"

/* id -> slot (0: none yet; LATMON_SYSCALL_SLOTS: none left, use slot 0). */
__u32 sc_slot_of[LATMON_SYSCALL_IDS];
/* slot -> id + 1 (0: free, or lost an allocation race). */
__u32 sc_slot_id[LATMON_SYSCALL_SLOTS];
/* Slots handed out so far. */
__u32 sc_nslots;

struct sc_stamp {
	__u64 ts; /* 0: empty */
	__u64 id;
	__u64 task; /* raw_tp: the parking task_struct, against tid reuse */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sc_stamp);
} sc_cpu SEC(".maps");

#ifndef LATMON_NO_BTF
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct sc_stamp);
} sc_parked SEC(".maps");
#endif

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LATMON_MAX_STAMPS);
	__type(key, __u32);
	__type(value, struct sc_stamp);
} sc_parked_by_tid SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LATMON_SYSCALL_SLOTS);
	__type(key, __u32);
	__type(value, struct latmon_hist);
} sc_hist SEC(".maps");

static __always_inline struct sc_stamp *cpu_stamp(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&sc_cpu, &zero);
}

/* The histogram slot of syscall `id`; hands out a slot on first use. */
static __always_inline __u32 slot_for(__u64 id)
{
	__u32 slot, old;

	if (id >= LATMON_SYSCALL_IDS)
		return 0;
	slot = sc_slot_of[id];
	if (slot)
		return slot < LATMON_SYSCALL_SLOTS ? slot : 0;
	slot = __sync_fetch_and_add(&sc_nslots, 1) + 1;
	if (slot >= LATMON_SYSCALL_SLOTS) {
		/* Out of slots: remember, so the counter stops moving. */
		__sync_val_compare_and_swap(&sc_slot_of[id], 0, LATMON_SYSCALL_SLOTS);
		return 0;
	}
	old = __sync_val_compare_and_swap(&sc_slot_of[id], 0, slot);
	if (old) /* another CPU was first; our slot stays unused */
		return old < LATMON_SYSCALL_SLOTS ? old : 0;
	sc_slot_id[slot] = id + 1;
	return slot;
}

/* At sys_exit: current is the task that made the syscall, as the alert
 * record wants. `ctx`: the program's, for the perf buffer. */
static __always_inline void record(void *ctx, __u64 id, __u64 start_ns)
{
	__u64 now = bpf_ktime_get_ns();
	__s64 delta = now - start_ns;
	__u32 slot = slot_for(id);
	struct latmon_hist *h = latmon_hist_get(&sc_hist, slot);

	if (!h)
		return;
	if (delta < 0) {
		h->drops++;
		return;
	}
	latmon_hist_record(h, delta);
	if (cfg.threshold_ns && delta > cfg.threshold_ns && !(id < LATMON_SYSCALL_IDS && cfg.quiet_id[id])) {
		h->alerts++;
		latmon_alert(ctx, slot, delta, now, NULL);
	}
}

static __always_inline void count_drop(void)
{
	struct latmon_hist *h = latmon_hist_get(&sc_hist, 0);

	if (h)
		h->drops++;
}

/* Both variants stamp the same way. `id` is the syscall (what filter_id
 * names), `as_id` the id it is counted under. */
static __always_inline void enter(long id, long as_id)
{
	struct sc_stamp *s;

	if (cfg.filter_id >= 0 && id != cfg.filter_id)
		return;
	if (!latmon_current_wanted(cfg.filter_pid, cfg.filter_comm))
		return;
	s = cpu_stamp();
	if (!s)
		return;
	s->id = as_id;
	s->ts = bpf_ktime_get_ns();
}

#ifndef LATMON_NO_BTF
/* futex's op (its second argument, the command in its low 7 bits below
 * FUTEX_PRIVATE_FLAG and FUTEX_CLOCK_REALTIME) says whether the caller
 * waits for a peer's wake or a timeout, or wakes, requeues or takes a PI
 * lock (service time, and a PI lock's wait is priority inversion: latency). */
static __always_inline long futex_split(long id, struct pt_regs *regs)
{
	unsigned long cmd;

	if (id != cfg.futex_nr && id != cfg.futex_time64_nr)
		return id;
	cmd = PT_REGS_PARM2_CORE_SYSCALL(regs) & 0x7f;
	if (cmd == 0 /* FUTEX_WAIT */ || cmd == 9 /* FUTEX_WAIT_BITSET */ || cmd == 11 /* FUTEX_WAIT_REQUEUE_PI */)
		return LATMON_SYSCALL_FUTEX_WAIT;
	return id;
}
#endif

/* The fast path: this task's stamp is still in the CPU slot. */
static __always_inline bool exit_fast(void *ctx)
{
	struct sc_stamp *s = cpu_stamp();

	if (!s || !s->ts)
		return false;
	record(ctx, s->id, s->ts);
	s->ts = 0;
	return true;
}

/* ---- tid-hash parking (raw_tp and tracepoint) --------------------------- */

/* sys_exit of a task whose stamp is not in the CPU slot. */
static __always_inline void exit_parked_by_tid(void *ctx)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct sc_stamp *p;

	p = bpf_map_lookup_elem(&sc_parked_by_tid, &tid);
	if (!p)
		return;
	/* A stale entry of an earlier thread with this id (one that died
	 * before the exit hook ran) must not time the first sys_exit of a new
	 * thread; its stamp is lost: counted. */
	if (p->task == bpf_get_current_task())
		record(ctx, p->id, p->ts);
	else
		count_drop();
	bpf_map_delete_elem(&sc_parked_by_tid, &tid);
}

/* sched_process_exit runs in the exiting task before its last switch: no
 * stamp of it may outlive it (its exit syscall never returns). */
static __always_inline void task_exit_by_tid(void)
{
	struct sc_stamp *s = cpu_stamp();
	__u32 tid = (__u32)bpf_get_current_pid_tgid();

	/* A stamp in the CPU slot is the running task's: exit/exit_group. */
	if (s)
		s->ts = 0;
	bpf_map_delete_elem(&sc_parked_by_tid, &tid);
}

/* sched_switch runs before the context switch: current is prev. */
static __always_inline void park_by_tid(void)
{
	struct sc_stamp *s = cpu_stamp();
	__u32 tid;

	if (!s || !s->ts)
		return;
	tid = (__u32)bpf_get_current_pid_tgid();
	s->task = bpf_get_current_task();
	if (bpf_map_update_elem(&sc_parked_by_tid, &tid, s, BPF_ANY))
		count_drop();
	s->ts = 0;
}

#ifndef LATMON_NO_BTF
/* ---- tp_btf: park in task storage -------------------------------------- */

/* TP_PROTO(struct pt_regs *regs, long id) */
SEC("tp_btf/sys_enter")
int BPF_PROG(sc_enter_btf, struct pt_regs *regs, long id)
{
	LATMON_GATE();
	enter(id, futex_split(id, regs));
	return 0;
}

/* TP_PROTO(struct pt_regs *regs, long ret) */
SEC("tp_btf/sys_exit")
int BPF_PROG(sc_exit_btf, struct pt_regs *regs, long ret)
{
	LATMON_GATE();
	struct sc_stamp *p;

	if (exit_fast(ctx))
		return 0;
	/* Switched out during the syscall, or not stamped at all. */
	p = bpf_task_storage_get(&sc_parked, bpf_get_current_task_btf(), 0, 0);
	if (!p || !p->ts)
		return 0;
	record(ctx, p->id, p->ts);
	p->ts = 0;
	return 0;
}

/* TP_PROTO(bool preempt, struct task_struct *prev, struct task_struct *next,
 *          unsigned int prev_state) */
SEC("tp_btf/sched_switch")
int BPF_PROG(sc_switch_btf, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	LATMON_GATE();
	struct sc_stamp *s = cpu_stamp(), *p;

	if (!s || !s->ts)
		return 0;
	/* The slot's owner is prev: it is leaving the CPU inside a syscall. */
	p = bpf_task_storage_get(&sc_parked, prev, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (p) {
		p->id = s->id;
		p->ts = s->ts;
	} else {
		count_drop();
	}
	s->ts = 0;
	return 0;
}

/* ---- raw_tp: park in an LRU hash keyed by thread id --------------------- */

SEC("raw_tp/sys_enter")
int BPF_PROG(sc_enter_raw, struct pt_regs *regs, long id)
{
	LATMON_GATE();
	enter(id, futex_split(id, regs));
	return 0;
}

SEC("raw_tp/sys_exit")
int BPF_PROG(sc_exit_raw, struct pt_regs *regs, long ret)
{
	LATMON_GATE();
	if (!exit_fast(ctx))
		exit_parked_by_tid(ctx);
	return 0;
}

SEC("raw_tp/sched_switch")
int BPF_PROG(sc_switch_raw, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	LATMON_GATE();
	park_by_tid();
	return 0;
}

SEC("raw_tp/sched_process_exit")
int sc_task_exit_raw(void *ctx)
{
	LATMON_GATE();
	task_exit_by_tid();
	return 0;
}
#endif /* !LATMON_NO_BTF */

#ifdef LATMON_NO_BTF
/* ---- tracepoint: record layout from tracefs format files ---------------- */

/* sys_enter's `id`, from events/raw_syscalls/sys_enter/format. */
const volatile struct latmon_tp_field enter_id = {};

SEC("tracepoint/raw_syscalls/sys_enter")
int sc_enter_tp(void *ctx)
{
	LATMON_GATE();
	long id = latmon_tp_read(ctx, &enter_id);

	/* No futex split here: this build reads no syscall argument. */
	enter(id, id);
	return 0;
}

SEC("tracepoint/raw_syscalls/sys_exit")
int sc_exit_tp(void *ctx)
{
	LATMON_GATE();
	if (!exit_fast(ctx))
		exit_parked_by_tid(ctx);
	return 0;
}

SEC("tracepoint/sched/sched_switch")
int sc_switch_tp(void *ctx)
{
	LATMON_GATE();
	park_by_tid();
	return 0;
}

SEC("tracepoint/sched/sched_process_exit")
int sc_task_exit_tp(void *ctx)
{
	LATMON_GATE();
	task_exit_by_tid();
	return 0;
}
#endif /* LATMON_NO_BTF */

char LICENSE[] SEC("license") = "Dual MIT/GPL";
