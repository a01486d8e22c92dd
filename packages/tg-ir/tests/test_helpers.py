import pathlib

import pytest

from tg.ir import (
    DEBUG,
    Context,
    ContextVar,
    GlobalCounters,
    Timing,
    all_int,
    all_same,
    argfix,
    argsort,
    cache_dir,
    ceildiv,
    colored,
    dedup,
    flatten,
    getenv,
    partition,
    prod,
    round_up,
    to_function_name,
    unwrap,
)
from tg.ir.helpers import ansilen, ansistrip, get_single_element, is_pow2, merge_dicts, strip_parens


def test_getenv(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TG_TEST_INT", "7")
    monkeypatch.setenv("TG_TEST_STR", "abc")
    monkeypatch.setenv("TG_TEST_BAD", "x")
    getenv.cache_clear()
    assert getenv("TG_TEST_INT", 0) == 7 and getenv("TG_TEST_STR", "") == "abc" and getenv("TG_TEST_MISSING", 3) == 3
    with pytest.raises(ValueError, match="TG_TEST_BAD"):
        getenv("TG_TEST_BAD", 0)
    getenv.cache_clear()


def test_context_scoped_nested_and_decorator() -> None:
    base = DEBUG.value
    with Context(DEBUG=3):
        assert DEBUG.value == 3 and DEBUG >= 3 and DEBUG > 2 and DEBUG < 4 and DEBUG <= 3
        with Context(DEBUG=5):
            assert DEBUG.value == 5
        assert DEBUG.value == 3
    assert DEBUG.value == base

    @Context(DEBUG=4)
    def f() -> int:
        return int(DEBUG.value)

    assert f() == 4 and DEBUG.value == base
    with pytest.raises(RuntimeError), Context(DEBUG=6):
        raise RuntimeError("restored even on error")
    assert DEBUG.value == base
    with pytest.raises(KeyError, match="NOT_A_VAR"):
        Context(NOT_A_VAR=1)


def test_contextvar_registry() -> None:
    v = ContextVar("TG_TEST_CTXVAR", 2)
    assert ContextVar.get("TG_TEST_CTXVAR") is v and int(v) == 2 and bool(v)
    with pytest.raises(RuntimeError, match="already defined"):
        ContextVar("TG_TEST_CTXVAR", 3)


def test_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    monkeypatch.setenv("TG_CACHE_DIR", str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c"
    monkeypatch.delenv("TG_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir() == tmp_path / "tg"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_dir().name == "tg"


def test_counters_and_timing(capsys: pytest.CaptureFixture[str]) -> None:
    GlobalCounters.global_ops = 10
    GlobalCounters.kernel_count = 2
    GlobalCounters.reset()
    assert GlobalCounters.global_ops == 0 and GlobalCounters.kernel_count == 0
    with Timing("took "):
        pass
    assert "took" in capsys.readouterr().out and "ms" in capsys.readouterr().out + "ms"


def test_list_helpers() -> None:
    assert prod([2, 3, 4]) == 24 and prod([]) == 1
    assert flatten([[1, 2], [3]]) == [1, 2, 3]
    assert dedup([3, 1, 3, 2, 1]) == [3, 1, 2]
    assert argsort([3, 1, 2]) == [1, 2, 0]
    assert all_same([1, 1, 1]) and not all_same([1, 2]) and all_same([])
    assert all_int((1, 2)) and not all_int((1, 2.0))
    assert round_up(5, 4) == 8 and round_up(8, 4) == 8
    with pytest.raises(ValueError):
        round_up(1, 0)
    assert ceildiv(7, 2) == 4 and ceildiv(-7, 2) == -3 and ceildiv(8, 2) == 4
    assert partition([1, 2, 3, 4], lambda x: x % 2 == 0) == ([2, 4], [1, 3])
    assert unwrap(3) == 3
    with pytest.raises(ValueError):
        unwrap(None)
    assert argfix((1, 2)) == (1, 2) and argfix(1, 2) == (1, 2)
    assert merge_dicts([{"a": 1}, {"b": 2}]) == {"a": 1, "b": 2}
    with pytest.raises(ValueError):
        merge_dicts([{"a": 1}, {"a": 2}])
    assert get_single_element([5]) == 5
    with pytest.raises(ValueError):
        get_single_element([1, 2])
    assert is_pow2(8) and not is_pow2(6) and not is_pow2(0)
    assert strip_parens("(a+b)") == "a+b" and strip_parens("(a)+(b)") == "(a)+(b)"


def test_colored_and_names() -> None:
    s = colored("hi", "red")
    assert s != "hi" and ansistrip(s) == "hi" and ansilen(s) == 2
    assert colored("hi", None) == "hi"
    with pytest.raises(ValueError):
        colored("hi", "purple")
    assert to_function_name(colored("r_4_4", "green")) == "r_4_4"
    assert to_function_name("a-b") == "a2Db"


def test_cached_property() -> None:
    from tg.ir.helpers import cached_property

    calls: list[int] = []

    class A:
        @cached_property
        def v(self) -> int:
            """doc"""
            calls.append(1)
            return 42

    a = A()
    assert a.v == 42 and a.v == 42 and len(calls) == 1
    assert isinstance(A.v, cached_property) and A.v.__doc__ == "doc"


def test_contextvar_reads_the_environment_at_first_use_not_at_definition(monkeypatch: pytest.MonkeyPatch) -> None:
    # a pytest plugin may import tg before conftest.py sets SPEC=1; the setting must still take effect
    monkeypatch.delenv("TG_TEST_LATE", raising=False)
    v = ContextVar("TG_TEST_LATE", 0)
    monkeypatch.setenv("TG_TEST_LATE", "3")
    getenv.cache_clear()
    try:
        assert v.value == 3 and v >= 3
        with Context(TG_TEST_LATE=1):
            assert v.value == 1
        assert v.value == 3
    finally:
        getenv.cache_clear()


def test_spec_is_on_when_set_after_tg_is_imported() -> None:
    import subprocess
    import sys

    code = ("import os; import tg.ir, tg.ir.helpers as h; os.environ['SPEC'] = '1'; "
            "print(int(h.SPEC))")  # fmt: skip
    env = {k: v for k, v in __import__("os").environ.items() if k != "SPEC"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "1"
