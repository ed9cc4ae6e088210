// SPDX-License-Identifier: (GPL-2.0-only OR MIT)
/*
 * features: one empty program per attach kind. `latmon check` loads and
 * attaches each one on its own to learn what this kernel really allows;
 * config flags or version numbers lie (e.g. fentry refused by lockdown).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

SEC("tracepoint/sched/sched_switch")
int feat_tracepoint(void *ctx) { return 0; }

SEC("tp_btf/sched_switch")
int BPF_PROG(feat_tp_btf) { return 0; }

SEC("raw_tp/sched_switch")
int BPF_PROG(feat_raw_tp) { return 0; }

SEC("kprobe/vfs_read")
int BPF_KPROBE(feat_kprobe) { return 0; }

SEC("fentry/vfs_read")
int BPF_PROG(feat_fentry) { return 0; }

/* Attached by user space to a symbol of latmon itself. */
SEC("uprobe")
int BPF_KPROBE(feat_uprobe) { return 0; }

char LICENSE[] SEC("license") = "Dual MIT/GPL";
