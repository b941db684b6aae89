"""Engines at the real Qwen3.5-2B size on the CPU, each sqlscout variant side by side with transformers bf16 in one
process: `python -m benchmarks.real_size_cpu --model DIR --threads N --variants ...` prints one JSON list
(benchmarks.model_cpu --real-size runs it per thread count and writes the report).

The measures follow an agent episode: a 700-token prompt, tool results of 300 tokens appended at about 2k tokens
of context, and greedy decoding there. Decoding alternates between transformers and the variant in short
rounds, as do the weight-streaming floors, so that the machine's load (these cores are shared) falls on both
alike; load time, memory, prefill and append are measured once per engine.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from benchmarks.llama_cpp.bench import BENCH_PEERS
from benchmarks.weight_stream import weight_stream

PROMPT_TOKENS = 700
APPEND_TOKENS = 300
APPEND_CONTEXT = 2000  # tokens in the sequence once the timed append is in
ROUND_TOKENS = 8  # decode tokens per engine per round
# name -> EngineOptions fields (those not given: the engine's default).
VARIANTS: dict[str, dict] = {
    "sqlscout-default": {},
    "sqlscout-fp32": {"dtype": "float32"},
    "sqlscout-bf16": {"dtype": "bfloat16"},
    "sqlscout-int8": {"quantize": "int8"},
    "sqlscout-int4": {"quantize": "int4"},
    "sqlscout-int8-compiled": {"quantize": "int8", "compile": True},
}
PEER = "transformers-bf16"
# The llama.cpp file type a laptop user would run in place of each sqlscout variant.
LLAMA_CPP_PEERS = {"sqlscout-default": "BF16", "sqlscout-int8": "Q8_0", "sqlscout-int4": "Q4_K_M"}


def _timed(function: Callable[[], object]) -> tuple[float, object]:
    started = time.perf_counter()
    value = function()
    return time.perf_counter() - started, value


def _time_into(times: list[float], function: Callable[[], object]) -> None:
    times.append(_timed(function)[0])


def _ids(count: int, vocab: int, seed: int) -> list[int]:
    return torch.randint(0, vocab, (count,), generator=torch.Generator().manual_seed(seed)).tolist()


class Memory:
    """Resident memory of this process (Linux): what an engine adds, now and at its peak, from just before its
    load."""

    def start(self) -> None:
        Path("/proc/self/clear_refs").write_text("5")  # resets the peak (VmHWM) to the current size
        self.before = self._status("VmRSS")

    def added_gb(self) -> float:
        return (self._status("VmRSS") - self.before) / 1e6

    def peak_added_gb(self) -> float:
        return (self._status("VmHWM") - self.before) / 1e6

    @staticmethod
    def _status(field: str) -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])  # kB
        raise KeyError(field)


class Peer:
    """transformers' model with its cache after the same prompt and append, decoding greedily on request."""

    def __init__(self, model_dir: Path, memory: Memory) -> None:
        from transformers import Qwen3_5ForCausalLM

        memory.start()
        self.load_s, self.model = _timed(
            lambda: Qwen3_5ForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).eval()
        )
        self.cache = None
        vocab = self.model.config.vocab_size
        self.prefill_s, _ = _timed(lambda: self._forward(_ids(PROMPT_TOKENS, vocab, 1)))
        self._forward(_ids(APPEND_CONTEXT - APPEND_TOKENS - PROMPT_TOKENS, vocab, 2))
        self.append_s, self.logits = _timed(lambda: self._forward(_ids(APPEND_TOKENS, vocab, 3)))
        self.held_memory_gb = memory.added_gb()
        self.memory_gb = memory.peak_added_gb()
        matrices = [m.weight for m in self.model.modules() if isinstance(m, torch.nn.Linear)]
        self.weight_bytes, self.stream = weight_stream(matrices, torch.bfloat16)

    @torch.inference_mode()
    def _forward(self, ids: list[int]) -> torch.Tensor:
        # Logits of the last position only, as generate() asks for them.
        out = self.model(torch.tensor([ids]), past_key_values=self.cache, use_cache=True, logits_to_keep=1)
        self.cache = out.past_key_values
        return out.logits[0, -1]

    def decode(self, tokens: int) -> None:
        for _ in range(tokens):
            self.logits = self._forward([int(self.logits.argmax())])


