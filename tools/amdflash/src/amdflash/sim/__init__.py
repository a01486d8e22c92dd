"""The simulated Navi31 board: register model, flash and PSP models, test images and invariant checks."""

from amdflash.sim.accessor import ModelBar5
from amdflash.sim.board import SimulatedNavi31, Txn
from amdflash.sim.config import DEFAULT_INITIAL_REGS, DEFAULT_PSP_ITEMS, SimConfig, default_sfdp
from amdflash.sim.device import DirectSimDevice, make_sim_device, served_device
from amdflash.sim.images import BAD_SIZES, bad_sizes, build_ifwi, build_mirrored, corrupt_sgn, huge_sgn_count
from amdflash.sim.invariants import assert_fw_dump_restored, assert_no_violations, assert_registers_restored

__all__ = [
    "BAD_SIZES",
    "DEFAULT_INITIAL_REGS",
    "DEFAULT_PSP_ITEMS",
    "DirectSimDevice",
    "ModelBar5",
    "SimConfig",
    "SimulatedNavi31",
    "Txn",
    "assert_fw_dump_restored",
    "assert_no_violations",
    "assert_registers_restored",
    "bad_sizes",
    "build_ifwi",
    "build_mirrored",
    "corrupt_sgn",
    "default_sfdp",
    "huge_sgn_count",
    "make_sim_device",
    "served_device",
]
