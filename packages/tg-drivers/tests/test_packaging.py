"""This package's tests run from its own install: `pip install '<package>[test]'` brings what they import."""

from pathlib import Path

from tg.drivers.testing import check_test_extra


def test_test_extra_declares_what_the_tests_import() -> None:
    check_test_extra(Path(__file__).resolve().parents[1])


def test_a_missing_test_dependency_is_reported(tmp_path: Path) -> None:
    import pytest

    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text("import hypothesis\nfrom pytest import raises\n")
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\n[project.optional-dependencies]\ntest = ["pytest"]\n'
    )
    with pytest.raises(AssertionError, match=r"add \['hypothesis'\]"):
        check_test_extra(tmp_path)
