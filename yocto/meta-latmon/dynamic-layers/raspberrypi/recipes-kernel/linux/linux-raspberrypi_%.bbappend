# SPDX-License-Identifier: MIT
# The Raspberry Pi kernel (meta-raspberrypi; this append is parsed only when
# that layer is in the build): the latmon kernel feature like linux-yocto,
# and PREEMPT_RT when LATMON_RPI_PREEMPT_RT = "1" (the raspberrypi4-64-rt
# board, yocto/kas/raspberrypi4-64.yml). linux-raspberrypi requires
# linux-yocto.inc, so .scc/.cfg fragments and KERNEL_DEBUG work as there.
# Both includes are conditional as a whole (see linux-yocto_%.bbappend).
LATMON_KERNEL_FILES := "${@os.path.normpath(os.path.join(d.getVar('THISDIR'), '..', '..', '..', '..', 'recipes-kernel', 'linux', 'files'))}"
LATMON_RPI_FILES := "${THISDIR}/files"
# nooelint: oelint.spaces.lineend - oelint reads the empty name of the guard's else branch as a trailing blank
require ${@bb.utils.contains('DISTRO_FEATURES', 'latmon', 'recipes-kernel/linux/linux-latmon.inc', '', d)}

LATMON_RPI_PREEMPT_RT ??= "0"
# nooelint: oelint.spaces.lineend - oelint reads the empty name of the guard's else branch as a trailing blank
require ${@oe.utils.conditional('LATMON_RPI_PREEMPT_RT', '1', 'linux-latmon-rpi-rt.inc', '', d)}
