#!/usr/bin/env bash
# Creates or refreshes the project-local virtualenv (.venv) from uv.lock, the project's lock file
# (every package pinned with its hashes; `make lock` re-resolves it). Idempotent: when the lock
# file, pyproject.toml and this script are unchanged since the last successful run, it only checks
# Java and exits. `bootstrap.sh --is-current` only answers whether that is so (exit 0) or not (exit 1).
set -euo pipefail
cd "$(dirname "$0")/.."

UV_VERSION=0.13.8
VENV=.venv
STAMP="$VENV/.cdcflow-bootstrap"
want=$(cat uv.lock pyproject.toml scripts/bootstrap.sh | sha256sum | cut -d' ' -f1)
current() { [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && [ -x "$VENV/bin/python" ]; }
if [ "${1:-}" = "--is-current" ]; then
  current
  exit
fi

# --- Java (Spark needs a JVM >= 17) -------------------------------------------------------------
if ! command -v java >/dev/null 2>&1; then
  echo "error: 'java' was not found on PATH. cdcflow runs Spark, which needs Java 17 or newer." >&2
  echo "       On Debian/Ubuntu: apt-get install -y openjdk-17-jre-headless" >&2
  exit 1
fi
java_major=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1)
if [ -z "$java_major" ] || [ "$java_major" -lt 17 ]; then
  echo "error: Java 17 or newer is required for Spark; 'java -version' reports: $(java -version 2>&1 | head -n1)" >&2
  exit 1
fi

# --- Python 3.11 ------------------------------------------------------------------------------------
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  for cand in python3.11 python3; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)'; then
      PY=$cand; break
    fi
  done
fi
if [ -z "$PY" ]; then
  echo "error: Python 3.11 is required (python3.11 or python3 at version 3.11 on PATH)." >&2
  exit 1
fi

if current; then
  # The Delta jars (jars.lock) and the Go tests' modules (go.sum) are checked every time: milliseconds when there.
  "$VENV/bin/python" scripts/fetch_jars.py
  exec "$VENV/bin/python" scripts/fetch_go_modules.py
fi

echo "bootstrap: preparing $VENV from uv.lock (first run downloads ~1 GB of wheels)"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
if ! "$VENV/bin/python" -m uv --version 2>/dev/null | grep -q "$UV_VERSION"; then
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "uv==$UV_VERSION"
fi
# --locked: a pyproject.toml edited without `make lock` is an error here, not a silently different set.
pinned="$VENV/.cdcflow-pinned.txt"
if ! "$VENV/bin/python" -m uv export --quiet --locked --all-extras --no-emit-project --format requirements.txt -o "$pinned"; then
  echo "error: uv.lock does not match pyproject.toml; run 'make lock' and commit uv.lock" >&2
  exit 1
fi
# --compile-bytecode: pip writes .pyc files at install time, uv does not; with PYTHONDONTWRITEBYTECODE set (as on
# CI machines) nothing would ever write them, and every process (each Airflow task, each CLI call, Spark's
# Python workers) would compile its imports from source again: ~10 s of a window's 27 s, GX alone 9 s of it.
"$VENV/bin/python" -m uv pip sync --python "$VENV/bin/python" --require-hashes --compile-bytecode "$pinned"
"$VENV/bin/python" -m uv pip install --python "$VENV/bin/python" --no-deps -e .
# The project's own packages too (a later edit only makes that file's .pyc stale: Python then compiles it).
"$VENV/bin/python" -m compileall -q -j 0 cdc_core spark_jobs plugins dags >/dev/null
# delta-spark's JVM side, pinned by jars.lock, into .cache/jars/ (from Maven Central, once; never at run time).
"$VENV/bin/python" scripts/fetch_jars.py
# The Go modules the Go client tests build with (tests/wire/go_mysql/go.sum), into .cache/go-mod (never at test time).
"$VENV/bin/python" scripts/fetch_go_modules.py
echo "$want" > "$STAMP"
echo "bootstrap: $VENV is ready"
