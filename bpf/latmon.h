/* SPDX-License-Identifier: (GPL-2.0-only OR MIT) */
/*
 * latmon.h - the single truth for everything the BPF programs and user space
 * share: histogram layout, limits and record structs.
 *
 * Rules (build.rs and the Rust side depend on them):
 *  - Every limit is a `#define LATMON_<NAME> <decimal literal>`. build.rs reads
 *    exactly those lines and emits Rust `pub const`s, so a limit is written
 *    once, here. Derived relations are checked with _Static_assert below.
 *  - Structs use fixed-width types and explicit padding; Rust reads them via
 *    the skeleton's generated types (never a hand-written twin).
 */
#ifndef __LATMON_H
#define __LATMON_H

/* Log-linear histogram: values below 2^SUB_BITS get one bucket each; every
 * power of two above is split into 2^SUB_BITS linear sub-buckets, so a
 * bucket is never wider than 1/8 (12.5 %) of its lower bound. */
#define LATMON_HIST_SUB_BITS 3
#define LATMON_HIST_SUBS 8
/* Values >= 2^MAX_LOG2 ns (68.7 s) land in the last bucket; min/max/sum stay
 * exact, and percentiles never go beyond the exact max. */
#define LATMON_HIST_MAX_LOG2 36
#define LATMON_HIST_BUCKETS 272

/* Bounded map sizes. */
#define LATMON_MAX_STAMPS 10240 /* in-flight start stamps (threads) */
#define LATMON_COMM_LEN 16	/* TASK_COMM_LEN */
#define LATMON_SELFTEST_VALUES 512
/* Per-task state created from sched_waking / sched_switch (rq lock held,
 * preemption off) lives in task storage, or - where creating task
 * storage there is unsafe: PREEMPT_RT kernels before 6.12.16, 6.13.4 and
 * 6.14 (CVE-2024-58070; src/rtkernel.rs) - in a preallocated hash keyed
 * by thread id (bpf/task_slot.bpf.h), bounded by LATMON_MAX_STAMPS
 * entries, or KTHREAD_SLOTS for state only kernel threads get (IRQ
 * threads, chain's carriers). A task that finds no entry is a drop. */
#define LATMON_KTHREAD_SLOTS 1024
#define LATMON_TASK_SLOT_STORAGE 0 /* task storage */
#define LATMON_TASK_SLOT_HASH 1	   /* the tid hash */
/* Test builds only (bpf/test_hooks.bpf.h; LATMON_RT_HASH_MUTATE=1): the
 * tid hash with every new entry keyed by the current task, not the task
 * it is for - the wrong key the live test of the hash path must catch. */
#define LATMON_TASK_SLOT_HASH_MUTATED 2

/* syscall: raw syscall ids below SYSCALL_IDS get a histogram slot the first
 * time they complete, up to SYSCALL_SLOTS - 1 distinct syscalls; slot 0
 * collects the rest (larger ids such as ARM private calls, slots used up).
 * 128 slots x 2224-byte histograms = 278 KiB per CPU. */
#define LATMON_SYSCALL_IDS 1024
#define LATMON_SYSCALL_SLOTS 128
/* syscall: futex and futex_time64 calls with a wait op (FUTEX_WAIT,
 * FUTEX_WAIT_BITSET, FUTEX_WAIT_REQUEUE_PI) count under this id, above every
 * architecture's syscall numbers: a wait, apart from futex's wakes, requeues
 * and PI locks (docs/probes.md, "Waits"). */
#define LATMON_SYSCALL_FUTEX_WAIT 1023

/* irq: histograms keyed by (IRQ number, kind) in a per-CPU hash - IRQ
 * numbers are sparse; kind 0 is the handler, 1 the threaded path end to
 * end (hardirq entry -> IRQ thread running), 2 and 3 its stages (hardirq
 * entry -> the thread's wakeup, wakeup -> running): 1 = 2 + 3 per event. */
#define LATMON_IRQ_SLOTS 96
#define LATMON_IRQ_KIND_HANDLER 0
#define LATMON_IRQ_KIND_THREAD 1
#define LATMON_IRQ_KIND_THREAD_HARDIRQ 2
#define LATMON_IRQ_KIND_THREAD_WAKEUP 3
/* Alert ids of the irq object: softirq vectors 0..SOFTIRQ_VECS-1, then
 * one per (irq, kind) pair that alerts, handed out on its first alert
 * (IRQ numbers are sparse). Pairs beyond these are counted, not sent. */
