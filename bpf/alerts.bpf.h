/* SPDX-License-Identifier: (GPL-2.0-only OR MIT) */
/*
 * Threshold alert records, shared by every probe family: an event above its
 * probe's threshold becomes a struct latmon_alert (bpf/latmon.h) in a ring
 * buffer (kernel >= 5.8) or, where that is missing, a perf buffer; a token
 * bucket per alert id (LATMON_ALERT_RATE/s after LATMON_ALERT_BURST) keeps
 * an alert storm off the link, and whatever is refused or finds the buffer
 * full is counted per id in alert_drops.
 *
 * The including object defines LATMON_ALERT_IDS (how many ids: probes, or
 * series) and declares its family's `cfg` (bpf/latmon.h) before
 * including; it gets its own maps (alert_tat, alert_drops, alerts,
 * alerts_perf). User space creates only the buffer it uses (the other's
 * autocreate is off) and says which in cfg.common.use_ringbuf, constant at
 * load, so the verifier prunes the other branch.
 *
 * Kernel helpers only (no kernel types): the no-BTF builds include it too.
 */
#ifndef __ALERTS_BPF_H
#define __ALERTS_BPF_H

#include <bpf/bpf_helpers.h>

#ifndef LATMON_ALERT_IDS
#error "define LATMON_ALERT_IDS before including alerts.bpf.h"
#endif

/* Never read: puts the record's layout into the skeleton, so user space
 * decodes records through the generated types::latmon_alert. */
const volatile struct latmon_alert alert_layout = {};

/* Token bucket per id as a GCRA: the theoretical arrival time of the next
 * alert. Shared by all CPUs with plain read-modify-write (tracing programs
 * may not take bpf_spin_lock): CPUs racing for the last token can each
 * win, so a burst may exceed BURST by the number of CPUs. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LATMON_ALERT_IDS);
	__type(key, __u32);
	__type(value, __u64);
} alert_tat SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LATMON_ALERT_IDS);
	__type(key, __u32);
	__type(value, struct latmon_alert_drops);
} alert_drops SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, LATMON_ALERT_RING_BYTES);
} alerts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
} alerts_perf SEC(".maps");

/* GCRA: admit when the next theoretical arrival time is at most
 * (BURST - 1) periods ahead of now. */
static __always_inline bool latmon_alert_admit(__u32 id, __u64 now)
{
	const __u64 period = 1000000000ull / LATMON_ALERT_RATE;
	__u64 *tat = bpf_map_lookup_elem(&alert_tat, &id);
	__u64 t;

	if (!tat)
		return false;
	t = *tat;
	if (t < now)
		t = now;
	if (t - now > (LATMON_ALERT_BURST - 1) * period)
		return false;
	*tat = t + period;
	return true;
}

static __always_inline void latmon_alert_dropped(__u32 id, bool full)
{
	struct latmon_alert_drops *d = bpf_map_lookup_elem(&alert_drops, &id);

	if (!d)
		return;
	if (full)
		__sync_fetch_and_add(&d->buffer_full, 1);
	else
		__sync_fetch_and_add(&d->rate_limited, 1);
}

/* Who the alert is about: the current thread (task == 0), or another one
 * given by its ids and the kernel address of its comm (the task a wakeup
 * or switch-in is about). */
struct latmon_alert_who {
	__u32 pid; /* thread group id */
	__u32 tid;
	const void *comm; /* kernel pointer to task_struct::comm, or NULL: current */
};

static __always_inline void latmon_alert_fill(struct latmon_alert *a, __u32 id, __u64 delta, __u64 now,
					      const struct latmon_alert_who *who)
{
	a->time_ns = now;
	a->latency_ns = delta;
	a->probe_id = id;
	a->cpu = bpf_get_smp_processor_id();
	if (who && who->comm) {
		a->pid = who->pid;
		a->tid = who->tid;
		bpf_probe_read_kernel_str(a->comm, sizeof(a->comm), who->comm);
	} else {
		__u64 pid_tgid = bpf_get_current_pid_tgid();

		a->pid = pid_tgid >> 32;
		a->tid = (__u32)pid_tgid;
		bpf_get_current_comm(a->comm, sizeof(a->comm));
	}
}

/* Emit (or count) one alert record for id. `ctx`: the program's context
 * (perf buffer output needs it). `who`: NULL for the current thread. */
static __always_inline void latmon_alert(void *ctx, __u32 id, __u64 delta, __u64 now,
					 const struct latmon_alert_who *who)
{
	if (!latmon_alert_admit(id, now)) {
		latmon_alert_dropped(id, false);
		return;
	}
	if (cfg.common.use_ringbuf) {
		struct latmon_alert *a = bpf_ringbuf_reserve(&alerts, sizeof(*a), 0);

		if (!a) {
			latmon_alert_dropped(id, true);
			return;
		}
		latmon_alert_fill(a, id, delta, now, who);
		bpf_ringbuf_submit(a, 0);
	} else {
		struct latmon_alert a = {};

		latmon_alert_fill(&a, id, delta, now, who);
		if (bpf_perf_event_output(ctx, &alerts_perf, BPF_F_CURRENT_CPU, &a, sizeof(a)))
			latmon_alert_dropped(id, true);
	}
}

#ifdef LATMON_ALERT_ANATOMY
#include "causes.bpf.h"

/* Objects that send anatomies (LATMON_ALERT_ANATOMY defined before
 * including): the longer record's layout for the skeleton, and a per-CPU
 * scratch record for the perf buffer (too large for the BPF stack). */
const volatile struct latmon_alert_anat alert_anat_layout = {};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct latmon_alert_anat);
} alert_scratch SEC(".maps");

/* As latmon_alert() at now, with the anatomy `an` appended (NULL: the
 * short record, no anatomy), its causes tallied (cfg.common.tally_causes).
 * A BPF subprogram, not inlined: the record's
 * copy is long, and every caller would carry it (binary size). */
static __noinline int latmon_alert_anat(void *ctx, __u32 id, __u64 delta, const struct latmon_alert_who *who,
					const struct latmon_anatomy *an)
{
	__u64 now = bpf_ktime_get_ns();
	struct latmon_alert_anat *a;
	__u32 zero = 0;

	/* Before the token bucket: refused records' time counts too. */
	if (cfg.common.tally_causes) {
		if (an)
			latmon_cause_tally(id, delta, an);
		else
			latmon_cause_tally_whole(id, delta);
	}
	if (!an) {
		latmon_alert(ctx, id, delta, now, who);
		return 0;
	}
	if (!latmon_alert_admit(id, now)) {
		latmon_alert_dropped(id, false);
		return 0;
	}
	if (cfg.common.use_ringbuf) {
		a = bpf_ringbuf_reserve(&alerts, sizeof(*a), 0);
		if (!a) {
			latmon_alert_dropped(id, true);
			return 0;
		}
		latmon_alert_fill(&a->alert, id, delta, now, who);
		__builtin_memcpy(&a->anat, an, sizeof(*an));
		bpf_ringbuf_submit(a, 0);
	} else {
		a = bpf_map_lookup_elem(&alert_scratch, &zero);
		if (!a)
			return 0;
		latmon_alert_fill(&a->alert, id, delta, now, who);
		__builtin_memcpy(&a->anat, an, sizeof(*an));
		if (bpf_perf_event_output(ctx, &alerts_perf, BPF_F_CURRENT_CPU, a, sizeof(*a)))
			latmon_alert_dropped(id, true);
	}
	return 0;
}
#endif /* LATMON_ALERT_ANATOMY */

#endif /* __ALERTS_BPF_H */
