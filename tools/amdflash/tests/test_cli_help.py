import io

from amdflash.cli import main


def test_help_exits_cleanly() -> None:
    out = io.StringIO()
    assert main(["--help"], stdout=out) == 0
    text = out.getvalue()
    assert "amdflash" in text
    assert "ROM_CNTL" in text  # the persistent side effect is documented in --help


def test_romsw_help_documents_rom_cntl_side_effect() -> None:
    out = io.StringIO()
    assert main(["romsw", "--help"], stdout=out) == 0
    assert "ROM_CNTL" in out.getvalue()


def test_usage_error_exit_code() -> None:
    err = io.StringIO()
    assert main(["romsw", "read", "zz", "4"], stderr=err) == 2
    assert "invalid integer" in err.getvalue()
    assert main(["nonsense"], stderr=io.StringIO()) == 2
