"""One thread runs the engine for every caller: the rows of all callers waiting for a generation decode together in
one batch, in chunks of tokens, and between chunks callers join (their prompt copied in, their appended tokens
prefilled), leave, or drop out when cancelled.

A caller waits for its rows in order of arrival while the batch holds `max_rows` rows; each row caches up to
its caller's token limit, so memory stays within max_rows rows of that limit.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import threading
from collections import deque
from dataclasses import dataclass, field

import torch

from model.engine import Engine
from model.sampling_params import SamplingParams
from model.serving.cancel import CancelEvent, Cancelled, wait_until
from model.serving.row_pool import Lease, RowPool
from model.serving.shared_prefix import SharedPrefix

log = logging.getLogger(__name__)

# Tokens decoded between two looks at arrivals, departures and cancels: the longest a caller waits to join a
# running batch, and the longest its rows keep decoding after a cancel.
DECODE_CHUNK_TOKENS = 16


@dataclass(eq=False)
class _Job:
    """A caller's wait for the engine thread; `abandoned` once the caller stopped waiting (cancelled)."""

    cancel: CancelEvent | None
    done: bool = False
    result: object = None
    error: BaseException | None = None
    abandoned: bool = False


@dataclass(eq=False)
class _Admission(_Job):
    ids: list[int] = field(default_factory=list)
    rows: int = 1
    max_tokens: int = 0


@dataclass(eq=False)
class _Generation(_Job):
    lease: Lease | None = None
    appends: dict[int, list[int]] = field(default_factory=dict)
    rows: list[int] = field(default_factory=list)  # lease row indices
    left: list[int] = field(default_factory=list)  # tokens each row may still generate
    sampling: SamplingParams = field(default_factory=SamplingParams)
    stop_ids: frozenset[int] = frozenset()
    tokens: list[list[int]] = field(default_factory=list)

    def running(self) -> list[int]:
        """Positions (in `rows`) of the rows still generating."""
        return [
            i
            for i, tokens in enumerate(self.tokens)
            if self.left[i] > 0 and not (tokens and tokens[-1] in self.stop_ids)
        ]


@dataclass(eq=False)
class _Release(_Job):
    lease: Lease | None = None


