"""The `amdflash` console command. A Ctrl-C at any moment of start-up (while the CLI's modules load, before its own
handlers are installed) ends the process quietly: `error: interrupted` and exit status 130, never a traceback.

Only the standard library is imported here, so the unprotected window is Python's own start-up.
"""

from __future__ import annotations

import os
import signal
import sys

INTERRUPTED = 128 + signal.SIGINT


def quiet_exit(code: int = INTERRUPTED, message: bytes = b"error: interrupted\n") -> None:
    """Leave at once with `code` after `message` on stderr; further Ctrl-Cs are ignored (nothing is left to do)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        sys.stdout.flush()
    except Exception:  # a broken or half-closed stdout must not turn the exit into a traceback
        pass
    try:
        os.write(2, message)
    except OSError:
        pass
    os._exit(code)


def main() -> None:
    """Load and run the CLI (`amdflash.cli.console_main`, which exits with the command's status)."""
    try:
        from amdflash.cli import console_main

        console_main()
    except KeyboardInterrupt as exc:  # while loading, or in a gap the CLI's own handling does not cover
        quiet_exit(int(getattr(exc, "exit_code", INTERRUPTED)))


if __name__ == "__main__":
    main()
