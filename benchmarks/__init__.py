"""Speed benchmarks and, in benchmarks/eval, the accuracy evaluation of sqlscout."""

import importlib.util
import sys
from pathlib import Path

# The GPU machine has torch and triton but none of the server's packages and no index to install them from:
# ConfigArgParse, one pure-Python module, travels with the tree as its wheel and is imported from the zip.
if importlib.util.find_spec("configargparse") is None:
    sys.path.append(str(Path(__file__).with_name("vendor") / "configargparse-1.9.0-py3-none-any.whl"))
