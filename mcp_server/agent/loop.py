"""The text-to-SQL agent: runs episodes of the SQaLe protocol on a database and returns the voted answer."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from dbtools.agent_tools import AgentToolbox
from dbtools.engines import Database
from dbtools.query_limits import DEFAULT_QUERY_LIMITS
from mcp_server.agent.dialect import DialectTranslator
from mcp_server.agent.episode import Episode, EpisodeLimits
from mcp_server.agent.metrics import episode_metrics
from mcp_server.agent.outcome import EpisodeOutcome, conclude, dialect_fields
from mcp_server.agent.policies.base import Policy, PolicyRun
from mcp_server.agent.voting import vote
from model.sampling_params import SamplingParams
from model.serving.cancel import CancelEvent, Cancelled

log = logging.getLogger(__name__)


@dataclass
class AgentConfig:
    """The protocol's limits and sampling; defaults are the ones the model was trained with."""

    max_rounds: int = EpisodeLimits.max_rounds
    max_failed_queries: int = EpisodeLimits.max_failed_queries
    token_budget: int = EpisodeLimits.token_budget
    sampling: SamplingParams = field(default_factory=SamplingParams)
    samples: int = 1
    max_result_rows: int = DEFAULT_QUERY_LIMITS.max_rows

    def __post_init__(self) -> None:
        for name in ("max_rounds", "max_failed_queries", "token_budget", "samples", "max_result_rows"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")


@dataclass(frozen=True)
class RoundEvent:
    """Progress after one round (all episodes of a question advance together)."""

    round: int  # 1-based
    max_rounds: int  # the most rounds an episode can take: its tool rounds plus the forced final answer
    calls: tuple[str, ...]  # tools run in this round, over all episodes
    episodes_running: int


@dataclass
class AgentAnswer:
    """The chosen episode's answer, the votes when several episodes ran, and every episode's trace."""

    dialect: str
    chosen: EpisodeOutcome
    metrics: dict
    votes: list[dict] | None = None
    episodes: list[EpisodeOutcome] = field(default_factory=list)
    processed_tokens: int | None = None
    elapsed_s: float = 0.0

    @property
    def sql(self) -> str | None:
        return self.chosen.sql

    @property
    def ending(self) -> str:
        return self.chosen.ending

    def to_dict(self) -> dict:
        chosen = self.chosen
        trace = chosen.trace.to_dict()
        trace["processed_tokens"] = self.processed_tokens
        trace["elapsed_s"] = round(self.elapsed_s, 3)
        return {
            **dialect_fields(chosen, self.dialect),
            "columns": chosen.columns,
            "rows": chosen.result_rows(),
            "row_count": chosen.row_count,
            "truncated": chosen.truncated,
            "error": chosen.error,
            "ending": chosen.ending,
            "votes": self.votes,
            "trace": trace,
            "metrics": self.metrics,
        }


class Agent:
    """Answers questions about one database with one policy."""

    def __init__(self, db: Database, policy: Policy, config: AgentConfig | None = None) -> None:
        self.db = db
        self.policy = policy
        self.config = config or AgentConfig()
        self.toolbox = AgentToolbox(db)
        self.translate = DialectTranslator(db)

    def ask(
        self,
        question: str,
        evidence: str | None = None,
        *,
        samples: int | None = None,
        on_round: Callable[[RoundEvent], None] | None = None,
        cancel: CancelEvent | None = None,
    ) -> AgentAnswer:
        """Run `samples` episodes (default from the config) and return the answer most of them agree on."""
        started = time.perf_counter()
        config = self.config if samples is None else replace(self.config, samples=samples)
        limits = EpisodeLimits(config.max_rounds, config.max_failed_queries, config.token_budget)
        chat = self.policy.chat
        prompt = chat.first_prompt(
            self.policy.prompts.system, self.policy.prompts.user_message(question, evidence)
        )
        run = self.policy.start(prompt, config.samples, config.token_budget)
        try:
            prompt_tokens = run.count_tokens(prompt)
            episodes = [
                Episode(row, self.toolbox, self.translate, chat, limits, transcript=prompt)
                for row in range(config.samples)
            ]
            for episode in episodes:
                episode.trace.prompt_tokens = prompt_tokens
            self._advance(run, episodes, prompt_tokens, config, on_round, cancel)
            for episode in episodes:
                episode.trace.length = run.length(episode.row)
            processed = run.processed_tokens
        finally:
            run.close()
        outcomes = [conclude(e, self.db, config.max_result_rows) for e in episodes]
        winner, votes = vote(outcomes)
        chosen = outcomes[winner]
        return AgentAnswer(
            dialect=self.db.dialect,
            chosen=chosen,
            metrics=episode_metrics(chosen.trace, question, evidence),
            votes=votes if config.samples > 1 else None,
            episodes=outcomes,
            processed_tokens=processed,
            elapsed_s=time.perf_counter() - started,
        )

    def _advance(
        self,
        run: PolicyRun,
        episodes: list[Episode],
        prompt_tokens: int,
        config: AgentConfig,
        on_round: Callable[[RoundEvent], None] | None,
        cancel: CancelEvent | None,
    ) -> None:
        """Lockstep rounds: append each running episode's next turn, complete them together, apply."""
        appended = {e.row: prompt_tokens for e in episodes}
        round_index = 0
        while running := [e for e in episodes if not e.done]:
            if cancel is not None and cancel.is_set():
                raise Cancelled("the question was cancelled")
            round_index += 1
            texts = {e.row: e.pending for e in running if e.pending}
            for row, text in texts.items():
                appended[row] = run.count_tokens(text)
            run.append(texts)
            for e in running:
                e.pending = ""
            ready = []
            for e in running:
                limit = e.generation_limit(run)
                if limit > 0:
                    ready.append((e, limit))
                else:
                    e.out_of_tokens()
            if not ready:
                break
            completions = run.complete(
                [e.row for e, _ in ready], [limit for _, limit in ready], config.sampling, cancel
            )
            tools: list[str] = []
            for (episode, _), completion in zip(ready, completions, strict=True):
                tools += episode.take_turn(completion, appended[episode.row], run)
            log.info("round %d: %d calls (%s)", round_index, len(tools), ", ".join(tools) or "none")
            if on_round is not None:
                on_round(RoundEvent(round_index, config.max_rounds + 1, tuple(tools), len(ready)))
