"""Progress of long operations on stderr: a tqdm bar on a terminal, a plain line about every 10% otherwise.

stdout never sees progress, so scripts that parse results (and the per-sector `OK sector` lines) are unaffected.
"""

from __future__ import annotations

import time
from types import TracebackType
from typing import Any, TextIO

PLAIN_STEP = 10  # percent between two plain progress lines


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB"):
        if n < 1024 or unit == "MiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


class Progress:
    """Progress of an operation of `total` bytes, described by `desc`, shown on `stream` (None: shown nowhere).

    On a terminal it is a tqdm bar (percent, bytes, rate, time left); otherwise one line per 10% step:
    `<desc>: 40% (819.2 KiB/2.0 MiB, 312.5 KiB/s, 4s left)`. Use as a context manager; `update(n)` adds `n` bytes,
    `goto(done)` sets the position.
    """

    def __init__(self, total: int, desc: str, stream: TextIO | None) -> None:
        self.total, self.desc, self.stream = max(int(total), 1), desc, stream
        self.done = 0
        self._start = time.monotonic()
        self._next_percent = PLAIN_STEP
        self._bar: Any = None
        if stream is not None and _isatty(stream):
            from tqdm import tqdm

            self._bar = tqdm(
                total=self.total,
                desc=desc,
                unit="B",
                unit_scale=True,
                unit_divisor=1024,
                file=stream,
                leave=True,
                dynamic_ncols=True,
            )

    def update(self, n: int) -> None:
        """Add `n` bytes of progress."""
        self.goto(self.done + n)

    def goto(self, done: int) -> None:
        """Set the progress to `done` bytes."""
        done = min(max(int(done), 0), self.total)
        delta, self.done = done - self.done, done
        if self.stream is None:
            return
        if self._bar is not None:
            self._bar.update(delta)
            return
        percent = 100 * done // self.total
        if percent < self._next_percent:
            return
        self._next_percent = (percent // PLAIN_STEP + 1) * PLAIN_STEP
        elapsed = max(time.monotonic() - self._start, 1e-9)
        rate = done / elapsed
        left = f", {(self.total - done) / rate:.0f}s left" if done < self.total and rate > 0 else ""
        self.stream.write(f"{self.desc}: {percent}% ({_size(done)}/{_size(self.total)}, {_size(rate)}/s{left})\n")
        self.stream.flush()

    def close(self) -> None:
        """Finish the bar (a plain stream needs nothing)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