#define LATMON_IRQ_ALERT_SLOTS 32
/* softirq: one histogram per vector (the kernel's NR_SOFTIRQS). */
#define LATMON_SOFTIRQ_VECS 10

/* timer and chain series: slots of one per-CPU array (see timer.bpf.c). */
#define LATMON_TIMER_SERIES 8
#define LATMON_TS_TIMER 0	      /* timer: intended expiry -> running */
#define LATMON_TS_CHAIN 1	      /* chain: event -> running, end to end */
#define LATMON_TS_CHAIN_TIMER 2	      /* chain stage: timer expiry -> wakeup */
#define LATMON_TS_CHAIN_IRQ 3	      /* chain stage: hardirq entry -> wakeup */
#define LATMON_TS_CHAIN_RUN 4	      /* chain stage: wakeup -> running */
#define LATMON_TS_CHAIN_RESPONSE 5    /* chain stage: running -> response function returns */
#define LATMON_TS_CHAIN_TO_RESPONSE 6 /* chain: event -> response, end to end */
#define LATMON_TS_CHAIN_IRQ_THREAD 7  /* chain stage: hardirq entry -> wakeup by kernel threads */
/* chain: kernel threads an IRQ's wakeup is followed through (IRQ thread,
 * then e.g. a workqueue worker) before it reaches the named thread. */
#define LATMON_CHAIN_MAX_HOPS 3

/* Function latency (kfunc/ufunc, bpf/func.bpf.c). One BPF object serves up
 * to MAX_FUNC_PROBES probes; a probe's id indexes every per-probe array. */
#define LATMON_MAX_FUNC_PROBES 32
/* Stamp stacks: one per (thread, probe) for live threads that have called
 * the probe's function; freed when the thread exits. */
#define LATMON_FUNC_MAX_THREADS 4096
/* Nested (recursive) calls measured per (thread, probe); deeper calls are
 * counted as drops, their returns recognised and skipped. A power of two. */
#define LATMON_FUNC_MAX_DEPTH 8
/* Threshold alerts: a token bucket per probe, in the kernel. At most RATE
 * records per second per probe after a BURST; the rest are counted. */
#define LATMON_ALERT_RATE 100
#define LATMON_ALERT_BURST 32
/* Alert ring buffer (bytes, a power-of-two multiple of the page size) and
 * the per-CPU perf buffer pages used where the kernel has no ring buffer. */
#define LATMON_ALERT_RING_BYTES 262144
#define LATMON_ALERT_PERF_PAGES 16
/* User space: alert records held between two summaries, all probes. */
#define LATMON_ALERT_QUEUE 4096

/* Outlier anatomy (timer, chain, runq with a threshold; bpf/anatomy.bpf.h):
 * while a watched task waits, its waiting CPU accounts what held it.
 * ANAT_TASKS other tasks (the longest runs: a newcomer longer than the
 * smallest entry takes its place) and the first ANAT_IRQS IRQ numbers
 * seen get an entry each; the others are folded into one rest entry per
 * kind. Softirqs are
 * kept per vector (SOFTIRQ_VECS). One waiter per CPU at a time: a second
 * watched task waiting on a busy CPU gets no anatomy, unless the holder's
 * claim is older than ANAT_STALE_NS (a waiter that exited unseen). */
#define LATMON_ANAT_TASKS 4
#define LATMON_ANAT_IRQS 4
#define LATMON_ANAT_STALE_NS 1000000000
/* The no-BTF build's task causes: sched_switch's record has the task's
 * priority (prev_prio), not its policy, so struct latmon_anat_task's
 * policy holds its class instead; user space asks the thread for its
 * policy (src/probes/alerts.rs). UNSET: a task charged only while
 * interrupted, never seen switching out (policy and prio unknown). */
#define LATMON_ANAT_POLICY_RT 256   /* FIFO or RR; prio: rt_priority */
#define LATMON_ANAT_POLICY_FAIR 257 /* OTHER, BATCH or IDLE; prio: nice */
#define LATMON_ANAT_POLICY_UNSET 258
/* Wire bound: causes per Alert frame a receiver accepts (a sender makes at
 * most ANAT_TASKS + ANAT_IRQS + SOFTIRQ_VECS + 4). */
