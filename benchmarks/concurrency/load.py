"""N questions that arrive together, answered at once by one runner or one after another: wall time, questions
per minute and the latency of each question from the moment they all arrived."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class LoadResult:
    """One mode at one N: `latencies_s` are each question's time from the common arrival to its answer."""

    mode: str  # "together" or "one by one"
    questions: int
    wall_s: float
    latencies_s: tuple[float, ...]
    cpu_s: float  # CPU time of this process (every thread) while the questions ran

    @property
    def per_minute(self) -> float:
        return self.questions / self.wall_s * 60

    @property
    def p50_s(self) -> float:
        return statistics.median(self.latencies_s)

    @property
    def p95_s(self) -> float:
        ordered = sorted(self.latencies_s)
        return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]

    def to_dict(self) -> dict:
        return {
            "mode": self.mode,
            "questions": self.questions,
            "wall_s": round(self.wall_s, 3),
            "questions_per_minute": round(self.per_minute, 2),
            "p50_s": round(self.p50_s, 3),
            "p95_s": round(self.p95_s, 3),
            "latencies_s": [round(s, 3) for s in self.latencies_s],
            "cpu_ms_per_question": round(self.cpu_s / self.questions * 1000, 1),
        }


def one_by_one(ask: Callable[[int], object], questions: int) -> LoadResult:
    """Answer questions 0..N-1 in turn; each one's latency counts the wait for those before it."""
    cpu = time.process_time()
    started = time.perf_counter()
    latencies = []
    for number in range(questions):
        ask(number)
        latencies.append(time.perf_counter() - started)
    wall = time.perf_counter() - started
    return LoadResult("one by one", questions, wall, tuple(latencies), time.process_time() - cpu)


def together(ask: Callable[[int], object], questions: int) -> LoadResult:
    """Ask questions 0..N-1 from N threads released at the same moment."""
    ready = threading.Barrier(questions + 1)
    latencies: list[float] = [0.0] * questions
    errors: list[BaseException] = []
    started = 0.0

    def one(number: int) -> None:
        ready.wait()
        try:
            ask(number)
        except BaseException as error:
            errors.append(error)
        latencies[number] = time.perf_counter() - started

    threads = [threading.Thread(target=one, args=(number,)) for number in range(questions)]
    for thread in threads:
        thread.start()
    cpu = time.process_time()
    started = time.perf_counter()
    ready.wait()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    if errors:
        raise errors[0]
    return LoadResult("together", questions, wall, tuple(latencies), time.process_time() - cpu)
