#!/usr/bin/env bash
# Installs sqlscout into .venv (pinned by constraints.txt) and starts the MCP server (stdio) on the bundled demo
# database. Extra arguments go to the server, e.g. `scripts/serve.sh --transport http`. The local engine (PyTorch,
# several GB) is installed only when the server will run a model itself: `--model` (or SQLSCOUT_MODEL) given
# without `--endpoint` (or SQLSCOUT_ENDPOINT).
# Everything but the protocol goes to stderr: over stdio, stdout belongs to the MCP client.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh

model=${SQLSCOUT_MODEL:-} endpoint=${SQLSCOUT_ENDPOINT:-}
for arg in "$@"; do
    case $arg in
        --model | --model=*) model=yes ;;
        --endpoint | --endpoint=*) endpoint=yes ;;
    esac
done
if [ -n "$model" ] && [ -z "$endpoint" ]; then
    install_sqlscout local "about 5 GB with the CUDA build of PyTorch on Linux; usually 5-10 minutes"
else
    install_sqlscout "" "the database tools and --endpoint, without the local engine; usually under a minute"
fi
exec .venv/bin/python -m mcp_server "$@"
