"""Runs llama-server on a GGUF file for the length of a `with` block, as an OpenAI-compatible endpoint."""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from benchmarks.llama_cpp.build import llama_cpp_tools
from benchmarks.servers.ports import free_port

START_TIMEOUT_S = 300  # loading a 2B model takes seconds; far longer means it is stuck
STOP_TIMEOUT_S = 10
POLL_S = 0.25


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as response:
            return json.load(response).get("status") == "ok"
    except (OSError, ValueError):  # refused while starting, HTTP 503 (an OSError) while loading the model
        return False


def _tail(log_file: IO[bytes]) -> str:
    log_file.flush()
    log_file.seek(0)
    return "\n".join(log_file.read().decode(errors="replace").strip().splitlines()[-20:])


def _stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextmanager
def llama_server(gguf: Path, threads: int, *, alias: str, context: int = 16384) -> Iterator[str]:
    """Start llama-server on gguf, wait until it answers /health, yield its base URL
    (`http://127.0.0.1:PORT/v1`) and stop it on leaving the block."""
    port = free_port()
    command = [str(llama_cpp_tools() / "llama-server"), "-m", str(gguf), "--host", "127.0.0.1"]
    command += ["--port", str(port), "-t", str(threads), "-c", str(context), "--alias", alias]
    # A file, not a pipe: a server that logs every request would fill a pipe nobody reads and block.
    with tempfile.TemporaryFile() as log_file:
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT
        )
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while not _healthy(port):
                if process.poll() is not None:
                    raise RuntimeError(
                        f"llama-server exited with status {process.returncode} before answering /health:\n"
                        + _tail(log_file)
                    )
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"llama-server did not answer /health on port {port} within {START_TIMEOUT_S} s:\n"
                        + _tail(log_file)
                    )
                time.sleep(POLL_S)
            yield f"http://127.0.0.1:{port}/v1"
        finally:
            _stop(process)
