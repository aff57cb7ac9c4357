#!/usr/bin/env bash
# Compaction under load: a compacted stream against one that is not, in the same run (3 nodes,
# fsync = "always"). Sets up .venv itself. Prints markdown (--json for the figures).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
python scripts/bench_compaction.py "$@"
