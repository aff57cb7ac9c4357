#!/usr/bin/env bash
# Benchmarks: relay on 3 and 5 local nodes, then NATS JetStream R3 in the same run (when
# nats-server and /tmp/peer-venv exist: see ../shared/peers/README.md). Prints markdown.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
python scripts/bench_report.py "$@"
