#!/usr/bin/env bash
# Remake docs/images/report.png, the README's picture: the first screen (1280x900) of the report on
# the shipped T4 sample, in headless Chromium (Debian's package; no network).
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
traceana report sample_traces/t4_seed_pow_mul.json -o "$tmp/t4.html" -q
"${TRACEANA_CHROMIUM:-chromium}" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync --user-data-dir="$tmp/profile" \
  --hide-scrollbars --window-size=1280,900 --screenshot="$tmp/shot.png" "file://$tmp/t4.html" >/dev/null 2>&1
cp "$tmp/shot.png" docs/images/report.png
echo "wrote docs/images/report.png"
