#!/usr/bin/env bash
# CPU per transaction of each node and of the producer (node 1 coordinates); one line.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
python scripts/bench_cpu.py "$@"
