#!/usr/bin/env bash
# The project's one test command (README and CI): build and install the package with its test
# dependencies, then run every test, Rust and Python.
set -euo pipefail
cd "$(dirname "$0")/.."
# Build only when needed: after the README's `pip install -e .` the native extension is already
# built from these sources, and only the test requirements may be missing (scripts/built.py).
if missing="$(python3 scripts/built.py)"; then
  if [ -n "$missing" ]; then
    printf '%s\n' "$missing" | xargs -d '\n' python3 -m pip install --quiet --disable-pip-version-check
  fi
else
  python3 -m pip install --quiet --disable-pip-version-check -e '.[test]'
fi
# The HTML report is checked in a real headless Chromium (Debian's package) where one can be had.
if ! command -v chromium-headless-shell >/dev/null && ! command -v chromium >/dev/null \
    && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium-headless-shell) >/dev/null \
    || echo "warning: could not install chromium-headless-shell; the browser test will be skipped" >&2
fi
cargo test --locked
python3 -m pytest
