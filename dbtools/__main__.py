"""`python -m dbtools`: the database tools from the command line."""

from dbtools.cli import main

raise SystemExit(main())
