"""tg.drivers.interrupts: SIGINT/SIGTERM deferred inside critical sections, raised at the next safe point."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from tg.drivers.interrupts import Interrupted, critical, in_critical, pending, signal_guard

pytestmark = pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(), reason="signals are delivered to the main thread only"
)


def kill(signum: int = signal.SIGINT) -> None:
    os.kill(os.getpid(), signum)  # Python runs the handler at the next bytecode boundary of the main thread


def test_signal_inside_critical_waits_for_its_end() -> None:
    steps: list[str] = []
    with pytest.raises(Interrupted) as info:
        with critical():
            kill()
            steps.append("after kill")  # still running: the signal was only recorded
            assert in_critical() and pending() == 1
            steps.append("restore")
    assert steps == ["after kill", "restore"]
    assert info.value.signum == signal.SIGINT and info.value.exit_code == 130
    assert isinstance(info.value, KeyboardInterrupt)
    assert pending() == 0 and not in_critical()


def test_nested_sections_act_at_the_outermost_exit() -> None:
    inner_done = False
    with pytest.raises(Interrupted):
        with critical():
            with critical():
                kill()
            inner_done = True  # the inner exit is not a safe point
    assert inner_done


def test_sigterm_is_deferred_too_and_maps_to_143() -> None:
    with pytest.raises(Interrupted) as info:
        with critical():
            kill(signal.SIGTERM)
    assert info.value.signum == signal.SIGTERM and info.value.exit_code == 143


def test_outside_critical_a_guarded_signal_raises_at_once() -> None:
    reached = False
    with pytest.raises(Interrupted), signal_guard():
        kill()
        reached = True
    assert not reached


def test_guard_restores_previous_handlers() -> None:
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with signal_guard():
        assert signal.getsignal(signal.SIGINT) is not before[0]
        with critical():
            pass
        assert signal.getsignal(signal.SIGINT) is not before[0]  # critical() inside a guard does not uninstall
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    with critical():
        assert signal.getsignal(signal.SIGINT) is not before[0]  # self-installed without a guard
    assert signal.getsignal(signal.SIGINT) == before[0]


def test_pending_signal_replaces_an_ordinary_exception_but_not_a_keyboard_interrupt() -> None:
    with pytest.raises(Interrupted) as info:
        with critical():
            kill()
            raise OSError("device gone")
    assert isinstance(info.value.__cause__, OSError)  # chained: the error is not lost
    with pytest.raises(KeyboardInterrupt) as kb:
        with critical():
            kill()
            raise KeyboardInterrupt("from a fault hook")
    assert not isinstance(kb.value, Interrupted) and pending() == 0  # reported once, not twice


def test_second_signal_prints_a_note(capfd: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(Interrupted):
        with critical():
            kill()
            kill()
            kill()
            assert pending() == 3
    assert capfd.readouterr().err.count("finishing the current hardware step safely") == 1


def test_worker_threads_are_left_alone() -> None:
    result: list[bool] = []

    def work() -> None:
        with critical():
            result.append(in_critical())

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert result == [False]  # no handlers installed, no state touched from a non-main thread
