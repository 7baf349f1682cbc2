"""Calls for the bounded worker tests (module level: a worker imports them by name)."""

from __future__ import annotations

import ctypes
import os
import time


def double(x: int) -> int:
    return x * 2


def pid() -> int:
    return os.getpid()


def sleep(seconds: float) -> str:
    time.sleep(seconds)
    return "woke"


def spin(seconds: float) -> str:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass
    return "spun"


def allocate(size: int) -> int:
    return len(bytearray(size))


def crash() -> None:
    ctypes.string_at(0)


def recurse(depth: int) -> int:
    return recurse(depth + 1)


def fail() -> None:
    raise ValueError("the file says no")
