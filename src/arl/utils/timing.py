"""Wall-clock timing of named phases: ``with timed(times, "update"): ...`` stores the seconds.

The training step times its phases this way and logs them as ``perf/<name>_s``. Timers nest: an
outer phase's seconds include those of the phases timed inside it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def timed(times: dict[str, float], name: str) -> Iterator[None]:
    """Store the seconds the ``with`` block took in ``times[name]`` (``time.perf_counter``),
    also when the block raises or returns early; a name timed again is overwritten."""
    start = time.perf_counter()
    try:
        yield
    finally:
        times[name] = time.perf_counter() - start
