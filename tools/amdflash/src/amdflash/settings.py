"""`Settings`: the timeouts and poll intervals the CLI passes to the drivers (tests lower them)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Settings:
    """Library timeouts (seconds). The defaults are the original tools' values."""

    transaction_timeout: float = 2.0
    erase_timeout: float = 2.0
    program_timeout: float = 1.0
    wrsr_timeout: float = 1.0
    command_timeout: float = 10.0
    end_timeout: float = 60.0
    poll_interval: float = 0.001
    busy_poll_interval: float = 0.002
