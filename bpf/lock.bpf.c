// SPDX-License-Identifier: (GPL-2.0-only OR MIT)
/*
 * lock: the futex waits of watched threads, from the wait's start (its
 * futex or futex_time64 call with a wait command: FUTEX_WAIT,
 * WAIT_BITSET, LOCK_PI, LOCK_PI2, WAIT_REQUEUE_PI; a futex_wait or
 * futex_waitv call) to the thread running again (its switch-in after the
 * block; a wait that never blocked ends at the call's return). One
 * histogram per lock (thread group, futex address).
 *
 * The owner: for LOCK_PI and LOCK_PI2 the futex word's TID; for the other
 * futex commands glibc's pthread_mutex_t owner (__data.__owner, LOCK_GLIBC_OWNER_
 * OFFSET bytes after the word: the wait may be on a mutex), both read at
 * the call's entry. Plausible only if that thread is alive in the
 * waiter's thread group (checked when the waiter blocks, through
 * bpf_task_from_pid, 6.2+; on older kernels by walking the waiter's
 * thread group, at most LOCK_GROUP_WALK threads); else, and for futex_wait
 * and futex_waitv, the owner is the thread that woke the waiter
 * (sched_waking), known only at the end.
 *
 * While the waiter is blocked, its owner is followed (lock_owners, keyed
 * by its thread id): its own time on a CPU, and, while it is runnable and
 * off its CPU (preempted), every task that runs on that CPU instead
 * (lock_cpu: per CPU, the preempted owner it holds and since when),
 * charged at the CPU's next switch. A preempter's time while its
 * priority lies strictly between the owner's effective priority (a PI
 * boost included) and the waiter's is the inversion's (inv_ns).
 *
 * Hot paths: sched_switch and sched_waking run for every task on the
 * machine; they test the watched-thread gate (watched_one/watched_many,
 * owners_live) before any map lookup. The futex tracepoints fire for
 * futex calls only. tp_btf only (trusted task pointers, the kfunc).
 */
#include "lock_state.bpf.h"
#include "lock_owner.bpf.h"

struct sys_enter_futex_rec {
	__u64 common;
	__s32 nr;
	__u32 pad;
	__u64 uaddr;
	__u64 op;
	__u64 args[4];
};

/* include/trace/events/syscalls.h: every argument a u64 slot. */
struct sys_enter_futex_wait_rec {
	__u64 common;
	__s32 nr;
	__u32 pad;
	__u64 uaddr;
	__u64 args[5]; /* val, mask, flags, timeout, clockid */
};

struct sys_enter_futex_waitv_rec {
	__u64 common;
	__s32 nr;
	__u32 pad;
	__u64 waiters; /* struct futex_waitv[nr_futexes], user memory */
	__u64 nr_futexes;
	__u64 args[3]; /* flags, timeout, clockid */
};

struct sys_exit_futex_rec {
	__u64 common;
	__s32 nr;
	__u32 pad;
	__s64 ret;
};

/* The histogram slot of lock (tgid, uaddr); hands one out on first use. */
static __always_inline __u32 slot_for(__u32 tgid, __u64 uaddr)
{
	struct latmon_lock_key k = {.tgid = tgid, .uaddr = uaddr};
	__u32 *s = bpf_map_lookup_elem(&lock_slot_of, &k);
	__u32 slot, val;

	if (s)
		return *s < LATMON_LOCK_SERIES ? *s : 0;
	if (lock_nslots >= LATMON_LOCK_SERIES - 1)
		return 0;
	slot = __sync_fetch_and_add(&lock_nslots, 1) + 1;
	if (slot >= LATMON_LOCK_SERIES)
		return 0;
	/* A copy for the map: `slot` stays in a register, bounded (the
	 * verifier forgets the bound of a value reloaded from the stack). */
	val = slot;
	if (bpf_map_update_elem(&lock_slot_of, &k, &val, BPF_NOEXIST)) {
		/* Another CPU was first (our slot stays unused), or full. */
		s = bpf_map_lookup_elem(&lock_slot_of, &k);
		return s && *s < LATMON_LOCK_SERIES ? *s : 0;
	}
	lock_slot_key[slot].uaddr = uaddr;
	lock_slot_key[slot].tgid = tgid;
	return slot;
}

