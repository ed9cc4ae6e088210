#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# qemu-system-{arm,aarch64,x86_64} for the virtual boards. They must come from
# bookworm-backports: the machine carries qemu-utils 10 from there and
# bookworm's qemu 7.2 conflicts with it. The backports suite is
# added to the Debian source already configured (its URIs read at run time).
set -uo pipefail
export DEBIAN_FRONTEND=noninteractive
if command -v qemu-system-aarch64 >/dev/null && command -v qemu-system-arm >/dev/null && command -v qemu-system-x86_64 >/dev/null; then
  exit 0
fi
src=/etc/apt/sources.list.d/debian.sources
bp=/etc/apt/sources.list.d/latmon-backports.sources
if ! grep -rqs bookworm-backports /etc/apt/sources.list /etc/apt/sources.list.d/; then
  uris=$(awk '/^URIs:/ {print $2; exit}' "$src")
  [ -n "$uris" ] || { echo "install-qemu: no URIs in $src" >&2; exit 1; }
  keyring=$(awk '/^Signed-By:/ {print $2; exit}' "$src")
  printf 'Types: deb\nURIs: %s\nSuites: bookworm-backports\nComponents: main\nSigned-By: %s\n' "$uris" "$keyring" > "$bp"
fi
apt-get update || echo "install-qemu: warning: apt-get update reported errors; continuing" >&2
set -e
apt-get install -y --no-install-recommends -t bookworm-backports qemu-system-arm qemu-system-x86
