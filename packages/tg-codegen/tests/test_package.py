import importlib.metadata as md

import tg.codegen


def test_version_matches_metadata() -> None:
    assert md.version("tg-codegen") == tg.codegen.__version__


def test_public_names_are_reexported() -> None:
    from tg.codegen.program import get_program
    from tg.codegen.schedule import create_schedule

    assert tg.codegen.get_program is get_program
    assert tg.codegen.create_schedule is create_schedule
    for name in tg.codegen.__all__:
        assert hasattr(tg.codegen, name), name
