#!/usr/bin/env bash
# HTTP publish and chunked consume against the ZeroMQ client, same cluster, same run; markdown.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
python scripts/bench_http.py "$@"