#define LATMON_ANAT_MAX_CAUSES 32
/* Top causes per interval (bpf/causes.bpf.h): every alert of timer, chain
 * and runq with an anatomy adds its parts, before the token bucket decides
 * on its record, to its alert id's table of CAUSE_SLOTS entries, keyed by
 * cause kind and id (thread id, IRQ number, softirq vector); a cause that
 * finds no entry is folded, counted, into one sum. An entry not added to
 * in the current or the previous epoch (user space advances an id's epoch
 * at each read, once an interval) may be taken over by a new cause. */
#define LATMON_CAUSE_SLOTS 16
/* Cause kinds (the wire's WireCause kinds too). */
#define LATMON_CAUSE_TASK 1 /* id: thread id */
#define LATMON_CAUSE_TASK_REST 2
#define LATMON_CAUSE_IRQ 3 /* id: IRQ number */
#define LATMON_CAUSE_IRQ_REST 4
#define LATMON_CAUSE_SOFTIRQ 5 /* id: vector */
#define LATMON_CAUSE_TIMER_IRQ_DELAY 6
#define LATMON_CAUSE_OTHER 7

/* cycle (bpf/cycle.bpf.c): the cycles of watched periodic threads, a
 * bounded hash keyed by thread id (CYCLE_THREADS; more are counted as
 * drops). Histogram series per object: response (release -> done),
 * wakeup (release -> running), exec (running -> done). */
#define LATMON_CYCLE_THREADS 64
/* cycle,auto: the loops discovery hands the family at most (the
 * cycle_auto hash; docs/agent.md "Loop discovery"). */
#define LATMON_CYCLE_AUTO 32
#define LATMON_CYCLE_SERIES 3
#define LATMON_CS_RESPONSE 0
#define LATMON_CS_WAKEUP 1
#define LATMON_CS_EXEC 2
/* Period detection: release-to-release steps within 1 % of each other
 * share a bin; the fullest of STEP_BINS is the period. A bin needs
 * PERIOD_MIN_STEPS steps before misses are judged against it. */
#define LATMON_CYCLE_STEP_BINS 8
#define LATMON_CYCLE_PERIOD_MIN_STEPS 8
/* A detected period follows the loop: FOLLOW_STEPS consecutive steps
 * within 1 % of each other and off the period (each a sleep the loop
 * chose, not a catch-up to the next boundary) are its new period
 * (bpf/cycle_release.bpf.h period_follow()). */
#define LATMON_CYCLE_PERIOD_FOLLOW_STEPS 2
/* What a cycle's release -> run gap was when the timer's interrupt did not
 * make it (struct latmon_cycle_record's `late`; 0: it did, the gap is
 * timer_irq_delay). STOPPED: the thread was stopped or traced (SIGSTOP)
 * after its sleep began; BACKLOG: the release had passed when the loop
 * asked to sleep (it was still running: the kernel returns at once). */
#define LATMON_CYCLE_LATE_STOPPED 1
#define LATMON_CYCLE_LATE_BACKLOG 2
/* What a cycle blocked on (struct latmon_cycle_exec's blocked[]). */
#define LATMON_CYCLE_BLOCKED_FUTEX 0
#define LATMON_CYCLE_BLOCKED_IO 1
#define LATMON_CYCLE_BLOCKED_SLEEP 2
#define LATMON_CYCLE_BLOCKED_OTHER 3
#define LATMON_CYCLE_BLOCKED_KINDS 4
/* Record events (struct latmon_cycle_record's event). */
#define LATMON_CYCLE_MISS 1
#define LATMON_CYCLE_OVERRUN 2
#define LATMON_CYCLE_RESPONSE 3 /* response above threshold=, no miss */
#define LATMON_CYCLE_RULE 4	/* an RT sleep rule broken (bpf/cycle_rules.bpf.h) */
/* The RT sleep rules (struct latmon_cycle_stats' rules[], a record's
 * rule); docs/probes.md "cycle", "Sleep rules". */
#define LATMON_RULE_WOKEN_BY_LOWER 0
#define LATMON_RULE_SLEEP_OTHER 1
#define LATMON_RULE_SLEEP_RELATIVE 2
#define LATMON_RULE_SLEEP_REALTIME_CLOCK 3
#define LATMON_RULES 4
/* Rule records: at most one per rule per thread per RULE_GAP_NS (the
 * counts stay exact), under their own alert id's token bucket so that
 * they never take a miss record's token. */
