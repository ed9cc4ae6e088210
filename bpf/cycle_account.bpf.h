/* SPDX-License-Identifier: (GPL-2.0-only OR MIT) */
/*
 * cycle (bpf/cycle.bpf.c): a cycle's accounts - the anatomy slot its
 * thread holds while the cycle runs, its series, its records (miss, slow
 * response, overrun), its done and its release - shared by the programs
 * of the release sources, the wakeup path and the context switches.
 */
#ifndef __CYCLE_ACCOUNT_BPF_H
#define __CYCLE_ACCOUNT_BPF_H

#include "cycle_state.bpf.h"

/* Give back the slot t holds, its account merged into the cycle's. */
static __always_inline void slot_return(struct cycle_thread *t)
{
	struct anat_slot *s = anat_take_key(t->key, t->anat);

	t->anat = 0;
	if (!s)
		return;
	merge_anat(&t->acc, &s->acc);
	if (LATMON_MUTATING)
		/* The loop's own time charged to other tasks, which the
		 * live test must catch. */
		t->acc.task_rest_ns += s->self_ns;
	else
		t->exec.running_ns += s->self_ns;
	anat_release(s);
}

/* t's thread runs, or is runnable, on `cpu` from `now`: it holds that
 * CPU's slot, and the CPU watches its deadline. */
static __always_inline void slot_hold(struct cycle_thread *t, __u32 tid, __u32 cpu, __u64 now)
{
	struct cycle_watch *w;
	__u32 zero = 0;

	if (t->anat && t->anat != cpu + 1) {
		t->exec.migrations++;
		slot_return(t);
	}
	if (!t->anat)
		t->anat = anat_claim_key(t->key, cpu, now);
	/* cfg.common.anatomy: user space's "kernel has bpf_map_lookup_percpu_elem". */
	w = cfg.common.anatomy ? bpf_map_lookup_percpu_elem(&cycle_watch, &zero, cpu) : NULL;
	if (w && !t->reported && t->deadline_ns) {
		w->deadline_ns = t->deadline_ns;
		w->release_ns = t->release_ns;
		if (!__sync_lock_test_and_set(&w->tid, tid))
			__sync_fetch_and_add(&watches, 1);
	}
}

static __always_inline void record_series(__u32 series, __u64 ns, bool alert)
{
	struct latmon_hist *h = latmon_hist_get(&cycle_hist, series);

	if (!h)
		return;
	latmon_hist_record(h, ns);
	if (alert)
		h->alerts++;
}

/* Send a record of thread `tid`: a miss or slow response from the loop
 * itself (current), an overrun from whatever runs on the loop's CPU (the
 * record names the loop by its entry's tgid and comm). Five arguments: the
 * BPF calling convention's limit. */
static __noinline int send_record(void *ctx, struct cycle_thread *t, __u32 tid, __u32 event, __u64 now)
{
	struct latmon_alert_cycle *r;
	__u64 latency = now - t->release_ns;

	if (!latmon_alert_admit(0, now)) {
		latmon_alert_dropped(0, false);
		return 0;
	}
	r = cycle_scratch_take();
	if (!r) {
		latmon_alert_dropped(0, false);
		return 0;
	}
	r->alert.time_ns = now;
	r->alert.latency_ns = latency;
	r->alert.probe_id = 0;
	r->alert.cpu = bpf_get_smp_processor_id();
	r->alert.tid = tid;
	/* The thread as it entered (not its task: an overrun is sent from
	 * another context, and a task is not read past its life). */
	r->alert.pid = t->tgid;
	__builtin_memcpy(r->alert.comm, t->comm, sizeof(r->alert.comm));
	__builtin_memcpy(&r->anat, &t->acc, sizeof(r->anat));
	__builtin_memset(&r->cycle, 0, sizeof(r->cycle));
	__builtin_memcpy(&r->cycle.exec, &t->exec, sizeof(r->cycle.exec));
	r->cycle.release_ns = t->release_ns;
	r->cycle.deadline_ns = t->deadline_ns;
	r->cycle.event = event;
	r->cycle.late = t->late;
	r->cycle.doing_syscall = -1;
	__builtin_memset(&r->lock, 0, sizeof(r->lock));
	if (event != LATMON_CYCLE_OVERRUN) {
		struct latmon_lock_record *l = cfg.lock_join ? bpf_map_lookup_elem(&lock_cycle, &tid) : NULL;

		/* Cleared at the release, but a wait may straddle it. */
		if (l && l->start_ns >= t->release_ns)
			__builtin_memcpy(&r->lock, l, sizeof(r->lock));
		r->cycle.done_ns = now;
	} else if (t->phase == P_RUN) {
		r->cycle.doing = LATMON_CYCLE_DOING_RUNNING;
	} else if (t->phase == P_BLOCKED) {
		r->cycle.doing = LATMON_CYCLE_DOING_BLOCKED;
		r->cycle.doing_on = t->blocked_on;
		r->cycle.doing_syscall = t->blocked_sys;
	} else {
		/* Runnable: behind whatever runs on this CPU now. */
		r->cycle.doing = LATMON_CYCLE_DOING_RUNNABLE;
		r->cycle.doing_pid = (__u32)bpf_get_current_pid_tgid();
		bpf_get_current_comm(r->cycle.doing_comm, sizeof(r->cycle.doing_comm));
	}
	if (cfg.common.use_ringbuf) {
		if (bpf_ringbuf_output(&alerts, r, sizeof(*r), 0))
			latmon_alert_dropped(0, true);
	} else if (bpf_perf_event_output(ctx, &alerts_perf, BPF_F_CURRENT_CPU, r, sizeof(*r))) {
		latmon_alert_dropped(0, true);
	}
	cycle_scratch_put();
	return 0;
}

