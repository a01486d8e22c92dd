"""Tiny random GGUF models for the tests, written once per session by make_tiny_gguf.py (needs `gguf`)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

HERE = Path(__file__).resolve().parent


def load_generator() -> ModuleType:
    """The generator script as a module (tests are not a package)."""
    spec = importlib.util.spec_from_file_location("make_tiny_gguf", HERE / "make_tiny_gguf.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("make_tiny_gguf", module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def generator() -> ModuleType:
    pytest.importorskip("gguf", reason="the tiny-model tests need the `gguf` package to write their files")
    return load_generator()


@pytest.fixture(scope="session")
def tiny_models(generator: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    """{(arch, weight type): path} for arch in llama, qwen3 and every weight type of make_tiny_gguf."""
    return generator.write_all(tmp_path_factory.mktemp("tiny-gguf"))  # type: ignore[no-any-return]


@pytest.fixture(scope="session")
def tiny_llm(tiny_models: dict[tuple[str, str], Path]):  # type: ignore[no-untyped-def]
    """One loaded tiny Qwen 3 (Q8_0) shared by the generation, server and CLI tests."""
    from tg.llm import LLM

    return LLM(tiny_models[("qwen3", "Q8_0")], max_context=160)
