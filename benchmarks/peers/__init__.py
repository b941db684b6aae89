"""sqlscout side by side with peer database MCP servers (DBHub, the reference SQLite server), driven by one
MCP client over stdio: size of the tool list, median latency and characters returned per task."""
