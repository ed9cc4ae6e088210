// SPDX-License-Identifier: (GPL-2.0-only OR MIT)
/*
 * shared: no program, one global of each struct of latmon.h. Its skeleton's
 * `types` module is the one Rust type set for those structs: build.rs
 * replaces every other skeleton's copy of them by a re-export of it, after
 * checking the copy is the same. Never loaded.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "latmon.h"

struct latmon_hist shared_hist;
struct latmon_alert shared_alert;
struct latmon_anat_task shared_anat_task;
struct latmon_anat_irq shared_anat_irq;
struct latmon_anatomy shared_anatomy;
struct latmon_alert_anat shared_alert_anat;
struct latmon_alert_drops shared_alert_drops;
struct latmon_cause_entry shared_cause_entry;
struct latmon_cause_tally shared_cause_tally;
struct latmon_irq_key shared_irq_key;
struct latmon_tp_field shared_tp_field;
struct latmon_common_config shared_common_config;
struct latmon_runq_config shared_runq_config;
struct latmon_irq_config shared_irq_config;
struct latmon_syscall_config shared_syscall_config;
struct latmon_func_config shared_func_config;
struct latmon_timer_config shared_timer_config;
struct latmon_cycle_config shared_cycle_config;
struct latmon_cycle_bin shared_cycle_bin;
struct latmon_cycle_stats shared_cycle_stats;
struct latmon_cycle_blocked shared_cycle_blocked;
struct latmon_cycle_exec shared_cycle_exec;
struct latmon_cycle_record shared_cycle_record;
struct latmon_alert_cycle shared_alert_cycle;
struct latmon_lock_config shared_lock_config;
struct latmon_lock_key shared_lock_key;
struct latmon_lock_tally shared_lock_tally;
struct latmon_lock_task shared_lock_task;
struct latmon_lock_record shared_lock_record;
struct latmon_alert_lock shared_alert_lock;

char LICENSE[] SEC("license") = "Dual MIT/GPL";
