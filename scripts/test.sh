#!/usr/bin/env bash
# The project's one test command (README and CI): build and install the package with its test
# dependencies, then run every test, Rust and Python. Whatever it downloads or installs, it says
# first, in one line: what, from where, into where, how big.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf 'test.sh: %s\n' "$*" >&2; }
prefix="$(python3 -c 'import sys; print(sys.prefix)')"
# Build only when needed: after the README's `pip install -e .` the native extension is already
# built from these sources, and only the test requirements may be missing (scripts/built.py).
if missing="$(python3 scripts/built.py)"; then
  if [ -n "$missing" ]; then
    say "installing the test requirements $(printf '%s ' $missing)from PyPI into $prefix (about 7 MB)"
    printf '%s\n' "$missing" | xargs -d '\n' python3 -m pip install --quiet --disable-pip-version-check
  fi
else
  say "building the native extension (release, into target/) and installing the package with its test extras" \
      "from PyPI into $prefix (pip install -e '.[test]': about 120 MB of wheels and 30 MB of crates, 8 to 9 minutes on 2 cores)"
  python3 -m pip install --quiet --disable-pip-version-check -e '.[test]'
fi
# The HTML report is checked in a real headless Chromium (Debian's package) where one can be had.
if ! command -v chromium-headless-shell >/dev/null && ! command -v chromium >/dev/null \
    && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  if apt-get update -qq >/dev/null 2>&1 \
      && bytes="$(apt-get install --print-uris -qq chromium-headless-shell | awk '{s += $3} END {print s + 0}')"; then
    say "installing Debian's chromium-headless-shell and its libraries with apt-get from the apt mirrors into /usr" \
        "($((bytes / 1000000)) MB to download) for the report's browser test"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium-headless-shell >/dev/null 2>&1 \
      || say "warning: could not install chromium-headless-shell; the browser test will be skipped"
  else
    say "warning: apt-get cannot reach its mirrors; the browser test will be skipped"
  fi
fi
# A real nsys for tests/real/test_nsys_export.py, fetched once before pytest's workers start (it
# prints its own line when it downloads; on failure those tests skip, saying why).
python3 scripts/fetch_nsys.py >/dev/null || say "warning: no real nsys; its tests will be skipped"
# The Rust core's tests in the release profile: they reuse target/release, which the install just
# built (a debug `cargo test` would compile every dependency a second time, in another profile).
# The first run fetches the dev-dependencies (criterion, tempfile, fastrand) from crates.io.
cargo test --locked --release
# pytest on every core (pytest-xdist), then the few tests that time themselves, alone.
python3 -m pytest -n auto --dist loadfile -m 'not serial'
python3 -m pytest -p no:xdist -m serial
