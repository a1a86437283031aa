#!/usr/bin/env bash
# Create bench/.venv-peers: the peers due is measured against, pinned.
# Idempotent: does nothing when the stamp matches these pins.
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3}
VENV=.venv-peers
PINS=(
  "procrastinate==3.10.0"
  "pgqueuer==1.6.0"
  "asyncpg==0.32.0"
  "uvloop==0.23.0"
  "huey==3.5.4"
  "psycopg[binary]==3.3.9"
  "psycopg-pool==3.3.3"
)
STAMP="$VENV/.peers-stamp"
WANT="${PINS[*]}"

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then
  echo "peers venv up to date ($VENV)"
  exit 0
fi
test -x "$VENV/bin/python" || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet "${PINS[@]}"
echo "$WANT" > "$STAMP"
echo "peers venv ready ($VENV): $WANT"