#define LATMON_CYCLE_RULE_GAP_NS 100000000
#define LATMON_CYCLE_RULE_ALERT_ID 1
/* An overrun's loop, now (struct latmon_cycle_record's doing). */
#define LATMON_CYCLE_DOING_RUNNING 1
#define LATMON_CYCLE_DOING_RUNNABLE 2
#define LATMON_CYCLE_DOING_BLOCKED 3

/* lock (bpf/lock.bpf.c): the futex waits of watched threads, from the
 * wait's start to the thread running again. Threads: a hash keyed by
 * thread id (LOCK_THREADS; more are counted as drops). Owners followed
 * while a wait lasts: a hash keyed by the owner's thread id
 * (LOCK_OWNERS), each naming the first LOCK_PREEMPTERS tasks that held
 * its CPU while it was runnable (the rest folded). Histograms: one per
 * lock (thread group, futex address), slots handed out on first use,
 * slot 0 the rest (slots used up). */
#define LATMON_LOCK_THREADS 64
#define LATMON_LOCK_OWNERS 64
#define LATMON_LOCK_SERIES 64
#define LATMON_LOCK_PREEMPTERS 4
/* Where a wait's owner came from (struct latmon_lock_record's owner_from). */
#define LATMON_LOCK_OWNER_NONE 0
#define LATMON_LOCK_OWNER_PI 1	  /* the PI futex word's TID (FUTEX_TID_MASK) */
#define LATMON_LOCK_OWNER_GLIBC 2 /* glibc pthread_mutex_t __data.__owner */
#define LATMON_LOCK_OWNER_WAKER 3 /* the thread that woke the waiter */
/* A wait's op (struct latmon_lock_record's op): the futex command
 * (FUTEX_CMD_MASK, below 128) for futex and futex_time64, else which
 * syscall. */
#define LATMON_LOCK_OP_FUTEX_WAIT2 256 /* futex2's futex_wait (6.7+) */
#define LATMON_LOCK_OP_FUTEX_WAITV 257 /* futex_waitv (5.16+) */
/* glibc's struct __pthread_mutex_s: int __lock, unsigned __count, int
 * __owner, on x86_64, aarch64 and 32-bit arm alike (sysdeps/nptl/
 * bits/struct_mutex.h): the owner's TID 8 bytes after the futex word. */
#define LATMON_LOCK_GLIBC_OWNER_OFFSET 8

#if !defined(__cplusplus)
/* A limit the BPF code masks an index with (`i & (N - 1)`: the verifier's
 * bound on a map or array index) must be a power of two, or the mask
 * folds distinct indexes together. Each such limit is asserted here. */
#define IS_POW2(n) ((n) > 0 && ((n) & ((n)-1)) == 0)
_Static_assert(IS_POW2(LATMON_FUNC_MAX_DEPTH), "FUNC_MAX_DEPTH must be a power of two");
_Static_assert(LATMON_MAX_FUNC_PROBES >= 32 && IS_POW2(LATMON_MAX_FUNC_PROBES),
	       "MAX_FUNC_PROBES: at least 32, a power of two (BPF masks ids with it)");
_Static_assert(IS_POW2(LATMON_CYCLE_STEP_BINS), "CYCLE_STEP_BINS: a power of two (BPF masks bins with it)");
_Static_assert(IS_POW2(LATMON_CYCLE_BLOCKED_KINDS), "CYCLE_BLOCKED_KINDS: a power of two (BPF masks kinds with it)");
_Static_assert(IS_POW2(LATMON_HIST_SUBS), "HIST_SUBS: a power of two (BPF masks sub-buckets with it)");
_Static_assert(LATMON_ALERT_RATE > 0 && LATMON_ALERT_BURST > 0, "alert rate and burst must be positive");
_Static_assert(LATMON_TS_CHAIN_IRQ_THREAD < LATMON_TIMER_SERIES, "timer series fit the map");
_Static_assert(LATMON_ANAT_TASKS + LATMON_ANAT_IRQS + LATMON_SOFTIRQ_VECS + 4 <= LATMON_ANAT_MAX_CAUSES,
	       "an anatomy's causes fit the wire bound");
_Static_assert(LATMON_CS_EXEC < LATMON_CYCLE_SERIES, "cycle series fit the map");
_Static_assert(LATMON_RULES == 4 && IS_POW2(LATMON_RULES) && LATMON_RULE_SLEEP_REALTIME_CLOCK < LATMON_RULES,
	       "RULES: a power of two (BPF masks rule ids with it), every rule below it");
