#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# A Python venv with the Modbus client the Modbus tests use (pymodbus and
# pyserial, pinned), cached under target/ so reruns skip the download.
# Prints the venv's python. Needs python3-venv (scripts/install-deps.sh)
# and PyPI the first time.
set -euo pipefail
cd "$(dirname "$0")/.."
want="pymodbus==3.16.1 pyserial==3.5"
venv=target/modbus-venv
mkdir -p target
# One maker at a time: nextest runs two Modbus tests at once, and on a fresh
# clone both found no venv and ran `python3 -m venv` on the same directory
# (ensurepip failed in the one that lost: a FLAKY test in every CI run).
exec 9> target/modbus-venv.lock
flock 9
if [ "$(cat "$venv/.latmon-stamp" 2>/dev/null)" != "$want" ]; then
  rm -rf "$venv"
  python3 -m venv "$venv" >&2
  # shellcheck disable=SC2086
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check $want >&2
  echo "$want" > "$venv/.latmon-stamp"
fi
echo "$PWD/$venv/bin/python"
