#!/usr/bin/env bash
# What idle streams cost: 3 nodes with one stream, then with --streams (default 10,000) idle
# ones: node CPU at rest and single-publish latency on another stream. Prints markdown.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
python scripts/bench_idle_streams.py "$@"
