#!/usr/bin/env bash
# A multi-host layout on one machine: every node in a network namespace of its own (as root).
#   scripts/netns_cluster.sh up --nodes 3 --dir /tmp/mh ; scripts/netns_cluster.sh down --dir /tmp/mh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
python scripts/netns_cluster.py "$@"
