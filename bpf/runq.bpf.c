// SPDX-License-Identifier: (GPL-2.0-only OR MIT)
/*
 * runq: run-queue latency, the time a runnable task waits for a CPU - from
 * its wakeup (sched_wakeup, sched_wakeup_new) or from being preempted while
 * still runnable, to the sched_switch that puts it on a CPU. Same definition
 * as libbpf-tools' runqlat.
 *
 * The start stamp lives in task-local storage (tp_btf, kernel >= 5.11): no
 * hash lookup, no pid-reuse hazard, freed by the kernel when the task exits,
 * so the map is bounded by the number of tasks. Kernels without tp_btf or
 * task storage get the raw_tp variant with runqlat's bounded hash keyed by
 * pid (a full map is a counted drop). User space autoloads one set.
 *
 * Rejected by measurement: a switch-only design computing
 * rq->clock - next->sched_info.last_queued (no wakeup program at all). When
 * a wakeup preempts the running task (e.g. an idle CPU), wakeup_preempt()
 * calls rq_clock_skip_update(), so __schedule() does not refresh rq->clock
 * and the delta reads 0 for exactly the wakeups whose idle-exit cost an RT
 * integrator wants to see (70 % zeros on an idle host).
 *
 * Kernels without BTF: see the tracepoint section at the end.
 */
/* LATMON_NO_BTF_VARIANT: build.rs also builds this file as runq_nobtf
 * (-DLATMON_NO_BTF, nobtf.h instead of vmlinux.h, no CO-RE relocation):
 * only the classic tracepoint programs, reading the record layout user
 * space took from tracefs format files. */
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
#include "tpfield.bpf.h"
/* Before the shared headers, which read cfg.common. */
const volatile struct latmon_runq_config cfg = {};
#define LATMON_ALERT_IDS 1
#define LATMON_ALERT_ANATOMY
#include "alerts.bpf.h"
#ifndef LATMON_NO_BTF
#include <bpf/bpf_core_read.h>
#include "core_fixes.bpf.h"
#include "filter.bpf.h"
#endif
#include "anatomy.bpf.h"

#define TASK_RUNNING 0

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct latmon_hist);
} runq_hist SEC(".maps");

/* A waiting task's stamp. */
struct runq_stamp {
	__u64 start_ns; /* 0: not waiting */
	__u32 anat;	/* anatomy slot held (anat_claim), 0: none */
	__u32 pad;
};

#ifndef LATMON_NO_BTF
/* tp_btf: in task storage. */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct runq_stamp);
} runq_start SEC(".maps");
#endif

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LATMON_MAX_STAMPS);
	__type(key, __u32);
	__type(value, struct runq_stamp);
} runq_start_by_pid SEC(".maps");

#ifndef LATMON_NO_BTF
static __always_inline bool comm_wanted(struct task_struct *t)
{
	char comm[LATMON_COMM_LEN];

	if (!cfg.filter_comm[0])
		return true;
	if (bpf_probe_read_kernel_str(comm, sizeof(comm), &t->comm) < 0)
		return false;
	return latmon_comm_equal(comm, cfg.filter_comm);
}

/* The idle task (pid 0) never waits on a run queue. */
static __always_inline bool wanted(__u32 pid, __u32 tgid, struct task_struct *t)
{
	if (!pid)
		return false;
	if (cfg.filter_tgid && tgid != cfg.filter_tgid)
		return false;
	return comm_wanted(t);
}
#endif

/* The task `who` (NULL: unknown) waited delta_ns and runs now; `an`: the
 * anatomy of its wait (NULL: none). */
static __always_inline void record(void *ctx, __s64 delta_ns, const struct latmon_alert_who *who,
				   const struct latmon_anatomy *an)
{
	struct latmon_hist *h = latmon_hist_get(&runq_hist, 0);

	if (!h)
		return;
	if (delta_ns < 0) {
		h->drops++;
		return;
	}
	latmon_hist_record(h, delta_ns);
	if (cfg.threshold_ns && delta_ns > cfg.threshold_ns) {
		h->alerts++;
		/* At sched_switch the current task is still prev: the record
		 * names the task switched in. */
		latmon_alert_anat(ctx, 0, delta_ns, who, an);
	}
}

