/* SPDX-License-Identifier: (GPL-2.0-only OR MIT) */
/*
 * cycle (bpf/cycle.bpf.c): a watched thread's life - it enters the
 * watched set at its first timer sleep (or timerfd read) if it passes the
 * filter, and leaves it when it exits (sched_process_exit) or execs
 * (sched_process_exec), its counts folded into `cycle_retired` first.
 *
 * Why leave: the set is a bounded hash (CYCLE_THREADS). Entries that
 * stayed after their thread's death filled it: with loop threads started
 * one after another, counting stopped at the 64th (only drops rose), a
 * controller restarted 70 times was invisible from its 65th run on; and
 * a dead loop's entry was found by whatever task the kernel gave its
 * thread id next (or by the program the loop exec'd), whose cycles, rule
 * violations and records were counted under the old loop's name - read
 * through its dead task_struct (issue 40). Now an entry lives as long as
 * its thread runs one image; the bound is on threads alive at once, and
 * a thread's identity (tgid, comm) is copied at its entry: no task
 * pointer is read past the task's life.
 */
#ifndef __CYCLE_LIFE_BPF_H
#define __CYCLE_LIFE_BPF_H

#include "cycle_account.bpf.h"
#include "filter.bpf.h"

#define PF_EXITING 0x00000004 /* include/linux/sched.h, unchanged since 2.6 */

/* The counts of the threads that left, summed (user space adds them to
 * the live entries'; atomic adds: threads exit on any CPU), and the
 * period of the one with the most cycles: period_ns, its cycles in
 * bin[0].count (the bins are otherwise unused here). The probe line's
 * period is that of the thread with the most cycles, live or gone: a
 * loop that exited before the last read keeps its period there. */
struct latmon_cycle_stats cycle_retired;

/* Whether task p's comm is the filter's (comm=; none: every task). p may
 * be a read pointer (the timerfd's waiter): a probe read. */
static __always_inline bool comm_wanted(struct task_struct *p, char *comm)
{
	if (bpf_probe_read_kernel_str(comm, LATMON_COMM_LEN, &p->comm) < 0)
		return false;
	return !cfg.filter_comm[0] || latmon_comm_equal(comm, cfg.filter_comm);
}

/* Task p (thread tid) enters the watched threads if it passes the filter
 * (comm=, or pid= the thread id; cycle,auto: its id is in cycle_auto). NULL: not wanted, or no room. A task
 * already exiting gets no entry: sched_process_exit, which frees it, may
 * have run. */
static __always_inline struct cycle_thread *thread_enter(struct task_struct *p, __u32 tid)
{
	char comm[LATMON_COMM_LEN];
	struct cycle_thread *t, *z;
	__u32 zero = 0;

	/* cycle,auto first: every timer sleep on the machine comes here, and
	 * one hash lookup turns away all but the listed loops. */
	if (cfg.auto_watch && !bpf_map_lookup_elem(&cycle_auto, &tid))
		return NULL;
	if (!comm_wanted(p, comm) || (cfg.filter_tid && tid != cfg.filter_tid))
		return NULL;
	if (BPF_CORE_READ(p, flags) & PF_EXITING)
		return NULL;
	z = bpf_map_lookup_elem(&cycle_zero, &zero);
	if (!z)
		return NULL;
	if (bpf_map_update_elem(&cycle_threads, &tid, z, BPF_NOEXIST)) {
		count_drop(); /* CYCLE_THREADS watched already */
		return NULL;
	}
	if (__sync_fetch_and_add(&cycle_live, 1) == 0)
		watched_one = tid;
	else
		watched_many = 1;
	t = bpf_map_lookup_elem(&cycle_threads, &tid);
	if (!t)
		return NULL;
	t->key = (__u64)p;
	t->tgid = BPF_CORE_READ(p, tgid);
	__builtin_memcpy(t->comm, comm, sizeof(t->comm));
	return t;
}

/* Thread `tid` leaves the watched set: its open cycle is dropped (neither
 * a cycle nor a miss: the loop ends, it did not finish late), its CPU
 * slot and this CPU's overrun watch given back, its counts retired, its
 * entry freed. A watch another CPU holds finds no entry (or another
 * release) and goes out empty. */
static __always_inline void thread_leave(__u32 tid)
{
	struct cycle_thread *t = thread_of(tid);
	struct cycle_watch *w;
	__u32 zero = 0;

	if (!t)
		return;
	t->reported = 1;
	slot_return(t);
	w = bpf_map_lookup_elem(&cycle_watch, &zero);
	if (w && w->tid == tid && __sync_val_compare_and_swap(&w->tid, tid, 0) == tid)
		__sync_fetch_and_add(&watches, -1);
	__sync_fetch_and_add(&cycle_retired.cycles, t->st.cycles);
	__sync_fetch_and_add(&cycle_retired.misses, t->st.misses);
	__sync_fetch_and_add(&cycle_retired.overruns, t->st.overruns);
	__sync_fetch_and_add(&cycle_retired.unseen, t->st.unseen);
	for (int i = 0; i < LATMON_RULES; i++)
		__sync_fetch_and_add(&cycle_retired.rules[i], t->st.rules[i]);
	/* Two threads leaving at once may race here: the period shown is
	 * then one of theirs. */
	if (t->st.period_ns && t->st.cycles >= cycle_retired.bin[0].count) {
		cycle_retired.bin[0].count = t->st.cycles;
		cycle_retired.period_ns = t->st.period_ns;
	}
	if (cfg.lock_join)
		bpf_map_delete_elem(&lock_cycle, &tid);
	if (!bpf_map_delete_elem(&cycle_threads, &tid))
		__sync_fetch_and_add(&cycle_live, -1);
}

/* In the exiting task, while its thread id is still its own (release_task
 * frees the id later), before its last switches: the loop's last cycle,
 * open since its last release, is neither an overrun nor a miss.
 * TP_PROTO(struct task_struct *p, bool group_dead) on 6.18,
 * (struct task_struct *p) before: only p is read. */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(cycle_exit, struct task_struct *p)
{
	__u32 tid = p->pid;

	/* cycle,auto: the id is free from here on; a thread that reuses it
	 * before discovery's next scan is not the listed loop (the agent puts
	 * it back when a scan lists that id again). */
	if (cfg.auto_watch)
		bpf_map_delete_elem(&cycle_auto, &tid);
	thread_leave(tid);
	return 0;
}

/* After exec's de_thread: `old_pid` was the thread's id (a non-leader
 * that execs takes its leader's; the group's other threads exit). The new
 * image enters at its own first timer sleep if the filter names it (its
 * comm is the new program's). TP_PROTO(struct task_struct *p, pid_t
 * old_pid, struct linux_binprm *bprm) */
SEC("tp_btf/sched_process_exec")
int BPF_PROG(cycle_exec, struct task_struct *p, pid_t old_pid)
{
	__u32 old = old_pid;

	/* A new program: discovery judges it afresh before it is watched. */
	if (cfg.auto_watch)
		bpf_map_delete_elem(&cycle_auto, &old);
	thread_leave(old_pid);
	return 0;
}

#endif /* __CYCLE_LIFE_BPF_H */
