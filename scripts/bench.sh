#!/usr/bin/env bash
# Benchmarks: relay on 3 and 5 local nodes, then NATS JetStream R3 in the same run (when
# the peer benchmark program and its venv exist: docs/benchmarks.md, "NATS JetStream"). Prints
# markdown.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
python scripts/bench_report.py "$@"
