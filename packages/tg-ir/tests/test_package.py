import importlib.metadata as md

import tg.ir
import tg.ir.spec


def test_version_matches_metadata() -> None:
    assert md.version("tg-ir") == tg.ir.__version__


def test_every_public_name_is_exported() -> None:
    missing = [n for n in tg.ir.__all__ if not hasattr(tg.ir, n)]
    assert not missing
    assert tg.ir.verify is tg.ir.spec.verify and tg.ir.kernel_spec is tg.ir.spec.kernel_spec
    assert {"SpecError", "tensor_spec", "program_spec", "type_verify"} <= set(tg.ir.__all__)
