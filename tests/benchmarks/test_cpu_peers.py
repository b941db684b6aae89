"""The llama.cpp forks as the CPU benchmark's peers, without building them: how each is built and asked to time a
decode at depth, and the table that sets every sqlscout variant against every fork."""

import pytest

from benchmarks import model_cpu
from benchmarks.llama_cpp import bench, build
from benchmarks.llama_cpp.bench import BENCH_PEERS, decode_test
from benchmarks.llama_cpp.build import IK_LLAMA_CPP, LLAMA_CPP


def test_each_fork_times_a_decode_after_the_context_its_own_way():
    assert decode_test(LLAMA_CPP, 2000, 32) == (["-p", "0", "-n", "32", "-d", "2000"], 0, 32)
    assert decode_test(IK_LLAMA_CPP, 2000, 32) == (["-p", "0", "-n", "0", "-gp", "2000,32"], 2000, 32)


# Captured from ik_llama.cpp's `llama-bench -m Q4_K_M.gguf -t 2 -r 1 -o json -rtr 1 -p 0 -n 0 -gp 64,4`
# (ik-llama-cpp-python 0.1.5), the fields the parser does not read cut.
IK_LLAMA_BENCH_OUTPUT = """\
[
  {
    "build_commit": "ik-llama-cpp-python-0.1.5",
    "model_type": "qwen35 2B Q4_K - Medium",
    "model_size": 1680612608,
    "n_threads": 2,
    "repack": true,
    "n_prompt": 64,
    "n_gen": 4,
    "avg_ns": 241613427,
    "stddev_ns": 0,
    "avg_ts": 16.55538,
    "stddev_ts": 0.000000,
    "test": "tg4@pp64",
    "samples_ns": [ 241613427 ],
    "samples_ts": [ 16.55538 ]
  }
]
"""


def test_ik_llama_cpps_record_of_a_decode_after_a_context_is_found_by_the_counts_its_options_name():
    _, n_prompt, n_gen = decode_test(IK_LLAMA_CPP, 64, 4)
    record = bench.bench_record(bench.parse_llama_bench(IK_LLAMA_BENCH_OUTPUT), n_prompt, n_gen)
    assert record["avg_ts"] == pytest.approx(16.55538)


@pytest.fixture
def bench_calls(tmp_path, monkeypatch):
    """llama-bench commands as they would run, each answered with the record its test writes."""
    calls = []

    def run_tool(command, what, timeout_s=None):
        calls.append(command)
        if "-gp" in command:
            n_prompt, n_gen = map(int, command[command.index("-gp") + 1].split(","))
        else:
            n_prompt, n_gen = int(command[command.index("-p") + 1]), int(command[command.index("-n") + 1])
        return f'[{{"n_prompt": {n_prompt}, "n_gen": {n_gen}, "avg_ts": 7.5, "stddev_ts": 0.5, "model_size": 9}}]'

    monkeypatch.setattr(bench, "run_tool", run_tool)
    monkeypatch.setattr(bench, "llama_cpp_tools", lambda fork: tmp_path / fork.name)
    return calls


@pytest.mark.parametrize(
    ("peer", "binary", "options"),
    [
        ("llama.cpp", "llama.cpp", ["-p", "0", "-n", "32", "-d", "2000"]),
        ("ik_llama.cpp", "ik_llama.cpp", ["-p", "0", "-n", "0", "-gp", "2000,32"]),
        ("ik_llama.cpp-rtr", "ik_llama.cpp", ["-rtr", "1", "-p", "0", "-n", "0", "-gp", "2000,32"]),
    ],
)
def test_each_peer_runs_its_own_forks_bench_with_its_options(bench_calls, tmp_path, peer, binary, options):
    measured = bench.llama_decode(tmp_path / "m.gguf", 2, context=2000, tokens=32, peer=BENCH_PEERS[peer])
    assert measured == {"decode_tokens_per_s": 7.5, "decode_tokens_per_s_stddev": 0.5, "model_size_bytes": 9}
    [command] = bench_calls
    assert command[0] == str(tmp_path / binary / "llama-bench")
    assert command[-len(options) :] == options
    bench.llama_prefill(tmp_path / "m.gguf", 2, tokens=700, peer=BENCH_PEERS[peer])
    assert bench_calls[1][-4:] == ["-p", "700", "-n", "0"]
    assert ("-rtr" in bench_calls[1]) is (peer == "ik_llama.cpp-rtr")


@pytest.mark.parametrize("level", ["avx2", "avx512", "native"])
def test_ik_llama_cpp_is_built_at_the_same_level_without_the_kernels_the_benchmark_never_runs(
    monkeypatch, level
):
    monkeypatch.setattr(build.platform, "machine", lambda: "x86_64")
    monkeypatch.setenv("SQLSCOUT_CPU_ISA", level)
    ours, theirs = build.cmake_flags(LLAMA_CPP), build.cmake_flags(IK_LLAMA_CPP)
    own = (
        "-DLLAMA_BUILD_EXAMPLES=ON",
        "-DBUILD_SHARED_LIBS=OFF",
        "-DGGML_IQK_FA_ALL_QUANTS=OFF",
    )  # after the common flags: cmake's last wins
    assert theirs == (*build.CMAKE_FLAGS, *own, *ours[len(build.CMAKE_FLAGS) :])


def _variant(name: str, decode: float, peers: list[dict]) -> dict:
    return {
        "variant": name,
        "threads": 2,
        "decode_tokens_per_s": decode,
        "prefill_s": 10.0,
        "weight_bytes": 2e9,
        "peers": peers,
    }


def test_the_table_sets_every_variant_against_every_fork_measured():
    peers = [
        {
            "engine": engine,
            "type": "BF16",
            "decode_tokens_per_s": rate,
            "prefill_tokens_per_s": 35.0,
            "weight_bytes": 4e9,
        }
        for engine, rate in (("llama.cpp", 5.0), ("ik_llama.cpp", 8.0), ("ik_llama.cpp-rtr", 10.0))
    ]
    lines = model_cpu.report_peers(
        [_variant("transformers-bf16", 1.0, []), _variant("sqlscout-default", 10.0, peers)]
    )
    rows = [line for line in lines if line.startswith("| 2 |")]
    assert [row.split(" | ")[2:5] for row in rows] == [
        ["llama.cpp", "BF16", "10.00 / 5.00"],
        ["ik_llama.cpp", "BF16", "10.00 / 8.00"],
        ["ik_llama.cpp-rtr", "BF16", "10.00 / 10.00"],
    ]
    assert [row.split(" | ")[5] for row in rows] == ["2.00x", "1.25x", "1.00x"]
    assert all("70.0 / 35.0 | 2.00x" in row for row in rows)
    assert model_cpu.report_peers([_variant("sqlscout-default", 10.0, [])]) == []
