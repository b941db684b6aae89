"""The floor of any server built on the mcp SDK: one tool that answers a line of text and touches no database.

Run over stdio as `python -m benchmarks.peers.sdk_floor`; the peers benchmark times it beside the real servers,
so its row shows what the SDK's own request handling costs on both ends before a server does any work.
"""

import importlib.metadata

from mcp.server.mcpserver import MCPServer

NOOP_TOOL = "noop"


def build_server() -> MCPServer:
    server = MCPServer("mcp-sdk-floor", version=importlib.metadata.version("mcp"))

    # Text only, no output schema: the cheapest reply a tool can give, on both ends.
    @server.tool(name=NOOP_TOOL, structured_output=False)
    async def noop() -> str:
        """Answers at once, without any work."""
        return "ok"

    return server


if __name__ == "__main__":
    build_server().run("stdio")
