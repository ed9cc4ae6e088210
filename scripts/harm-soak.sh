#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The harm soak (issue 39, "First, do no harm"): boots a virtual board
# BOOTS times; in each boot latmon attaches every family that loads there
# (tests/board/harm-soak.toml) under a load that makes the known hazards
# likely (tests/fixtures/lm_stress.c: slab churn, fork/exit storms,
# hackbench-style messaging, timers, PI-futex contention; lm_cycle: a
# SCHED_FIFO loop with misses), and cycles attach -> SIGHUP reload
# (tests/board/harm-soak-reload.toml: probes kept, re-attached, detached)
# -> SIGHUP back (attached again) -> SIGINT (all detached) -> attach again
# while it runs.
#   scripts/harm-soak.sh rt-arm64|rt-amd64|armmp BOOTS
# A boot is a hang when the guest's heartbeat (a console line every 5 s)
# stops for 60 s, when one of its steps does not finish in time (the guest
# says harm-stuck) or when it ends before its report; it is a splat when
# the kernel logs one on the console (tests/kernel-splats.txt, the boards'
# check). Each failing boot's console is kept as
# target/board/harm-BOARD-bootN-console.log. Ends with
#   harm-soak BOARD: boots N, hangs H, splats S
# (and the same, with each boot's figures, in target/board/harm-soak-BOARD.json);
# exit 0 only with no hang, no splat and every boot's report complete.
# Environment:
#   LATMON_HARM_SECS=N      seconds of load per boot at least (default 60)
#   LATMON_HARM_CYCLES=N    attach/reload/detach cycles per boot at least
#                           (default 2; the load runs until both are done)
#   LATMON_HARM_SMP=N       the guest's CPUs (default 2: cross-CPU contention)
#   LATMON_BOARD_INJECT_SPLAT=1  the guest logs a fake "BUG: scheduling
#                           while atomic" through /dev/kmsg mid-boot (the
#                           negative control: every boot is then a splat)
#   LATMON_HARM_TAG=NAME    names the outputs instead of BOARD
#   LATMON_BOARD_GUEST_ENV="K=V ..."  exported to the guest's latmon, e.g.
#                           LATMON_RT_TASK_STORAGE=safe (the mutation check:
#                           task storage forced on the 6.1-rt kernels)
set -euo pipefail
# The whole script is read before it runs (a soak runs for hours: an edit
# of this file meanwhile must not change what runs).
{
cd "$(dirname "$0")/.."
board=${1:?usage: $0 rt-arm64|rt-amd64|armmp BOOTS}
boots=${2:?usage: $0 BOARD BOOTS}
secs=${LATMON_HARM_SECS:-60}
smp=${LATMON_HARM_SMP:-2}
min_cycles=${LATMON_HARM_CYCLES:-2}
# The outputs' name (target/board/harm-TAG-bootN-console.log,
# harm-soak-TAG.json): two soaks of one board at once need two.
tag=${LATMON_HARM_TAG:-$board}
# A step of the guest's cycle (an attach, a reload, a stop) that takes
# longer than this is a hang (latmon stuck for good; a stopped kernel is
# the heartbeat's). Under TCG and the load, on a 2-core host shared with
# builds, attaching the 11 probes took 130-350 s (the verifier: 20-117 s
# for one probe; 29 s without the load) and a reload over 360 s.
step_s=${LATMON_HARM_STEP_S:-900}
silence_s=60
# shellcheck source=tests/board/lib.sh
. tests/board/lib.sh
board_vars "$board"
board_inputs "$board"
work=$(mktemp -d)
qpid=""
trap '[ -z "$qpid" ] || kill "$qpid" 2>/dev/null || true; rm -rf "$work"' EXIT
root=$work/root
board_root "$root"
for c in harm-soak harm-soak-reload; do
  sed "s|@UART@|$uart|" "tests/board/$c.toml" > "$root/etc/latmon/$c.toml"
done
board_fixture lm_stress "$root/bin/lm_stress" -O2 -pthread
board_fixture lm_cycle "$root/bin/lm_cycle" -O2
inject=""
[ "${LATMON_BOARD_INJECT_SPLAT:-0}" = 1 ] && inject=$board_inject_sh
guest_env=""
[ -z "${LATMON_BOARD_GUEST_ENV:-}" ] || guest_env="export ${LATMON_BOARD_GUEST_ENV}"
cat > "$root/init" <<INIT
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
echo "board: booted \$(uname -r) on \$(nproc) CPUs"
$board_detectors_sh
$guest_env
echo "harm: guest env: ${LATMON_BOARD_GUEST_ENV:-none}"
echo boot > /tmp/step
: > /tmp/run.err
# The heartbeat: the host counts a boot with none for ${silence_s} s as hung.
( n=0; while :; do n=\$((n + 1)); echo "harm-heartbeat \$n \$(cut -d' ' -f1 /proc/uptime) \$(cat /tmp/step) latmon-log-lines \$(wc -l < /tmp/run.err)"; sleep 5; done ) &
hb=\$!
# latmon's log on the console as it comes, stamped with the uptime: which
# attach, reload or detach step takes the time.
( tail -f /tmp/run.err | while read -r l; do echo "latmon@\$(cut -d' ' -f1 /proc/uptime): \$l"; done ) &
# step NAME: what the cycle is doing now (the heartbeat shows it).
step() { echo "\$1" > /tmp/step; }
# wait_for PATTERN COUNT WHAT: until /tmp/run.err holds COUNT lines matching
# PATTERN, latmon having exited, or ${step_s} s (then a hang: harm-stuck).
wait_for() {
  s0=\$(cut -d' ' -f1 /proc/uptime)
  while [ "\$(grep -c "\$1" /tmp/run.err)" -lt "\$2" ]; do
    kill -0 \$pid 2>/dev/null || { echo "harm-fail: latmon exited during \$3"; return 1; }
    [ \$((\$(cut -d. -f1 /proc/uptime) - \${s0%.*})) -lt $step_s ] || { echo "harm-stuck: \$3 not done in ${step_s} s"; tail -n 5 /tmp/run.err; return 1; }
    usleep 100000
  done
  echo "harm: \$3 in \$(since \$s0) s"
}
# since T: seconds since uptime T.
since() { awk -v t="\$1" '{ printf "%.1f", \$1 - t }' /proc/uptime; }
# The load runs until the cycles below are done: at least $secs s and
# $min_cycles cycles (attaching under TCG takes minutes on a busy host).
# (It runs at nice 19: latmon's threads, at nice 10, still attach in
# bounded time.)
lm_stress 86400 > /tmp/stress.out 2>&1 &
stress=\$!
t0=\$(cut -d. -f1 /proc/uptime)
# The RT loop: 1 ms cycles at SCHED_FIFO 80, a miss injected every 50th
# (busy, page faults, blocking I/O, long overrun in turn), while the load
# runs.
( while kill -0 \$stress 2>/dev/null; do lm_cycle 5000 1000 50 10 64 /tmp/cycle.io > /dev/null 2>&1; done ) &
loop=\$!
cycles=0 reloads=0 attaches=0
# LATMON_BOARD_INJECT_SPLAT=1: a fake splat half-way through the load's
# least time, whatever latmon is doing then.
( sleep $((secs / 2)); : no-op unless LATMON_BOARD_INJECT_SPLAT=1; $inject ) &
while [ \$cycles -lt $min_cycles ] || [ \$((\$(cut -d. -f1 /proc/uptime) - t0)) -lt $secs ]; do
  cycles=\$((cycles + 1))
  step "cycle-\$cycles-attach"
  cp /etc/latmon/harm-soak.toml /tmp/harm.toml
  latmon -v run --config /tmp/harm.toml > /dev/null 2>>/tmp/run.err &
  pid=\$!
  wait_for "running: [0-9]* of [0-9]* probes attached" \$cycles "cycle \$cycles attach" || break
  attaches=\$((attaches + 1))
  grep "running: [0-9]* of [0-9]* probes attached" /tmp/run.err | tail -n 1 | sed 's/^/harm: /'
  sleep 3
  for c in harm-soak-reload harm-soak; do
    step "cycle-\$cycles-reload-\$c"
    cp /etc/latmon/\$c.toml /tmp/harm.toml
    kill -HUP \$pid
    reloads=\$((reloads + 1))
    wait_for "reload: [0-9]* probes ([0-9]* running)" \$reloads "cycle \$cycles reload to \$c" || break 2
    grep "reload: [0-9]* probes" /tmp/run.err | tail -n 1 | sed 's/^/harm: /'
    sleep 3
  done
  step "cycle-\$cycles-detach"
  kill -INT \$pid
  s0=\$(cut -d' ' -f1 /proc/uptime)
  while kill -0 \$pid 2>/dev/null && [ \$((\$(cut -d. -f1 /proc/uptime) - \${s0%.*})) -lt $step_s ]; do usleep 100000; done
  if kill -0 \$pid 2>/dev/null; then echo "harm-stuck: cycle \$cycles detach not done in ${step_s} s"; break; fi
  wait \$pid
  rc=\$?
  echo "harm: cycle \$cycles detached in \$(since \$s0) s, latmon exit \$rc"
  [ \$rc = 0 ] || echo "harm-fail: latmon exit \$rc after SIGINT in cycle \$cycles"
done
step done
kill -TERM \$stress
wait \$stress
echo "harm: \$(cat /tmp/stress.out)"
kill \$loop 2>/dev/null
echo "harm: latmon said (first attach):"
grep -m 12 -i "fail\|error\|skipped\|running:" /tmp/run.err | sed 's/^/harm:   /'
echo "=== harm-done cycles \$cycles attaches \$attaches reloads \$reloads"
kill \$hb
sync
poweroff -f
INIT
board_initramfs "$root" "$work/initramfs.gz"
mkdir -p target/board
# A failing boot's console from an earlier soak would be taken for this one's.
rm -f "target/board/harm-$tag-boot"*-console.log
echo "harm-soak $board: $boots boots of ${secs} s of load, $smp CPUs, $RELEASE under ${qemu[0]} (TCG)" >&2
hangs=0 splats=0 incomplete=0
rows=()
for i in $(seq "$boots"); do
  con=$work/console.log
  : > "$con"
  b0=$(date +%s)
  "${qemu[@]}" -smp "$smp" -nographic -no-reboot -monitor none \
    -kernel "$KERNEL" -initrd "$work/initramfs.gz" -append "$(board_cmdline)" \
    -serial "file:$con" -serial "file:$work/uart.log" >/dev/null 2>&1 &
  qpid=$!
  # Progress: console growth until the first heartbeat (the boot), then
  # heartbeats.
  last=$(date +%s) seen=0 size=0 hang=""
  while kill -0 "$qpid" 2>/dev/null; do
    sleep 2
    now=$(date +%s)
    hb=$(grep -ac '^harm-heartbeat' "$con" || true)
    if [ "$hb" -gt 0 ]; then
      [ "$hb" = "$seen" ] || { seen=$hb last=$now; }
    else
      s=$(stat -c %s "$con")
      [ "$s" = "$size" ] || { size=$s last=$now; }
    fi
    if [ $((now - last)) -ge "$silence_s" ]; then hang="no heartbeat for $((now - last)) s"; fi
    if grep -aq '^harm-stuck' "$con"; then hang=$(grep -a -m 1 '^harm-stuck' "$con"); fi
    # Heartbeats but no end (cannot happen while every step is bounded):
    # 20 minutes past the load's end is a hang too.
    if [ $((now - b0)) -gt $((secs + 1200)) ]; then hang="the boot did not end in $((now - b0)) s"; fi
    if [ -n "$hang" ]; then kill "$qpid" 2>/dev/null || true; break; fi
  done
  wait "$qpid" 2>/dev/null || true
  qpid=""
  secs_boot=$(( $(date +%s) - b0 ))
  done_line=$(grep -a '^=== harm-done' "$con" | tr -d '\r' || true)
  if [ -z "$hang" ] && [ -z "$done_line" ]; then
    hang="the boot ended before its report (last step: $(grep -a '^harm-heartbeat' "$con" | tail -n 1 | cut -d' ' -f4))"
  fi
  bad=$(python3 tests/board/splats.py "$con" || true)
  fails=$(grep -a '^harm-fail' "$con" || true)
  # The load's own account: every class did some of its work, or the boot
  # proved nothing (lm_stress exits 1 then, and its line is missing if it
  # never ran). A hung boot has none: it is a hang, not also a failure.
  stress=$(grep -a -m 1 '^harm: lm_stress:' "$con" | tr -d '\r' | sed 's/^harm: //' || true)
  if [ -z "$hang" ] && { [ -z "$stress" ] || printf '%s\n' "$stress" | grep -qE ' (slab|fork|msg|timer|lock) 0( |$)'; }; then
    fails="${fails:+$fails; }harm-fail: the load did not run: ${stress:-no lm_stress report}"
  fi
  verdict=ok
  [ -z "$fails" ] || { verdict=failed; incomplete=$((incomplete + 1)); }
  [ -z "$hang" ] || { verdict=hang; hangs=$((hangs + 1)); }
  [ -z "$bad" ] || { verdict=splat; splats=$((splats + 1)); }
  echo "harm-soak $board: boot $i: $verdict in $secs_boot s: ${done_line#=== harm-done }; ${stress:-no load report}" >&2
  [ -z "$hang" ] || echo "harm-soak $board: boot $i: hang: $hang" >&2
  [ -z "$fails" ] || echo "harm-soak $board: boot $i: $fails" >&2
  [ -z "$bad" ] || printf '%s\n' "$bad" | head -n 20 | sed "s/^/harm-soak $board: boot $i: /" >&2
  if [ "$verdict" != ok ]; then
    cp "$con" "target/board/harm-$tag-boot$i-console.log"
    echo "harm-soak $board: boot $i: console kept as target/board/harm-$tag-boot$i-console.log" >&2
  fi
  rows+=("$(python3 -c 'import json, sys; print(json.dumps(dict(boot=int(sys.argv[1]), verdict=sys.argv[2], seconds=int(sys.argv[3]), report=sys.argv[4], load=sys.argv[5], hang=sys.argv[6], splats=[l for l in sys.argv[7].splitlines() if l])))' \
    "$i" "$verdict" "$secs_boot" "${done_line#=== harm-done }" "$stress" "$hang" "$bad")")
done
line="harm-soak $board: boots $boots, hangs $hangs, splats $splats"
python3 -c 'import json, sys; json.dump(dict(board=sys.argv[1], boots=int(sys.argv[2]), hangs=int(sys.argv[3]), splats=int(sys.argv[4]), failed=int(sys.argv[5]), load_seconds=int(sys.argv[6]), cpus=int(sys.argv[7]), guest_env=sys.argv[8], inject_splat=sys.argv[9] == "1", kernel=sys.argv[10], boot_rows=[json.loads(r) for r in sys.argv[11:]]), sys.stdout, indent=1); print()' \
  "$board" "$boots" "$hangs" "$splats" "$incomplete" "$secs" "$smp" "${LATMON_BOARD_GUEST_ENV:-}" "${LATMON_BOARD_INJECT_SPLAT:-0}" "$RELEASE" "${rows[@]}" \
  > "target/board/harm-soak-$tag.json"
[ "$incomplete" = 0 ] || echo "harm-soak $board: $incomplete boot(s) where latmon failed a step (harm-fail above)" >&2
echo "$line"
[ "$hangs" = 0 ] && [ "$splats" = 0 ] && [ "$incomplete" = 0 ]
exit
}
