"""The bounded worker (ingest/loaders/bounded.py): a call past its time, CPU or memory bound, or
one whose parser crashes, answers Refused naming why — and the next call runs as before."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from knowledge_store.ingest.loaders.bounded import Limits, Refused, Runner
from tests.ingest import bounded_calls as calls


@pytest.fixture
def runner() -> Iterator[Runner]:
    # 20 s: time for a worker to start and fail on a loaded machine (the sleep takes all of it).
    bounded = Runner(Limits(seconds=20, cpu_seconds=2, memory_bytes=1024**3), workers=2)
    yield bounded
    bounded.close()


def test_a_call_answers_in_a_worker_that_is_kept(runner: Runner) -> None:
    assert runner.call(calls.double, 21) == 42
    first = runner.call(calls.pid)
    assert runner.call(calls.pid) == first
    assert list(runner.map(calls.double, [(i,) for i in range(10)])) == [2 * i for i in range(10)]


@pytest.mark.parametrize(
    ("call", "args", "says"),
    [
        (calls.sleep, (600,), "longer than 20 s"),
        (calls.allocate, (3 * 1024**3,), "more than 1 GiB of memory"),
        (calls.crash, (), "crashed (SIGSEGV)"),
        (calls.recurse, (0,), "nests too deeply"),
        (calls.fail, (), "ValueError: the file says no"),
    ],
)
def test_a_call_past_a_bound_is_refused_and_the_next_one_runs(
    runner: Runner, call: object, args: tuple[object, ...], says: str
) -> None:
    answer = runner.call(call, *args)  # type: ignore[arg-type]
    assert isinstance(answer, Refused) and says in answer.reason, answer
    assert runner.call(calls.double, 2) == 4


def test_a_call_past_its_cpu_bound_is_refused() -> None:
    # A wall-clock bound far above the CPU one: on a loaded machine a CPU second takes longer.
    bounded = Runner(Limits(seconds=300, cpu_seconds=2), workers=1)
    try:
        answer = bounded.call(calls.spin, 600)
        assert isinstance(answer, Refused) and "2 s of CPU" in answer.reason, answer
        assert bounded.call(calls.double, 2) == 4
    finally:
        bounded.close()


def test_closing_the_runner_stops_its_workers() -> None:
    bounded = Runner(Limits(seconds=5), workers=1)
    worker_pid = bounded.call(calls.pid)
    bounded.close()  # kills and reaps it
    with pytest.raises(ProcessLookupError):
        os.kill(worker_pid, 0)
