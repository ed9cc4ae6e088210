#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Fetch and unpack a virtual board's Debian kernel and busybox-static into a
# cache outside the repo (nothing downloaded is ever committed).
#   scripts/fetch-board.sh rt-arm64|armmp|rt-amd64 [--btf]
# Prints KEY=VALUE lines: KERNEL, CONFIG, BUSYBOX, BTF (the kernel's own BTF,
# cut from its image; empty when it has none), RELEASE, MODULES.
# --btf on a kernel without BTF (armmp) makes a detached BTF file with pahole
# from the matching -dbg package's vmlinux (a 620 MB download, ~1.5 min):
# what an integrator ships as `btf_path` for such a kernel.
# Fails loudly when a package cannot be downloaded.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
board=${1:?usage: $0 rt-arm64|armmp|rt-amd64 [--btf]}
want_btf=${2:-}
cache=${LATMON_BOARD_CACHE:-/var/cache/latmon-boards}
case "$board" in
  rt-arm64) meta=linux-image-rt-arm64; arch=arm64 ;;
  armmp) meta=linux-image-armmp; arch=armhf ;;
  rt-amd64) meta=linux-image-rt-amd64; arch=amd64 ;;
  *) echo "fetch-board: unknown board $board" >&2; exit 2 ;;
esac
mkdir -p "$cache"
cd "$cache"
if [ "$arch" != "$(dpkg --print-architecture)" ] && ! dpkg --print-foreign-architectures | grep -qx "$arch"; then
  echo "fetch-board: adding dpkg architecture $arch" >&2
  dpkg --add-architecture "$arch"
  apt-get update >&2 || echo "fetch-board: warning: apt-get update reported errors" >&2
fi
# The meta package depends on the versioned image package.
pkg=$(apt-cache depends "$meta:$arch" 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
[ -n "$pkg" ] || { echo "fetch-board: cannot resolve $meta:$arch (apt-get update? multiarch?)" >&2; exit 1; }
pkg=${pkg%%:*}
dir="$cache/$board"
if [ ! -d "$dir/boot" ] || [ "$(cat "$dir/.pkg" 2>/dev/null)" != "$pkg" ]; then
  rm -rf "$dir" && mkdir -p "$dir"
  # _apt cannot write into root-owned caches; download as root, quietly.
  apt-get download -o APT::Sandbox::User=root "$pkg:$arch" "busybox-static:$arch" >&2
  dpkg -x "$(ls -t "$pkg"_*_"$arch".deb | head -1)" "$dir"
  dpkg -x "$(ls -t busybox-static_*_"$arch".deb | head -1)" "$dir/busybox"
  echo "$pkg" > "$dir/.pkg"
fi
kernel=$(ls "$dir"/boot/vmlinuz-* | head -1)
config=$(ls "$dir"/boot/config-* | head -1)
btf=""
if grep -q '^CONFIG_DEBUG_INFO_BTF=y' "$config"; then
  btf="$dir/vmlinux.btf"
  [ -s "$btf" ] || python3 "$top/scripts/extract-btf.py" "$kernel" "$btf" >&2
fi
if [ -z "$btf" ] && [ "$want_btf" = --btf ]; then
  btf="$dir/external.btf"
  if [ ! -s "$btf" ]; then
    command -v pahole >/dev/null || { echo "fetch-board: pahole missing (apt-get install dwarves)" >&2; exit 1; }
    rel=${kernel##*/vmlinuz-}
    apt-get download -o APT::Sandbox::User=root "$pkg-dbg:$arch" >&2
    dbg=$(ls -t "$pkg"-dbg_*_"$arch".deb | head -1)
    dpkg-deb --fsys-tarfile "$dbg" | tar -x -C "$dir" "./usr/lib/debug/boot/vmlinux-$rel"
    pahole -J --btf_encode_detached "$btf.tmp" "$dir/usr/lib/debug/boot/vmlinux-$rel" >&2
    mv "$btf.tmp" "$btf"
    rm -rf "$dir/usr/lib/debug" "$dbg"
  fi
fi
echo "KERNEL=$kernel"
echo "CONFIG=$config"
echo "BUSYBOX=$dir/busybox/bin/busybox"
echo "BTF=$btf"
echo "RELEASE=${kernel##*/vmlinuz-}"
echo "MODULES=$dir/lib/modules"
