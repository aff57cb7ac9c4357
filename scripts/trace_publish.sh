#!/usr/bin/env bash
# Where one publish's time goes: every node's loop turns lined up against single publishes.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
python scripts/trace_publish.py "$@"
