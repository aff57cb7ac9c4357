#!/usr/bin/env bash
# A 10-minute soak of a 3-node cluster at half its peak rate: RSS, parked fetches, open
# requests, dedup keys, backlog and p99 per 30-second window, and a verdict. Prints markdown.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
python scripts/soak.py "$@"
