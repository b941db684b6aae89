"""The MCP server and its text-to-SQL agent: the loop, its prompts, policies and traces."""
