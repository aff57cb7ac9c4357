#!/usr/bin/env bash
# How long a 3-node cluster takes to restart with a long log (default 1M txs); prints markdown.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
python scripts/bench_restart.py "$@"
