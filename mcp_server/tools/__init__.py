"""The MCP tools, one module each: every tool takes the ToolContext (context.py) as its first argument."""
