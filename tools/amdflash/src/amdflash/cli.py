"""The `amdflash` command line."""

import argparse

from amdflash.__about__ import __version__


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `amdflash`."""
    parser = argparse.ArgumentParser(prog="amdflash", description="SPI flash recovery for Navi31 boards.")
    parser.add_argument("--version", action="version", version=f"amdflash {__version__}")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `amdflash` console script."""
    build_parser().parse_args(argv)
    build_parser().print_help()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