def _load_and_fill(
    model_dir: Path, threads: int, settings: dict, cache_dir: Path, session_tokens: int, memory: Memory
):
    """A sqlscout engine loaded and a session through the prompt and the append: (engine, session, timings and the
    memory the engine then holds)."""
    from model.engine import Engine
    from model.engine_options import EngineOptions
    from model.sampling_params import SamplingParams

    options = EngineOptions(device="cpu", threads=threads, max_context=4096, cache_dir=cache_dir, **settings)
    load_s, engine = _timed(lambda: Engine.load(model_dir, options))
    vocab = engine.config.vocab_size
    session = engine.new_session(max_tokens=session_tokens)
    prefill_s, _ = _timed(lambda: session.append(_ids(PROMPT_TOKENS, vocab, 1)))
    session.append(_ids(APPEND_CONTEXT - APPEND_TOKENS - PROMPT_TOKENS, vocab, 2))
    append_s, _ = _timed(lambda: session.append(_ids(APPEND_TOKENS, vocab, 3)))
    held_memory_gb = memory.added_gb()
    # One decode step (a generate() of n tokens runs n - 1 of them); a compiled step compiles here.
    first_s, _ = _timed(lambda: session.generate(2, SamplingParams(temperature=0), stop_ids=set()))
    timings = {
        "load_s": load_s,
        "held_memory_gb": held_memory_gb,
        "prefill_s": prefill_s,
        "append_s": append_s,
        "first_decode_call_s": first_s,
    }
    return engine, session, timings


def _peer_rounds(
    gguf: Path, peers: list[str], threads: int, rounds: int, our_round: Callable[[], None]
) -> list[dict]:
    """Each peer on gguf: one llama-bench decode run apiece (ROUND_TOKENS * 4 tokens at APPEND_CONTEXT) after each
    of `rounds` of ours, then each one's prefill of PROMPT_TOKENS; with the weight bytes a token reads."""
    from benchmarks.llama_cpp.bench import llama_decode, llama_prefill, weight_bytes_per_token

    decodes: dict[str, list[float]] = {name: [] for name in peers}
    for _ in range(rounds):
        our_round()
        for name in peers:
            measured = llama_decode(
                gguf, threads, context=APPEND_CONTEXT, tokens=ROUND_TOKENS * 4, peer=BENCH_PEERS[name]
            )
            decodes[name].append(measured["decode_tokens_per_s"])
    weight_bytes = weight_bytes_per_token(gguf)
    return [
        {
            "engine": name,
            "decode_tokens_per_s": statistics.median(decodes[name]),
            **llama_prefill(gguf, threads, tokens=PROMPT_TOKENS, peer=BENCH_PEERS[name]),
            "weight_bytes": weight_bytes,
        }
        for name in peers
    ]


