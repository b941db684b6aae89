"""The one text-to-SQL model a process loads, shared by the questions asked at once."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import anyio

from dbtools.cache import cache_dir
from dbtools.engines import Database
from mcp_server.agent import Agent, AgentAnswer, AgentConfig, RoundEvent
from mcp_server.agent.errors import EndpointError, PolicyConfigError
from mcp_server.agent.policies import MODEL_SETUP_HINT, Policy, build_policy
from mcp_server.agent.policies.endpoint import EndpointPolicy
from mcp_server.question_gate import QuestionGate
from mcp_server.settings import Settings
from model.serving.cancel import CancelEvent, wait_until

log = logging.getLogger(__name__)

ENGINE_CACHE = "engine"  # under the cache directory: what a local model keeps between starts (int8 weights)


class ModelLoadError(RuntimeError):
    """The configured model could not be loaded; the message says why."""


class ModelRunner:
    """Loads the policy once (at the first question, or in the background at start) and runs up to
    --max-concurrent-questions questions on it at once, each its own episodes; later questions wait their
    turn in order of arrival. An endpoint serves the questions' requests side by side; the local engine
    decodes their rows together in one batch."""

    def __init__(self, settings: Settings, db: Database | None = None, policy: Policy | None = None) -> None:
        self.settings = settings
        self.db = db  # asked when a question names no database
        self._policy = policy
        self._config: AgentConfig | None = None
        # One agent per database asked: its toolbox holds the database's value index. See forget().
        self._agents: dict[Database, Agent] = {}
        self._agents_lock = threading.Lock()
        self._loading = False  # a thread is loading the policy
        self._load_changed = threading.Condition()
        self._gate = QuestionGate(settings.max_concurrent_questions)
        # Worker threads for questions asked from an event loop, as many as may run: a question waiting its
        # turn holds none, so a burst of questions never takes the threads of the database tools.
        self.threads = anyio.CapacityLimiter(settings.max_concurrent_questions)
        self._questions: set[CancelEvent] = set()  # the cancel events of the questions asked now
        self._questions_changed = threading.Condition()
        self._status = (
            ("ready" if policy else "not loaded yet")
            if self.configured
            else "not configured (start the server with --model DIR or --endpoint URL)"
        )

    @property
    def configured(self) -> bool:
        return self._policy is not None or self.settings.has_model

    @property
    def status(self) -> str:
        """The model behind ask_database in one sentence (loading, ready, what the endpoint serves, or why it
        failed), as of the last load or question: list_sources and the schema overview show it."""
        return self._status

    def preload_in_background(self) -> None:
        """Start loading now so the first question does not wait for it; failures surface on that question."""
        if self.configured:
            threading.Thread(target=self._preload, name="model-preload", daemon=True).start()

    def _preload(self) -> None:
        try:
            with self._loading_turn(None):
                self._ensure_policy()
        except Exception as error:
            log.warning("%s; ask_database will try again and report it", error)
            log.debug("the model did not load", exc_info=True)

    def _ensure_policy(self) -> None:
        try:
            self._load()
        except (PolicyConfigError, ModelLoadError) as error:
            self._status = f"not ready: {error}"
            raise

    def _load(self) -> None:
        if self._config is None:
            if self._policy is None:
                if not self.settings.has_model:
                    raise PolicyConfigError(f"no text-to-SQL model is configured: {MODEL_SETUP_HINT}")
                where = self.settings.model or self.settings.endpoint
                self._status = (
                    f"checking the model server at {self._where()}"
                    if self.settings.endpoint
                    else f"loading from {self._where()}"
                )
                log.info("loading the text-to-SQL model from %s", where)
                keeps_files = self.settings.quantize or self.settings.compile
                try:
                    policy = build_policy(
                        model_dir=self.settings.model,
                        endpoint=self.settings.endpoint,
                        endpoint_model=self.settings.endpoint_model,
                        api_key=self.settings.api_key,
                        endpoint_timeout_s=self.settings.endpoint_timeout,
                        endpoint_retries=self.settings.endpoint_retries,
                        engine_options=self.settings.engine_options(
                            cache_dir() / ENGINE_CACHE if keeps_files else None
                        ),
                        sampling=self.settings.sampling(),
                    )
                except PolicyConfigError:
                    raise
                except Exception as error:
                    raise ModelLoadError(f"loading the model from {where} failed: {error}") from error
                if isinstance(policy, EndpointPolicy):
                    self._status = self._check_endpoint(policy)
                else:
                    self._status = f"ready: the local engine runs the model from {self._where()}"
                self._policy = policy
                if self._status.startswith("ready"):
                    log.info("model ready")
            self._config = AgentConfig(
                token_budget=self.settings.token_budget,
                samples=self.settings.samples,
                max_result_rows=self.settings.max_rows,
                sampling=self.settings.sampling(),
            )

    def _check_endpoint(self, policy: EndpointPolicy) -> str:
        """Contact the endpoint before calling the model ready: what it serves goes to the log and is the
        status, and an address where nothing answers fails now, with the reason."""
        try:
            served = policy.probe()
        except EndpointError as error:
            raise ModelLoadError(str(error)) from None
        server = f"the model server at {self._where()}"
        if served is None:
            status = f"ready: {server} answers (it lists no models)"
        elif self.settings.endpoint_model not in served:
            status = (
                f"{server} serves {', '.join(served) or 'no model'}, not --endpoint-model "
                f"{self.settings.endpoint_model}: questions will fail until it does"
            )
            log.warning("%s", status)
            return status
        else:
            status = f"ready: {server} answers and serves {', '.join(served)}"
        log.info("%s", status)
        return status

    def _where(self) -> str:
        return str(self.settings.endpoint or self.settings.model)

    def _agent(self, database: Database) -> Agent:
        with self._agents_lock:
            agent = self._agents.get(database)
            if agent is None:
                agent = self._agents[database] = Agent(database, self._policy, self._config)
            return agent

    def forget(self, database: Database) -> None:
        """Drop the agent of a database that is no longer served (its source was reconfigured or removed)."""
        with self._agents_lock:
            self._agents.pop(database, None)

    def ask(
        self,
        question: str,
        evidence: str | None = None,
        *,
        database: Database | None = None,
        on_round: Callable[[RoundEvent], None] | None = None,
        cancel: CancelEvent | None = None,
    ) -> AgentAnswer:
        """Answer one question; waits for its turn while --max-concurrent-questions others run, and for the
        model while it loads, unless cancelled (Cancelled).

        Raises PolicyConfigError without a model, ModelLoadError when it fails to load, ModelError when it
        fails to answer."""
        cancel = cancel or CancelEvent()
        with self._running(cancel), self._gate.turn(cancel):
            self._loaded(cancel)
            agent = self._agent(database or self.db)
            try:
                answer = agent.ask(question, evidence, on_round=on_round, cancel=cancel)
            except EndpointError as error:
                self._status = f"the model server at {self._where()} failed the last question: {error}"
                raise
            if not self._status.startswith("ready"):
                self._status = f"ready: the model server at {self._where()} answered the last question"
            return answer

    def _loaded(self, cancel: CancelEvent) -> None:
        if self._config is not None:
            return
        with self._loading_turn(cancel):
            self._ensure_policy()

    @contextmanager
    def _loading_turn(self, cancel: CancelEvent | None) -> Iterator[None]:
        """Be the one thread that loads the policy, once any other has finished; Cancelled if `cancel` is set
        while waiting."""
        with self._load_changed:
            wait_until(
                self._load_changed,
                lambda: not self._loading,
                cancel,
                "cancelled while waiting for the model to load",
            )
            self._loading = True
        try:
            yield
        finally:
            with self._load_changed:
                self._loading = False
                self._load_changed.notify_all()

    @contextmanager
    def _running(self, cancel: CancelEvent) -> Iterator[None]:
        with self._questions_changed:
            self._questions.add(cancel)
        try:
            yield
        finally:
            with self._questions_changed:
                self._questions.discard(cancel)
                self._questions_changed.notify_all()

    def stop(self, grace_s: float) -> bool:
        """Cancel every question; True once none is left, False if one still runs after `grace_s`."""
        with self._questions_changed:
            for cancel in self._questions:
                cancel.set()
            return self._questions_changed.wait_for(lambda: not self._questions, timeout=grace_s)
