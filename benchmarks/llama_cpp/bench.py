"""Decode and prefill speed of a GGUF file as each peer's llama-bench measures it, and the weight bytes a decode
token reads."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from benchmarks.llama_cpp.build import IK_LLAMA_CPP, LLAMA_CPP, Fork, gguf_py, llama_cpp_tools, run_tool

BENCH_TIMEOUT_S = (
    3600  # a 2,000-token context is prefilled before every decode repetition: minutes at 1 thread
)


@dataclass(frozen=True)
class BenchPeer:
    """A fork run as its users run it: its name in the tables and the llama-bench options it takes beyond ours."""

    name: str
    fork: Fork
    options: tuple[str, ...] = ()


BENCH_PEERS = {
    peer.name: peer
    for peer in (
        BenchPeer("llama.cpp", LLAMA_CPP),
        BenchPeer("ik_llama.cpp", IK_LLAMA_CPP),
        # The weights repacked at load into the row-interleaved layouts of ik_llama.cpp's CPU kernels.
        BenchPeer("ik_llama.cpp-rtr", IK_LLAMA_CPP, ("-rtr", "1")),
    )
}


def parse_llama_bench(output: str) -> list[dict]:
    """The test records of `llama-bench -o json`'s output, skipping any text around its one JSON array."""
    decoder = json.JSONDecoder()
    start = output.find("[")
    while start != -1:
        try:
            records, _ = decoder.raw_decode(output, start)
        except json.JSONDecodeError:
            records = None
        if isinstance(records, list) and records and all(isinstance(r, dict) for r in records):
            return records
        start = output.find("[", start + 1)
    raise ValueError(f"llama-bench printed no JSON array of test records: {output[-500:]!r}")


def bench_record(records: list[dict], n_prompt: int, n_gen: int) -> dict:
    """The record of the test that prefilled n_prompt tokens and generated n_gen."""
    for record in records:
        if record.get("n_prompt") == n_prompt and record.get("n_gen") == n_gen:
            return record
    tests = [(r.get("n_prompt"), r.get("n_gen")) for r in records]
    raise ValueError(f"llama-bench ran no test with n_prompt={n_prompt}, n_gen={n_gen}; it ran {tests}")


def _run_bench(peer: BenchPeer, gguf: Path, threads: int, repetitions: int, options: list[str]) -> list[dict]:
    command = [str(llama_cpp_tools(peer.fork) / "llama-bench"), "-m", str(gguf), "-t", str(threads)]
    command += ["-r", str(repetitions), "-o", "json", *peer.options, *options]
    return parse_llama_bench(
        run_tool(command, f"{peer.name} llama-bench {gguf.name}", timeout_s=BENCH_TIMEOUT_S)
    )


def decode_test(fork: Fork, context: int, tokens: int) -> tuple[list[str], int, int]:
    """llama-bench's options that time `tokens` decoded after `context` tokens, and the n_prompt and n_gen of the
    record it writes: llama.cpp's -d fills the context untimed; ik_llama.cpp's -gp times only the generation
    (-p 0 -n 0: without them it also runs its default prompt and generation tests)."""
    if fork.bench_has_depth:
        return ["-p", "0", "-n", str(tokens), "-d", str(context)], 0, tokens
    return ["-p", "0", "-n", "0", "-gp", f"{context},{tokens}"], context, tokens


def llama_decode(
    gguf: Path,
    threads: int,
    *,
    context: int,
    tokens: int,
    repetitions: int = 1,
    peer: BenchPeer = BENCH_PEERS["llama.cpp"],
) -> dict:
    """Decode tokens/s after `context` tokens (and its standard deviation over the repetitions), and the model's
    size in bytes, as the peer's llama-bench reports them."""
    options, n_prompt, n_gen = decode_test(peer.fork, context, tokens)
    record = bench_record(_run_bench(peer, gguf, threads, repetitions, options), n_prompt, n_gen)
    return {
        "decode_tokens_per_s": float(record["avg_ts"]),
        "decode_tokens_per_s_stddev": float(record["stddev_ts"]),
        "model_size_bytes": int(record["model_size"]),
    }


def llama_prefill(
    gguf: Path, threads: int, *, tokens: int, repetitions: int = 2, peer: BenchPeer = BENCH_PEERS["llama.cpp"]
) -> dict:
    """Prefill tokens/s of a `tokens`-token prompt and its standard deviation, as the peer's llama-bench reports
    them."""
    record = bench_record(
        _run_bench(peer, gguf, threads, repetitions, ["-p", str(tokens), "-n", "0"]), tokens, 0
    )
    return {
        "prefill_tokens_per_s": float(record["avg_ts"]),
        "prefill_tokens_per_s_stddev": float(record["stddev_ts"]),
    }


def decode_weight_bytes(tensor_bytes: Mapping[str, int]) -> int:
    """Bytes of the tensors one decode token reads, given every tensor's size by its GGUF name.

    A token reads a single row of the embedding table, so token_embd counts only when it is also the LM head
    (no separate output.weight), and then once."""
    total = sum(size for name, size in tensor_bytes.items() if name != "token_embd.weight")
    if "output.weight" not in tensor_bytes:
        total += tensor_bytes.get("token_embd.weight", 0)
    return total


def weight_bytes_per_token(gguf: Path) -> int:
    """decode_weight_bytes of a GGUF file, read with llama.cpp's own gguf-py."""
    path = str(gguf_py(llama_cpp_tools()))
    if path not in sys.path:
        sys.path.insert(0, path)
    from gguf import GGUFReader

    return decode_weight_bytes({tensor.name: int(tensor.n_bytes) for tensor in GGUFReader(gguf).tensors})
