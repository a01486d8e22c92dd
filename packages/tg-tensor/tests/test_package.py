import importlib.metadata as md

import tg.tensor


def test_version_matches_metadata() -> None:
    assert md.version("tg-tensor") == tg.tensor.__version__