def measure(
    model_dir: Path,
    threads: int,
    variants: list[str],
    rounds: int,
    cache_dir: Path,
    ggufs: dict[str, Path] | None = None,
    peers: list[str] | None = None,
) -> list[dict]:
    """Each variant against transformers in alternating rounds, and against the llama.cpp forks named in peers on
    the matching GGUF file (ggufs by file type, see LLAMA_CPP_PEERS) in rounds of their own, alternating with ours
    too."""
    from model.cpu import set_cpu_threads
    from model.cpu_weights import CpuWeight
    from model.sampling_params import SamplingParams

    set_cpu_threads(threads)
    memory = Memory()
    peer = Peer(model_dir, memory)
    greedy = SamplingParams(temperature=0)
    peer_rates, peer_floors, results = [], [], []
    for name in variants:
        gc.collect()
        memory.start()
        # Rounds against transformers, then as many against the llama.cpp forks.
        session_tokens = APPEND_CONTEXT + (2 * rounds + 1) * ROUND_TOKENS + 8
        engine, session, timings = _load_and_fill(
            model_dir, threads, VARIANTS[name], cache_dir, session_tokens, memory
        )
        matrices = [
            w for n, w in engine.model.weights.items() if n.endswith(("proj.weight", "lm_head.weight"))
        ]
        weight_bytes, stream = weight_stream(matrices, engine.dtype)
        # Each call runs ROUND_TOKENS tokens: the one still pending from the last call, then the new ones.
        decode = functools.partial(session.generate, ROUND_TOKENS, greedy, stop_ids=set())
        # An untimed pass each first: a cold one ran up to 3x slower than the next, and is half of two rounds.
        stream()
        peer.stream()
        ours, theirs, floors, their_floors = [], [], [], []
        for _ in range(rounds):
            ours.append(_timed(decode)[0])
            theirs.append(_timed(lambda: peer.decode(ROUND_TOKENS))[0])
            floors.append(_timed(stream)[0])
            their_floors.append(_timed(peer.stream)[0])
        measured_peers = []
        kind = LLAMA_CPP_PEERS.get(name)
        if ggufs and peers and kind in ggufs:
            our_round = functools.partial(_time_into, ours, decode)
            measured_peers = [
                {"type": kind, **fork}
                for fork in _peer_rounds(ggufs[kind], peers, threads, rounds, our_round)
            ]
        peer_rates.append(ROUND_TOKENS * rounds / sum(theirs))
        peer_floors.append(statistics.median(their_floors))
        results.append(
            {
                "variant": name,
                "dtype": str(engine.dtype).removeprefix("torch."),
                "weights": sorted({w.kind for w in matrices if isinstance(w, CpuWeight)}),
                "compiled": engine.options.compile,
                **timings,
                "memory_gb": memory.peak_added_gb(),
                "decode_tokens_per_s": ROUND_TOKENS * len(ours) / sum(ours),
                "decode_tokens": ROUND_TOKENS * len(ours),
                "peers": measured_peers,
                "peer_decode_tokens_per_s": peer_rates[-1],
                "weight_bytes": weight_bytes,
                "floor_s": statistics.median(floors),
            }
        )
        del engine, session, decode, stream, matrices
    peer_rate = statistics.median(peer_rates)
    results.insert(
        0,
        {
            "variant": PEER,
            "dtype": "bfloat16",
            "weights": ["bfloat16"],
            "compiled": False,
            "load_s": peer.load_s,
            "held_memory_gb": peer.held_memory_gb,
            "prefill_s": peer.prefill_s,
            "append_s": peer.append_s,
            "first_decode_call_s": None,
            "memory_gb": peer.memory_gb,
            "decode_tokens_per_s": peer_rate,
            "peer_decode_tokens_per_s": peer_rate,
            "weight_bytes": peer.weight_bytes,
            "floor_s": statistics.median(peer_floors),
        },
    )
    for result in results:
        result.setdefault("decode_tokens", ROUND_TOKENS * rounds)
        result["threads"] = threads
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.real_size_cpu", description=__doc__)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--variants", nargs="+", choices=tuple(VARIANTS), required=True)
    parser.add_argument("--rounds", type=int, default=2, help=f"decode rounds of {ROUND_TOKENS} tokens each")
    parser.add_argument(
        "--cache-dir", type=Path, required=True, help="kept quantized weights, compiled steps"
    )
    parser.add_argument(
        "--gguf", nargs="*", default=[], metavar="TYPE=PATH", help="the peers' files by file type (BF16=...)"
    )
    parser.add_argument("--peers", nargs="*", default=[], choices=tuple(BENCH_PEERS), help="llama.cpp forks")
    args = parser.parse_args(argv)
    ggufs = {kind: Path(path) for kind, path in (item.split("=", 1) for item in args.gguf)}
    measured = measure(
        args.model, args.threads, args.variants, args.rounds, args.cache_dir, ggufs, args.peers
    )
    print(json.dumps(measured))


if __name__ == "__main__":
    main()
