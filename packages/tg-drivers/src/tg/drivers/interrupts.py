"""Interrupt-safe hardware steps: SIGINT/SIGTERM are deferred while a step is in flight and acted on afterwards.

A Ctrl-C that lands between two register writes of a multi-register transaction (or inside its `finally` restore)
leaves the hardware half-configured. Wrap each such step in `critical()`: a SIGINT or SIGTERM arriving inside it is
recorded, the step runs to completion (including its clean-up), and `Interrupted` (a `KeyboardInterrupt`) is raised
when the outermost `critical()` exits - the next safe point. Outside critical sections the signals raise
`Interrupted` at once, so a long command still stops promptly between steps.

```python
from tg.drivers.interrupts import critical, signal_guard

with signal_guard():                 # optional: install the handlers once for a whole command
    for sector in range(512):
        with critical():             # never interrupted half-way
            erase_program_verify(sector)
```

`critical()` installs the handlers itself when no `signal_guard()` is active (a few microseconds per step). Both are
no-ops outside the main thread (Python delivers signals to the main thread only). Sections nest; signals arriving
while one is pending are counted (`pending()`), and the second one prints a note on stderr that the step is being
finished safely.
"""

from __future__ import annotations

import os
import signal
import threading
from types import FrameType, TracebackType
from typing import Any

__all__ = ["DEFERRED_SIGNALS", "Interrupted", "critical", "in_critical", "pending", "signal_guard"]

#: the signals that are deferred inside critical sections
DEFERRED_SIGNALS = (signal.SIGINT, signal.SIGTERM)

_SECOND_SIGNAL_NOTE = b"interrupt pending: finishing the current hardware step safely, then stopping\n"


class Interrupted(KeyboardInterrupt):
    """Raised at a safe point for a SIGINT or SIGTERM; `signum` says which (`exit_code` is `128 + signum`)."""

    def __init__(self, signum: int = signal.SIGINT) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        """The conventional shell exit status for this signal (130 for SIGINT, 143 for SIGTERM)."""
        return 128 + self.signum


class _State:
    depth = 0  # nesting of critical sections
    guards = 0  # nesting of signal_guard()s (and self-installs of critical())
    pending: list[int] = []  # signals received inside critical sections, not acted on yet
    previous: dict[int, Any] = {}  # handlers to restore when the outermost guard exits


def _handler(signum: int, frame: FrameType | None) -> None:
    if _State.depth > 0:
        _State.pending.append(signum)
        if len(_State.pending) == 2:  # os.write: a handler must not re-enter a buffered stream mid-write
            try:
                os.write(2, _SECOND_SIGNAL_NOTE)
            except OSError:
                pass
        return
    raise Interrupted(signum)


def _on_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _install() -> None:
    if _State.guards == 0:
        _State.previous = {s: signal.signal(s, _handler) for s in DEFERRED_SIGNALS}
    _State.guards += 1


def _uninstall() -> None:
    _State.guards -= 1
    if _State.guards == 0:
        for s, previous in _State.previous.items():
            signal.signal(s, previous if previous is not None else signal.SIG_DFL)
        _State.previous = {}


def _raise_pending(exc: BaseException | None) -> None:
    """Act on the signals deferred until now: raise `Interrupted` for the first (chained to `exc`, the exception
    leaving the section), unless `exc` is already a `KeyboardInterrupt`; either way none stays pending."""
    if not _State.pending:
        return
    signum = _State.pending[0]
    _State.pending.clear()
    if not isinstance(exc, KeyboardInterrupt):
        raise Interrupted(signum) from exc


def pending() -> int:
    """How many deferred signals are waiting for the next safe point."""
    return len(_State.pending)


def in_critical() -> bool:
    """True inside a `critical()` section (of the main thread)."""
    return _State.depth > 0


class critical:
    """Context manager: SIGINT/SIGTERM are deferred until the outermost section exits, then raise `Interrupted`.

    If the section is left by an exception, a pending signal replaces it (chained) unless that exception is already a
    `KeyboardInterrupt`, so no Ctrl-C is ever lost and none is reported twice.
    """

    __slots__ = ("_active", "_installed")

    def __enter__(self) -> critical:
        self._active = _on_main_thread()
        self._installed = False
        if self._active:
            if _State.guards == 0:
                _install()
                self._installed = True
            _State.depth += 1
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if not self._active:
            return
        _State.depth -= 1
        if _State.depth:
            return
        if self._installed:
            _uninstall()
        _raise_pending(exc)


class signal_guard:
    """Install the deferring SIGINT/SIGTERM handlers for the duration of a command (restores the previous ones).

    Inside it, a signal outside any `critical()` raises `Interrupted` at once (SIGTERM too, so clean-up code runs);
    inside one it waits for the section's end. A signal still pending when the guard exits is raised there.
    """

    __slots__ = ("_active",)

    def __enter__(self) -> signal_guard:
        self._active = _on_main_thread()
        if self._active:
            _install()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if not self._active:
            return
        _uninstall()
        if _State.guards == 0 and _State.depth == 0:
            _raise_pending(exc)
