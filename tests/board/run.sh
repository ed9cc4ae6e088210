#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Virtual-board end-to-end test: boots a Debian kernel under qemu (software
# emulation) with an initramfs holding the static latmon, its board config
# and a workload; latmon sends postcard frames over the guest's second UART
# (the board's link UART, not the console); the host decodes them with
# `latmon decode` and checks what arrived.
#   tests/board/run.sh rt-arm64|armmp|rt-amd64
# Fails loudly when anything cannot run (package not downloadable, qemu
# missing, no output): a board test never passes silently.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"
board=${1:?usage: $0 rt-arm64|armmp|rt-amd64}
case "$board" in
  rt-arm64) arch=aarch64; cfg=board-configs/qemu-arm64-rt.toml; uart=/dev/ttyAMA1; console=ttyAMA0
    qemu=(qemu-system-aarch64 -M virt -cpu cortex-a57 -m 512) ;;
  armmp) arch=armv7; cfg=board-configs/qemu-armv7.toml; uart=/dev/ttyAMA1; console=ttyAMA0
    qemu=(qemu-system-arm -M virt -cpu cortex-a15 -m 512) ;;
  rt-amd64) arch=x86_64; cfg=board-configs/qemu-x86_64-rt.toml; uart=/dev/ttyS1; console=ttyS0
    qemu=(qemu-system-x86_64 -m 512) ;;
  *) echo "board: unknown board $board" >&2; exit 2 ;;
esac
command -v "${qemu[0]}" >/dev/null || { echo "board $board: FAIL: ${qemu[0]} missing (scripts/install-qemu.sh)" >&2; exit 1; }
t0=$(date +%s)
vars=$(scripts/fetch-board.sh "$board")
eval "$vars"
bin=$(scripts/build-static.sh "$arch")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/root
mkdir -p "$root"/{bin,proc,sys,dev,tmp,etc/latmon}
cp "$BUSYBOX" "$root/bin/busybox"
cp "$bin" "$root/bin/latmon"
cp "$cfg" "$root/etc/latmon/latmon.toml"
[ -n "${EXTRA_BTF:-}" ] && cp "$EXTRA_BTF" "$root/etc/latmon/kernel.btf"
# The console carries the script's markers, `latmon check` and latmon's log;
# the link UART carries only what latmon's serial sink sends (frames).
cat > "$root/init" <<INIT
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
echo "board: booted \$(uname -r)"
echo "=== check"
latmon ${LATMON_BOARD_VERBOSE:-} check --config /etc/latmon/latmon.toml --json
echo "=== check-rc \$?"
echo "=== run"
latmon -v run --config /etc/latmon/latmon.toml --duration 10s 2>/tmp/run.err &
pid=\$!
# Attaching takes a while under emulation: start the workload after it
# (usleep, not sleep: the workload is exactly the processes named "sleep").
for i in \$(seq 600); do grep -q "running:" /tmp/run.err 2>/dev/null && break; usleep 100000; done
for i in \$(seq 300); do sleep 0.01; done
wait \$pid
rc=\$?
cat /tmp/run.err
echo "=== run-rc \$rc"
echo "=== done"
sync
poweroff -f
INIT
chmod +x "$root/init"
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) > "$work/initramfs.gz"
echo "board $board: booting $RELEASE under ${qemu[0]} (TCG)" >&2
timeout 300 "${qemu[@]}" -nographic -no-reboot -monitor none \
  -kernel "$KERNEL" -initrd "$work/initramfs.gz" \
  -append "console=$console quiet panic=-1" \
  -serial "file:$work/console.log" -serial "file:$work/uart.log" >/dev/null 2>&1 || true
t1=$(date +%s)
mkdir -p target/board
cp "$work/uart.log" "target/board/$board-uart.log"
cp "$work/console.log" "target/board/$board-console.log"
# Decode the link UART's frames on the host, as a technician's laptop would.
host_latmon=target/release/latmon
[ -x "$host_latmon" ] || cargo build --release --locked >&2
"$host_latmon" decode "file:$work/uart.log" > "$work/frames.jsonl" 2> "$work/link.txt" || true
cp "$work/frames.jsonl" "target/board/$board-frames.jsonl"
python3 tests/board/verify.py "$board" "$work/console.log" "$work/frames.jsonl" "$work/link.txt" "$t1" "$t0"