/* A followed owner's closed account, into its lock's tally. */
static __always_inline void tally(__u32 slot, struct lock_owner *o)
{
	struct latmon_lock_tally *y;
	__u64 inv;

	if (!o || slot >= LATMON_LOCK_SERIES)
		return;
	inv = o->rest_inv_ns;
	for (int i = 0; i < LATMON_LOCK_PREEMPTERS; i++)
		inv += o->pre[i].inv_ns;
	y = &lock_tally[slot];
	__sync_fetch_and_add(&y->followed, 1);
	__sync_fetch_and_add(&y->owner_run_ns, o->run_ns);
	if (inv) {
		__sync_fetch_and_add(&y->inversions, 1);
		__sync_fetch_and_add(&y->inversion_ns, inv);
	}
}

/* The wait of t (series `slot`, ended at `end`) with its owner's account:
 * false if it has no owner (followed or waker). */
static __always_inline bool fill_wait(struct latmon_lock_record *l, struct lock_thread *t, __u32 slot, __u64 end)
{
	struct task_struct *cur = bpf_get_current_task_btf();
	struct lock_owner *o = NULL;
	__u32 otid = t->owner_tid;

	__builtin_memset(l, 0, sizeof(*l));
	l->uaddr = t->uaddr;
	l->start_ns = t->start_ns;
	l->end_ns = end;
	l->op = t->op;
	l->slot = slot;
	l->waiter_policy = cur->policy;
	l->waiter_prio = prio_of(cur, l->waiter_policy);
	if (t->owner_live)
		o = bpf_map_lookup_elem(&lock_owners, &otid);
	if (o) {
		l->owner_from = t->owner_from;
		l->owner_tid = otid;
		l->owner_tgid = o->tgid;
		l->owner_policy = o->policy;
		l->owner_prio = o->prio;
		l->owner_run_ns = o->run_ns;
		l->rest_ns = o->rest_ns;
		l->rest_inv_ns = o->rest_inv_ns;
		__builtin_memcpy(l->owner_comm, o->comm, sizeof(l->owner_comm));
		__builtin_memcpy(l->pre, o->pre, sizeof(l->pre));
	} else if (t->waker_tid) {
		/* Policy and priority: user space asks the thread. */
		l->owner_from = LATMON_LOCK_OWNER_WAKER;
		l->owner_tid = t->waker_tid;
		l->owner_tgid = t->waker_tgid;
		l->owner_policy = LATMON_ANAT_POLICY_UNSET;
		__builtin_memcpy(l->owner_comm, t->waker_comm, sizeof(l->owner_comm));
	}
	return l->owner_from != LATMON_LOCK_OWNER_NONE;
}

static __noinline int send_record(void *ctx, struct lock_thread *t, __u32 slot, __u64 latency, __u64 end)
{
	struct latmon_alert_lock *r;
	__u32 zero = 0;

	if (slot >= LATMON_LOCK_SERIES)
		return 0;
	if (!latmon_alert_admit(slot, end)) {
		latmon_alert_dropped(slot, false);
		return 0;
	}
	r = bpf_map_lookup_elem(&lock_scratch, &zero);
	if (!r)
		return 0;
	__builtin_memset(&r->alert, 0, sizeof(r->alert));
	latmon_alert_fill(&r->alert, slot, latency, end, NULL);
	fill_wait(&r->lock, t, slot, end);
	if (cfg.common.use_ringbuf) {
		if (bpf_ringbuf_output(&alerts, r, sizeof(*r), 0))
			latmon_alert_dropped(slot, true);
	} else if (bpf_perf_event_output(ctx, &alerts_perf, BPF_F_CURRENT_CPU, r, sizeof(*r))) {
		latmon_alert_dropped(slot, true);
	}
	return 0;
}

/* The wait (tid's, series `slot`, ended at `end`) for a cycle miss that
 * contains it (bpf/lock_cycle.bpf.h): kept if it has an owner and is the
 * thread's longest since its last release. */
static __noinline int keep_for_cycle(struct lock_thread *t, __u32 tid, __u32 slot, __u64 end)
{
	struct latmon_alert_lock *r;
	struct latmon_lock_record *e;
	__u32 zero = 0;

	e = bpf_map_lookup_elem(&lock_cycle, &tid);
	if (e && e->end_ns - e->start_ns >= end - t->start_ns)
		return 0;
	r = bpf_map_lookup_elem(&lock_scratch, &zero);
	if (!r || !fill_wait(&r->lock, t, slot, end))
		return 0;
	/* Full of threads that are no loops: the LRU evicts one of theirs. */
	bpf_map_update_elem(&lock_cycle, &tid, &r->lock, BPF_ANY);
	return 0;
}

