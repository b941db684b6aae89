"""The llama.cpp peer's own logic, without llama.cpp: llama-bench's output, the bytes a decode token reads, when
a checkpoint is converted again, the tokenizer handed to the converter and llama-server's lifetime."""

import json
import os
import sys
import textwrap
import urllib.request

import pytest
from tokenizers import Tokenizer
from tokenizers.models import BPE, WordLevel

from benchmarks.llama_cpp import build, server
from benchmarks.llama_cpp.bench import bench_record, decode_weight_bytes, parse_llama_bench
from benchmarks.llama_cpp.convert import checkpoint_key, has_bpe_tokenizer, with_qwen_tokenizer
from benchmarks.random_checkpoint import PADDED_VOCAB_SIZE

# Captured from `llama-bench -m Q4_K_M.gguf -t 2 -p 16 -n 4 -r 2 -o json` (0.3.36, beside other work), with
# the fields the parser does not read cut and a log line put in front as a stray one on stdout would be.
LLAMA_BENCH_OUTPUT = """\
load_backend: loaded CPU backend from libggml-cpu.so
[
  {
    "build_commit": "0c1e570",
    "model_filename": "Q4_K_M.gguf",
    "model_type": "qwen35 2B Q4_K - Medium",
    "model_size": 1263435008,
    "model_n_params": 1881825088,
    "n_threads": 2,
    "n_prompt": 16,
    "n_gen": 0,
    "n_depth": 0,
    "avg_ns": 3537986025,
    "stddev_ns": 670870441,
    "avg_ts": 4.605137,
    "stddev_ts": 0.873223,
    "samples_ts": [
      3.98768,
      5.2226
    ]
  },
  {
    "build_commit": "0c1e570",
    "model_filename": "Q4_K_M.gguf",
    "model_type": "qwen35 2B Q4_K - Medium",
    "model_size": 1263435008,
    "model_n_params": 1881825088,
    "n_threads": 2,
    "n_prompt": 0,
    "n_gen": 4,
    "n_depth": 0,
    "avg_ns": 11480029183,
    "stddev_ns": 639181570,
    "avg_ts": 0.348972,
    "stddev_ts": 0.01943,
    "samples_ts": [
      0.362711,
      0.335233
    ]
  }
]
"""


def test_llama_bench_output_parses_past_log_lines_and_each_test_is_found_by_its_token_counts():
    records = parse_llama_bench(LLAMA_BENCH_OUTPUT)
    assert [(r["n_prompt"], r["n_gen"]) for r in records] == [(16, 0), (0, 4)]
    assert bench_record(records, 0, 4)["avg_ts"] == pytest.approx(0.348972)
    assert bench_record(records, 16, 0)["model_size"] == 1263435008
    with pytest.raises(ValueError, match=r"n_prompt=700, n_gen=0; it ran \[\(16, 0\), \(0, 4\)\]"):
        bench_record(records, 700, 0)


@pytest.mark.parametrize("output", ["", "error: failed to load model\n", "[not json] [1, 2]\n"])
def test_output_without_test_records_is_an_error_that_shows_it(output):
    with pytest.raises(ValueError, match="no JSON array of test records"):
        parse_llama_bench(output)


def test_a_decode_token_reads_a_separate_head_but_not_the_embedding_table():
    sizes = {
        "token_embd.weight": 1000,
        "output.weight": 600,
        "blk.0.attn_qkv.weight": 30,
        "output_norm.weight": 2,
    }
    assert decode_weight_bytes(sizes) == 632


def test_a_head_tied_to_the_embedding_table_is_read_once():
    sizes = {"token_embd.weight": 1000, "blk.0.ffn_up.weight": 30, "output_norm.weight": 2}
    assert decode_weight_bytes(sizes) == 1032


@pytest.fixture
def checkpoint(tmp_path):
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text('{"vocab_size": 1024}')
    (model_dir / "model.safetensors").write_bytes(b"weights")
    (model_dir / "tokenizer.json").write_text("{}")
    return model_dir


def test_the_cache_key_is_stable_and_ignores_files_the_conversion_does_not_read(checkpoint):
    key = checkpoint_key(checkpoint)
    (checkpoint / "README.md").write_text("notes")
    assert checkpoint_key(checkpoint) == key
    assert len(key) == 16


@pytest.mark.parametrize(
    "change",
    [
        lambda d: (d / "config.json").write_text('{"vocab_size": 2048}'),
        lambda d: (d / "model.safetensors").write_bytes(b"more weights"),
        lambda d: os.utime(d / "model.safetensors", ns=(1, 1)),
        lambda d: (d / "model-00002-of-00002.safetensors").write_bytes(b"shard"),
        lambda d: (d / "tokenizer.json").write_text('{"model": {}}'),
    ],
    ids=["config", "weight size", "weight mtime", "new shard", "tokenizer"],
)
def test_a_changed_checkpoint_gets_a_new_cache_key(checkpoint, change):
    key = checkpoint_key(checkpoint)
    change(checkpoint)
    assert checkpoint_key(checkpoint) != key


def test_only_a_bpe_tokenizer_json_is_handed_to_the_converter_as_it_is(tmp_path):
    (tmp_path / "word_level").mkdir()
    Tokenizer(WordLevel({"<unk>": 0}, unk_token="<unk>")).save(
        str(tmp_path / "word_level" / "tokenizer.json")
    )
    (tmp_path / "bpe").mkdir()
    Tokenizer(BPE({"a": 0}, [])).save(str(tmp_path / "bpe" / "tokenizer.json"))
    (tmp_path / "none").mkdir()
    assert [has_bpe_tokenizer(tmp_path / name) for name in ("word_level", "bpe", "none")] == [
        False,
        True,
        False,
    ]


