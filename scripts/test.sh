#!/usr/bin/env bash
# The project's one test command (README and CI): build and install the package with its test
# dependencies, then run every test, Rust and Python.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet --disable-pip-version-check -e '.[test]'
cargo test --locked
python3 -m pytest
