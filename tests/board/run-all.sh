#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Every virtual board, one after another (cross builds share a lock), with
# the time each takes. Exit non-zero if any board fails.
set -uo pipefail
cd "$(dirname "$0")/../.."
rc=0
summary=""
for b in rt-arm64 armmp rt-amd64; do
  t=$(date +%s)
  if tests/board/run.sh "$b"; then r=PASS; else r=FAIL; rc=1; fi
  summary+="board $b: $r in $(( $(date +%s) - t )) s (incl. its cross build)"$'\n'
done
printf '%s' "$summary"
exit $rc
