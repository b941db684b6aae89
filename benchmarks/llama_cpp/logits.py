"""llama.cpp's next-token logits at every position of a prompt, through the sdist's Python bindings.

The bindings run in a child process (`python -m benchmarks.llama_cpp.logits`): they load libllama.so into the
process for good and print llama.cpp's logs on its stderr."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from benchmarks.llama_cpp.build import bindings_path, llama_cpp_tools, run_tool

PROJECT_ROOT = Path(__file__).resolve().parents[2]
LOGITS_TIMEOUT_S = 1800


def llama_logits(gguf: Path, token_ids: list[int], threads: int) -> torch.Tensor:
    """fp32 [len(token_ids), vocab]: row i holds the logits of the token after token_ids[: i + 1]."""
    tools = llama_cpp_tools()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(str(path) for path in [PROJECT_ROOT, *bindings_path(tools)]),
        "LLAMA_CPP_LIB_PATH": str(tools),
    }
    with tempfile.TemporaryDirectory() as scratch:
        # A file, not the command line: a long prompt's ids would pass the kernel's limit on one argument.
        ids, out = Path(scratch) / "token_ids.json", Path(scratch) / "logits.npy"
        ids.write_text(json.dumps(token_ids))
        command = [sys.executable, "-m", __name__, str(gguf), str(threads), str(ids), str(out)]
        run_tool(command, f"llama.cpp's logits of {gguf.name}", env=env, timeout_s=LOGITS_TIMEOUT_S)
        return torch.from_numpy(np.load(out))


def _write_logits(gguf: str, threads: int, token_ids: list[int], out: str) -> None:
    from llama_cpp import Llama

    # scores holds n_ctx rows of the whole vocabulary: a context of just the prompt keeps it small.
    model = Llama(
        gguf,
        logits_all=True,
        n_ctx=len(token_ids),
        n_threads=threads,
        verbose=False,
    )
    model.eval(token_ids)
    np.save(out, np.ascontiguousarray(model.scores[: len(token_ids)], dtype=np.float32))


if __name__ == "__main__":
    _write_logits(sys.argv[1], int(sys.argv[2]), json.loads(Path(sys.argv[3]).read_text()), sys.argv[4])
