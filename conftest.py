"""Repository-wide pytest set-up: every test run checks each compiler stage against tg.ir's specs.

SPEC=1 makes `create_schedule` verify the tensor graph and `get_program` verify the kernel AST and the linear
program (tg.ir.spec). Settings are read at their first use, so setting it here works even when a plugin imported tg
before this file ran (tg.ir.helpers.ContextVar).
"""

import os

os.environ.setdefault("SPEC", "1")
