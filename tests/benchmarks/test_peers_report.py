"""The peer benchmark's tables: medians in ms and ratios sqlscout / peer, '–' where a peer has nothing."""

from benchmarks.peers.drive import ServerMeasure, TaskMeasure
from benchmarks.peers.report import errors, task_grid, tasks_table, tools_table
from benchmarks.peers.servers import SDK_FLOOR
from benchmarks.peers.tasks import Call


def server(name, tools_chars, **tasks):
    return ServerMeasure(name, "1.0", "2025-11-25", 3, tools_chars, tasks)


def timed(tool, seconds, chars, note=""):
    return TaskMeasure(Call(tool, note=note), seconds=seconds, text_chars=chars)


def rows(table):
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in table.splitlines()[2:]]


def test_ratios_are_sqlscout_over_the_peer_from_medians_in_milliseconds():
    ours = server("sqlscout", 400, query=timed("run_query", [0.001, 0.009, 0.003], 300))
    peer = server("peer", 100, query=timed("read_query", [0.002, 0.004, 0.1, 0.006], 1200, note="LIMIT 10"))
    assert rows(tasks_table(ours, [peer], ["query"])) == [
        ["query", "sqlscout", "run_query", "3.0", "300", "–", "", ""],
        ["query", "peer", "read_query (LIMIT 10)", "5.0", "1,200", "–", "0.60x", "0.25x"],
    ]
    assert rows(tools_table(ours, [peer]))[1] == ["peer", "1.0", "2025-11-25", "3", "100", "4.00x"]


def test_a_task_the_peer_lacks_or_fails_has_no_numbers_and_the_failure_is_listed():
    ours = server("sqlscout", 1, a=timed("x", [0.01], 10), b=timed("y", [0.01], 10))
    failed = TaskMeasure(Call("z"), error="no such table: orders")
    peer = server("peer", 1, b=failed)
    assert [row[2:] for row in rows(tasks_table(ours, [peer], ["a", "b"]))[1::2]] == [
        ["–"] * 6,
        ["z: error", "–", "–", "–", "–", "–"],
    ]
    assert errors([ours, peer]) == ["peer, b: no such table: orders"]


def test_against_the_sdk_floor_only_time_is_compared():
    ours = server("sqlscout", 400, query=timed("run_query", [0.004], 300))
    floor = server(SDK_FLOOR, 100, query=timed("noop", [0.002], 2))
    assert rows(tasks_table(ours, [floor], ["query"]))[1][-2:] == ["2.00x", "–"]
    assert rows(tools_table(ours, [floor]))[1][-1] == "–"


def test_the_current_table_has_a_row_per_task_and_a_column_per_server():
    ours = server("sqlscout", 1, a=timed("x", [0.002, 0.004], 1200), b=timed("y", [0.01], 10))
    peer = server("peer", 1, b=TaskMeasure(Call("z"), error="failed"))
    assert task_grid(ours, [peer], ["a", "b"]) == (
        ["task", "sqlscout", "peer"],
        [["a", "3.0 ms, 1,200 chars", "–"], ["b", "10.0 ms, 10 chars", "–"]],
    )
