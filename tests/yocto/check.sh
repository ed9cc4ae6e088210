#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The Yocto layer's checks, the ones the Yocto world itself uses, without
# bitbake (scripts/test.sh runs this before the builds, then tests/yocto/bitbake.sh,
# the real BitBake, beside them):
#   1. latmon-crates.inc lists exactly Cargo.lock's crates and checksums
#   2. oelint-adv is clean on every recipe, append, include and layer.conf
#      (suppressions: yocto/.oelint.cfg, each justified there), and the
#      kernel appends are guarded by DISTRO_FEATURES (what oelint cannot see)
#   3. LIC_FILES_CHKSUM follows Cargo.lock's libbpf-sys/libbpf-rs, and the recipe's
#      LICENSE covers every crate linked into latmon; the pinned SRCREV_latmon
#      has this Cargo.lock (so latmon-crates.inc fits the source it builds)
#   4. the kas files load and validate offline with kas's own loader/schema
#   5. the systemd unit, rendered for every board config, passes
#      systemd-analyze verify with no diagnostic at all
#   6. every option of the kernel fragments exists in Debian's PREEMPT_RT
#      arm64 kernel config (scripts/fetch-board.sh rt-arm64 downloads it)
# Python tools come from PyPI into a venv under target/ (LATMON_YOCTO_VENV).
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"
layer=yocto/meta-latmon
start=$(date +%s)
step() { echo "yocto: $*"; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

venv=${LATMON_YOCTO_VENV:-$top/target/yocto-venv}
# Versions these checks were written against; bump deliberately.
pins=(oelint-adv==9.11.2 kas==5.5)
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.pins" 2>/dev/null)" != "${pins[*]}" ]; then
  step "creating $venv (${pins[*]})"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "${pins[@]}"
  echo "${pins[*]}" > "$venv/.pins"
fi

step "1. crate list"
python3 scripts/gen-latmon-crates-inc.py --check

step "2. oelint-adv $("$venv/bin/oelint-adv" --version 2>&1 | tail -1)"
mapfile -t lintfiles < <(find "$layer" \( -name '*.bb' -o -name '*.bbappend' -o -name '*.inc' -o -name layer.conf \) | sort)
lint=$(OELINT_CONFIG="$top/yocto/.oelint.cfg" "$venv/bin/oelint-adv" --quiet --relpaths "${lintfiles[@]}" 2>&1) || true
if [ -n "$lint" ]; then
  echo "$lint" >&2
  echo "yocto: FAIL: oelint-adv findings (fix them, or suppress in yocto/.oelint.cfg with a reason)" >&2
  exit 1
fi
echo "oelint-adv: ${#lintfiles[@]} files clean: ${lintfiles[*]#$layer/}"
mapfile -t kernelfiles < <(find "$layer" -path "*recipes-kernel/linux/*" -name "*.bbappend" | sort)
python3 tests/yocto/checks.py guards "${kernelfiles[@]}"

step "3. license checksums"
python3 tests/yocto/checks.py licenses "$layer/recipes-support/latmon/latmon_git.bb"
python3 tests/yocto/checks.py srcrev "$layer/recipes-support/latmon/latmon_git.bb"

step "4. kas files"
KAS_WORK_DIR="$work/kas" "$venv/bin/python" tests/yocto/checks.py kas yocto/kas/*.yml

step "5. systemd unit"
mkdir -p "$work/bin"
printf '#!/bin/sh\nexit 0\n' > "$work/bin/latmon"
chmod +x "$work/bin/latmon"
units=()
for cfg in board-configs/*.toml; do
  b=$(basename "$cfg" .toml)
  sh "$layer/recipes-support/latmon/files/latmon-service-files.sh" "$cfg" "$layer/recipes-support/latmon/files" \
    "$work/$b" "$work/bin" /etc "CAP_BPF CAP_PERFMON" > "$work/$b.facts"
  sh -n "$work/$b/latmon.init"
  units+=("$work/$b/latmon.service")
done
python3 tests/yocto/checks.py caps "${units[0]}"
if command -v systemd-analyze >/dev/null; then
  for u in "${units[@]}"; do
    # verify exits 0 on "ignoring" diagnostics: any output is a failure.
    out=$(systemd-analyze verify "$u" 2>&1) || { echo "$out" >&2; exit 1; }
    if [ -n "$out" ]; then
      echo "$out" >&2
      echo "yocto: FAIL: systemd-analyze verify $u" >&2
      exit 1
    fi
    b=$(basename "$(dirname "$u")")
    echo "systemd-analyze verify: latmon.service for $b: clean ($(tr '\n' ' ' < "$work/$b.facts"))"
  done
else
  echo "yocto: systemd-analyze not installed: unit not verified (install the systemd package)" >&2
fi

step "6. kernel fragment options"
vars=$(scripts/fetch-board.sh rt-arm64)
config=$(printf '%s\n' "$vars" | sed -n 's/^CONFIG=//p')
[ -f "$config" ] || { echo "yocto: FAIL: no kernel config from scripts/fetch-board.sh rt-arm64" >&2; exit 1; }
mapfile -t cfgs < <(find "$layer" -name '*.cfg' | sort)
python3 tests/yocto/checks.py kconfig "$config" "${cfgs[@]}"

echo "yocto: all checks passed in $(( $(date +%s) - start )) s"
