#!/usr/bin/env bash
# Installs sqlscout with the local engine into .venv (pinned by constraints.txt) and starts the MCP server
# (stdio) on the bundled demo database. Extra arguments go to the server, e.g. `scripts/serve.sh --transport http`.
# Everything but the protocol goes to stderr: over stdio, stdout belongs to the MCP client.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
install_sqlscout local "about 5 GB with the CUDA build of PyTorch on Linux; usually 5-10 minutes"
exec .venv/bin/python -m mcp_server "$@"
