#!/usr/bin/env bash
# What a group commit and a batch ack cost (latency, log bytes) on a 3-node cluster; markdown.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
python scripts/bench_groups.py "$@"