/* The current thread (t) finished its cycle at `now`. */
static __always_inline void cycle_done(void *ctx, struct cycle_thread *t, __u32 tid, __u64 now)
{
	struct task_struct *cur = bpf_get_current_task_btf();
	struct anat_slot *s = anat_held_here();
	__u64 response, deadline;
	bool miss, slow;

	/* The loop's time up to now, on this CPU. */
	if (s && s->waiter == t->key)
		anat_charge_current(s, now);
	slot_return(t);
	t->acc.cpu_ran = bpf_get_smp_processor_id();
	t->exec.fault_count = faults_of(cur) - t->faults;
	response = now > t->release_ns ? now - t->release_ns : 0;
	deadline = deadline_of(t);
	miss = deadline && response > deadline;
	slow = cfg.threshold_ns && response > cfg.threshold_ns;
	/* The family's alerts: misses, and responses above threshold=. */
	record_series(LATMON_CS_RESPONSE, response, miss || slow);
	record_series(LATMON_CS_EXEC, now > t->run_ns ? now - t->run_ns : 0, false);
	t->st.cycles++;
	if (miss)
		t->st.misses++;
	if (miss || slow) {
		if (!t->deadline_ns && deadline)
			t->deadline_ns = t->release_ns + deadline;
		send_record(ctx, t, tid, miss ? LATMON_CYCLE_MISS : LATMON_CYCLE_RESPONSE, now);
	}
}

/* The cycle of t's thread (task p, woken onto `cpu`) is released: its
 * accounts start over. */
static __always_inline void release_init(struct cycle_thread *t, struct task_struct *p, __u32 cpu, __u64 now)
{
	__u32 tid = p->pid;

	__builtin_memset(&t->acc, 0, sizeof(t->acc));
	__builtin_memset(&t->exec, 0, sizeof(t->exec));
	t->acc.timer_irq_delay_ns = now > t->release_ns ? now - t->release_ns : 0;
	/* A stop (SIGSTOP, a tracer) since the sleep began, not the timer,
	 * kept it from running (issue 40: "timer irq delay 5.00s"). */
	t->late = t->stopped ? LATMON_CYCLE_LATE_STOPPED : 0;
	t->acc.cpu_woken = cpu;
	t->faults = faults_of(p);
	t->deadline_ns = deadline_of(t) ? t->release_ns + deadline_of(t) : 0;
	t->reported = 0;
	t->started = 0;
	t->wake_ns = now;
	if (cfg.lock_join)
		bpf_map_delete_elem(&lock_cycle, &tid);
}

/* The thread runs from `now`: the cycle's first run, if it is. */
static __always_inline void run_start(struct cycle_thread *t, __u64 now)
{
	if (t->started)
		return;
	t->started = 1;
	t->run_ns = now;
	/* No wakeup when the release found the loop running (backlog) or
	 * stopped: their gap is not a wakeup latency (issue 40: a backlog
	 * took cycle:wakeup's p99 to 714 us against a p50 of 56 us). */
	if (!t->late)
		record_series(LATMON_CS_WAKEUP, now > t->release_ns ? now - t->release_ns : 0, false);
}

/* The overrun check: this CPU's watched cycle is past its deadline. */
static __always_inline void overrun_check(void *ctx)
{
	struct cycle_watch *w;
	struct cycle_thread *t;
	__u32 zero = 0, tid;
	__u64 now;

	if (watches <= 0)
		return;
	w = bpf_map_lookup_elem(&cycle_watch, &zero);
	if (!w || !w->tid)
		return;
	now = bpf_ktime_get_ns();
	if (now <= w->deadline_ns)
		return;
	tid = __sync_lock_test_and_set(&w->tid, 0);
	if (!tid)
		return;
	__sync_fetch_and_add(&watches, -1);
	t = bpf_map_lookup_elem(&cycle_threads, &tid);
	if (!t || t->release_ns != w->release_ns || t->phase < P_WAIT || t->phase == P_INTR)
		return;
	/* Two CPUs can watch one cycle (woken on one, run on the other) and
	 * check it at once (both resuming from a vCPU stall): one record. */
	if (__sync_val_compare_and_swap(&t->reported, 0, 1))
		return;
	t->st.overruns++;
	send_record(ctx, t, tid, LATMON_CYCLE_OVERRUN, now);
}

#endif /* __CYCLE_ACCOUNT_BPF_H */
