"""The `tg-pci-server` command line."""

import argparse

from tg_pci_server.__about__ import __version__


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `tg-pci-server`."""
    parser = argparse.ArgumentParser(prog="tg-pci-server", description="Serve PCI devices over TCP or a unix socket.")
    parser.add_argument("--version", action="version", version=f"tg-pci-server {__version__}")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `tg-pci-server` console script."""
    build_parser().parse_args(argv)
    build_parser().print_help()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
