#!/usr/bin/env bash
# Flame graphs (SVG) of every node of a local 3-node cluster under `relay bench`, sampled by
# py-spy: pipelined and one in flight, for each fsync setting asked. Writes DIR/<load>-<fsync>-node<N>.svg.
# Usage: scripts/profile.sh [--out docs/profiles] [--fsync always,never] [--count N]
set -euo pipefail
cd "$(dirname "$0")/.."
RELAY_EXTRAS="${RELAY_EXTRAS:-dev,spark,chaos,profile}" source scripts/venv.sh
python scripts/profile_nodes.py "$@"
