"""The GPU suite's current table, read from the files its steps wrote into its output folder: each measure against
its peer in the same run and its target. A step that did not run leaves its row as "not measured"."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from benchmarks.tables import CurrentTable

# Where a question on a GPU should be (the targets the suite's table is read against).
TARGETS = {
    "decode": ">= 750 tokens/s",
    "turn": "<= 5 ms",
    "episode": ">= 0.8x the decode rate",
    "speculative": ">= 1.3x plain",
    "prefill": ">= 1.0x SDPA, >= 300 TFLOP/s",
    "decode attention": "<= 5 us a layer at <= 2k",
}
NOT_MEASURED = "not measured"


def _json(out: Path, name: str) -> dict | None:
    path = out / name
    return json.loads(path.read_text()) if path.exists() else None


def _decode_rows(decode: dict | None, ask: dict | None) -> list[list[str]]:
    if decode is None:
        return [
            ["batch-1 decode, replayed graph", NOT_MEASURED, "–", TARGETS["decode"]],
            ["an agent turn: append 400 tokens, first new token", NOT_MEASURED, "–", TARGETS["turn"]],
            ["an ask episode: generated tokens over model time", NOT_MEASURED, "–", TARGETS["episode"]],
        ]
    rate = decode["decode_tokens_per_s"]
    rows = [
        [
            f"batch-1 decode at {decode['context']:,} tokens of context, replayed graph",
            f"{rate:.0f} tokens/s ({decode['fraction_of_limit']:.0%} of the "
            f"{decode['bandwidth_limit_tokens_per_s']:,.0f} the bytes allow)",
            f"transformers `generate` {decode['transformers_decode_tokens_per_s']:.1f} tokens/s "
            f"({decode['ratio_vs_transformers']:.0f}x)",
            TARGETS["decode"],
        ],
        [
            "an agent turn: append 400 tokens at 2k context, first new token",
            f"{decode['agent_turn_overhead_ms']:.0f} ms",
            "–",
            TARGETS["turn"],
        ],
    ]
    episode = (
        NOT_MEASURED
        if ask is None
        else f"{ask['tokens_per_s']:.0f} tokens/s ({ask['tokens_per_s'] / rate:.2f}x)"
    )
    rows.append(
        [
            "an ask episode: generated tokens over model time",
            episode,
            f"the decode rate, {rate:.0f}",
            TARGETS["episode"],
        ]
    )
    return rows


def _speculative_row(report: dict | None) -> list[str]:
    from benchmarks.speculative import all_episodes

    name = "speculative decoding, replayed agent episodes"
    if report is None or "default" not in report["variants"]:
        return [name, NOT_MEASURED, "–", TARGETS["speculative"]]
    tokens, episodes = next(iter(report["variants"]["default"]["episodes"].items()))
    speedups = [row["speedup"] for row in episodes.values()]
    total = all_episodes(episodes)
    return [
        f"{name} ({tokens})",
        f"{total['speculative_tokens_per_s']:.0f} tokens/s ({total['speedup']:.2f}x; "
        f"{min(speedups):.2f}-{max(speedups):.2f}x an episode)",
        f"plain decoding {total['plain_tokens_per_s']:.0f} tokens/s",
        TARGETS["speculative"],
    ]


def _prefill_row(out: Path) -> list[str]:
    path = out / "kernels.csv"
    rows = list(csv.DictReader(path.open())) if path.exists() else []
    prefill = [r for r in rows if r["op"] == "attention prefill" and r["shape"].endswith("prefix=0")]
    if not prefill:
        return ["prefill attention", NOT_MEASURED, "–", TARGETS["prefill"]]
    shape = max({r["shape"] for r in prefill}, key=lambda s: int(s.split()[0].removeprefix("T=")))
    ours = next(r for r in prefill if r["shape"] == shape and r["impl"] == "triton")
    sdpa = next((r for r in prefill if r["shape"] == shape and r["impl"] == "sdpa flash"), None)
    versus = (
        "–"
        if sdpa is None
        else f"SDPA flash {float(sdpa['ms']) * 1000:.0f} us ({float(sdpa['ms']) / float(ours['ms']):.2f}x)"
    )
    return [
        f"prefill attention, {shape.split()[0]}",
        f"{float(ours['ms']) * 1000:.0f} us, {float(ours['tflop_per_s']):.0f} TFLOP/s",
        versus,
        TARGETS["prefill"],
    ]


def _decode_attention_row(profile: dict | None) -> list[str]:
    name = "decode attention"
    if profile is None:
        return [name, NOT_MEASURED, "–", TARGETS["decode attention"]]
    kernels = {k["kernel"]: k for k in profile["decode_step"]["kernels"]}
    parts = [kernels[k] for k in ("_decode_split_kernel", "_decode_combine_kernel") if k in kernels]
    if not parts:
        return [name, "not in the profile's top kernels", "–", TARGETS["decode attention"]]
    layers = max(k["calls_per_unit"] for k in parts)
    per_layer = sum(k["us_per_unit"] for k in parts) / layers
    return [
        f"{name}, {profile['context']:,} tokens of context",
        f"{per_layer:.1f} us a layer",
        "–",
        TARGETS["decode attention"],
    ]


def gpu_table(out: Path, machine: str, date: str) -> CurrentTable:
    """The suite's table from out; the README's headline: decode against transformers."""
    decode = _json(out, "model_decode.json")
    rows = [
        *_decode_rows(decode, _json(out, "gpu_ask.json")),
        _speculative_row(_json(out, "speculative.json")),
        _prefill_row(out),
        _decode_attention_row(_json(out, "gpu_profile.json")),
    ]
    headline = []
    if decode is not None:
        headline.append(
            [
                f"GPU decode tokens/s at {decode['context']:,} tokens of context, batch 1",
                machine.split(";")[0],
                f"{decode['decode_tokens_per_s']:.0f}",
                f"transformers `generate` {decode['transformers_decode_tokens_per_s']:.1f}",
                f"{decode['ratio_vs_transformers']:.0f}x",
            ]
        )
    return CurrentTable(
        key="gpu_suite",
        title="GPU suite",
        section="GPU suite on an H200 (`python -m benchmarks.gpu_suite`)",
        command="python -m benchmarks.gpu_suite",
        machine=machine,
        date=date,
        columns=["measure (Qwen3.5-2B shapes, bf16)", "measured", "peer in the same run", "target"],
        rows=rows,
        headline=headline,
    )
