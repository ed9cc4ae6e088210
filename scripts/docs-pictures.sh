#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The README's pictures of latmon-view (as root: the tests run the agent):
#   docs/view.png    tests/live/view_tui.rs's tmux screen (capture-pane text,
#                    drawn in a monospace <pre> by headless Chromium)
#   docs/report.png  tests/live/view_report.rs's report of the default
#                    configuration, as headless Chromium renders it
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked -p latmon-view
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
LATMON_VIEW_SCREEN="$work/screen.txt" cargo test --release --locked --test live -- --include-ignored view_tui::
LATMON_REPORT_PNG="$PWD/docs/report.png" cargo test --release --locked --test live -- --include-ignored view_report::
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
