#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Every virtual board, one after another (cross builds share a lock), with
# the time each takes. Exit non-zero if any board fails.
#
# A board that fails is run once more, as nextest retries a live test
# (.config/nextest.toml): its checks time a guest under TCG, where one
# host stall (steal, a neighbour's burst) can stretch a run past a bound
# that holds on every other. A board that then passes is named FLAKY in
# the summary, with its first try's failures above it and that try's
# console, UART and frames kept as target/board/<board>-try1-*; a second
# failure fails the run. LATMON_BOARD_RETRIES=0 turns the retry off.
set -uo pipefail
cd "$(dirname "$0")/../.."
retries=${LATMON_BOARD_RETRIES:-1}
rc=0
summary=""
for b in rt-arm64 armmp rt-amd64; do
  t=$(date +%s)
  if tests/board/run.sh "$b"; then
    r=PASS
  else
    r=FAIL
    for f in console.log uart.log frames.jsonl; do
      [ -f "target/board/$b-$f" ] && mv "target/board/$b-$f" "target/board/$b-try1-$f"
    done
    # What the guest's kernel said went wrong, if anything (a BUG splat, a
    # stall, a panic), so CI's log names it.
    grep -aE 'BUG:|WARNING:|Oops|Kernel panic|detected stalls|soft lockup|blocked for more than' \
      "target/board/$b-try1-console.log" 2>/dev/null | head -n 20 | sed "s/^/board $b: guest said: /" >&2
    if [ "$retries" -gt 0 ]; then
      echo "board $b: FAILED its first try in $(( $(date +%s) - t )) s; its outputs in target/board/$b-try1-*; trying once more" >&2
      if tests/board/run.sh "$b"; then r="FLAKY (failed, then passed its retry)"; fi
    fi
    [ "$r" = FAIL ] && rc=1
  fi
  summary+="board $b: $r in $(( $(date +%s) - t )) s (incl. its cross build)"$'\n'
done
printf '%s' "$summary"
exit $rc