class BatchScheduler:
    """Runs every engine operation of its callers on one thread that batches their rows; every prompt that
    starts with `prefix` gets that prefix's state copied in rather than prefilled."""

    def __init__(self, engine: Engine, prefix: SharedPrefix, max_rows: int) -> None:
        self.engine = engine
        self.prefix = prefix
        self.pool = RowPool(engine, max_rows)
        self._lock = threading.Lock()
        self._finished = threading.Condition(self._lock)  # notified whenever a job is done
        self._admissions: deque[_Admission] = deque()
        self._incoming: list[_Job] = []  # releases and generations, in order of arrival
        self._active: list[_Generation] = []  # owned by the engine thread
        self._driver: threading.Thread | None = None

    @property
    def waiting(self) -> int:
        """Requests that the engine thread has not taken up yet (callers waiting for rows among them)."""
        with self._lock:
            return len(self._admissions) + len(self._incoming)

    def admit(
        self, ids: list[int], rows: int, max_tokens: int, cancel: CancelEvent | None
    ) -> tuple[Lease, int]:
        """Wait for `rows` rows, in order of arrival, and fill them with the prompt `ids`; returns the lease and
        the tokens run for the prompt."""
        job = _Admission(cancel, ids=list(ids), rows=rows, max_tokens=max_tokens)
        return self._wait(job, self._admissions)

    def generate(
        self,
        lease: Lease,
        appends: dict[int, list[int]],
        rows: list[int],
        max_new_tokens: list[int],
        sampling: SamplingParams,
        stop_ids: set[int],
        cancel: CancelEvent | None,
    ) -> list[list[int]]:
        """Prefill `appends` (tokens by lease row), then generate up to max_new_tokens for each of `rows`
        together with the other callers' rows; one token list per row."""
        job = _Generation(
            cancel,
            lease=lease,
            appends=appends,
            rows=list(rows),
            left=list(max_new_tokens),
            sampling=dataclasses.replace(sampling),
            stop_ids=frozenset(stop_ids),
            tokens=[[] for _ in rows],
        )
        return self._wait(job, self._incoming)

    def release(self, lease: Lease) -> None:
        """Give the lease's rows back (waits for the engine thread's next look, at most a chunk)."""
        self._wait(_Release(None, lease=lease), self._incoming)

    def _wait(self, job: _Job, queue) -> object:
        with self._lock:
            queue.append(job)
            if self._driver is None:
                self._driver = threading.Thread(target=self._drive, name="local-engine", daemon=True)
                self._driver.start()
            try:
                wait_until(
                    self._finished,
                    lambda: job.done,
                    job.cancel,
                    "the question was cancelled while waiting for the model",
                )
            except Cancelled:
                job.abandoned = True
                raise
        if job.error is not None:
            raise job.error
        return job.result

    def _finish(self, job: _Job, result: object = None, error: BaseException | None = None) -> None:
        with self._lock:
            if job.abandoned and isinstance(job, _Admission) and error is None:
                self._give_back(result[0])  # nobody else will
            # The traceback would keep the engine thread's frames, and the caches they hold, alive.
            job.result, job.error = result, None if error is None else error.with_traceback(None)
            job.done = True
            self._finished.notify_all()

    def _drive(self) -> None:
        try:
            with torch.inference_mode():
                while self._step():
                    pass
        except BaseException as error:
            # A fault of the scheduler itself: every waiting caller gets it rather than waiting forever.
            with self._lock:
                waiting = [*self._admissions, *self._incoming, *self._active]
                self._admissions.clear()
                self._incoming, self._active, self._driver = [], [], None
            for job in waiting:
                self._finish(job, error=error)
            raise

    def _step(self) -> bool:
        """One look at arrivals, departures and cancels, then one chunk of decoding; False once idle."""
        with self._lock:
            incoming, self._incoming = self._incoming, []
            self._active = [job for job in self._active if not job.abandoned]
            if not (incoming or self._active or self._admissible()):
                self._driver = None
                return False
        for job in incoming:
            if isinstance(job, _Release):
                self._run(job, lambda job=job: self._give_back(job.lease))
        self._admit_waiting()
        for job in incoming:
            if isinstance(job, _Generation) and not job.abandoned:
                try:
                    if job.appends:
                        self.pool.append(job.lease, job.appends)
                except Exception as error:
                    self._finish(job, error=error)
                    continue
                self._active.append(job)
        self._decode_chunk()
        return True

    def _admissible(self) -> bool:
        """Whether the first caller in line (after dropping cancelled ones) can take its rows now."""
        while self._admissions and self._admissions[0].abandoned:
            self._admissions.popleft()
        return bool(self._admissions) and self.pool.fits(self._admissions[0].rows)

    def _admit_waiting(self) -> None:
        while True:
            with self._lock:
                if not self._admissible():
                    return
                job = self._admissions.popleft()
            self._run(job, lambda job=job: self._fill(job))

    def _log_rows(self, event: str) -> None:
        log.info(
            "a question %s the batch: %d of %d rows in use, %d questions waiting for rows",
            event,
            self.pool.rows_in_use,
            self.pool.max_rows,
            len(self._admissions),
        )

    def _fill(self, job: _Admission) -> tuple[Lease, int]:
        prompt = self.engine.new_session(1, len(job.ids))
        prefilled = self.prefix.fill(prompt, job.ids)
        lease = self.pool.admit(prompt, job.rows, job.max_tokens)
        self._log_rows("joined")
        return lease, prefilled

    def _give_back(self, lease: Lease) -> None:
        self.pool.release(lease)
        self._log_rows("left")

    def _run(self, job: _Job, work) -> None:
        try:
            result = work()
        except Exception as error:
            self._finish(job, error=error)
        else:
            self._finish(job, result)

    def _decode_chunk(self) -> None:
        """Decode up to DECODE_CHUNK_TOKENS for every running row, one batch per sampling setting."""
        for job in [job for job in self._active if not job.running()]:
            self._finish_generation(job)
        groups: dict[tuple, list[_Generation]] = {}
        for job in self._active:
            key = (dataclasses.astuple(job.sampling), job.stop_ids)
            groups.setdefault(key, []).append(job)
        for jobs in groups.values():
            parts = []
            for job in jobs:
                running = job.running()
                parts.append(
                    (
                        job.lease,
                        [job.rows[i] for i in running],
                        [min(job.left[i], DECODE_CHUNK_TOKENS) for i in running],
                    )
                )
            try:
                outputs = self.pool.generate(parts, jobs[0].sampling, set(jobs[0].stop_ids))
            except Exception as error:
                error.with_traceback(None)  # its frames hold the batch's caches
                for job in jobs:
                    self._active.remove(job)
                    # Each caller raises a copy of its own: one raised in several threads would gather
                    # all of their tracebacks.
                    self._finish(job, error=copy.copy(error))
                continue
            for job, rows_tokens in zip(jobs, outputs, strict=True):
                for i, tokens in zip(job.running(), rows_tokens, strict=True):
                    job.tokens[i] += tokens
                    # A row whose sequence is full gets no token: it is done too.
                    job.left[i] = job.left[i] - len(tokens) if tokens else 0
                if not job.running():
                    self._finish_generation(job)

    def _finish_generation(self, job: _Generation) -> None:
        self._active.remove(job)
        self._finish(job, job.tokens)
