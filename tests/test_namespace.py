import importlib.metadata as md

import amdflash
import tg.codegen
import tg.drivers
import tg.ir
import tg.runtime
import tg.tensor
import tg_pci_server


def test_namespace_is_pep420() -> None:
    import tg

    assert getattr(tg, "__file__", None) is None
    assert type(tg.__path__).__name__ == "_NamespacePath"


def test_every_distribution_reports_its_version() -> None:
    modules = {
        "tg-ir": tg.ir,
        "tg-codegen": tg.codegen,
        "tg-runtime": tg.runtime,
        "tg-drivers": tg.drivers,
        "tg-tensor": tg.tensor,
        "amdflash": amdflash,
        "tg-pci-server": tg_pci_server,
    }
    for dist, module in modules.items():
        assert md.version(dist) == module.__version__, dist
