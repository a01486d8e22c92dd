import importlib.metadata as md

import tg.ir


def test_version_matches_metadata() -> None:
    assert md.version("tg-ir") == tg.ir.__version__
