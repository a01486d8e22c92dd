import importlib.metadata as md

import tg.runtime


def test_version_matches_metadata() -> None:
    assert md.version("tg-runtime") == tg.runtime.__version__
