/* SPDX-License-Identifier: (GPL-2.0-only OR MIT) */
/*
 * nobtf.h - what a BPF object built without BTF includes instead of
 * vmlinux.h (build.rs: the `<stem>_nobtf` build, -DLATMON_NO_BTF, without
 * bpf/vmlinux/ on the include path).
 *
 * Kernels without BTF (Debian's armmp) cannot load an object with CO-RE
 * relocations: libbpf needs kernel BTF to relocate them. vmlinux.h marks
 * every struct preserve_access_index, so any field access through it
 * becomes a relocation. This header holds only what such an object needs
 * from the kernel, as plain C with fixed layouts:
 *  - base types and the uapi constants bpf_helpers.h and our objects use
 *    (values of include/uapi/linux/bpf.h: ABI, never renumbered);
 *  - nothing about tracepoint records: their layout is read at run time
 *    from tracefs format files (struct latmon_tp_field, tpfield.bpf.h);
 *  - the target's `struct pt_regs` as the kernel's user ABI defines it
 *    (asm/ptrace.h; the layout kprobe and uprobe programs get as context),
 *    with the field names libbpf's bpf_tracing.h expects when vmlinux.h is
 *    not included (__VMLINUX_H__ undefined).
 * build.rs checks that the object it builds from this carries no CO-RE
 * relocation.
 *
 * BPF's long and pointers are 64 bits even for a 32-bit kernel: registers
 * of a 32-bit target are declared __u32, never long.
 */
#ifndef __LATMON_NOBTF_H
#define __LATMON_NOBTF_H

typedef signed char __s8;
typedef unsigned char __u8;
typedef short __s16;
typedef unsigned short __u16;
typedef int __s32;
typedef unsigned int __u32;
typedef long long __s64;
typedef unsigned long long __u64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;

typedef _Bool bool;
enum { false = 0, true = 1 };

/* include/uapi/linux/bpf.h */
enum bpf_map_type {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERF_EVENT_ARRAY = 4,
	BPF_MAP_TYPE_PERCPU_HASH = 5,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_LRU_HASH = 9,
	BPF_MAP_TYPE_RINGBUF = 27,
};

enum {
	BPF_ANY = 0,
	BPF_NOEXIST = 1,
	BPF_EXIST = 2,
};

#define BPF_F_CURRENT_CPU 0xffffffffULL

#if defined(__TARGET_ARCH_x86)
/* arch/x86/include/uapi/asm/ptrace.h, x86_64 (bpf_tracing.h: rdi, rsp, ...) */
struct pt_regs {
	__u64 r15, r14, r13, r12, rbp, rbx, r11, r10;
	__u64 r9, r8, rax, rcx, rdx, rsi, rdi, orig_rax;
	__u64 rip, cs, eflags, rsp, ss;
};
#elif defined(__TARGET_ARCH_arm64)
/* arch/arm64/include/uapi/asm/ptrace.h: the kernel's struct pt_regs begins
 * with these fields; bpf_tracing.h reads a context through this type. */
struct user_pt_regs {
	__u64 regs[31];
	__u64 sp;
	__u64 pc;
	__u64 pstate;
};
struct pt_regs;
#elif defined(__TARGET_ARCH_arm)
/* arch/arm/include/uapi/asm/ptrace.h: `long uregs[18]`, 4-byte longs. */
struct pt_regs {
	__u32 uregs[18];
};
#else
#error "nobtf.h: no struct pt_regs for this target arch; add it from its uapi asm/ptrace.h"
#endif

#endif /* __LATMON_NOBTF_H */
