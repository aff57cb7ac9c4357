#!/usr/bin/env bash
# Benchmarks: relay on 3 and 5 local nodes, then NATS JetStream R3 in the same run (when
# the peer benchmark program and its venv exist: docs/benchmarks.md, "NATS JetStream"); then
# work queues against a JetStream work-queue stream (scripts/bench_queue.sh, which installs
# the bench extra). Prints markdown. RELAY_BENCH_QUEUE_ONLY=1 runs the work queues alone.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${RELAY_BENCH_QUEUE_ONLY:-}" ]; then
  source scripts/venv.sh
  python scripts/bench_report.py "$@"
  scripts/bench_queue.sh
else
  scripts/bench_queue.sh "$@"
fi
