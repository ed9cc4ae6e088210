# SPDX-License-Identifier: MIT
# shellcheck shell=bash
# shellcheck disable=SC2034 # variables set here are the sourcing script's
# What the virtual-board scripts share (tests/board/run.sh, the boards'
# test; scripts/harm-soak.sh, the harm soak): each board's facts, its
# inputs (kernel, busybox, static latmon, cross-built fixtures), the
# initramfs, the kernel command line and qemu's command. Sourced from the
# repository's top directory, after `set -euo pipefail`.

# board_vars BOARD: sets arch, uart (the link UART), console, configs
# (run.sh's sections: NAME=FILE), fetch_opts, target_cc, target_cflags,
# rx_tty/rx_driver (the console UART that receives the host's bytes and
# its /proc/tty/driver file; empty: none) and qemu (its command, no disk).
# Always TCG: this machine's /dev/kvm opens, but the 6.1 kernels stop
# right after decompression under it (no earlyprintk line in 30 s, -cpu
# host or kvm64), and with -cpu host qemu aborts setting MSR 0x10a.
board_vars() {
  fetch_opts=()
  target_cc="" target_cflags=""
  rx_tty="" rx_driver=""
  case "$1" in
    rt-arm64) arch=aarch64; uart=/dev/ttyAMA1; console=ttyAMA0
      # anatomy: a control loop pinned with the console UART's IRQ thread
      # (lm_cycle; tests/board/rt-arm64-anatomy.toml): runq's anatomy and
      # the cycle family's misses.
      # lock: a priority inversion on demand (lm_lock;
      # tests/board/rt-arm64-lock.toml), owners found without the 6.2 kfunc.
      configs=(main=board-configs/qemu-arm64-rt.toml anatomy=tests/board/rt-arm64-anatomy.toml
        lock=tests/board/rt-arm64-lock.toml)
      target_cc=aarch64-linux-gnu-gcc
      # Only the arch timer (IRQF_TIMER, never threaded) fires on its own on
      # qemu's virt board; the PL011's handler is force-threaded on
      # PREEMPT_RT (irq/N-uart-pl011): host bytes into the console make the
      # threaded path fire.
      rx_tty=/dev/ttyAMA0 rx_driver=/proc/tty/driver/ttyAMA
      qemu=(qemu-system-aarch64 -M virt -cpu cortex-a57 -m 512) ;;
    armmp) arch=armv7; uart=/dev/ttyAMA1; console=ttyAMA0
      # No BTF in this kernel: first as shipped (no-BTF build), then with
      # its BTF as a separate file (btf_path).
      configs=(nobtf=board-configs/qemu-armv7.toml btf=board-configs/qemu-armv7-btf.toml)
      fetch_opts=(--btf)
      # -marm: arm uprobes cannot probe Thumb code (Debian's armhf default).
      target_cc=arm-linux-gnueabihf-gcc target_cflags=-marm
      qemu=(qemu-system-arm -M virt -cpu cortex-a15 -m 512) ;;
    rt-amd64) arch=x86_64; uart=/dev/ttyS1; console=ttyS0
      configs=(main=board-configs/qemu-x86_64-rt.toml)
      # The 8250 console's handler is force-threaded too (irq/4-ttyS0).
      # The host's own gcc builds the fixtures (static, glibc).
      target_cc=gcc
      rx_tty=/dev/ttyS0 rx_driver=/proc/tty/driver/serial
      qemu=(qemu-system-x86_64 -m 512) ;;
    *) echo "board: unknown board $1" >&2; return 2 ;;
  esac
}

# board_inputs BOARD: the kernel and busybox (scripts/fetch-board.sh: sets
# KERNEL, CONFIG, BUSYBOX, BTF, RELEASE, MODULES) and the static latmon
# (bin). Fails loudly when anything is missing.
board_inputs() {
  command -v "${qemu[0]}" >/dev/null || { echo "board $1: FAIL: ${qemu[0]} missing (scripts/install-qemu.sh)" >&2; return 1; }
  local vars
  vars=$(scripts/fetch-board.sh "$1" "${fetch_opts[@]}")
  eval "$vars"
  bin=$(scripts/build-static.sh "$arch")
}

