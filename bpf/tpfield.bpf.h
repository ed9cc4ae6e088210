/* SPDX-License-Identifier: (GPL-2.0-only OR MIT) */
/*
 * Reading a classic tracepoint's record (SEC("tracepoint/<sys>/<event>"),
 * ctx = the record) at offsets and sizes user space found in the event's
 * tracefs format file and set in `const volatile struct latmon_tp_field`
 * rodata before load: the no-BTF builds' only source of kernel layouts.
 *
 * Through bpf_probe_read_kernel, not ctx loads: the verifier accepts a
 * tracepoint ctx load only at an offset fixed in the instruction, and these
 * offsets are known only at load time. Little-endian targets only (x86,
 * arm64, arm): the low `size` bytes of a zeroed u64.
 */
#ifndef __TPFIELD_BPF_H
#define __TPFIELD_BPF_H

#include <bpf/bpf_helpers.h>
#include "latmon.h"

static __always_inline __s64 latmon_tp_read(void *ctx, const volatile struct latmon_tp_field *f)
{
	__u64 v = 0;
	__u32 size = f->size;
	__u32 shift;

	if (size == 0 || size > 8)
		return 0;
	if (bpf_probe_read_kernel(&v, size, ctx + f->offset))
		return 0;
	if (f->is_signed && size < 8) {
		shift = 64 - size * 8;
		return ((__s64)(v << shift)) >> shift;
	}
	return v;
}

/* Does the comm field `f` (LATMON_COMM_LEN bytes) equal `want`? An empty
 * `want` matches every task. */
static __always_inline bool latmon_tp_comm_is(void *ctx, const volatile struct latmon_tp_field *f,
					      const volatile char *want)
{
	char comm[LATMON_COMM_LEN];

	if (!want[0])
		return true;
	if (bpf_probe_read_kernel(comm, sizeof(comm), ctx + f->offset))
		return false;
	for (int i = 0; i < LATMON_COMM_LEN; i++) {
		if (comm[i] != want[i])
			return false;
		if (!comm[i])
			break;
	}
	return true;
}

#endif /* __TPFIELD_BPF_H */
