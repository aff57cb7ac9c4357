#!/usr/bin/env bash
# Run every check: lint, types, then all tests (unit, simulator seeds, real clusters).
# Sets up .venv by itself. Extra arguments go to pytest, e.g. scripts/test.sh -m "not slow".
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
echo "== ruff"; ruff check .
echo "== mypy"; mypy
echo "== pytest"; python -m pytest -q -p no:cacheprovider "$@"
