"""The `tg-pci-server` console command. A Ctrl-C while it starts (its modules load before the server installs its own
SIGINT/SIGTERM handlers) ends the process quietly with status 130, never with a traceback."""

from __future__ import annotations

import os
import signal
import sys


def main() -> None:
    """Load and run the server's command line; exit with its status."""
    try:
        from tg_pci_server.cli import main as cli_main

        code = cli_main()
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            os.write(2, b"tg-pci-server: interrupted\n")
        except OSError:
            pass
        os._exit(128 + signal.SIGINT)
    sys.exit(code)


if __name__ == "__main__":
    main()