/* Whether the current thread passes the filter (comm=, or pid= the
 * thread id; the filter's comm half only). */
static __always_inline bool wanted_now(__u32 tid)
{
	return cfg.filter_tid ? tid == cfg.filter_tid : latmon_current_wanted(0, cfg.filter_comm);
}

/* A watched thread enters if it passes the filter. NULL: not wanted, or
 * no room. */
static __always_inline struct lock_thread *thread_enter(__u32 tid)
{
	struct lock_thread z = {};

	if (!wanted_now(tid))
		return NULL;
	if (bpf_map_update_elem(&lock_threads, &tid, &z, BPF_NOEXIST)) {
		count_drop(); /* LOCK_THREADS watched already */
		return NULL;
	}
	if (__sync_fetch_and_add(&lock_live, 1) == 0)
		watched_one = tid;
	else
		watched_many = 1;
	return bpf_map_lookup_elem(&lock_threads, &tid);
}

/* A wait of the watched thread starts: op is the futex command or a
 * LATMON_LOCK_OP_*; no owner yet. NULL: the thread is not watched. */
static __always_inline struct lock_thread *wait_begin(__u64 uaddr, __u32 op)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct lock_thread *t;
	__u32 tid = (__u32)pid_tgid;

	if (cfg.filter_tid && tid != cfg.filter_tid)
		return NULL;
	t = bpf_map_lookup_elem(&lock_threads, &tid);
	if (!t) {
		t = thread_enter(tid);
		if (!t)
			return NULL;
	}
	t->start_ns = bpf_ktime_get_ns();
	t->end_ns = 0;
	t->uaddr = uaddr;
	t->tgid = pid_tgid >> 32;
	t->op = op;
	t->phase = T_IN;
	t->owner_live = 0;
	t->waker_tid = 0;
	t->owner_from = LATMON_LOCK_OWNER_NONE;
	t->owner_tid = 0;
	return t;
}

/* futex(2) and 32-bit arm's futex_time64 (same arguments). The owner is
 * read only for a watched thread: an unwatched one pays no user read. */
