"""One `sqlscout ask` through a llama-server of the benchmark's checkpoint: proof that the completions protocol
(special tokens written in the prompt, stop strings, usage counts) works against llama.cpp as `--endpoint`."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.llama_cpp.convert import has_bpe_tokenizer, with_qwen_tokenizer
from benchmarks.llama_cpp.server import llama_server

QUESTION = "How many customers are there?"
MODEL_NAME = "sqale"
# A random checkpoint writes no valid call, so every round runs to this budget: it keeps the run to a minute.
TOKEN_BUDGET = 400
ASK_TIMEOUT_S = 900


def ask_through_llama_server(gguf: Path, model_dir: Path, threads: int) -> dict:
    """The ending, rounds and token counts of one episode on the bundled demo database, the model served by
    llama-server from gguf (model_dir lends its tokenizer and chat template)."""
    with tempfile.TemporaryDirectory() as scratch:
        prompts = (
            model_dir if has_bpe_tokenizer(model_dir) else with_qwen_tokenizer(model_dir, Path(scratch) / "m")
        )
        with llama_server(gguf, threads, alias=MODEL_NAME) as url:
            command = [
                sys.executable, "-m", "mcp_server", "ask", QUESTION, "--json", "--endpoint", url,
                "--endpoint-model", MODEL_NAME, "--model", str(prompts), "--token-budget", str(TOKEN_BUDGET),
            ]  # fmt: skip
            started = time.monotonic()
            done = subprocess.run(command, capture_output=True, text=True, timeout=ASK_TIMEOUT_S, check=False)
            elapsed = time.monotonic() - started
    if done.returncode not in (0, 1):  # 1: the episode ended without an answer, as a random model's does
        raise RuntimeError(
            f"sqlscout ask against llama-server failed ({done.returncode}):\n{done.stderr[-2000:]}"
        )
    answer = json.loads(done.stdout)
    return {"seconds": elapsed, "exit_status": done.returncode, "answer": answer}
