// SPDX-License-Identifier: (GPL-2.0-only OR MIT)
/*
 * func: function latency, entry to return, of kernel functions (kfunc) and
 * user-space functions in any binary or shared library (ufunc). The
 * seed article's design: stamp at entry keyed by thread, subtract at return,
 * histogram in the kernel, an alert record when a call is slower than the
 * probe's threshold.
 *
 * One object serves up to LATMON_MAX_FUNC_PROBES probes. A probe's id
 * indexes every per-probe array (histograms, filters, thresholds, token
 * buckets). How a program learns the id:
 *  - kprobe/kretprobe and uprobe/uretprobe: the BPF cookie of the
 *    attachment (bpf_get_attach_cookie, kernel >= 5.15), so one pair of
 *    programs serves every probe of its kind.
 *  - fentry/fexit: a loaded tracing program is bound to one kernel
 *    function (its attach_btf_id is fixed at load), so each kfunc probe
 *    needs its own load anyway, and a cookie would buy nothing (it also
 *    needs kernel >= 5.19). User space loads this object once more per
 *    fentry probe, with only the fentry/fexit pair, `fentry_probe_id` set
 *    in that copy's rodata and every map reused from the first copy.
 *
 * Entry stamps: a bounded hash keyed by (tid, probe id) holding a small
 * stack of LATMON_FUNC_MAX_DEPTH stamps, so recursive and nested calls
 * pair correctly (last in, first out). Calls deeper than the stack are not
 * measured: counted as drops, and their returns recognised and skipped.
 * A thread's entry stays until the thread exits (raw_tp/sched_process_exit
 * deletes it): one lookup at entry and one at return, instead of an insert
 * and a delete per call as in libbpf-tools' funclatency - measured 384 vs
 * 599 ns of BPF per call (benches/ufunc-vs-funclatency.sh). So the map is
 * bounded by the threads that call a traced function; when it is full, a
 * new thread's calls are counted as drops.
 *
 * Returns that never come (longjmp/exceptions unwinding past the function,
 * uretprobe's nesting limit, a thread exiting inside the function) are the
 * hazard: a stale stamp would pair with a later return. Uprobes see the
 * stack pointer at entry and at return, which identifies the frame:
 *  - at entry, a stamp at or below the new call's frame on the same stack
 *    cannot be one of its callers (callers sit higher): stale, dropped;
 *  - at return, the returning frame's entry SP is known exactly; stamps of
 *    deeper frames are stale (dropped); a return from a frame deeper than
 *    every stamp is an unmeasured (too deep) call.
 * Kernel functions run on task and IRQ stacks for the same thread, so SPs
 * cannot be compared; fexit never skips a return (a kretprobe short of
 * instances does, and the kernel counts it as missed): kprobe and fentry
 * pair by order alone.
 * Threads that exit mid-call: their stamps are counted as drops when
 * raw_tp/sched_process_exit deletes the thread's entries.
 *
 * Counters use atomic adds: uprobe programs run preemptible (migration
 * disabled only), and on PREEMPT_RT so do tracing programs, so two threads
 * can run the same program on one CPU.
 */
/* LATMON_NO_BTF_VARIANT: build.rs also builds this file as func_nobtf
 * (-DLATMON_NO_BTF, nobtf.h instead of vmlinux.h, no CO-RE relocation) for
 * kernels without BTF. That build has no fentry/fexit (they need the
 * kernel's BTF); kprobe, uprobe and the raw tracepoint need no kernel
 * type: the only kernel layout read here is the register set (PT_REGS_SP),
 * which is user ABI. */
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
/* Before the shared headers, which read cfg.common. */
const volatile struct latmon_func_config cfg = {};
#define LATMON_ALERT_IDS LATMON_MAX_FUNC_PROBES
#include "alerts.bpf.h"

#define MAX_PROBES LATMON_MAX_FUNC_PROBES
#define MAX_DEPTH LATMON_FUNC_MAX_DEPTH
/* Array index of a probe id already checked against MAX_PROBES. clang
 * drops a plain mask (it knows the bound) and may then index with a copy
 * the verifier has no bound for; the barrier keeps the mask. */
static __always_inline __u32 probe_idx(__u32 id)
{
	barrier_var(id);
	return id & (MAX_PROBES - 1);
}
#define PROBE_IDX(id) probe_idx(id)
/* Slot of a stamp stack. clang drops the mask where it can prove it
 * redundant; the 6.1 verifier (Debian's board kernels) then follows a
 * branch its range tracking cannot rule out with bounds umin > umax
 * (e.g. d >= 9 and d < 8 after the stale-frame loop), and refuses the
 * store ("invalid mem access 'scalar'"). The barrier keeps the mask, which
 * bounds the index on every path. */
