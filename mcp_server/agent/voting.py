"""Self-consistency over several episodes: the answer whose result set most episodes agree on."""

from __future__ import annotations

from mcp_server.agent.outcome import EpisodeOutcome


def vote(outcomes: list[EpisodeOutcome]) -> tuple[int, list[dict]]:
    """(index of the winning episode, the vote groups, largest first).

    Episodes agree when their results are equal as sets of rows. Episodes without a result (no SQL, or
    SQL that failed) form one last group that never wins while any episode has a result; ties go to
    the group whose first episode came first.
    """
    groups: dict[frozenset, list[int]] = {}
    without_result: list[int] = []
    for index, outcome in enumerate(outcomes):
        key = outcome.result_key()
        if key is None:
            without_result.append(index)
        else:
            groups.setdefault(key, []).append(index)
    ranked = sorted(groups.values(), key=lambda members: (-len(members), members[0]))
    votes = [{"sql": outcomes[m[0]].sql, "count": len(m), "episodes": m, "result": True} for m in ranked]
    if without_result:
        votes.append({"sql": None, "count": len(without_result), "episodes": without_result, "result": False})
    return (ranked[0][0] if ranked else 0), votes
