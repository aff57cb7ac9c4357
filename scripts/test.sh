#!/usr/bin/env bash
# Run every check: lint, types, then all tests (unit, simulator seeds, real clusters) against
# relay compiled with mypyc (scripts/compile.sh, where a C compiler is), then the fast tier
# once more from source (RELAY_PURE=1: the fallback). Sets up .venv by itself, and as root
# installs nftables for the namespaced tests, promtool for the metrics check and Debian's
# chromium for the console's browser test (without root those tests skip and say why). Tests
# run on two workers (pytest-xdist; RELAY_TEST_WORKERS=N for another count, 0 for none). Extra
# arguments go to pytest in both passes (a -m expression joins the second's "not slow"), e.g.
# scripts/test.sh -m "not slow".
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
# As root, install a Debian tool the tests use when it is missing; without it they skip.
apt_tool() {  # apt_tool COMMAND PACKAGE WHY
  [ "$(id -u)" = 0 ] && ! command -v "$1" >/dev/null || return 0
  local policy=/usr/sbin/policy-rc.d made=0
  if [ ! -e "$policy" ]; then  # install only: start no service (prometheus has one)
    printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy" && made=1
  fi
  local install=(env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$2")
  "${install[@]}" >/dev/null 2>&1 \
    || (apt-get update -q >/dev/null 2>&1 && "${install[@]}" >/dev/null 2>&1) \
    || echo "note: could not install $2; $3 will skip"
  if [ "$made" = 1 ]; then rm -f "$policy"; fi
}
apt_tool nft nftables "the netns tests"
apt_tool promtool prometheus "the promtool check of the metrics"
apt_tool chromium chromium "the console's browser test"
echo "== ruff"; ruff check .
echo "== mypy"; mypy
echo "== import layers"; lint-imports --no-cache
echo "== compile"; bash scripts/compile.sh
echo "== pytest"
python -m pytest -q -p no:cacheprovider -rs -n "${RELAY_TEST_WORKERS:-2}" --dist worksteal "$@"
if [ "$(python -c 'import relay.compiled as c; print(c.MODE)')" = compiled ]; then
  echo "== pytest, from source (RELAY_PURE=1): the fast tier and the tests marked pure"
  pure_pass="not slow or pure" rest=()  # a marker expression given joins these
  while [ "$#" -gt 0 ]; do
    if [ "$1" = -m ] && [ "$#" -gt 1 ]; then pure_pass="($pure_pass) and ($2)"; shift 2
    else rest+=("$1"); shift; fi
  done
  RELAY_PURE=1 python -m pytest -q -p no:cacheprovider -rs -n "${RELAY_TEST_WORKERS:-2}" \
    --dist worksteal -m "$pure_pass" ${rest[@]+"${rest[@]}"}
fi
