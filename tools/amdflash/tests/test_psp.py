"""PSP flash mailbox against the simulated board."""

from __future__ import annotations

from typing import Any

import pytest

from amdflash import psp
from amdflash.sim import ModelBar5, SimConfig, SimulatedNavi31


def make(**cfg: Any) -> tuple[psp.PSPFlashMailbox, SimulatedNavi31, list[str]]:
    board = SimulatedNavi31(SimConfig(**cfg))
    lines: list[str] = []
    box = psp.PSPFlashMailbox(ModelBar5(board), command_timeout=0.05, end_timeout=0.05, out=lines.append)
    return box, board, lines


def test_not_ready_message() -> None:
    box, board, _ = make(psp="not_ready")
    with pytest.raises(RuntimeError, match=r"^PSP mailbox is not ready before command 0x1: status=0x00000000$"):
        box.command(0x01)
    assert board.psp_log == []


def test_timeout_on_stall() -> None:
    box, _, _ = make(psp_stall={(0x06, 1)})
    with pytest.raises(TimeoutError, match=r"PSP mailbox command 0x6 timed out"):
        box.command(0x06, timeout=0.01)


@pytest.mark.parametrize("code", sorted(psp.PSP_ERRORS))
def test_error_decoding(code: int) -> None:
    box, _, _ = make(psp_fail={(0x0B, 1): code})
    text = psp.PSP_ERRORS[code]
    with pytest.raises(RuntimeError, match=rf"^PSP SPI_GET_MODEL_ID failed: error={code:#x} \({text}\)$"):
        box.require(0x0B, name="SPI_GET_MODEL_ID")


def test_unknown_error_and_default_name() -> None:
    box, _, _ = make(psp_fail={(0x0B, 1): 0x77})
    with pytest.raises(RuntimeError, match=r"^PSP 0xb failed: error=0x77 \(unknown error\)$"):
        box.require(0x0B)


def test_probe_reports_all_four() -> None:
    box, _, _ = make(psp_values={0x01: 1, 0x06: 2, 0x0B: 0x1234})
    expected = [("boot_partition", 0, 1), ("fb_state", 0, 2), ("model_id", 0, 0x1234), ("transfer_type", 0, 1)]
    assert box.probe() == expected


class FakeLength:
    def __len__(self) -> int:
        return 0x1000000


@pytest.mark.parametrize(
    ("payload", "item", "message"),
    [
        (b"", 1, "payload is empty"),
        (FakeLength(), 1, "payload exceeds the mailbox's 24-bit size field"),
        (b"abc", 1, "payload size must be divisible by four"),
        (b"abcd", 256, "item type must fit in eight bits"),
        (b"abcd", -1, "item type must fit in eight bits"),
    ],
)
def test_stream_validation(payload: Any, item: int, message: str) -> None:
    box, board, _ = make()
    with pytest.raises(ValueError, match=message):
        box.stream(payload, item)
    assert board.psp_log == []


def test_transfer_type_mismatch() -> None:
    box, board, lines = make()
    with pytest.raises(RuntimeError, match=r"^firmware requests item 0x1, not 0x2$"):
        box.stream(b"abcd", 2)
    assert lines == ["firmware transfer_type=0x1"]
    assert [c for c, *_ in board.psp_log] == [0x07]


def test_stream_success() -> None:
    box, board, lines = make()
    payload = bytes(range(0x54))
    assert box.stream(payload, 1) == 0x54
    assert board.psp_received == [(1, payload)]
    assert lines[-1].startswith("stream complete: type=0x1 size=0x54 elapsed=")


def test_stream_reports_progress_every_4k() -> None:
    box, _, lines = make(psp_items=[(0, 0x05)])
    calls: list[tuple[int, int]] = []
    box.stream(bytes(0x2000), 5, progress=lambda sent, size: calls.append((sent, size)))
    assert calls == [(0x1000, 0x2000), (0x2000, 0x2000), (0x2000, 0x2000)]
    assert not [line for line in lines if "0x1000/" in line]  # progress never goes to the output lines


def test_best_effort_end_after_data_failure() -> None:
    box, board, _ = make(psp_fail={(0x09, 3): 0x0C})
    with pytest.raises(RuntimeError, match=r"PSP DATA_TRANSFER@0x8 failed: error=0xc \(write to SPI error\)"):
        box.stream(bytes(0x54), 1)
    ends = [entry for entry in board.psp_log if entry[0] == 0x0A]
    assert ends == [(0x0A, (8 << 8) | 1, 0x11, 0)]


def test_no_second_end_when_end_fails() -> None:
    box, board, _ = make(psp_fail={(0x0A, 1): 0x0D})
    with pytest.raises(RuntimeError, match="PSP END_TRANSFER failed: error=0xd"):
        box.stream(bytes(0x54), 1)
    assert [c for c, *_ in board.psp_log].count(0x0A) == 1


def test_keyboard_interrupt_during_data_still_sends_end() -> None:
    def abort(event: tuple[Any, ...]) -> None:
        if event == ("psp", 0x09, 5):
            raise KeyboardInterrupt

    box, board, _ = make(abort_on=abort)
    with pytest.raises(KeyboardInterrupt):
        box.stream(bytes(0x54), 1)
    ends = [entry for entry in board.psp_log if entry[0] == 0x0A]
    assert ends == [(0x0A, (0x10 << 8) | 1, 0x11, 0)]
    assert board.violations == []