# Slow (left out of the fast tier): writes a checkpoint and the real tokenizer's files.
@pytest.mark.slow
def test_a_checkpoint_with_a_dummy_tokenizer_is_converted_from_links_with_the_real_qwen_tokenizer(tmp_path):
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps({"vocab_size": PADDED_VOCAB_SIZE}))
    (model_dir / "model.safetensors").write_bytes(b"weights")
    Tokenizer(WordLevel({"<unk>": 0}, unk_token="<unk>")).save(str(model_dir / "tokenizer.json"))
    staging = with_qwen_tokenizer(model_dir, tmp_path / "staging")
    assert (staging / "model.safetensors").readlink() == (model_dir / "model.safetensors").resolve()
    assert (staging / "config.json").is_symlink()
    assert has_bpe_tokenizer(staging) and not has_bpe_tokenizer(model_dir)
    assert Tokenizer.from_file(str(staging / "tokenizer.json")).token_to_id("<|im_start|>") == 248045
    assert json.loads((staging / "tokenizer_config.json").read_text())["eos_token"] == "<|im_end|>"


def test_a_vocabulary_too_small_for_the_qwen_tokenizer_is_refused_with_the_reason(checkpoint, tmp_path):
    with pytest.raises(ValueError, match="vocabulary of 1024 tokens, too small"):
        with_qwen_tokenizer(checkpoint, tmp_path / "staging")


FAKE_SERVER = """\
    import http.server, json, sys
    args = sys.argv[1:]
    with open(__file__ + ".args", "w") as f:
        json.dump(args, f)
    if args[args.index("-m") + 1].endswith("broken.gguf"):
        sys.exit("error: unknown model architecture: 'qwen99'")

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(json.dumps({"status": "ok"}).encode())

    port = int(args[args.index("--port") + 1])
    http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""


@pytest.fixture
def fake_tools(tmp_path, monkeypatch):
    """A tools folder whose llama-server is a tiny Python HTTP server that answers /health."""
    binary = tmp_path / "llama-server"
    binary.write_text(f"#!{sys.executable}\n" + textwrap.dedent(FAKE_SERVER))
    binary.chmod(0o755)
    monkeypatch.setattr(server, "llama_cpp_tools", lambda: tmp_path)
    return tmp_path


def test_the_server_answers_inside_the_block_with_the_options_given_and_is_stopped_after(fake_tools):
    with server.llama_server(fake_tools / "model.gguf", 2, alias="peer") as url:
        port = int(url.removeprefix("http://127.0.0.1:").removesuffix("/v1"))
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as response:
            assert json.load(response) == {"status": "ok"}
    args = json.loads((fake_tools / "llama-server.args").read_text())
    assert args == [
        "-m", str(fake_tools / "model.gguf"), "--host", "127.0.0.1", "--port", str(port),
        "-t", "2", "-c", "16384", "--alias", "peer",
    ]  # fmt: skip
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5)


def test_a_server_that_exits_while_starting_is_reported_with_its_output(fake_tools):
    with pytest.raises(
        RuntimeError, match=r"exited with status 1 before answering(.|\n)*unknown model architecture"
    ):
        with server.llama_server(fake_tools / "broken.gguf", 1, alias="peer"):
            pytest.fail("the block ran although the server never answered")


def test_the_server_is_stopped_when_the_block_raises(fake_tools):
    with pytest.raises(KeyError), server.llama_server(fake_tools / "model.gguf", 1, alias="peer") as url:
        port = url.split(":")[2].split("/")[0]
        raise KeyError("the benchmark failed")
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5)


@pytest.mark.parametrize(("machine", "amx_off"), [("x86_64", True), ("aarch64", False)])
def test_x86_builds_leave_out_ggmls_amx_kernels(monkeypatch, machine, amx_off):
    monkeypatch.setattr(build.platform, "machine", lambda: machine)
    flags = build.cmake_flags()
    assert ("-DCMAKE_CXX_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" in flags) is amx_off
    assert set(build.CMAKE_FLAGS) <= set(flags)


@pytest.mark.parametrize(
    ("level", "on", "off"),
    [
        ("avx2", {"AVX2", "FMA", "F16C"}, {"AVX512", "AVX512_VNNI", "AVX512_BF16"}),
        ("avx512", {"AVX2", "AVX512"}, {"AVX512_VNNI", "AVX512_BF16"}),
        ("avx512-bf16", {"AVX512", "AVX512_VNNI", "AVX512_BF16"}, set()),
        ("generic", set(), {"AVX", "AVX2", "FMA", "F16C", "AVX512"}),
    ],
)
def test_the_peer_is_built_for_the_level_the_kernels_are_capped_at(monkeypatch, level, on, off):
    monkeypatch.setattr(build.platform, "machine", lambda: "x86_64")
    monkeypatch.setenv("SQLSCOUT_CPU_ISA", level)
    flags = build.cmake_flags()
    assert "-DGGML_NATIVE=OFF" in flags and not any("-mno-amx" in flag for flag in flags)
    assert {f"-DGGML_{option}=ON" for option in on} <= set(flags)
    assert {f"-DGGML_{option}=OFF" for option in off} <= set(flags)
