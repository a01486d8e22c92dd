"""Repository-wide pytest set-up: spec checks on in every run, and slow tests out of the default run.

SPEC=1 makes `create_schedule` verify the tensor graph and `get_program` verify the kernel AST and the linear
program (tg.ir.spec). Settings are read at their first use, so setting it here works even when a plugin imported tg
before this file ran (tg.ir.helpers.ContextVar).

Tests marked `@pytest.mark.slow` are left out of a run unless it asks for them: `--slow` adds them, a `-m`
expression decides for itself (`-m slow` runs only them), and a run naming tests by node id
(`pytest path/test_x.py::test_y`) runs them whatever their marks. `bash .ci/run --full` runs them.
"""

import os

import pytest

os.environ.setdefault("SPEC", "1")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--slow", action="store_true", default=False, help="also run tests marked slow")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # --slow, a -m expression, or tests named by node id: the run already says what it wants
    if config.getoption("--slow") or config.getoption("-m") or any("::" in str(arg) for arg in config.args):
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]
