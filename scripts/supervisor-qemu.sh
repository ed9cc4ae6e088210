#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Run the example supervisor firmware (crates/latmon-supervisor) on a
# capture of latmon frames: build it for thumbv7m-none-eabi, boot it in
# qemu's lm3s6965evb, feed CAPTURE's bytes to UART0 once it is ready,
# paced like a serial line, and print what the firmware prints on UART1
# (a JSON line per applied summary, a link line when the line goes
# quiet). qemu is stopped once the firmware has read the whole capture
# (its link line counts CAPTURE's bytes); the script fails when the
# firmware's output stops for 60 s before that.
#
#   scripts/supervisor-qemu.sh CAPTURE            # 115200 baud 8N1: 11 520 B/s
#   SUPERVISOR_BAUD=921600 scripts/supervisor-qemu.sh CAPTURE
#
# A capture: `latmon run --output file:CAPTURE,budget=5760B/s` (a UART's
# budget; format frames is the file default) or any recording of a link.
# Needs qemu-system-arm, python3 and the rustup target thumbv7m-none-eabi
# (scripts/install-deps.sh). The run time goes to stderr.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 CAPTURE" >&2; exit 2; }
capture=$(realpath "$1")
[ -r "$capture" ] || { echo "supervisor-qemu: cannot read $1" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
baud=${SUPERVISOR_BAUD:-115200}
fw_dir=$root/crates/latmon-supervisor
(cd "$fw_dir" && cargo build --release --quiet --target thumbv7m-none-eabi)
target_dir=${CARGO_TARGET_DIR:-$fw_dir/target}
case $target_dir in /*) ;; *) target_dir=$fw_dir/$target_dir ;; esac
elf=$target_dir/thumbv7m-none-eabi/release/latmon-supervisor
[ -f "$elf" ] || { echo "supervisor-qemu: no firmware at $elf" >&2; exit 1; }

tmp=$(mktemp -d)
qemu_pid=
tail_pid=
cleanup() {
  local rc=$?
  [ -n "$qemu_pid" ] && kill "$qemu_pid" 2>/dev/null && wait "$qemu_pid" 2>/dev/null || true
  [ -n "$tail_pid" ] && kill "$tail_pid" 2>/dev/null && wait "$tail_pid" 2>/dev/null || true
  rm -rf "$tmp"
  exit $rc
}
trap cleanup EXIT
: > "$tmp/out"
start=$(date +%s.%N)
# UART0 (the first -serial) is a socket the feeder writes the capture to:
# qemu reads it only as fast as the UART's FIFO drains, like a line with
# flow control; the feeder paces it to the baud rate. UART1 (the second)
# is the firmware's output.
qemu-system-arm -M lm3s6965evb -display none -monitor none \
  -serial "unix:$tmp/uart0,server=on,wait=on" -serial "file:$tmp/out" \
  -kernel "$elf" </dev/null 2> >(grep -v -e 'terminating on signal' -e 'waiting for connection' >&2) &
qemu_pid=$!
tail -n +1 -F "$tmp/out" 2>/dev/null &
tail_pid=$!
status=0
python3 - "$tmp/uart0" "$capture" "$baud" "$tmp/out" <<'PY' || status=$?
import json, os, socket, sys, time
sock_path, capture, baud, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
data = open(capture, "rb").read()
rate = baud / 10.0  # 8N1: ten bits a byte
# Give up when the firmware's output has not grown for this long (qemu on
# a busy host reads UART0 far slower than the line's pace).
QUIET = 60.0


def lines():
    with open(out, "rb") as f:
        text = f.read()
    for line in text.splitlines():
        try:
            v = json.loads(line)
        except ValueError:
            continue
        if v.get("panic") or v.get("hardfault"):
            sys.exit("supervisor-qemu: the firmware stopped: %s" % line.decode())
        yield v


def wait_for(done):
    """Polls the firmware's lines until done(lines), or QUIET s of no output."""
    last_size, quiet_since = -1, time.monotonic()
    while time.monotonic() - quiet_since < QUIET:
        size = os.path.getsize(out)
        if size != last_size:
            last_size, quiet_since = size, time.monotonic()
        if done(list(lines())):
            return True
        time.sleep(0.1)
    return False


s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
for _ in range(200):
    try:
        s.connect(sock_path)
        break
    except OSError:
        time.sleep(0.05)
else:
    sys.exit("supervisor-qemu: qemu's UART0 socket never appeared")
# The line starts once the firmware listens: a byte that reaches the UART
# before the firmware set it up is not received (qemu empties the receive
# FIFO when the firmware switches it on), and the count would fall short.
if not wait_for(lambda vs: any("ready" in v for v in vs)):
    sys.exit("supervisor-qemu: the firmware never said it was ready")
t0 = time.monotonic()
sent = 0
# qemu takes UART0's bytes only as the firmware drains the FIFO: a send
# blocked this long means qemu stopped taking them.
s.settimeout(QUIET)
while sent < len(data):
    due = int((time.monotonic() - t0) * rate) - sent
    if due <= 0:
        time.sleep(0.001)
        continue
    try:
        sent += s.send(data[sent:sent + min(due, 4096)])
    except socket.timeout:
        sys.exit("supervisor-qemu: qemu took no byte of UART0's line for %d s (%d of %d sent)" % (QUIET, sent, len(data)))
# Wait for the firmware's link line that counts every byte of the capture:
# qemu hands UART0 a byte only when its FIFO has room, so none is lost on
# the way and a count short of the capture is a fault, not a tolerance.
read = 0


def whole(vs):
    global read
    for v in vs:
        read = v.get("link", {}).get("bytes", read)
    return read == len(data)


if not wait_for(whole):
    sys.exit("supervisor-qemu: the firmware read %d of the capture's %d bytes" % (read, len(data)))
PY
sleep 0.2 # the tail prints the last lines
end=$(date +%s.%N)
echo "supervisor-qemu: $(stat -c %s "$capture") bytes at $baud baud in $(awk "BEGIN { printf \"%.1f\", $end - $start }") s" >&2
exit $status
