"""This package's tests run from its own install: `pip install '<package>[test]'` brings what they import."""

from pathlib import Path

from tg.drivers.testing import check_test_extra


def test_test_extra_declares_what_the_tests_import() -> None:
    check_test_extra(Path(__file__).resolve().parents[1])
