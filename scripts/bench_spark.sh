#!/usr/bin/env bash
# Rows per second a Spark streaming query reads from a local 3-node cluster (see
# scripts/bench_spark.py). Sets up .venv itself; arguments go to the script.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
python scripts/bench_spark.py "$@"
