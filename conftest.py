"""Repository-wide pytest set-up: every test run checks each compiler stage against tg.ir's specs.

SPEC=1 makes `create_schedule` verify the tensor graph and `get_program` verify the kernel AST and the linear
program (tg.ir.spec). It must be in the environment before tg.ir is imported, which is why it is set here.
"""

import os

os.environ.setdefault("SPEC", "1")
