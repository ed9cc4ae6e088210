# SPDX-License-Identifier: MIT
# BPF, kprobes, uprobes, ftrace and BTF for latmon, with DISTRO_FEATURES
# "latmon" only (see linux-latmon.inc).
LATMON_KERNEL_FILES := "${THISDIR}/files"
require recipes-kernel/linux/linux-latmon.inc
