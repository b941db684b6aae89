#!/usr/bin/env bash
# Installs sqlscout with its pinned dependencies and starts the MCP server (stdio) on the bundled demo
# database. Extra arguments go to the server, e.g. `scripts/serve.sh --transport http`.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --disable-pip-version-check -c constraints.txt -e .
exec python3 -m mcp_server "$@"
