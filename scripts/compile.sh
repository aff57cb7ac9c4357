#!/usr/bin/env bash
# Compile the typed modules of a node's loop (relay/compiled.py: sources) with mypyc beside
# their sources, so this checkout's processes run them compiled (without a C compiler or mypyc,
# nothing is built and relay runs from source). Once a module of the group is edited, relay
# runs the whole group from source, saying so, until this is run again. RELAY_PURE=1 removes
# the compiled modules instead. Sets up .venv by itself.
set -euo pipefail
shopt -s nullglob
cd "$(dirname "$0")/.."
source scripts/venv.sh
# every extension module in the group's folders and beside its single modules (one left out
# of the group since its last build would shadow its source)
read -r -a STEMS <<< "$(python -c "import runpy; c = runpy.run_path('relay/compiled.py')
print(*(f'{p}/*' for p in c['PACKAGES']), *(m.removesuffix('.py') for m in c['MODULES']))")"
extension_modules() { for stem in "${STEMS[@]}"; do printf '%s\n' $stem.*.so; done; }
rm -f relay_native__mypyc.*.so $(extension_modules)
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
built=(relay_native__mypyc.*.so $(extension_modules))
if [ "${#built[@]}" -gt 0 ]; then touch -r build/compile-started "${built[@]}"; fi
python -c "import relay.compiled as c; print('relay:', c.install())"
