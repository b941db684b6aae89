"""Which literals of a question an episode saw before answering."""

from __future__ import annotations

from mcp_server.agent.metrics import episode_metrics, question_literals
from mcp_server.agent.trace import CallRecord, EpisodeTrace, RoundRecord


def test_question_literals_are_quoted_strings_names_and_numbers():
    question = 'How many orders did "Acme Corp" place in New York after 2019? Show those over 3.5 kg.'
    assert question_literals(question, "status refers to status = 'shipped'") == [
        "Acme Corp",
        "New York",
        "2019",
        "3.5",
        "shipped",
    ]
    # Sentence-initial words and possessives are grammar, not names.
    assert question_literals("Which team is Alice Smith's? List Bob's tasks.") == ["Alice Smith", "Bob"]


def test_literals_count_as_seen_only_in_tool_outputs_before_the_answer():
    def call(tool, output, tables=()):
        return CallRecord(tool=tool, args={}, output=output, tables=list(tables))

    trace = EpisodeTrace(
        rounds=[
            RoundRecord(1, "tool", "", "", calls=[call("distinct_values", "Boston\\nDenver", ["offices"])]),
            RoundRecord(2, "tool", "", "", calls=[call("submit_sql", "Austin", ["offices", "staff"])]),
        ]
    )
    metrics = episode_metrics(trace, "How many staff work in Boston, Austin or Bos?")
    assert metrics["literals_seen"] == {"Boston": True, "Austin": False, "Bos": False}
    assert metrics["tables_touched"] == ["offices", "staff"]
    assert abs(metrics["literals_seen_share"] - 1 / 3) < 1e-9
