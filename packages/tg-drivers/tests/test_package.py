import importlib.metadata as md

import tg.drivers


def test_version_matches_metadata() -> None:
    assert md.version("tg-drivers") == tg.drivers.__version__
