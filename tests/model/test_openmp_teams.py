"""Loading leaves the loading thread without an OpenMP team: a team left on the main thread makes libgomp throttle
the workers of every other thread's team (the serving scheduler's, which decodes), so each of its parallel regions
waits for its workers to wake. Checked in a fresh interpreter by the process's thread count, which a team raises
by its workers for as long as its thread lives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from model.cpu import on_a_thread_of_its_own

ROOT = Path(__file__).resolve().parents[2]
PROBE = """
import json, os, sys, time, torch, tqdm
from model.engine import Engine
from model.engine_options import EngineOptions
from model.sampling_params import SamplingParams

def threads():
    return len(os.listdir("/proc/self/task"))

def settled(expected):
    # The thread count once the workers of ended threads' teams are gone: they leave after their thread ends.
    for _ in range(100):
        if threads() <= expected:
            break
        time.sleep(0.05)
    return threads()

tqdm.tqdm.monitor_interval = 0  # the load's progress bar would start tqdm's monitor thread, and count it
torch.set_num_threads(2)
before = threads()
engine = Engine.load(sys.argv[1], EngineOptions(device="cpu", threads=2, speculate="off", compile=False))
after_load = settled(before)
engine.warm_up(SamplingParams(temperature=0))
after_warm_up = settled(before)
torch.randn(1 << 20).mul(2)  # a parallel region on this thread: its team's worker stays
print(json.dumps([before, after_load, after_warm_up, threads()]))
"""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads through Linux's /proc")
def test_loading_and_warming_up_leave_no_team_on_the_calling_thread(checkpoint_dirs):
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(checkpoint_dirs["text_tied"])],
        cwd=ROOT,
        # Two threads whatever share of the cores this worker has: with one, no team would have a worker to count.
        env={**os.environ, "OMP_NUM_THREADS": "2", "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    before, after_load, after_warm_up, after_own_region = json.loads(done.stdout.splitlines()[-1])
    assert after_load == before and after_warm_up == before
    # The probe itself does leave a team: the count would have shown one.
    assert after_own_region > before


def test_work_on_a_thread_of_its_own_returns_its_result_and_raises_its_error():
    assert on_a_thread_of_its_own(lambda: 41 + 1) == 42
    with pytest.raises(ZeroDivisionError):
        on_a_thread_of_its_own(lambda: 1 / 0)
