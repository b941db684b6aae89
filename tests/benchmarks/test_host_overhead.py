"""The host-overhead benchmark as a measurement of the fast tier: every layer of the decode path timed, in all and
outside the replays of its captured step, and the operations each layer dispatches outside the step counted."""

from benchmarks.host_overhead import COLUMNS, current, measure


def test_each_path_is_timed_and_its_operations_outside_the_step_counted():
    rows = measure(context=64, tokens=32, append_tokens=32, repeats=1)
    bare, one_call, chunks, sampled, scheduler, replayed_turn, eager_turn = rows
    assert all(row["us"] > 0 for row in rows)
    assert bare["ops_outside_step"] == 0 and bare["ops"] > 0
    assert all(0 <= row["host_us"] <= row["us"] for row in rows)
    # A call's fixed work (copies into and out of the shared workspace) is spread over the tokens of the call.
    assert 0 < one_call["ops_outside_step"] < chunks["ops_outside_step"]
    # Sampling draws each step's noise outside the captured step, where greedy decoding draws none.
    assert sampled["ops_outside_step"] > chunks["ops_outside_step"]
    assert "ops" not in scheduler  # its own thread dispatches the steps: timed, not counted
    assert replayed_turn["per"] == eager_turn["per"] == "turn of 32 tokens"
    # An eager turn dispatches every operation of the prefill itself; a replayed one copies state in and out around
    # a replay.
    assert eager_turn["ops_outside_step"] == eager_turn["ops"] > bare["ops"]
    assert 0 < replayed_turn["ops_outside_step"] < eager_turn["ops_outside_step"] / 4
    table = current(rows)
    assert table.columns == COLUMNS and len(table.rows) == len(rows)
    assert table.rows[4][4:] == ["–", "–"]