static __always_inline int futex_enter(__u64 uaddr, __u64 op)
{
	__u32 cmd = (__u32)op & FUTEX_CMD_MASK, word = 0, from = LATMON_LOCK_OWNER_NONE;
	struct lock_thread *t;
	__s32 owner = 0;

	if (cmd != FUTEX_WAIT && cmd != FUTEX_WAIT_BITSET && cmd != FUTEX_LOCK_PI && cmd != FUTEX_LOCK_PI2 &&
	    cmd != FUTEX_WAIT_REQUEUE_PI)
		return 0;
	t = wait_begin(uaddr, cmd);
	if (!t)
		return 0;
	if (cmd == FUTEX_LOCK_PI || cmd == FUTEX_LOCK_PI2) {
		if (!bpf_probe_read_user(&word, sizeof(word), (void *)uaddr)) {
			owner = word & FUTEX_TID_MASK;
			from = LATMON_LOCK_OWNER_PI;
		}
	} else if (cmd != FUTEX_WAIT_REQUEUE_PI) {
		/* A condition variable's word: no owner (checked at the block). */
		if (!bpf_probe_read_user(&owner, sizeof(owner), (void *)(uaddr + LATMON_LOCK_GLIBC_OWNER_OFFSET)))
			from = LATMON_LOCK_OWNER_GLIBC;
	}
	if (owner <= 0 || (__u32)owner == (__u32)bpf_get_current_pid_tgid())
		return 0;
	t->owner_from = from;
	t->owner_tid = owner;
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_futex")
int lock_futex_enter(struct sys_enter_futex_rec *ctx)
{
	LATMON_GATE();
	return futex_enter(ctx->uaddr, ctx->op);
}

/* 32-bit arm with a 64-bit time_t (glibc 2.34+ _TIME_BITS=64): glibc
 * calls futex_time64; no such tracepoint on 64-bit kernels (user space
 * leaves this program out there). */
SEC("tracepoint/syscalls/sys_enter_futex_time64")
int lock_futex_time64_enter(struct sys_enter_futex_rec *ctx)
{
	LATMON_GATE();
	return futex_enter(ctx->uaddr, ctx->op);
}

/* futex2's futex_wait (kernel 6.7+, commit 27b88f3519e2): a plain wait,
 * neither PI nor a glibc mutex: the owner is the waker. */
SEC("tracepoint/syscalls/sys_enter_futex_wait")
int lock_futex_wait_enter(struct sys_enter_futex_wait_rec *ctx)
{
	LATMON_GATE();
	wait_begin(ctx->uaddr, LATMON_LOCK_OP_FUTEX_WAIT2);
	return 0;
}

/* futex_waitv (kernel 5.16+, commit bf69bad38cf6): a wait on up to 128
 * words at once; its series is the first waiter's word (waiters[0].uaddr,
 * read from user memory; an unreadable array is a drop). The owner is the
 * waker. */
SEC("tracepoint/syscalls/sys_enter_futex_waitv")
int lock_futex_waitv_enter(struct sys_enter_futex_waitv_rec *ctx)
{
	LATMON_GATE();
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	__u64 uaddr = 0;

	if (!ctx->nr_futexes)
		return 0; /* -EINVAL, no wait */
	/* LATMON_MUTATED(2): the second waiter's word, the wrong series the
	 * live test must catch. */
	if (bpf_probe_read_user(
		    &uaddr, sizeof(uaddr),
		    (void *)(ctx->waiters + FUTEX_WAITV_UADDR_OFFSET + (LATMON_MUTATED(2) ? FUTEX_WAITV_SIZE : 0)))) {
		if (wanted_now(tid))
			count_drop();
		return 0;
	}
	wait_begin(uaddr, LATMON_LOCK_OP_FUTEX_WAITV);
	return 0;
}

/* Every exit: the same body (a thread is in one syscall at a time). */
static __always_inline int futex_exit(void *ctx)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct lock_thread *t = thread_of(tid);
	struct latmon_hist *h;
	__u64 now, end, latency;
	__u32 slot, otid;

	if (!t || t->phase == T_NONE)
		return 0;
	now = bpf_ktime_get_ns();
	if (t->phase == T_BLOCKED)
		owner_close(t, now); /* its switch-in was not seen */
	end = t->phase == T_RAN ? t->end_ns : now;
	latency = end > t->start_ns ? end - t->start_ns : 0;
	slot = slot_for(t->tgid, t->uaddr);
	h = latmon_hist_get(&lock_hist, slot);
	if (h) {
		latmon_hist_record(h, latency);
		if (cfg.threshold_ns && latency > cfg.threshold_ns) {
			h->alerts++;
			send_record(ctx, t, slot, latency, end);
		}
	}
	if (cfg.cycle_join)
		keep_for_cycle(t, tid, slot, end);
	if (t->owner_live) {
		otid = t->owner_tid;
		tally(slot, bpf_map_lookup_elem(&lock_owners, &otid));
		bpf_map_delete_elem(&lock_owners, &otid);
		t->owner_live = 0;
	}
	t->phase = T_NONE;
	return 0;
}

SEC("tracepoint/syscalls/sys_exit_futex")
int lock_futex_exit(struct sys_exit_futex_rec *ctx)
{
	LATMON_GATE();
	return futex_exit(ctx);
}

SEC("tracepoint/syscalls/sys_exit_futex_time64")
int lock_futex_time64_exit(struct sys_exit_futex_rec *ctx)
{
	LATMON_GATE();
	return futex_exit(ctx);
}

SEC("tracepoint/syscalls/sys_exit_futex_wait")
int lock_futex_wait_exit(struct sys_exit_futex_rec *ctx)
{
	LATMON_GATE();
	return futex_exit(ctx);
}

SEC("tracepoint/syscalls/sys_exit_futex_waitv")
int lock_futex_waitv_exit(struct sys_exit_futex_rec *ctx)
{
	LATMON_GATE();
	return futex_exit(ctx);
}

/* sched_waking, not sched_wakeup: it fires in the waker's own context;
 * a remote wakeup's sched_wakeup fires on the woken task's CPU, from
 * whatever runs there (the idle task, an IPI). TP_PROTO(struct
 * task_struct *p) */
