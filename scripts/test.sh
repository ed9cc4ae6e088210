#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The test command (README, CI). Run as root: live tests load BPF programs
# into the running kernel. Then the static cross builds and the virtual
# boards (qemu), unless --no-boards is given: a board that cannot run fails.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "test.sh: run as root (the live BPF tests need it)" >&2; exit 1; }
boards=1
[ "${1:-}" = --no-boards ] && boards=0
t0=$(date +%s)
# --no-fail-fast: one CI run reports every failing test, not just the first binary's.
cargo test --locked --release --no-fail-fast
echo "test.sh: cargo tests passed in $(( $(date +%s) - t0 )) s"
# The Yocto layer: oelint-adv, kas, systemd-analyze, kernel options (yocto/).
tests/yocto/check.sh
# The layer through the real BitBake and yocto-check-layer, offline, from the
# pinned snapshots in ../shared/yocto.
tests/yocto/bitbake.sh
if [ $boards = 1 ]; then
  tests/board/run-all.sh
fi
