#!/usr/bin/env bash
# Run every check: lint, types, then all tests (unit, simulator seeds, real clusters).
# Sets up .venv by itself, and as root installs nftables for the namespaced tests (without
# root or nft those tests skip and say why). Extra arguments go to pytest, e.g.
# scripts/test.sh -m "not slow".
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
if [ "$(id -u)" = 0 ] && ! command -v nft >/dev/null; then
  apt-get install -y -q nftables >/dev/null 2>&1 \
    || (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q nftables >/dev/null 2>&1) \
    || echo "note: could not install nftables; the netns tests will skip"
fi
echo "== ruff"; ruff check .
echo "== mypy"; mypy
echo "== pytest"; python -m pytest -q -p no:cacheprovider -rs "$@"
