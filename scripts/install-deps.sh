#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Install what building and testing latmon needs on Debian bookworm (root).
# Used by the README's first command and by CI (.ci/run). systemd is there
# for systemd-analyze verify (tests/yocto/check.sh); it needs no running systemd.
set -uo pipefail
export DEBIAN_FRONTEND=noninteractive
# A failed index (seen with one multiarch mirror) is a warning, not fatal.
apt-get update || echo "install-deps: warning: apt-get update reported errors; continuing" >&2
set -e
apt-get install -y --no-install-recommends \
  clang llvm libelf-dev zlib1g-dev pkg-config make gcc libc6-dev \
  autoconf autopoint automake libtool flex bison gawk \
  bpftool libbpf-tools rt-tests procps util-linux file cpio \
  python3 python3-venv \
  systemd
command -v cargo >/dev/null || { echo "install-deps: cargo not found; install Rust with rustup" >&2; exit 1; }