# board_fixture SOURCE OUT [CFLAGS...]: tests/fixtures/SOURCE.c built static
# for the board (its cross gcc) into OUT.
board_fixture() {
  local src=$1 out=$2
  shift 2
  command -v "$target_cc" >/dev/null || { echo "board: FAIL: $target_cc missing (scripts/install-deps.sh)" >&2; return 1; }
  # shellcheck disable=SC2086 # target_cflags: zero or more flags
  "$target_cc" -static -Wall $target_cflags "$@" -o "$out" "tests/fixtures/$src.c"
}

# board_root ROOT: the initramfs tree with busybox and latmon (bin/).
board_root() {
  mkdir -p "$1"/{bin,proc,sys,dev,tmp,etc/latmon}
  cp "$BUSYBOX" "$1/bin/busybox"
  cp "$bin" "$1/bin/latmon"
}

# board_initramfs ROOT OUT: ROOT (its executable /init) packed for -initrd.
board_initramfs() {
  chmod +x "$1/init"
  (cd "$1" && find . | cpio -o -H newc --quiet | gzip -1) > "$2"
}

# The kernel's command line: the console, and what a stock kernel offers
# to detect harm (issue 39), set short enough to fire within a boot (a
# board runs 1-3 minutes, a harm-soak boot at least one). The Debian 6.1
# kernels (rt-arm64, rt-amd64, armmp; their configs: scripts/fetch-board.sh
# prints CONFIG=) have DETECT_HUNG_TASK (default 120 s), SOFTLOCKUP_DETECTOR
# (watchdog_thresh 10: a soft lockup after 20 s), RCU stall warnings
# (RCU_CPU_STALL_TIMEOUT 21 s) and SCHED_DEBUG (scheduling while atomic);
# not DEBUG_ATOMIC_SLEEP (no "sleeping function called from invalid
# context"), PROVE_LOCKING (no "Invalid wait context") or a hard-lockup
# detector on arm64 (none before 6.6's buddy detector; x86's needs a PMU
# TCG lacks). So:
# - hung tasks: 20 s (checked every 20 s: a task blocked since 20 s is
#   named within 40 s), warnings unlimited (-1, default 10);
# - RCU CPU stalls: 20 s, and RCU tasks stalls (bpf trampolines, kprobes
#   wait for them) 30 s: 7500 jiffies at the kernels' HZ=250 (default 10
#   minutes);
# - loglevel=5, not `quiet` (console loglevel 4, errors only): WARN_ON's
#   "WARNING: CPU: ..." is pr_warn (level 4), and only levels below the
#   console loglevel reach the console the host reads. verify.py cuts the
#   kernel's lines out of the text it parses.
# - panic=-1: a panic reboots at once, and -no-reboot ends qemu.
board_cmdline() {
  echo "console=$console loglevel=5 panic=-1 sysctl.kernel.hung_task_timeout_secs=20" \
    "sysctl.kernel.hung_task_warnings=-1 rcupdate.rcu_cpu_stall_timeout=20 rcupdate.rcu_task_stall_timeout=7500"
}

# The guest's report of the detectors it runs with (its first lines on the
# console, after `board: booted`): what board_cmdline asked, as the kernel
# took it. Worded without the splat words ("hung", "stall" alone) that a
# technician greps a console for.
# shellcheck disable=SC2016 # expanded in the guest's init
board_detectors_sh='echo "board: kernel detectors armed (s): tasks $(cat /proc/sys/kernel/hung_task_timeout_secs), cpus $(cat /proc/sys/kernel/watchdog_thresh), rcu $(cat /sys/module/rcupdate/parameters/rcu_cpu_stall_timeout); console loglevel $(cut -f1 /proc/sys/kernel/printk)"'

# The negative control of the splat checks (LATMON_BOARD_INJECT_SPLAT=1):
# the guest's init logs a fake splat through /dev/kmsg (level 3), as the
# kernel would, in the middle of its run; the board must then fail naming
# it.
board_inject_sh='echo "<3>BUG: scheduling while atomic: latmon-inject/0/0x00000002 (LATMON_BOARD_INJECT_SPLAT)" > /dev/kmsg'
