"""`python -m amdflash`: the same as the `amdflash` console script."""

from amdflash.entry import main

main()
