"""`hatch run demo`: shows the installed tg packages and what they can do today."""

import importlib.metadata as md

DISTRIBUTIONS = ["tg-ir", "tg-codegen", "tg-runtime", "tg-drivers", "tg-tensor", "amdflash", "tg-pci-server"]


def main() -> None:
    print("tg packages:")
    for dist in DISTRIBUTIONS:
        print(f"  {dist:<14} {md.version(dist)}")


if __name__ == "__main__":
    main()
