#!/usr/bin/env bash
# Resolves constraints.txt together with the project's extras against the public package index alone, as
# on a user's machine: this machine's pip configuration (config files, PIP_* variables, local wheels) is
# switched off. Metadata only (fast-deps reads it with range requests): no wheel is downloaded.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
ensure_venv "usually a few seconds"

unset_pip=()
for name in $(compgen -e); do
    [[ $name == PIP_* ]] && unset_pip+=(-u "$name")
done
say "resolving constraints.txt against the public package index (metadata only, about a minute)"
env "${unset_pip[@]}" PIP_CONFIG_FILE=/dev/null python -m pip install --dry-run --ignore-installed \
    --quiet --only-binary=:all: --use-feature=fast-deps -r constraints.txt -c constraints.txt ".[local,test]"
say "every pin resolves on the public index"
