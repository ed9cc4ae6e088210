#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The test command (README, CI). Run as root: live tests load BPF programs
# into the running kernel. Then the Yocto layer's checks (the real BitBake
# among them), the static cross builds and the virtual boards (qemu), unless
# --no-boards is given: a board that cannot run fails.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "test.sh: run as root (the live BPF tests need it)" >&2; exit 1; }
boards=1
[ "${1:-}" = --no-boards ] && boards=0
t0=$(date +%s)
stage() { # NAME CMD...: run one stage and say how long it took
  local name=$1 s; shift
  s=$(date +%s)
  "$@"
  echo "test.sh: $name passed in $(( $(date +%s) - s )) s"
}
# Style gates: rustfmt (rustfmt.toml), clippy on every target (an allowance
# only with its reason beside it) and clang-format for bpf/ (.clang-format).
# clippy builds the BPF skeletons through build.rs, as cargo build does.
lint() {
  cargo fmt --all --check
  cargo clippy --release --all-targets --locked --workspace -- -D warnings
  clang-format --dry-run -Werror bpf/*.c bpf/*.h
}
stage "style gates" lint
# The technician's tool (crates/latmon-view) for Linux (tests/view_tui.rs and
# tests/view_report.rs drive it) and cross-built for Windows laptops
# (x86_64-pc-windows-gnu, linked by mingw-w64): a check that it builds, not
# run here.
view_builds() {
  cargo build --release --locked -p latmon-view
  cargo test --release --locked -p latmon-view
  cargo build --release --locked -p latmon-view --target x86_64-pc-windows-gnu
  file target/x86_64-pc-windows-gnu/release/latmon-view.exe | grep -q 'PE32+ executable' \
    || { echo "test.sh: latmon-view.exe is not a Windows executable" >&2; return 1; }
  ls -l target/release/latmon-view target/x86_64-pc-windows-gnu/release/latmon-view.exe
}
stage "latmon-view (Linux, Windows cross build)" view_builds
# --no-fail-fast: one CI run reports every failing test, not just the first binary's.
# The default members (latmon, latmon-core; Cargo.toml): not --workspace,
# whose feature unification with latmon-view's crates would build latmon a
# second time with other dependency features.
stage "cargo tests" cargo test --locked --release --no-fail-fast
# The Yocto layer: oelint-adv, kas, systemd-analyze, kernel options (yocto/).
stage "yocto checks" tests/yocto/check.sh
# The layer through the real BitBake and yocto-check-layer, offline, from the
# pinned snapshots in ../shared/yocto.
stage "bitbake checks" tests/yocto/bitbake.sh
if [ $boards = 1 ]; then
  stage "virtual boards" tests/board/run-all.sh
fi
echo "test.sh: all stages passed in $(( $(date +%s) - t0 )) s"
