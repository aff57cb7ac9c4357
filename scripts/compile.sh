#!/usr/bin/env bash
# Compile relay's typed pure modules (relay/compiled.py: PACKAGES) with mypyc beside their
# sources, so this checkout's processes run them compiled (without a C compiler or mypyc,
# nothing is built and relay runs from source). Once a module of the group is edited, relay
# runs the whole group from source, saying so, until this is run again. RELAY_PURE=1 removes
# the compiled modules instead. Sets up .venv by itself.
set -euo pipefail
shopt -s nullglob
cd "$(dirname "$0")/.."
source scripts/venv.sh
PACKAGES="$(python -c "import runpy; print(*runpy.run_path('relay/compiled.py')['PACKAGES'])")"
rm -f relay_native__mypyc.*.so
for package in $PACKAGES; do rm -f "$package"/*.so; done
if [ "${RELAY_PURE:-}" = 1 ]; then
  echo "relay: compiled modules removed"
  exit 0
fi
mkdir -p build
touch build/compile-started  # the sources as the build found them, to the nanosecond
RELAY_COMPILE_REQUIRED=1 python setup.py -q build_ext --inplace -j "$(nproc)" \
  > build/compile.log 2>&1 || { cat build/compile.log; exit 1; }
# Built from the sources as they were when the build started (an unchanged module keeps its
# older build's file): a source edited during the build stays newer than its module.
built=(relay_native__mypyc.*.so)
for package in $PACKAGES; do built+=("$package"/*.so); done
if [ "${#built[@]}" -gt 0 ]; then touch -r build/compile-started "${built[@]}"; fi
python -c "import relay.compiled as c; print('relay:', c.install())"