static __always_inline __u32 slot(__u32 d)
{
	barrier_var(d);
	return d & (MAX_DEPTH - 1);
}

/* Where the stack pointer is at a uretprobe relative to the entry:
 * x86's `ret` pops the return address (the entry SP pointed at it); arm64
 * and arm return through the link register and leave SP as at entry. */
#if defined(__TARGET_ARCH_x86)
#define RET_SP_ADJ 8
#else
#define RET_SP_ADJ 0
#endif
/* Two stack pointers further apart than this are on different stacks
 * (a signal alternate stack, another mapping): never compared. */
#define SAME_STACK_WINDOW (64u << 20)

/* A frame's identity: the low 32 bits of its entry SP, bit 0 set so that
 * a known frame is never 0 (0 means "no SP": kprobe, fentry). */
static __always_inline __u32 frame_id(__u64 entry_sp) { return (__u32)entry_sp | 1; }

struct func_key {
	__u32 tid;
	__u32 probe_id;
};

struct func_stack {
	__u32 depth;	     /* stamps held, 0..MAX_DEPTH */
	__u32 overflow;	     /* calls deeper than the stack, inside the top one */
	__u32 sp[MAX_DEPTH]; /* low 32 bits of the entry SP (0: unknown) */
	__u64 ts[MAX_DEPTH];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_PROBES);
	__type(key, __u32);
	__type(value, struct latmon_hist);
} func_hist SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LATMON_FUNC_MAX_THREADS);
	__type(key, struct func_key);
	__type(value, struct func_stack);
} func_stamps SEC(".maps");

static __always_inline void count_drops(__u32 id, __u64 n)
{
	struct latmon_hist *h;

	if (!n)
		return;
	h = latmon_hist_get(&func_hist, id);
	if (h)
		__sync_fetch_and_add(&h->drops, n);
}

static __always_inline bool wanted(__u32 id, __u64 pid_tgid)
{
	char comm[LATMON_COMM_LEN];
	__u32 want_tgid = cfg.filter_tgid[PROBE_IDX(id)];

	if (want_tgid && (pid_tgid >> 32) != want_tgid)
		return false;
	if (!cfg.filter_comm[PROBE_IDX(id)][0])
		return true;
	if (bpf_get_current_comm(comm, sizeof(comm)))
		return false;
	for (int i = 0; i < LATMON_COMM_LEN; i++) {
		if (comm[i] != cfg.filter_comm[PROBE_IDX(id)][i])
			return false;
		if (!comm[i])
			break;
	}
	return true;
}

/* Is the frame at `a` at the same or a higher address than the frame at
 * `b`, on the same stack? Low 32 bits, wrap-safe. Stacks grow down: a
 * caller's frame is strictly above its callees'. */
static __always_inline bool at_or_above(__u32 a, __u32 b) { return a - b < SAME_STACK_WINDOW; }

/* `sp`: frame_id() of the entry SP (uprobe), 0 when unknown. */
static __always_inline int on_entry(__u32 id, __u32 sp)
{
	struct func_key key;
	struct func_stack *st;
	__u64 pid_tgid, stale = 0;
	__u32 d, top;

	if (id >= MAX_PROBES)
		return 0;
	pid_tgid = bpf_get_current_pid_tgid();
	if (!wanted(id, pid_tgid))
		return 0;
	key.tid = (__u32)pid_tgid;
	key.probe_id = id;
	st = bpf_map_lookup_elem(&func_stamps, &key);
	if (!st) {
		struct func_stack fresh = {};

		fresh.depth = 1;
		fresh.sp[0] = sp;
		fresh.ts[0] = bpf_ktime_get_ns();
		if (bpf_map_update_elem(&func_stamps, &key, &fresh, BPF_NOEXIST))
			count_drops(id, 1); /* map full */
		return 0;
	}
	if (sp) {
		/* A stamp at or below this call's frame cannot be a caller
		 * of it: stale, its return was skipped. */
		for (int i = 0; i < MAX_DEPTH; i++) {
			d = st->depth;
			if (!d || d > MAX_DEPTH)
				break;
			top = st->sp[slot(d - 1)];
			if (!top || !at_or_above(sp, top))
				break;
			st->depth = d - 1;
			stale++;
		}
		if (stale) {
			/* Deeper unmeasured calls were inside a stale one. */
			st->overflow = 0;
			count_drops(id, stale);
		}
	}
	d = st->depth;
	if (d >= MAX_DEPTH) {
		st->overflow++;
		count_drops(id, 1); /* deeper than the stamp stack */
		return 0;
	}
	st->sp[slot(d)] = sp;
	st->ts[slot(d)] = bpf_ktime_get_ns();
	st->depth = d + 1;
	return 0;
}

