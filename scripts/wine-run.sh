#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# scripts/wine-run.sh PROGRAM.exe ARGS...: run a Windows build (latmon-view.exe,
# cross-built by scripts/test.sh) under wine, as the live tests do
# (tests/live/view_report.rs compares its output with the Linux build's).
#
# The wine prefix is made once and kept: $LATMON_WINEPREFIX, else
# ~/.cache/latmon-wine (a first run's wineboot takes a while; later runs
# reuse it). Into it goes bcryptprimitives.dll built from
# scripts/wine/processprng.c with mingw-w64: Debian bookworm's wine 8.0
# lacks ProcessPrng, which Rust's std calls at start-up; Windows 10 and
# later have it, so this is for wine only.
#
# Paths in ARGS: relative to the working directory, or Z:\ plus the Unix
# path (wine maps / to Z:). Exit status: the program's.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
[ $# -ge 1 ] || { echo "usage: scripts/wine-run.sh PROGRAM.exe [ARGS...]" >&2; exit 2; }
[ -f "$1" ] || { echo "wine-run.sh: $1: no such program" >&2; exit 2; }
for tool in wine wineboot wineserver x86_64-w64-mingw32-gcc; do
  command -v "$tool" > /dev/null \
    || { echo "wine-run.sh: needs $tool (apt-get install wine wine64 gcc-mingw-w64-x86-64)" >&2; exit 2; }
done
export WINEPREFIX=${LATMON_WINEPREFIX:-${XDG_CACHE_HOME:-$HOME/.cache}/latmon-wine}
export WINEARCH=win64
# Wine's own messages (fixme:, err:) are not the program's output.
export WINEDEBUG=${WINEDEBUG:--all}
# Ours, not wine's builtin (native only: the builtin has no ProcessPrng).
export WINEDLLOVERRIDES="bcryptprimitives=n${WINEDLLOVERRIDES:+;$WINEDLLOVERRIDES}"
dll=$WINEPREFIX/drive_c/windows/system32/bcryptprimitives.dll
src=$here/wine/processprng.c
mkdir -p "$(dirname "$WINEPREFIX")"
# One setup at a time (tests run wine in parallel); the stamp is written
# last, so an interrupted setup is redone.
(
  flock 9
  if [ ! -f "$WINEPREFIX/.latmon-ready" ]; then
    echo "wine-run.sh: making the wine prefix $WINEPREFIX" >&2
    wineboot --init > /dev/null 2>&1
    wineserver --wait
    touch "$WINEPREFIX/.latmon-ready"
  fi
  if [ ! -f "$WINEPREFIX/.latmon-dll" ] || [ "$src" -nt "$WINEPREFIX/.latmon-dll" ]; then
    x86_64-w64-mingw32-gcc -O2 -Wall -Werror -shared -s -o "$dll.tmp" "$src" -ladvapi32
    mv -f "$dll.tmp" "$dll"
    touch "$WINEPREFIX/.latmon-dll"
  fi
) 9> "$WINEPREFIX.lock"
exec wine "$@"