SEC("tp_btf/sched_waking")
int BPF_PROG(lock_waking, struct task_struct *p)
{
	LATMON_GATE();
	struct lock_thread *t = thread_of(p->pid);
	__u64 pid_tgid;

	if (!t || t->phase != T_BLOCKED)
		return 0;
	pid_tgid = bpf_get_current_pid_tgid();
	t->waker_tid = (__u32)pid_tgid;
	t->waker_tgid = pid_tgid >> 32;
	bpf_get_current_comm(t->waker_comm, sizeof(t->waker_comm));
	return 0;
}

/* TP_PROTO(bool preempt, struct task_struct *prev, struct task_struct *next,
 *          unsigned int prev_state) */
SEC("tp_btf/sched_switch")
int BPF_PROG(lock_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	LATMON_GATE();
	struct lock_thread *t;
	struct lock_owner *o;
	struct lock_cpu *c;
	__u32 zero = 0, otid;
	__u64 now = 0;

	if (lock_live <= 0)
		return 0;
	if (owners_live > 0) {
		now = bpf_ktime_get_ns();
		/* A preempted owner's CPU: prev ran instead of it. */
		c = bpf_map_lookup_elem(&lock_cpu, &zero);
		if (c && c->owner_tid) {
			otid = c->owner_tid;
			o = bpf_map_lookup_elem(&lock_owners, &otid);
			if (!o || o->closed) {
				c->owner_tid = 0;
			} else {
				if (prev->pid != otid && now > c->since)
					charge(o, prev, now - c->since);
				c->since = now;
			}
		}
	}
	/* A waiter blocks: its owner is followed from now on - before the
	 * owners' own switches below, so that an owner switched in right now
	 * (a PI owner boosted past the task it waited behind) runs from now. */
	t = thread_of(prev->pid);
	if (t && t->phase == T_IN && latmon_task_state(prev) != TASK_RUNNING) {
		if (!now)
			now = bpf_ktime_get_ns();
		t->phase = T_BLOCKED;
		owner_begin(t, prev, now);
	}
	if (owners_live > 0) {
		if (!now)
			now = bpf_ktime_get_ns();
		o = owner_of(prev);
		if (o)
			owner_out(o, prev, bpf_get_smp_processor_id(), now);
		o = owner_of(next);
		if (o) {
			o->running_since = now;
			owner_unhold(o, next->pid);
		}
	}
	t = thread_of(next->pid);
	if (t && t->phase == T_BLOCKED) {
		if (!now)
			now = bpf_ktime_get_ns();
		t->end_ns = now;
		t->phase = T_RAN;
		owner_close(t, now);
	}
	return 0;
}

/* ---- a watched thread's end: its exit, or an exec into another image -- */

/* Thread `tid` leaves the watched set: an open wait is dropped, its owner
 * no longer followed, its entry freed - the bound LOCK_THREADS is then on
 * threads alive at once (entries were never freed: a controller
 * restarted 64 times was no longer seen), and a thread later given the id
 * (pid reuse) or the image the thread execs is judged by the filter
 * afresh at its first wait (issue 40). */
static __always_inline void thread_leave(__u32 tid)
{
	struct lock_thread *t = thread_of(tid);
	__u32 otid;

	if (!t)
		return;
	if (t->owner_live) {
		owner_close(t, bpf_ktime_get_ns());
		otid = t->owner_tid;
		bpf_map_delete_elem(&lock_owners, &otid);
	}
	if (cfg.cycle_join)
		bpf_map_delete_elem(&lock_cycle, &tid);
	if (!bpf_map_delete_elem(&lock_threads, &tid))
		__sync_fetch_and_add(&lock_live, -1);
}

/* In the exiting task, while its thread id is still its own (release_task
 * frees the id later). TP_PROTO(struct task_struct *p, bool group_dead)
 * on 6.18, (struct task_struct *p) before: only p is read. */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(lock_exit, struct task_struct *p)
{
	thread_leave(p->pid);
	return 0;
}

/* After exec's de_thread: `old_pid` was the thread's id (a non-leader
 * that execs takes its leader's id; the others exit). TP_PROTO(struct
 * task_struct *p, pid_t old_pid, struct linux_binprm *bprm) */
SEC("tp_btf/sched_process_exec")
int BPF_PROG(lock_exec, struct task_struct *p, pid_t old_pid)
{
	thread_leave(old_pid);
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
