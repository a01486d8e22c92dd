"""`python -m amdflash`: the same as the `amdflash` console script."""

from amdflash.cli import console_main

console_main()
