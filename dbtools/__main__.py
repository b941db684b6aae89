"""`python -m dbtools`: the database tools from the command line."""

import os
import sys

from dbtools.cli import main

try:
    status = main()
    sys.stdout.flush()
except BrokenPipeError:
    # The reader (`| head`) stopped early: end quietly, and keep the interpreter's own final flush from
    # failing on the closed pipe too.
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    status = 1
raise SystemExit(status)
