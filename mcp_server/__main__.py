"""`python -m mcp_server`: the sqlscout command line."""

from mcp_server.cli import main

raise SystemExit(main())
