#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The README's pictures of latmon-view (as root: the agent runs):
#   docs/view.png    tests/live/view_tui.rs's tmux screen (capture-pane text,
#                    drawn in a monospace <pre> by headless Chromium)
#   docs/report.png  the report of a 30-minute capture of the default
#                    probes (runq, syscall, irq), runq and irq with alert
#                    thresholds so that records come, under the stress-ng
#                    mix (the live tests' load) with a 115200-baud budget,
#                    as headless Chromium renders it.
# LATMON_REPORT_CAPTURE=FILE uses that frames capture instead of taking one
# (30 minutes); LATMON_REPORT_MINUTES sets the length of a new one.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked -p latmon-view --bin latmon-view
cargo build --release --locked --bin latmon
bin=$(realpath "${CARGO_TARGET_DIR:-target}")/release
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
LATMON_VIEW_SCREEN="$work/screen.txt" cargo test --release --locked --test live -- --include-ignored view_tui::
cap=${LATMON_REPORT_CAPTURE:-}
if [ -z "$cap" ]; then
  mins=${LATMON_REPORT_MINUTES:-30}
  cap=$work/capture.bin
  echo "docs-pictures.sh: a ${mins}-minute capture under the stress-ng mix ..."
  stress-ng --cpu 1 --cpu-load 20 --sock 1 --timer 1 --fork 1 --hdd 1 --msg 1 \
    --timeout "$((mins * 60 + 20))s" --quiet &
  "$bin/latmon" run --interval 1s --duration "${mins}m" \
    --probe runq,threshold=50ms --probe syscall --probe irq,threshold=15us \
    --output "file:$cap,budget=5760B/s" --output file:/dev/null,format=json > /dev/null
  wait
fi
# The capture's file name, not the scratch path, in the report's facts.
[ "$cap" = "$work/capture.bin" ] || cp "$cap" "$work/capture.bin"
(cd "$work" && "$bin/latmon-view" report file:capture.bin -o report.html)
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1300,2000 \
  --screenshot="$PWD/docs/report.png" "file://$work/report.html" 2>/dev/null
python3 - "$work/screen.txt" "$work/screen.html" <<'PY'
import html, sys
text = open(sys.argv[1], encoding="utf-8").read().rstrip("\n")
open(sys.argv[2], "w", encoding="utf-8").write(
    "<!DOCTYPE html><html><head><meta charset='utf-8'><style>"
    "body{margin:0;background:#1e1e1e}pre{margin:8px;color:#e8e8e8;"
    "font:13px/1.2 'DejaVu Sans Mono',monospace}</style></head>"
    "<body><pre>%s</pre></body></html>" % html.escape(text))
PY
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1040,700 \
  --screenshot="$PWD/docs/view.png" "file://$work/screen.html" 2>/dev/null
ls -l docs/view.png docs/report.png
