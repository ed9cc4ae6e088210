#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Install everything building and testing latmon needs on Debian bookworm
# (root): the native build, the static cross builds (aarch64 musl: musl-dev:arm64
# brings aarch64-linux-musl-gcc; armv7 glibc), the
# virtual boards and the supervisor firmware's emulated MCU (qemu,
# multiarch busybox/kernels, pahole), the baselines and
# the paced-link tests' load (stress-ng),
# the Modbus tests' client (mbpoll; pymodbus comes from PyPI via
# scripts/modbus-venv.sh), promtool (package prometheus), and what BitBake
# needs on the host (chrpath, diffstat, lz4, an en_US.UTF-8 locale; rsync
# refreshes its cached layer copies file by file). systemd is
# there for systemd-analyze verify (tests/yocto/check.sh); it needs no
# running systemd. wine (with wine64) runs the Windows build of latmon-view
# in the live tests (scripts/wine-run.sh); time (/usr/bin/time) measures the
# report's peak memory (crates/latmon-view/tests/report_scale.rs).
# Used by the README's first command and by CI (.ci/run).
set -uo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
# Virtual boards fetch arm64/armhf kernels and busybox-static.
for a in arm64 armhf; do
  dpkg --print-foreign-architectures | grep -qx "$a" || dpkg --add-architecture "$a"
done
# A failed index (seen with one multiarch mirror) is a warning, not fatal.
apt-get update || echo "install-deps: warning: apt-get update reported errors; continuing" >&2
set -e
apt-get install -y --no-install-recommends \
  clang llvm libelf-dev zlib1g-dev pkg-config make gcc libc6-dev \
  autoconf autopoint automake libtool flex bison gawk \
  gcc-aarch64-linux-gnu libc6-dev-arm64-cross gcc-arm-linux-gnueabihf libc6-dev-armhf-cross \
  musl-dev:arm64 \
  bpftool libbpf-tools rt-tests procps util-linux file cpio dwarves xz-utils zstd \
  python3 python3-venv systemd mbpoll prometheus \
  chrpath diffstat lz4 locales stress-ng clang-format \
  gcc-mingw-w64-x86-64 tmux chromium rsync time wine wine64
# BitBake (tests/yocto/bitbake.sh) wants an en_US.UTF-8 locale.
if ! locale -a 2>/dev/null | grep -qix 'en_US.utf8'; then
  sed -i 's/^# *en_US.UTF-8 UTF-8/en_US.UTF-8 UTF-8/' /etc/locale.gen
  grep -qx 'en_US.UTF-8 UTF-8' /etc/locale.gen || echo 'en_US.UTF-8 UTF-8' >> /etc/locale.gen
  locale-gen >/dev/null
fi
scripts/install-qemu.sh
command -v cargo >/dev/null || { echo "install-deps: cargo not found; install Rust with rustup" >&2; exit 1; }
rustup component add rustfmt clippy
rustup target add aarch64-unknown-linux-gnu aarch64-unknown-linux-musl armv7-unknown-linux-gnueabihf
# latmon-view for Windows laptops (scripts/test.sh cross-builds it; mingw-w64 links).
rustup target add x86_64-pc-windows-gnu
# The example supervisor firmware (crates/latmon-supervisor, Cortex-M3),
# run in qemu-system-arm's lm3s6965evb by scripts/supervisor-qemu.sh
# (qemu from scripts/install-qemu.sh above; python3 paces its UART).
rustup target add thumbv7m-none-eabi
# The test runner (scripts/test.sh, .config/nextest.toml): cargo-nextest
# from the crate registry, built here once and kept in ~/.cargo/bin; a
# machine that has it at this version skips this. Built at opt-level 1
# without LTO: it only starts and watches the test binaries, and on 2 cores
# that build takes 396 s where the release profile's takes 557 s (on the
# critical path of a fresh machine's CI, before BitBake starts).
nextest=0.9.151
if [ "$(cargo nextest --version 2>/dev/null | awk 'NR == 1 {print $2}')" != "$nextest" ]; then
  CARGO_PROFILE_RELEASE_OPT_LEVEL=1 CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
    cargo install --locked cargo-nextest --version "$nextest"
fi