/* `sp`: frame_id() of the returning frame's entry SP (uretprobe), 0 when
 * unknown. */
static __always_inline int on_return(void *ctx, __u32 id, __u32 sp)
{
	__u64 now = bpf_ktime_get_ns();
	struct latmon_hist *h;
	struct func_key key;
	struct func_stack *st;
	__u64 delta, stale = 0;
	__u32 d, want, top;
	bool matched = false;

	if (id >= MAX_PROBES)
		return 0;
	key.tid = (__u32)bpf_get_current_pid_tgid();
	key.probe_id = id;
	st = bpf_map_lookup_elem(&func_stamps, &key);
	if (!st)
		return 0; /* entry filtered out, dropped, or before attach */
	if (sp) {
		want = sp;
		for (int i = 0; i < MAX_DEPTH; i++) {
			d = st->depth;
			if (!d || d > MAX_DEPTH)
				break;
			top = st->sp[slot(d - 1)];
			if (top == want) {
				matched = true;
				break;
			}
			if (!top || at_or_above(top, want))
				break; /* this return is deeper than every stamp */
			/* The stamp's frame is below the returning one: its
			 * return was skipped. */
			st->depth = d - 1;
			stale++;
		}
		if (stale)
			st->overflow = 0;
		if (matched) {
			/* Unmeasured deeper calls have returned (or never will). */
			st->overflow = 0;
		} else if (st->overflow) {
			st->overflow--;
		}
	} else if (st->overflow) {
		st->overflow--;
	} else {
		matched = st->depth > 0;
	}
	count_drops(id, stale);
	if (matched) {
		d = st->depth - 1;
		delta = now - st->ts[slot(d)];
		st->depth = d;
		h = latmon_hist_get(&func_hist, id);
		if (h) {
			latmon_hist_record_atomic(h, delta);
			if (cfg.threshold_ns[PROBE_IDX(id)] && delta > cfg.threshold_ns[PROBE_IDX(id)]) {
				__sync_fetch_and_add(&h->alerts, 1);
				latmon_alert(ctx, id, delta, now, NULL);
			}
		}
	}
	return 0;
}

/* ---- fentry/fexit: one loaded copy per kernel function ----------------- */

#ifndef LATMON_NO_BTF
SEC("fentry")
int BPF_PROG(func_fentry)
{
	LATMON_GATE();
	return on_entry(cfg.fentry_probe_id, 0);
}

SEC("fexit")
int BPF_PROG(func_fexit)
{
	LATMON_GATE();
	return on_return(ctx, cfg.fentry_probe_id, 0);
}
#endif

/* ---- kprobe/kretprobe: probe id in the attach cookie ------------------- */

SEC("kprobe")
int BPF_KPROBE(func_kentry)
{
	LATMON_GATE();
	return on_entry(bpf_get_attach_cookie(ctx), 0);
}

SEC("kretprobe")
int BPF_KRETPROBE(func_kexit)
{
	LATMON_GATE();
	return on_return(ctx, bpf_get_attach_cookie(ctx), 0);
}

/* ---- uprobe/uretprobe: probe id in the attach cookie, frames by SP ----- */

SEC("uprobe")
int BPF_KPROBE(func_uentry)
{
	LATMON_GATE();
	return on_entry(bpf_get_attach_cookie(ctx), frame_id(PT_REGS_SP(ctx)));
}

SEC("uretprobe")
int BPF_KRETPROBE(func_uexit)
{
	LATMON_GATE();
	return on_return(ctx, bpf_get_attach_cookie(ctx), frame_id(PT_REGS_SP(ctx) - RET_SP_ADJ));
}

/* ---- threads that exit inside a traced function ------------------------ */

/* TP_PROTO(struct task_struct *p, bool group_dead); fires in the exiting
 * thread. Delete its entries; stamps still in them (it exited inside a
 * traced function) would never be popped: count them as drops. */
SEC("raw_tp/sched_process_exit")
int func_task_exit(void *ctx)
{
	LATMON_GATE();
	struct func_key key = {.tid = (__u32)bpf_get_current_pid_tgid()};
	struct func_stack *st;

	for (__u32 id = 0; id < MAX_PROBES; id++) {
		if (id >= cfg.nr_probes)
			break;
		key.probe_id = id;
		st = bpf_map_lookup_elem(&func_stamps, &key);
		if (!st)
			continue;
		count_drops(id, (__u64)st->depth + st->overflow);
		bpf_map_delete_elem(&func_stamps, &key);
	}
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
