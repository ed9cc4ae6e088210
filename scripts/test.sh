#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The test command (README, CI). Run as root: live tests load BPF programs
# into the running kernel.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "test.sh: run as root (the live BPF tests need it)" >&2; exit 1; }
cargo test --locked --release
# The Yocto layer: oelint-adv, kas, systemd-analyze, kernel options (yocto/).
tests/yocto/check.sh
