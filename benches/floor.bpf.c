// SPDX-License-Identifier: (GPL-2.0-only OR MIT)
/*
 * The floor of the cycle family's per-switch cost (benches/cycle-floor.sh):
 * empty programs on the tracepoints every context switch and wakeup runs
 * (cycle_switch, cycle_waking, cycle_wakeup in bpf/cycle.bpf.c). What they
 * cost per run is dispatch plus the BPF statistics' own clock reads.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

SEC("tp_btf/sched_switch")
int BPF_PROG(floor_switch) { return 0; }

SEC("tp_btf/sched_waking")
int BPF_PROG(floor_waking) { return 0; }

SEC("tp_btf/sched_wakeup")
int BPF_PROG(floor_wakeup) { return 0; }

char LICENSE[] SEC("license") = "Dual MIT/GPL";
