"""`python -m tg.llm`: see `tg.llm.cli`."""

import sys

from tg.llm.cli import main

sys.exit(main())