static __always_inline void count_drop(void)
{
	struct latmon_hist *h = latmon_hist_get(&runq_hist, 0);

	if (h)
		h->drops++;
}

#ifndef LATMON_NO_BTF
/* ---- tp_btf: task-local storage ---------------------------------------- */

/* p waits from now on, on the CPU it is queued on, which accounts why. */
static __always_inline void stamp_task(struct task_struct *p)
{
	struct runq_stamp *st;
	__u64 now;

	if (!wanted(p->pid, p->tgid, p))
		return;
	st = bpf_task_storage_get(&runq_start, p, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!st) {
		count_drop(); /* storage allocation failed */
		return;
	}
	now = bpf_ktime_get_ns();
	st->start_ns = now;
	st->anat = anat_claim(p, latmon_task_cpu_btf(p), now);
}

/* TP_PROTO(struct task_struct *p) for sched_wakeup and sched_wakeup_new */
SEC("tp_btf/sched_wakeup")
int BPF_PROG(runq_wakeup_btf, struct task_struct *p)
{
	LATMON_GATE();
	stamp_task(p);
	return 0;
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(runq_wakeup_new_btf, struct task_struct *p)
{
	LATMON_GATE();
	stamp_task(p);
	return 0;
}

/* TP_PROTO(bool preempt, struct task_struct *prev, struct task_struct *next,
 *          unsigned int prev_state) */
SEC("tp_btf/sched_switch")
int BPF_PROG(runq_switch_btf, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	LATMON_GATE();
	struct runq_stamp *st;
	__u64 now_ns = 0;

	/* anatomy: prev held a waiting CPU until now. */
	if (anat_held > 0) {
		now_ns = bpf_ktime_get_ns();
		anat_switch(prev, now_ns);
	}
	st = bpf_task_storage_get(&runq_start, next, 0, 0);
	if (st && st->start_ns) {
		struct latmon_alert_who who = {.pid = next->tgid, .tid = next->pid, .comm = &next->comm};
		struct anat_slot *slot = anat_take(next, st->anat);

		if (!now_ns)
			now_ns = bpf_ktime_get_ns();
		record(ctx, (__s64)(now_ns - st->start_ns), &who, slot ? &slot->acc : NULL);
		anat_release(slot);
		st->start_ns = 0;
		st->anat = 0;
	}
	/* A preempted task stays runnable: its wait starts now (after next
	 * gave back this CPU's anatomy slot, which prev may now claim). */
	if (latmon_task_state(prev) == TASK_RUNNING)
		stamp_task(prev);
	return 0;
}

/* ---- tp_btf: anatomy, hard and soft interrupts on a waiting CPU -------- */

/* TP_PROTO(int irq, struct irqaction *action) */
SEC("tp_btf/irq_handler_entry")
int BPF_PROG(runq_anat_irq_entry_btf, int irq, struct irqaction *action)
{
	LATMON_GATE();
	anat_irq_entry(irq);
	return 0;
}

/* TP_PROTO(int irq, struct irqaction *action, int ret) */
SEC("tp_btf/irq_handler_exit")
int BPF_PROG(runq_anat_irq_exit_btf, int irq, struct irqaction *action, int ret)
{
	LATMON_GATE();
	anat_irq_exit(irq);
	return 0;
}

/* TP_PROTO(unsigned int vec_nr) */
SEC("tp_btf/softirq_entry")
int BPF_PROG(runq_anat_softirq_entry_btf, unsigned int vec_nr)
{
	LATMON_GATE();
	anat_softirq_entry(vec_nr);
	return 0;
}

SEC("tp_btf/softirq_exit")
int BPF_PROG(runq_anat_softirq_exit_btf, unsigned int vec_nr)
{
	LATMON_GATE();
	anat_softirq_exit(vec_nr);
	return 0;
}

/* ---- raw_tp: bounded hash keyed by pid --------------------------------- */

/* Task arguments are untrusted here: CO-RE reads. */
static __always_inline void stamp_pid(struct task_struct *p)
{
	__u32 pid = BPF_CORE_READ(p, pid);
	struct runq_stamp st;

	if (!wanted(pid, BPF_CORE_READ(p, tgid), p))
		return;
	st.start_ns = bpf_ktime_get_ns();
	st.anat = anat_claim(p, latmon_task_cpu_btf(p), st.start_ns);
	st.pad = 0;
	if (bpf_map_update_elem(&runq_start_by_pid, &pid, &st, BPF_ANY)) {
		anat_release(anat_take(p, st.anat));
		count_drop(); /* map full */
	}
}

SEC("raw_tp/sched_wakeup")
int BPF_PROG(runq_wakeup_raw, struct task_struct *p)
{
	LATMON_GATE();
	stamp_pid(p);
	return 0;
}

SEC("raw_tp/sched_wakeup_new")
int BPF_PROG(runq_wakeup_new_raw, struct task_struct *p)
{
	LATMON_GATE();
	stamp_pid(p);
	return 0;
}

SEC("raw_tp/sched_switch")
int BPF_PROG(runq_switch_raw, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	LATMON_GATE();
	__u32 pid = BPF_CORE_READ(next, pid);
	struct runq_stamp *st;
	__u64 now_ns = 0;

	/* anatomy: prev held a waiting CPU until now. */
	if (anat_held > 0) {
		now_ns = bpf_ktime_get_ns();
		anat_switch_raw(prev, now_ns);
	}
	st = bpf_map_lookup_elem(&runq_start_by_pid, &pid);
	if (st) {
		struct latmon_alert_who who = {.pid = BPF_CORE_READ(next, tgid), .tid = pid, .comm = &next->comm};
		struct anat_slot *slot = anat_take(next, st->anat);

		if (!now_ns)
			now_ns = bpf_ktime_get_ns();
		record(ctx, (__s64)(now_ns - st->start_ns), &who, slot ? &slot->acc : NULL);
		anat_release(slot);
		bpf_map_delete_elem(&runq_start_by_pid, &pid);
	}
	/* After next gave back this CPU's anatomy slot (as on tp_btf). */
	if (latmon_task_state(prev) == TASK_RUNNING)
		stamp_pid(prev);
	return 0;
}

/* ---- raw_tp: anatomy, hard and soft interrupts on a waiting CPU -------- */

SEC("raw_tp/irq_handler_entry")
int BPF_PROG(runq_anat_irq_entry_raw, int irq)
{
	LATMON_GATE();
	anat_irq_entry(irq);
	return 0;
}

SEC("raw_tp/irq_handler_exit")
int BPF_PROG(runq_anat_irq_exit_raw, int irq)
{
	LATMON_GATE();
	anat_irq_exit(irq);
	return 0;
}

SEC("raw_tp/softirq_entry")
int BPF_PROG(runq_anat_softirq_entry_raw, unsigned int vec_nr)
{
	LATMON_GATE();
	anat_softirq_entry(vec_nr);
	return 0;
}

SEC("raw_tp/softirq_exit")
int BPF_PROG(runq_anat_softirq_exit_raw, unsigned int vec_nr)
{
	LATMON_GATE();
	anat_softirq_exit(vec_nr);
	return 0;
}
#endif /* !LATMON_NO_BTF */

#ifdef LATMON_NO_BTF
/* ---- tracepoint: record layout from tracefs format files ---------------
 *
 * For kernels without BTF (Debian armmp): no task_struct, so everything
 * comes from the records of sched_wakeup(_new) (pid, comm) and
 * sched_switch (prev_pid, prev_comm, prev_state, next_pid), at offsets and
 * sizes user space parsed from events/sched/<event>/format and set here
 * before load. Stamps in the pid-keyed hash, as raw_tp does. With a
 * threshold, the anatomy too (bpf/anatomy.bpf.h's no-BTF section): the
 * woken-on CPU from the wakeup's target_cpu, prev's priority from
 * sched_switch's prev_prio, and the IRQ number and softirq vector from the
 * irq events' records.
 */
const volatile struct latmon_tp_field wakeup_pid = {};
const volatile struct latmon_tp_field wakeup_comm = {};
const volatile struct latmon_tp_field wakeup_cpu = {};
const volatile struct latmon_tp_field wakeup_new_pid = {};
const volatile struct latmon_tp_field wakeup_new_comm = {};
const volatile struct latmon_tp_field wakeup_new_cpu = {};
/* anatomy only (user space sets them when cfg.common.anatomy is): prev's
 * priority, the IRQ number and the softirq vector. */
const volatile struct latmon_tp_field switch_prev_prio = {};
const volatile struct latmon_tp_field irq_entry_irq = {};
const volatile struct latmon_tp_field irq_exit_irq = {};
const volatile struct latmon_tp_field soft_entry_vec = {};
const volatile struct latmon_tp_field soft_exit_vec = {};
const volatile struct latmon_tp_field switch_prev_pid = {};
const volatile struct latmon_tp_field switch_prev_comm = {};
const volatile struct latmon_tp_field switch_prev_state = {};
const volatile struct latmon_tp_field switch_next_pid = {};
const volatile struct latmon_tp_field switch_next_comm = {};
/* sched_switch's prev_state is the kernel's report value (since 4.14,
 * __trace_sched_switch_state): 0 for a task still running, one bit per
 * sleeping state below TASK_REPORT_MAX, and TASK_REPORT_MAX itself for a
 * preempted task. Still runnable = no bit below it, the "R" of the
 * format's print fmt, from which user space takes the value. */
const volatile __u64 report_max = 0x100;

/* pid= without task structs: the records carry no tgid. Threads of the
 * filtered process, learnt at sched_switch, where current is prev (a
 * thread is switched out before it can be woken). A pid reused by another
 * process leaves the set at its first switch-out. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LATMON_MAX_STAMPS);
	__type(key, __u32);
	__type(value, __u8);
} runq_tids SEC(".maps");

/* Thread `pid` waits from now on, queued on `cpu`, which accounts why. */
static __always_inline void stamp_tid(__u32 pid, __u32 cpu)
{
	struct runq_stamp st;

	st.start_ns = bpf_ktime_get_ns();
	st.anat = anat_claim_key(pid, cpu, st.start_ns);
	st.pad = 0;
	if (bpf_map_update_elem(&runq_start_by_pid, &pid, &st, BPF_ANY)) {
		anat_release(anat_take_key(pid, st.anat));
		count_drop(); /* map full */
	}
}

static __always_inline int wakeup_tp(void *ctx, const volatile struct latmon_tp_field *pid_f,
				     const volatile struct latmon_tp_field *comm_f,
				     const volatile struct latmon_tp_field *cpu_f, bool new_task)
{
	__u32 pid = latmon_tp_read(ctx, pid_f);

	if (!pid)
		return 0;
	if (cfg.filter_tgid) {
		/* A new task has not run yet: admitted when its creator
		 * (current) belongs to the process. */
		if (new_task ? (bpf_get_current_pid_tgid() >> 32) != cfg.filter_tgid
			     : !bpf_map_lookup_elem(&runq_tids, &pid))
			return 0;
	}
	if (!latmon_tp_comm_is(ctx, comm_f, cfg.filter_comm))
		return 0;
	stamp_tid(pid, cfg.common.anatomy ? latmon_tp_read(ctx, cpu_f) : 0);
	return 0;
}

SEC("tracepoint/sched/sched_wakeup")
int runq_wakeup_tp(void *ctx)
{
	LATMON_GATE();
	return wakeup_tp(ctx, &wakeup_pid, &wakeup_comm, &wakeup_cpu, false);
}

SEC("tracepoint/sched/sched_wakeup_new")
int runq_wakeup_new_tp(void *ctx)
{
	LATMON_GATE();
	return wakeup_tp(ctx, &wakeup_new_pid, &wakeup_new_comm, &wakeup_new_cpu, true);
}

SEC("tracepoint/sched/sched_switch")
int runq_switch_tp(void *ctx)
{
	LATMON_GATE();
	__u32 prev = latmon_tp_read(ctx, &switch_prev_pid);
	__u32 next = latmon_tp_read(ctx, &switch_next_pid);
	__u64 state = latmon_tp_read(ctx, &switch_prev_state);
	bool prev_wanted = prev != 0;
	struct runq_stamp *st;
	__u64 now_ns = 0;

	/* anatomy: prev held a waiting CPU until now. */
	if (anat_held > 0) {
		now_ns = bpf_ktime_get_ns();
		anat_switch_tp(ctx, prev, latmon_tp_read(ctx, &switch_prev_prio), &switch_prev_comm, now_ns);
	}

	if (cfg.filter_tgid && prev) {
		if ((bpf_get_current_pid_tgid() >> 32) == cfg.filter_tgid) {
			__u8 one = 1;

			bpf_map_update_elem(&runq_tids, &prev, &one, BPF_ANY);
		} else {
			bpf_map_delete_elem(&runq_tids, &prev);
			prev_wanted = false;
		}
	}
	st = bpf_map_lookup_elem(&runq_start_by_pid, &next);
	if (st) {
		/* The record carries no tgid: the alert's pid is the thread's. */
		struct latmon_alert_who who = {.pid = next, .tid = next, .comm = ctx + switch_next_comm.offset};
		struct anat_slot *slot = anat_take_key(next, st->anat);

		if (!now_ns)
			now_ns = bpf_ktime_get_ns();
		record(ctx, (__s64)(now_ns - st->start_ns), &who, slot ? &slot->acc : NULL);
		anat_release(slot);
		bpf_map_delete_elem(&runq_start_by_pid, &next);
	}
	/* A preempted task stays runnable: its wait starts now, on this CPU
	 * (after next gave back its anatomy slot). */
	if (prev_wanted && !(state & (report_max - 1)) && latmon_tp_comm_is(ctx, &switch_prev_comm, cfg.filter_comm))
		stamp_tid(prev, bpf_get_smp_processor_id());
	return 0;
}

/* ---- tracepoint: anatomy, hard and soft interrupts on a waiting CPU ---- */

SEC("tracepoint/irq/irq_handler_entry")
int runq_anat_irq_entry_tp(void *ctx)
{
	LATMON_GATE();
	if (anat_held > 0)
		anat_irq_entry(latmon_tp_read(ctx, &irq_entry_irq));
	return 0;
}

SEC("tracepoint/irq/irq_handler_exit")
int runq_anat_irq_exit_tp(void *ctx)
{
	LATMON_GATE();
	if (anat_held > 0)
		anat_irq_exit(latmon_tp_read(ctx, &irq_exit_irq));
	return 0;
}

SEC("tracepoint/irq/softirq_entry")
int runq_anat_softirq_entry_tp(void *ctx)
{
	LATMON_GATE();
	if (anat_held > 0)
		anat_softirq_entry(latmon_tp_read(ctx, &soft_entry_vec));
	return 0;
}

SEC("tracepoint/irq/softirq_exit")
int runq_anat_softirq_exit_tp(void *ctx)
{
	LATMON_GATE();
	if (anat_held > 0)
		anat_softirq_exit(latmon_tp_read(ctx, &soft_exit_vec));
	return 0;
}
#endif /* LATMON_NO_BTF */

char LICENSE[] SEC("license") = "Dual MIT/GPL";