_Static_assert(LATMON_LOCK_SERIES > 1, "lock: slot 0 is the rest, at least one more");
_Static_assert(LATMON_HIST_SUBS == 1 << LATMON_HIST_SUB_BITS, "SUBS = 2^SUB_BITS");
_Static_assert(LATMON_HIST_BUCKETS == (LATMON_HIST_MAX_LOG2 - LATMON_HIST_SUB_BITS + 1) << LATMON_HIST_SUB_BITS,
	       "BUCKETS must cover every power of two up to MAX_LOG2");
#endif

/* One histogram; stored per CPU, summed by user space. All times in ns.
 * min_ns is meaningful only when count > 0. */
struct latmon_hist {
	__u64 count;
	__u64 sum_ns;
	__u64 min_ns;
	__u64 max_ns;
	__u64 drops;  /* events lost to a full map or a clock that went back */
	__u64 alerts; /* events above the probe's threshold */
	__u64 slots[LATMON_HIST_BUCKETS];
};

/* A latency above its probe's threshold (func family), as sent to user
 * space through the alert ring buffer (or perf buffer). */
struct latmon_alert {
	__u64 time_ns; /* CLOCK_MONOTONIC when the slow call returned */
	__u64 latency_ns;
	__u32 probe_id;
	__u32 pid; /* thread group id */
	__u32 tid;
	__u32 cpu;
	char comm[LATMON_COMM_LEN];
};

/* Anatomy of one late wakeup (bpf/anatomy.bpf.h). Times in ns; an entry
 * with ns == 0 is unused. What no part names is the remainder (`other`),
 * which user space computes from the record's latency_ns. */
struct latmon_anat_task {
	__u64 ns;
	__u32 pid;    /* thread id */
	__u32 tgid;   /* thread group id */
	__u32 policy; /* SCHED_*, or a LATMON_ANAT_POLICY_* class (no BTF) */
	__s32 prio;   /* rt_priority for FIFO and RR, else the nice value */
	char comm[LATMON_COMM_LEN];
};

struct latmon_anat_irq {
	__u64 ns; /* hard-IRQ handler time */
	__u32 irq;
	__u32 pad;
};

struct latmon_anatomy {
	__u64 timer_irq_delay_ns; /* timer: intended expiry -> expiry handled */
	__u64 task_rest_ns;	  /* tasks beyond ANAT_TASKS */
	__u64 irq_rest_ns;	  /* IRQs beyond ANAT_IRQS */
	__u64 softirq_ns[LATMON_SOFTIRQ_VECS];
	struct latmon_anat_task task[LATMON_ANAT_TASKS];
	struct latmon_anat_irq irq[LATMON_ANAT_IRQS];
	__u32 cpu_woken; /* the CPU that accounted the wait */
	__u32 cpu_ran;
};

/* An alert record with its anatomy (timer, chain, runq): the same ring
 * buffer carries both sizes; the longer one has the anatomy. */
struct latmon_alert_anat {
	struct latmon_alert alert;
	struct latmon_anatomy anat;
};

/* One cause of a tally (bpf/causes.bpf.h). ns is cumulative across the
 * entry's causes: user space takes deltas between reads, and the growth
 * since the last read belongs to the key it reads (an entry is taken over
 * only after a whole epoch without additions). */
struct latmon_cause_entry {
	__u64 key;   /* kind << 32 | id (LATMON_CAUSE_*); 0: never used */
	__u64 ns;    /* time charged to it, all alerts */
	__u64 epoch; /* the epoch it was last added to in */
};

/* Per alert id, all CPUs (atomic adds): the causes of its alerted time.
 * Cumulative; alerted_ns = the entries' ns + folded_ns. */
struct latmon_cause_tally {
	__u64 alerts;	    /* alerts tallied (records refused or not) */
	__u64 alerted_ns;   /* the sum of their latencies */
	__u64 folded_ns;    /* parts that found no entry */
	__u64 folded_parts; /* how many */
	struct latmon_cause_entry slot[LATMON_CAUSE_SLOTS];
};

/* Per probe, per CPU: alert records that never reached user space. */
struct latmon_alert_drops {
	__u64 rate_limited; /* refused by the probe's token bucket */
	__u64 buffer_full;  /* ring (or perf) buffer had no room */
};

