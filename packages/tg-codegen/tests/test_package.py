import importlib.metadata as md

import tg.codegen


def test_version_matches_metadata() -> None:
    assert md.version("tg-codegen") == tg.codegen.__version__
