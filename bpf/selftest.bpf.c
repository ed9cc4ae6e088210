// SPDX-License-Identifier: (GPL-2.0-only OR MIT)
/*
 * selftest: runs the BPF bucket function (bits.bpf.h) on values user space
 * writes into in_ns[], via BPF_PROG_TEST_RUN. The Rust tests compare the
 * result with hist::bucket_index() so the two implementations cannot drift.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "latmon.h"
#include "bits.bpf.h"

__u64 in_ns[LATMON_SELFTEST_VALUES];
__u32 out_bucket[LATMON_SELFTEST_VALUES];

SEC("raw_tp")
int bucket_selftest(void *ctx)
{
	for (__u32 i = 0; i < LATMON_SELFTEST_VALUES; i++)
		out_bucket[i] = latmon_bucket(in_ns[i]);
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
