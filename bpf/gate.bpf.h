/* SPDX-License-Identifier: (GPL-2.0-only OR MIT) */
/*
 * The gate every latmon program passes first: while latmon_gate is 0 a
 * program returns at once - the same hooks with empty bodies, the `empty`
 * state of `latmon certify` (src/certify/). Switched by writing the map,
 * not by detaching: a detach waits for RCU (tasks) grace periods and
 * would itself disturb what the certificate measures. 1 at load, and
 * nothing but `latmon certify` writes it.
 *
 * Its own section, so that libbpf names its map ".data.gate" in every
 * object (a custom .data.* section keeps its name, no object prefix):
 * user space finds it from any program's map ids (src/certify/gate.rs).
 * A .data global, not const volatile rodata: it changes after load; the
 * verifier keeps the branch, one load and compare per run.
 */
#ifndef __GATE_BPF_H
#define __GATE_BPF_H

volatile __u32 latmon_gate SEC(".data.gate") = 1;

#define LATMON_GATE()             \
	do {                      \
		if (!latmon_gate) \
			return 0; \
	} while (0)

#endif /* __GATE_BPF_H */
