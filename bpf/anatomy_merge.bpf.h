/* SPDX-License-Identifier: (GPL-2.0-only OR MIT) */
/*
 * One anatomy account (bpf/anatomy.bpf.h) added into another: the cycle
 * family adds each CPU slot's account into its cycle's as the loop leaves
 * that CPU or blocks.
 */
#ifndef __ANATOMY_MERGE_BPF_H
#define __ANATOMY_MERGE_BPF_H

/* Add a slot's account to the cycle's: tasks by thread id, IRQs by
 * number (a part that finds no entry goes to its kind's rest). */
static __always_inline void merge_anat(struct latmon_anatomy *to, const struct latmon_anatomy *from)
{
	for (int i = 0; i < LATMON_ANAT_TASKS; i++) {
		const struct latmon_anat_task *f = &from->task[i];
		bool done = false;

		if (!f->ns)
			continue;
		for (int j = 0; j < LATMON_ANAT_TASKS; j++) {
			struct latmon_anat_task *e = &to->task[j];

			if (e->ns && e->pid == f->pid) {
				e->ns += f->ns;
				done = true;
				break;
			}
			if (!e->ns) {
				*e = *f;
				done = true;
				break;
			}
		}
		if (!done)
			to->task_rest_ns += f->ns;
	}
	to->task_rest_ns += from->task_rest_ns;
	for (int i = 0; i < LATMON_ANAT_IRQS; i++) {
		const struct latmon_anat_irq *f = &from->irq[i];
		bool done = false;

		if (!f->ns)
			continue;
		for (int j = 0; j < LATMON_ANAT_IRQS; j++) {
			struct latmon_anat_irq *e = &to->irq[j];

			if (e->ns && e->irq == f->irq) {
				e->ns += f->ns;
				done = true;
				break;
			}
			if (!e->ns) {
				*e = *f;
				done = true;
				break;
			}
		}
		if (!done)
			to->irq_rest_ns += f->ns;
	}
	to->irq_rest_ns += from->irq_rest_ns;
	for (int v = 0; v < LATMON_SOFTIRQ_VECS; v++)
		to->softirq_ns[v] += from->softirq_ns[v];
}

#endif /* __ANATOMY_MERGE_BPF_H */
