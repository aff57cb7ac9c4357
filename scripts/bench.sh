#!/usr/bin/env bash
# Benchmarks: relay on 3 and 5 local nodes, then NATS JetStream R3 in the same run
# (scripts/bench_nats.py: PyPI's nats-server, of the bench extra, which this installs); then
# work queues against a JetStream work-queue stream (scripts/bench_queue.sh). Prints
# markdown. RELAY_BENCH_QUEUE_ONLY=1 runs the work queues alone.
set -euo pipefail
cd "$(dirname "$0")/.."
export RELAY_EXTRAS="${RELAY_EXTRAS:-dev,spark,chaos},bench"
if [ -z "${RELAY_BENCH_QUEUE_ONLY:-}" ]; then
  source scripts/venv.sh
  bash scripts/compile.sh  # the hot path compiled, as a pip install on a machine with gcc has it
  python scripts/bench_report.py "$@"
  scripts/bench_queue.sh
else
  scripts/bench_queue.sh "$@"
fi
