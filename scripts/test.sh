#!/usr/bin/env bash
# Installs everything the tests need (PostgreSQL server binaries, the pinned Python packages), then runs
# lint and the whole test suite. The suite starts and stops its own throwaway PostgreSQL server.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; then
    echo "installing PostgreSQL server binaries (Debian package postgresql)" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
fi

python3 -m pip install -q --disable-pip-version-check -c constraints.txt -e '.[test]'
python3 -m ruff check .
python3 -m ruff format --check .
python3 -m pytest "$@"