/* Key of the irq family's histograms. */
struct latmon_irq_key {
	__u32 irq;
	__u32 kind; /* LATMON_IRQ_KIND_* */
};

/* A field of a classic tracepoint's record, as its tracefs format file
 * describes it (src/tpformat.rs parses it). The no-BTF builds read their
 * tracepoint fields through these, set in rodata before load. */
struct latmon_tp_field {
	__u16 offset;	/* bytes from the start of the record */
	__u8 size;	/* 1, 2, 4 or 8 (16 for a comm, read as bytes) */
	__u8 is_signed; /* sign-extend when shorter than 8 bytes */
};

/* The switches the shared headers read (bpf/alerts.bpf.h, anatomy.bpf.h,
 * causes.bpf.h), the first member `common` of every family's config: one
 * config per object, filled once from the spec. Constant at load like the
 * rest of `cfg` (rodata), so the verifier prunes the branch a switch turns
 * off: the perf path with the ring buffer, the anatomy's accounting
 * without a threshold, the cause tally's static subprograms. */
struct latmon_common_config {
	__u32 use_ringbuf;  /* 1: alerts go to the ring buffer (kernel 5.8),
			     * 0: to the perf buffer */
	__u32 anatomy;	    /* account anatomies (a threshold is set; cycle:
			     * the kernel has bpf_map_lookup_percpu_elem) */
	__u32 tally_causes; /* tally alerts' causes (anatomies accounted) */
	__u32 task_slot;    /* where per-task state created in atomic context
			     * lives (bpf/task_slot.bpf.h): LATMON_TASK_SLOT_* */
};

/* runq: the probe's configuration, set in rodata before load. Filters:
 * 0 / empty means "all". */
struct latmon_runq_config {
	struct latmon_common_config common;
	__u64 threshold_ns; /* a wait above it counts in `alerts` and becomes
			     * an alert record, 0: none */
	__u32 filter_tgid;  /* pid=, 0: any */
	__u32 pad;
	char filter_comm[LATMON_COMM_LEN];
};

/* irq and softirq: the probe's configuration, set in rodata before load. */
struct latmon_irq_config {
	struct latmon_common_config common;
	__u64 threshold_ns; /* threshold=, 0: none */
};

/* syscall: the probe's configuration, set in rodata before load. */
struct latmon_syscall_config {
	struct latmon_common_config common;
	__u64 threshold_ns; /* threshold=, 0: none */
	__s32 filter_id;    /* syscall=, -1: every syscall */
	__u32 filter_pid;   /* pid=, 0: any */
	/* futex and futex_time64 on this architecture (-1: none): their wait
	 * ops are counted as LATMON_SYSCALL_FUTEX_WAIT (CO-RE builds, which
	 * can read the syscall's arguments from its pt_regs). */
	__s32 futex_nr;
	__s32 futex_time64_nr;
	char filter_comm[LATMON_COMM_LEN];
	/* Per syscall id (and LATMON_SYSCALL_FUTEX_WAIT): 1 if its calls wait
	 * and must not alert (`waits=alert` leaves it all 0). A timeout is
	 * not late. */
	__u8 quiet_id[LATMON_SYSCALL_IDS];
};

/* func: the configuration of one copy of the object (a set of probes),
 * set in rodata before load. Arrays are indexed by probe id; 0 / empty
 * means "no filter". */
struct latmon_func_config {
	struct latmon_common_config common;
	__u32 nr_probes;
	/* A fentry copy's one probe (its programs get no cookie); the no-BTF
	 * build has no fentry copy: 0. */
	__u32 fentry_probe_id;
	__u32 filter_tgid[LATMON_MAX_FUNC_PROBES];  /* pid= */
	__u64 threshold_ns[LATMON_MAX_FUNC_PROBES]; /* threshold=, 0: none */
	char filter_comm[LATMON_MAX_FUNC_PROBES][LATMON_COMM_LEN];
};

/* timer and chain (one object, two modes): the probe's configuration, set
 * in rodata before load. */
struct latmon_timer_config {
	struct latmon_common_config common;
	__u64 threshold_ns; /* threshold=, 0: none */
	__u32 filter_pid;   /* pid=, 0: any */
	__u32 chain;	    /* 1: chain mode (IRQ causes too, stage histograms
			     * instead of TS_TIMER) */
	__u32 response;	    /* chain with a response function (its uretprobe
			     * is attached) */
	__u32 pad;
	char filter_comm[LATMON_COMM_LEN];
};

