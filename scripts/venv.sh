# Source this file: it makes .venv (once) and installs relay with the extras in RELAY_EXTRAS
# (default dev,spark,chaos) when pyproject.toml changed since the last install. Needs python3
# >= 3.11 on PATH.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PY="${PYTHON:-python3}"
EXTRAS="${RELAY_EXTRAS:-dev,spark,chaos}"
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
STAMP="$VENV/.relay-installed-$EXTRAS"
WANT="$(cat "$ROOT/pyproject.toml" | sha256sum | cut -c1-16)"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
  "$VENV/bin/python" -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
  # a pure editable install: scripts/compile.sh compiles the hot path beside the sources
  RELAY_PURE=1 "$VENV/bin/python" -m pip install --quiet -e "$ROOT[$EXTRAS]"
  echo "$WANT" > "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
