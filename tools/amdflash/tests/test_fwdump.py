"""`dump_rom_aperture`: raw, wrong magic, mirrored, unavailable; register values; single-dword reads only."""

from __future__ import annotations

import pytest

from amdflash import regs
from amdflash.fwdump import dump_rom_aperture, fw_rom_reg_encode, validate_dump
from amdflash.sim import ModelBar5, SimConfig, SimulatedNavi31, build_ifwi, build_mirrored
from amdflash.util import bswap32


def test_raw_dump_and_register_values() -> None:
    image = build_ifwi(4)
    board = SimulatedNavi31(SimConfig(flash=image, reg_log=1 << 20))
    calls: list[tuple[int, int]] = []
    assert dump_rom_aperture(ModelBar5(board), progress=lambda done, total: calls.append((done, total))) == image
    assert calls == [(page, 0x200000) for page in range(0x10000, 0x200001, 0x10000)]
    log = list(board.reg_log or [])
    writes = [(off, v) for op, off, _, v in log if op == "w"]
    assert writes[0] == (regs.ROM_CNTL, bswap32(0x07000002 | 1 << 29))
    index_writes = [v for off, v in writes if off == regs.ROM_INDEX]
    assert index_writes[:-1] == [p for p in range(0, 0x200000, 0x10000)]
    assert writes[-2:] == [(regs.ROM_INDEX, bswap32(0x1234)), (regs.ROM_CNTL, bswap32(0x07000002))]
    data_reads = [size for op, off, size, _ in log if op == "r" and off == regs.ROM_DATA]
    assert len(data_reads) == 0x200000 // 4
    assert set(data_reads) == {4}
    assert board.violations == []


def test_encode_helper_is_a_byte_swap() -> None:
    assert fw_rom_reg_encode(0x12345678) == 0x78563412
    assert all(fw_rom_reg_encode(p >> 8) == p for p in range(0, 0x200000, 0x10000))


def test_validation_rules() -> None:
    image = build_ifwi(1)
    assert validate_dump(image) == image
    with pytest.raises(RuntimeError, match=r"^invalid raw flash dump: size=0x200000 magic=ffffffff$"):
        validate_dump(b"\xff" * 0x200000)
    with pytest.raises(RuntimeError, match=r"^invalid raw flash dump: size=0x1ffffc magic=aa55aa55$"):
        validate_dump(image[:-4])
    with pytest.raises(RuntimeError, match="ROM aperture contains mirrored 1 MiB halves; refusing"):
        validate_dump(build_mirrored(1))


def test_mirrored_aperture_is_rejected_and_registers_restored() -> None:
    board = SimulatedNavi31(SimConfig(flash=build_ifwi(1), rom_aperture="mirror_1mib"))
    with pytest.raises(RuntimeError, match="ROM aperture contains mirrored 1 MiB halves"):
        dump_rom_aperture(ModelBar5(board), progress=None)
    assert board.regs[regs.ROM_CNTL] == bswap32(0x07000002)
    assert board.regs[regs.ROM_INDEX] == bswap32(0x1234)


def test_unavailable_touches_nothing_else() -> None:
    board = SimulatedNavi31(SimConfig(flash=build_ifwi(1), rom_aperture="unavailable", reg_log=100))
    with pytest.raises(RuntimeError, match="raw SMUIO ROM controller is unavailable; the SOC15 function-ROM"):
        dump_rom_aperture(ModelBar5(board), progress=None)
    assert [op for op, *_ in board.reg_log or []] == ["r", "r"]