/* cycle: the probe's configuration, set in rodata before load. */
struct latmon_cycle_config {
	struct latmon_common_config common;
	__u64 period_ns;    /* period=, 0: detected from the releases */
	__u64 deadline_ns;  /* deadline=, 0: the period */
	__u64 threshold_ns; /* threshold=, 0: none */
	__u32 filter_tid;   /* pid=TID, 0: any */
#ifdef LATMON_TEST_HOOKS
	/* Test builds only (bpf/test_hooks.bpf.h): 1 charges execution to the
	 * wrong task; 2 that, and judges every timer sleep relative and every
	 * futex wait not PI. */
	__u32 mutate;
#endif
	__u32 timerfd; /* timerfd=true: follow loops reading a timerfd */
	/* Syscall numbers of the target architecture (user space, from its
	 * tables), -1: none there. */
	__s32 nr_futex;
	__s32 nr_futex_waitv;
	__s32 nr_nanosleep;
	__s32 nr_clock_nanosleep;
	__u32 lock_join; /* a lock probe runs: take its waits (bpf/lock_cycle.bpf.h) */
	/* cycle,auto: a thread is entered only if user space put its id in
	 * cycle_auto (the periodic RT loops discovery found, issue 42). */
	__u32 auto_watch;
	char filter_comm[LATMON_COMM_LEN];
};

/* Release-to-release steps within 1 % of step_ns's first value. */
struct latmon_cycle_bin {
	__u64 first_ns; /* the step that opened the bin, 0: free */
	__u64 count;
	__u64 sum_ns;
};

/* Per watched thread, cumulative; user space reads it each interval. */
struct latmon_cycle_stats {
	__u64 cycles;	 /* cycles done */
	__u64 misses;	 /* done after release + deadline */
	__u64 overruns;	 /* overrun records (unfinished at the deadline) */
	__u64 period_ns; /* the fullest bin's mean step (or period=) */
	__u64 unseen;	 /* cycles counted with a wakeup or switch no event showed */
	struct latmon_cycle_bin bin[LATMON_CYCLE_STEP_BINS];
	__u64 rules[LATMON_RULES]; /* sleep rules broken, per LATMON_RULE_* */
};

struct latmon_cycle_blocked {
	__u64 ns;
	__s32 syscall; /* the last syscall it blocked in, -1: unknown */
	__u32 pad;
};

/* A cycle's execution part (running -> done), beside the anatomy of its
 * preemptions and wakeups (struct latmon_anatomy). */
struct latmon_cycle_exec {
	__u64 running_ns;  /* the loop's own time on a CPU */
	__u64 fault_count; /* page faults (the task's min_flt + maj_flt) */
	__u64 fault_ns;	   /* 0: no exit point to time them (docs/probes.md) */
	__u64 migrations;  /* times it resumed on another CPU */
	struct latmon_cycle_blocked blocked[LATMON_CYCLE_BLOCKED_KINDS];
};

/* A miss, an overrun or a slow response, as the ring buffer carries it:
 * appended to struct latmon_alert_anat (struct latmon_alert_cycle). */
struct latmon_cycle_record {
	__u64 release_ns;    /* CLOCK_MONOTONIC */
	__u64 deadline_ns;   /* release + deadline */
	__u64 done_ns;	     /* 0: unfinished (overrun) */
	__u32 event;	     /* LATMON_CYCLE_MISS, _OVERRUN, _RESPONSE */
	__u32 doing;	     /* overrun: LATMON_CYCLE_DOING_* */
	__u32 doing_pid;     /* runnable: the thread on its CPU */
	__s32 doing_syscall; /* blocked: the syscall, -1: unknown */
	__u32 doing_on;	     /* blocked: LATMON_CYCLE_BLOCKED_* */
	__u32 late;	     /* the release -> run gap not the timer's: LATMON_CYCLE_LATE_* */
	char doing_comm[LATMON_COMM_LEN];
	struct latmon_cycle_exec exec;
	/* LATMON_CYCLE_RULE: which rule, the syscall the thread slept in
	 * (-1: none known), and for woken_by_lower its waker. */
	__u32 rule;
	__s32 rule_syscall;
	__u32 waker_pid; /* thread group id */
	__u32 waker_tid;
	__u32 waker_policy; /* SCHED_* */
	__s32 waker_prio;   /* rt_priority for FIFO and RR, else the nice value */
	char waker_comm[LATMON_COMM_LEN];
};

