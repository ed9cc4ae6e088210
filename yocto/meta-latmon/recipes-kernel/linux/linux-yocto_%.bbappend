# SPDX-License-Identifier: MIT
# BPF, kprobes, uprobes, ftrace and BTF for latmon, with DISTRO_FEATURES
# "latmon" only. The whole include is conditional, not each value in it:
# an inline ${@bb.utils.contains(...)} guard is part of the variable's value
# and so of every task signature that reads it, which would move the
# kernel's signatures just by adding the layer (yocto-check-layer's
# test_signatures).
LATMON_KERNEL_FILES := "${THISDIR}/files"
# nooelint: oelint.spaces.lineend - oelint reads the empty name of the guard's else branch as a trailing blank
require ${@bb.utils.contains('DISTRO_FEATURES', 'latmon', 'recipes-kernel/linux/linux-latmon.inc', '', d)}
