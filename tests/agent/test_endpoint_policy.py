"""The endpoint policy against a real OpenAI-compatible HTTP server on loopback, serving scripted completions."""

from __future__ import annotations

import shutil
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from mcp_server.agent import Agent, AgentConfig
from mcp_server.agent.errors import EndpointError
from mcp_server.agent.policies import build_policy
from mcp_server.agent.policies.endpoint import EndpointPolicy, completions_url
from model.sampling_params import SamplingParams
from model.serving.cancel import CancelEvent, Cancelled
from tests.completions_server import HOLD, CompletionsServer, completion

LIST = '{"tool": "list_tables", "args": {}}'
SUBMIT = '{"tool": "submit_sql", "args": {"sql": "SELECT COUNT(*) AS n FROM employees"}}'


@pytest.mark.parametrize("suffix", ["", "/v1", "/v1/"])
def test_completions_url_with_or_without_v1(suffix):
    assert completions_url("http://host:8000" + suffix) == "http://host:8000/v1/completions"


def test_episode_over_http_with_a_retry_after_a_server_error(sqlite_db):
    responses = [
        completion(f"Tables first.</think>\n{LIST}", 400, 12),
        (500, {"error": {"message": "engine overloaded"}}),
        completion(f"Count them.</think>\n{SUBMIT}", 460, 20),
    ]
    with CompletionsServer(responses) as server:
        policy = EndpointPolicy(server.url + "/v1", "sqale-2b", api_key="secret-key", backoff_s=0.01)
        sampling = SamplingParams(temperature=0.3, top_p=0.9, top_k=10, seed=7)
        answer = Agent(sqlite_db, policy, AgentConfig(sampling=sampling)).ask("How many employees?")
    assert answer.ending == "submit_sql" and answer.to_dict()["rows"] == [[7]]
    assert len(server.requests) == 3
    first, failed, retried = (r["body"] for r in server.requests)
    assert all(r["path"] == "/v1/completions" and r["auth"] == "Bearer secret-key" for r in server.requests)
    assert failed == retried
    assert first["model"] == "sqale-2b" and first["stop"] == ["<|im_end|>", "<|endoftext|>"]
    assert (first["temperature"], first["top_p"], first["top_k"], first["seed"]) == (0.3, 0.9, 10, 7)
    assert first["prompt"].startswith("<|im_start|>system\n")
    assert first["prompt"].endswith(
        "<|im_start|>user\nQuestion: How many employees?<|im_end|>\n<|im_start|>assistant\n<think>\n"
    )
    assert retried["prompt"] == (
        first["prompt"] + f"Tables first.</think>\n{LIST}<|im_end|>\n<|im_start|>user\n{LIST}\n"
        "users, aler, AlertLogs, countries, customers, products, orders, order_items, weird name, big_text, "
        "empty_table, departments, employees (13 tables)\n\n[5 tool turns left before you must answer]<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n"
    )
    # The second turn's limit comes from the server's own count of the first exchange.
    appended = len(retried["prompt"]) - len(first["prompt"]) - len(f"Tables first.</think>\n{LIST}")
    assert retried["max_tokens"] == 12288 - (400 + 12) - -(-appended // 3)
    trace = answer.chosen.trace
    assert trace.generated_tokens == 32 and [r.generated_tokens for r in trace.rounds] == [12, 20]
    assert trace.prompt_tokens == 400 and trace.length == 460 + 20


def test_samples_send_concurrent_requests(sqlite_db):
    responses = [completion(f"</think>\n{SUBMIT}", 300, 10) for _ in range(3)]
    with CompletionsServer(responses) as server:
        policy = build_policy(endpoint=server.url, endpoint_model="m")
        answer = Agent(sqlite_db, policy).ask("How many employees?", samples=3)
    assert len(server.requests) == 3 and server.requests[0]["auth"] is None
    assert answer.votes[0]["count"] == 3 and answer.to_dict()["rows"] == [[7]]


def test_bad_api_key_is_a_clear_error(sqlite_db):
    with CompletionsServer([(401, {"error": {"message": "invalid key"}})]) as server:
        policy = EndpointPolicy(server.url, "m", api_key="wrong", backoff_s=0.01)
        with pytest.raises(EndpointError, match="refused the API key .*SQLSCOUT_API_KEY"):
            Agent(sqlite_db, policy).ask("How many employees?")
    assert len(server.requests) == 1


def test_persistent_failures_and_bad_requests_are_reported(sqlite_db):
    with CompletionsServer([(503, {"error": {"message": "busy"}})] * 3) as server:
        policy = EndpointPolicy(server.url, "m", retries=2, backoff_s=0.01)
        with pytest.raises(EndpointError, match="HTTP 503: busy .*3 attempts"):
            Agent(sqlite_db, policy).ask("How many employees?")
    with CompletionsServer([(400, {"error": {"message": "unknown model m"}})]) as server:
        policy = EndpointPolicy(server.url, "m", backoff_s=0.01)
        with pytest.raises(EndpointError, match="HTTP 400: unknown model m"):
            Agent(sqlite_db, policy).ask("How many employees?")
    assert len(server.requests) == 1


def test_unreachable_endpoint_says_so(sqlite_db):
    with CompletionsServer([]) as server:
        url = server.url  # closed again when the block ends, so nothing listens there
    policy = EndpointPolicy(url, "m", retries=1, backoff_s=0.01)
    with pytest.raises(EndpointError) as raised:
        Agent(sqlite_db, policy).ask("How many employees?")
    assert str(raised.value) == (
        f"could not reach the model endpoint {url}/v1/completions: connection refused (gave up after 2 "
        "attempts): check that the model server is running and that --endpoint (SQLSCOUT_ENDPOINT) is its address"
    )


def test_a_cancel_cuts_off_the_requests_in_flight_and_sends_no_more(sqlite_db):
    cancel = CancelEvent()
    with CompletionsServer([HOLD, HOLD]) as server, ThreadPoolExecutor(1) as pool:
        policy = EndpointPolicy(server.url, "m")
        asking = pool.submit(Agent(sqlite_db, policy).ask, "How many employees?", samples=2, cancel=cancel)
        server.wait_for_requests(2)
        cancel.set()
        with pytest.raises(Cancelled):
            asking.result(timeout=2)
        deadline = time.monotonic() + 2
        while server.hung_up < 2:
            assert time.monotonic() < deadline, "the requests in flight were not cut off"
            time.sleep(0.01)
    assert len(server.requests) == 2


def test_a_cancel_ends_the_backoff_before_a_retry(sqlite_db):
    cancel = CancelEvent()
    with CompletionsServer([(503, {"error": {"message": "busy"}})]) as server:
        policy = EndpointPolicy(server.url, "m", backoff_s=30)
        asking = ThreadPoolExecutor(1).submit(
            Agent(sqlite_db, policy).ask, "How many employees?", cancel=cancel
        )
        server.wait_for_requests(1)
        cancel.set()
        with pytest.raises(Cancelled):
            asking.result(timeout=2)
    assert len(server.requests) == 1


def test_model_directory_lends_its_tokenizer_template_and_prompts(
    sqlite_db, tokenizer_dir, tokenizer, tmp_path
):
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(tokenizer_dir / name, tmp_path / name)
    (tmp_path / "sqale_agent.py").write_text('SYSTEM_PROMPT = "Explore."\nUSER_TEMPLATE = "Q={question}"\n')
    with CompletionsServer([completion(f"</think>\n{SUBMIT}", 30, 10)]) as server:
        policy = build_policy(endpoint=server.url, endpoint_model="m", model_dir=tmp_path)
        Agent(sqlite_db, policy).ask("How many employees?")
    body = server.requests[0]["body"]
    assert body["prompt"] == (
        "<|im_start|>system\nExplore.<|im_end|>\n<|im_start|>user\nQ=How many employees?<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n"
    )
    assert body["max_tokens"] == 12288 - len(tokenizer.encode(body["prompt"]))