/* lock: the probe's configuration, set in rodata before load. */
struct latmon_lock_config {
	struct latmon_common_config common;
	__u64 threshold_ns; /* threshold=: waits above it send a record, 0: none */
	__u32 filter_tid;   /* pid=TID, 0: any */
#ifdef LATMON_TEST_HOOKS
	/* Test builds only (bpf/test_hooks.bpf.h): 1 charges the owner's
	 * preempters to the owner; 2 takes futex_waitv's second waiter for
	 * the series. */
	__u32 mutate;
#endif
	char filter_comm[LATMON_COMM_LEN];
	__u32 owner_walk; /* 1: find owners by the thread-group walk even where the kfunc is */
	__u32 cycle_join; /* a cycle probe runs: hand it the waits (bpf/lock_cycle.bpf.h) */
};

/* A lock series: the futex word's thread group and address (user space
 * names it from the process's ELF symbols). */
struct latmon_lock_key {
	__u32 tgid;
	__u32 pad;
	__u64 uaddr;
};

/* Per lock series, cumulative (the object's .bss
 * lock_tally[LATMON_LOCK_SERIES], one per slot, slot 0 the overflow; user
 * space reads it each interval): every wait whose owner was followed, with
 * or without threshold=, and those in which a priority inversion held the
 * owner off. */
struct latmon_lock_tally {
	__u64 followed;	    /* waits whose owner was followed */
	__u64 inversions;   /* of those, waits with inversion time */
	__u64 inversion_ns; /* the inversions' time, summed */
	__u64 owner_run_ns; /* the owners' own time on a CPU, summed */
};

/* A task that held the owner's CPU while the owner was runnable. */
struct latmon_lock_task {
	__u64 ns;     /* all its time there during the wait */
	__u64 inv_ns; /* the part while its priority lay between the owner's
		       * (effective, boosts included) and the waiter's */
	__u32 pid;    /* thread id */
	__u32 tgid;
	__u32 policy; /* SCHED_* */
	__s32 prio;   /* rt_priority for FIFO and RR, else the nice value */
	char comm[LATMON_COMM_LEN];
};

/* A wait: above threshold=, appended to struct latmon_alert (struct
 * latmon_alert_lock); inside a cycle, in struct latmon_alert_cycle.
 * Times in ns. */
struct latmon_lock_record {
	__u64 uaddr;
	__u64 start_ns;	    /* the wait's start (futex entry), CLOCK_MONOTONIC */
	__u64 end_ns;	    /* its end (the thread running again) */
	__u64 owner_run_ns; /* the owner's own time on a CPU during the wait */
	__u64 rest_ns;	    /* preempters beyond LOCK_PREEMPTERS */
	__u64 rest_inv_ns;  /* their part between the two priorities */
	__u32 op;	    /* the futex command (FUTEX_WAIT, ...) or LATMON_LOCK_OP_* */
	__u32 slot;	    /* its series */
	__u32 owner_from;   /* LATMON_LOCK_OWNER_* */
	__u32 owner_tid;
	__u32 owner_tgid;
	__u32 owner_policy;
	__s32 owner_prio;
	__u32 waiter_policy;
	__s32 waiter_prio;
	__u32 pad;
	char owner_comm[LATMON_COMM_LEN];
	struct latmon_lock_task pre[LATMON_LOCK_PREEMPTERS];
};

struct latmon_alert_lock {
	struct latmon_alert alert;
	struct latmon_lock_record lock;
};

/* lock -> cycle: per thread, the longest futex wait with an owner since
 * the thread's last cycle release (bpf/lock_cycle.bpf.h). */
#define LATMON_LOCK_CYCLE_THREADS 128

/* A cycle record: the alert, its anatomy, its cycle half, and the
 * longest lock wait inside the cycle that the lock probe followed
 * (lock.owner_from LATMON_LOCK_OWNER_NONE: none, or no lock probe). */
struct latmon_alert_cycle {
	struct latmon_alert alert;
	struct latmon_anatomy anat;
	struct latmon_cycle_record cycle;
	struct latmon_lock_record lock;
};

#endif /* __LATMON_H */
