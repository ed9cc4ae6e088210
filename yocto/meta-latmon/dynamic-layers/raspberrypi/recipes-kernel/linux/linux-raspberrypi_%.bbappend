# SPDX-License-Identifier: MIT
# The Raspberry Pi kernel (meta-raspberrypi; this append is parsed only when
# that layer is in the build): the latmon kernel feature like linux-yocto,
# and PREEMPT_RT when LATMON_RPI_PREEMPT_RT = "1" (the raspberrypi4-64-rt
# board, yocto/kas/raspberrypi4-64.yml). linux-raspberrypi requires
# linux-yocto.inc, so .scc/.cfg fragments and KERNEL_DEBUG work as there.
LATMON_KERNEL_FILES := "${@os.path.normpath(os.path.join(d.getVar('THISDIR'), '..', '..', '..', '..', 'recipes-kernel', 'linux', 'files'))}"
require recipes-kernel/linux/linux-latmon.inc

LATMON_RPI_PREEMPT_RT ??= "0"
FILESEXTRAPATHS:prepend := "${@oe.utils.conditional('LATMON_RPI_PREEMPT_RT', '1', '${THISDIR}/files:', '', d)}"
SRC_URI:append = "${@oe.utils.conditional('LATMON_RPI_PREEMPT_RT', '1', ' file://preempt-rt.cfg', '', d)}"
