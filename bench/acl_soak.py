"""The ACL state machine of tests/test_acl.py, run long (default 20,000 steps).

Every step is checked against the plain-Python oracle; a leak fails the run.

    .venv/bin/python bench/acl_soak.py [--steps 20000] [--per-example 50]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from tests.test_acl import AclMachine


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--per-example", type=int, default=50)
    args = parser.parse_args()
    steps = 0
    original = AclMachine.check_invariants

    def counting(self: AclMachine, *a: object, **k: object) -> None:
        nonlocal steps
        steps += 1
        original(self, *a, **k)  # type: ignore[arg-type]
        if steps % 250 == 0:
            print(
                f"{steps} steps checked, no leak ({time.perf_counter() - started:.0f} s)",
                flush=True,
            )

    runs = 0
    original_teardown = AclMachine.teardown

    def teardown(self: AclMachine) -> None:
        nonlocal runs
        runs += 1
        original_teardown(self)

    AclMachine.check_invariants = counting  # type: ignore[method-assign]
    AclMachine.teardown = teardown  # type: ignore[method-assign]
    started = time.perf_counter()
    # Hypothesis ends some examples before ``per_example`` steps: run more until the
    # target number of checked steps is reached.
    while steps < args.steps:
        remaining = args.steps - steps
        examples = max(1, -(-remaining // args.per_example))
        run_state_machine_as_test(
            AclMachine,
            settings=settings(
                max_examples=examples,
                stateful_step_count=args.per_example,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
            ),
        )
    elapsed = time.perf_counter() - started
    print(f"{steps} checked steps in {runs} runs, {elapsed:.0f} s, no leak found")


if __name__ == "__main__":
    main()
