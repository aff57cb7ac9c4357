#!/usr/bin/env bash
# The main job: start a local 3-node cluster, publish from producers on every node, show
# consumers on every node agreeing, print a summary, stop everything. Sets up .venv itself.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
python scripts/demo.py
