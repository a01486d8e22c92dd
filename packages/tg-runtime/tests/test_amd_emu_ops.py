"""Per-instruction tables of the RDNA3 emulator (amd.md 4.7, item 2): edge cases of the instruction families tg's
kernels use, run on one wave with `emu.run_code`.

Each VALU case is an instruction (its LLVM 15 text and the words llvm-mc-15 assembles it to: checked below when
llvm-mc-15 is installed, so the stored words are right without LLVM too) and rows of inputs and expected outputs from
the ISA manual's definitions: NaN, +-inf, -0, denormals (kept: float_mode 0xF0 as both producers write it), overflow,
shifts past the width, carries. Row i runs in lane i; lane 31 is left out of EXEC and must keep its old values (its
VCC bit reads 0). Sources are v2, v4, v6 (pairs v[2:3]... for 64-bit types), the result v0 (v[0:1]); 16-bit operands
are low halves, whose high halves hold other bits that must not matter, and a 16-bit result must keep v0's high half.
SALU cases run one row per wave with sources s2, s4 (s[2:3], s[4:5]), result s0 and SCC.
"""

from __future__ import annotations

import math
import shutil
import struct
import subprocess
from typing import Any

import pytest

from tg.runtime.amd.sim.emu import run_code
from tg.runtime.amd.sim.ops import numerics as N

NAN, INF = math.nan, math.inf
DEN = 2.0**-149  # the smallest f32 denormal
MAX32 = N.bits_f32(0x7F7FFFFF)
ENDPGM = 0xBFB00000
FULL = 0xFFFFFFFF
V0_OLD, V1_OLD, HI_JUNK = 0x12345678, 0x9ABCDEF0, 0xA5A5


class Approx:
    """An expected float result that hardware computes within 1 ulp (amd.md 4.5)."""

    def __init__(self, value: float) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"~{self.value!r}"


# (LLVM 15 text, words, "source types -> result types", rows of inputs then outputs)
VALU_CASES: list[tuple[str, tuple[int, ...], str, list[tuple[Any, ...]]]] = [
    ("v_add_f32_e32 v0, v2, v4", (0x06000902,), "f32 f32 -> f32", [
        (1.0, 2.0, 3.0), (INF, -INF, NAN), (-0.0, -0.0, -0.0), (-0.0, 0.0, 0.0), (MAX32, MAX32, INF),
        (DEN, DEN, 2 * DEN), (NAN, 1.0, NAN), (1.0, 2.0**-24, 1.0), (1.0, 3 * 2.0**-24, 1 + 2.0**-22)]),
    ("v_sub_f32_e32 v0, v2, v4", (0x08000902,), "f32 f32 -> f32", [
        (1.0, 1.0, 0.0), (-0.0, 0.0, -0.0), (INF, INF, NAN), (DEN, 2 * DEN, -DEN)]),
    ("v_mul_f32_e32 v0, v2, v4", (0x10000902,), "f32 f32 -> f32", [
        (0.0, INF, NAN), (-2.0, 0.0, -0.0), (2.0**-75, 2.0**-75, 0.0), (2.0**-75, 2.0**-74, DEN),
        (MAX32, -2.0, -INF), (3.0, 1 / 3, 1.0)]),
    # fma rounds once: a*b+c below are exact in neither double nor f32 (double rounding would give 1 + 2^-22)
    ("v_fma_f32 v0, v2, v4, v6", (0xD6130000, 0x041A0902), "f32 f32 f32 -> f32", [
        (2.0**-12 + 2.0**-30, 2.0**-12 - 2.0**-30, 1 + 2.0**-23, 1 + 2.0**-23), (INF, 0.0, 1.0, NAN),
        (2.0, 3.0, -6.0, 0.0), (-0.0, 1.0, -0.0, -0.0), (MAX32, 2.0, -MAX32, MAX32), (DEN, 0.5, 0.0, 0.0),
        (3 * DEN, 0.5, 0.0, 2 * DEN)]),
    ("v_fmac_f32_e32 v0, v2, v4", (0x56000902,), "f32 f32 acc -> f32", [
        (2.0, 3.0, 1.0, 7.0), (NAN, 1.0, 1.0, NAN), (1.0, 1.0, -1.0, 0.0)]),
    # IEEE maxNum/minNum: a NaN operand gives the other one; -0 < +0
    ("v_max_f32_e32 v0, v2, v4", (0x20000902,), "f32 f32 -> f32", [
        (NAN, 1.0, 1.0), (1.0, NAN, 1.0), (NAN, NAN, NAN), (-0.0, 0.0, 0.0), (0.0, -0.0, 0.0), (-INF, -1.0, -1.0)]),
    ("v_min_f32_e32 v0, v2, v4", (0x1E000902,), "f32 f32 -> f32", [
        (NAN, 1.0, 1.0), (-0.0, 0.0, -0.0), (0.0, -0.0, -0.0), (INF, 5.0, 5.0)]),
    ("v_add_f32_e64 v0, -v2, |v4|", (0xD5030200, 0x20020902), "f32 f32 -> f32", [
        (1.0, -2.0, 1.0), (-0.0, -0.0, 0.0), (INF, -INF, NAN)]),
    ("v_mul_f32_e64 v0, v2, v4 clamp", (0xD5088000, 0x00020902), "f32 f32 -> f32", [
        (0.5, 3.0, 1.0), (-2.0, 1.0, 0.0), (NAN, 1.0, 0.0), (0.25, 2.0, 0.5)]),
    ("v_mul_f32_e64 v0, v2, v4 mul:2", (0xD5080000, 0x08020902), "f32 f32 -> f32", [
        (3.0, 0.5, 3.0), (MAX32, 1.0, INF)]),
    ("v_mul_f32_e64 v0, v2, v4 div:2", (0xD5080000, 0x18020902), "f32 f32 -> f32", [(3.0, 1.0, 1.5), (DEN, 1.0, 0.0)]),
    ("v_add_f32_e32 v0, 0.5, v4", (0x060008F0,), "x f32 -> f32", [(0, 1.0, 1.5)]),
    ("v_add_f32_e32 v0, 0x40490fdb, v4", (0x060008FF, 0x40490FDB), "x f32 -> f32", [(0, 0.0, N.bits_f32(0x40490FDB))]),
    ("v_fmaak_f32 v0, v2, v4, 0x40400000", (0x5A000902, 0x40400000), "f32 f32 -> f32", [(2.0, 5.0, 13.0)]),
    ("v_fmamk_f32 v0, v2, 0x40400000, v4", (0x58000902, 0x40400000), "f32 f32 -> f32", [(2.0, 5.0, 11.0)]),
    ("v_add_f64 v[0:1], v[2:3], v[4:5]", (0xD7270000, 0x00020902), "f64 f64 -> f64", [
        (0.1, 0.2, 0.30000000000000004), (INF, -INF, NAN), (-0.0, -0.0, -0.0), (5e-324, 5e-324, 1e-323)]),
    ("v_add_f64 v[0:1], 2.0, v[4:5]", (0xD7270000, 0x000208F4), "x f64 -> f64", [(0, 0.5, 2.5)]),
    ("v_mul_f64 v[0:1], v[2:3], v[4:5]", (0xD7280000, 0x00020902), "f64 f64 -> f64", [
        (1e308, 10.0, INF), (-0.0, 3.0, -0.0), (1e-200, 1e-200, 0.0)]),
    ("v_fma_f64 v[0:1], v[2:3], v[4:5], v[6:7]", (0xD6140000, 0x041A0902), "f64 f64 f64 -> f64", [
        (1 + 2.0**-30, 1 - 2.0**-30, -1.0, -(2.0**-60)), (0.1, 10.0, -1.0, 5.551115123125783e-17),
        (INF, 0.0, 1.0, NAN)]),
    ("v_add_f16_e32 v0, v2, v4", (0x64000902,), "f16 f16 -> f16", [
        (1.0, 2.0, 3.0), (65504.0, 32.0, INF), (2.0**-24, 2.0**-24, 2.0**-23), (-0.0, -0.0, -0.0), (NAN, 1.0, NAN)]),
    ("v_mul_f16_e32 v0, v2, v132", (0x6A010902,), "f16 f16h -> f16", [(3.0, 0.5, 1.5)]),
    ("v_fma_f16 v0, v2, v4, v6", (0xD6480000, 0x041A0902), "f16 f16 f16 -> f16", [
        (1 + 2.0**-10, 1 - 2.0**-10, -1.0, -(2.0**-20)), (2.0, 3.0, 1.0, 7.0)]),
    # conversions: round to nearest even, saturate to the integer range, NaN gives 0
    ("v_cvt_f32_f16_e32 v0, v2", (0x7E001702,), "f16 -> f32", [(65504.0, 65504.0), (2.0**-24, 2.0**-24), (NAN, NAN)]),
    ("v_cvt_f16_f32_e32 v0, v2", (0x7E001502,), "f32 -> f16", [
        (65520.0, INF), (65519.0, 65504.0), (2.0**-25, 0.0), (3 * 2.0**-26, 2.0**-24), (1 + 2.0**-11, 1.0),
        (-0.0, -0.0), (NAN, NAN)]),
    ("v_cvt_f16_f32_e32 v128, v2", (0x7F001502,), "f32 -> f16h", [(1.5, 1.5)]),
    ("v_cvt_f32_i32_e32 v0, v2", (0x7E000B02,), "i32 -> f32", [
        (-1, -1.0), (16777217, 16777216.0), (2**31 - 1, 2.0**31)]),
    ("v_cvt_f32_u32_e32 v0, v2", (0x7E000D02,), "u32 -> f32", [(0xFFFFFFFF, 2.0**32), (16777219, 16777220.0)]),
    ("v_cvt_i32_f32_e32 v0, v2", (0x7E001102,), "f32 -> i32", [
        (-1.9, -1), (1.9, 1), (3e9, 2**31 - 1), (-3e9, -(2**31)), (NAN, 0), (INF, 2**31 - 1), (-0.0, 0)]),
    ("v_cvt_u32_f32_e32 v0, v2", (0x7E000F02,), "f32 -> u32", [
        (-1.0, 0), (-0.5, 0), (5e9, 0xFFFFFFFF), (NAN, 0), (4294967040.0, 4294967040)]),
    ("v_cvt_f64_i32_e32 v[0:1], v2", (0x7E000902,), "i32 -> f64", [(-(2**31), -(2.0**31))]),
    ("v_cvt_f64_u32_e32 v[0:1], v2", (0x7E002D02,), "u32 -> f64", [(0xFFFFFFFF, 4294967295.0)]),
    ("v_cvt_i32_f64_e32 v0, v[2:3]", (0x7E000702,), "f64 -> i32", [
        (-2147483648.9, -(2**31)), (1e10, 2**31 - 1), (NAN, 0)]),
    ("v_cvt_u32_f64_e32 v0, v[2:3]", (0x7E002B02,), "f64 -> u32", [(4294967295.9, 0xFFFFFFFF), (-3.0, 0)]),
    ("v_cvt_f32_f64_e32 v0, v[2:3]", (0x7E001F02,), "f64 -> f32", [
        (1e39, INF), (1 + 2.0**-24, 1.0), (1 + 2.0**-24 + 2.0**-40, 1 + 2.0**-23), (1e-46, 0.0),
        (2.0**-140, 2.0**-140)]),
    ("v_cvt_f64_f32_e32 v[0:1], v2", (0x7E002102,), "f32 -> f64", [(DEN, DEN), (-INF, -INF)]),
    ("v_cvt_f32_ubyte0_e32 v0, v2", (0x7E002302,), "u32 -> f32", [(0x12345678, 120.0)]),
    # rounding to integers
    ("v_floor_f32_e32 v0, v2", (0x7E004902,), "f32 -> f32", [
        (-0.5, -1.0), (-0.0, -0.0), (2.5, 2.0), (INF, INF), (DEN, 0.0)]),
    ("v_trunc_f32_e32 v0, v2", (0x7E004302,), "f32 -> f32", [(-0.5, -0.0), (-1.5, -1.0), (NAN, NAN)]),
    ("v_ceil_f32_e32 v0, v2", (0x7E004502,), "f32 -> f32", [(-0.5, -0.0), (0.1, 1.0), (DEN, 1.0)]),
    ("v_rndne_f32_e32 v0, v2", (0x7E004702,), "f32 -> f32", [(2.5, 2.0), (3.5, 4.0), (-0.5, -0.0), (0.5, 0.0)]),
    ("v_fract_f32_e32 v0, v2", (0x7E004102,), "f32 -> f32", [(1.25, 0.25), (-0.25, 0.75), (INF, NAN), (-0.0, 0.0)]),
    ("v_floor_f64_e32 v[0:1], v[2:3]", (0x7E003502,), "f64 -> f64", [(-1e-300, -1.0), (-2.5, -3.0), (1e300, 1e300)]),
    ("v_trunc_f64_e32 v[0:1], v[2:3]", (0x7E002F02,), "f64 -> f64", [(-0.9, -0.0), (1e300, 1e300)]),
    ("v_ldexp_f32 v0, v2, v4", (0xD71C0000, 0x00020902), "f32 i32 -> f32", [
        (1.0, 200, INF), (1.0, -150, 0.0), (1.5, -149, 2 * DEN), (3.0, -1, 1.5), (INF, -5000, INF), (-0.0, 9, -0.0)]),
    ("v_ldexp_f64 v[0:1], v[2:3], v4", (0xD72B0000, 0x00020902), "f64 i32 -> f64", [
        (1.0, -1074, 5e-324), (1.0, 1024, INF)]),
    ("v_frexp_mant_f32_e32 v0, v2", (0x7E008102,), "f32 -> f32", [(8.0, 0.5), (-3.0, -0.75), (DEN, 0.5), (INF, INF)]),
    ("v_frexp_exp_i32_f32_e32 v0, v2", (0x7E007F02,), "f32 -> i32", [(8.0, 4), (DEN, -148), (0.0, 0), (INF, 0)]),
    # transcendentals: hardware is within 1 ulp; the special values are exact
    ("v_exp_f32_e32 v0, v2", (0x7E004B02,), "f32 -> f32", [
        (0.0, 1.0), (-INF, 0.0), (INF, INF), (1.0, 2.0), (128.0, INF), (-0.5, Approx(2**-0.5)), (NAN, NAN)]),
    ("v_log_f32_e32 v0, v2", (0x7E004F02,), "f32 -> f32", [
        (1.0, 0.0), (0.0, -INF), (-0.0, -INF), (-1.0, NAN), (INF, INF), (8.0, 3.0), (10.0, Approx(math.log2(10)))]),
    ("v_rcp_f32_e32 v0, v2", (0x7E005502,), "f32 -> f32", [(0.0, INF), (-0.0, -INF), (INF, 0.0), (3.0, Approx(1 / 3))]),
    ("v_sqrt_f32_e32 v0, v2", (0x7E006702,), "f32 -> f32", [
        (-0.0, -0.0), (-1.0, NAN), (4.0, 2.0), (INF, INF), (2.0, Approx(2**0.5))]),
    ("v_rsq_f32_e32 v0, v2", (0x7E005D02,), "f32 -> f32", [(0.0, INF), (4.0, 0.5), (INF, 0.0), (-1.0, NAN)]),
    ("v_sin_f32_e32 v0, v2", (0x7E006B02,), "f32 -> f32", [
        (0.25, Approx(1.0)), (0.0, 0.0), (INF, NAN), (-0.25, Approx(-1.0))]),
    ("v_rcp_f64_e32 v[0:1], v[2:3]", (0x7E005F02,), "f64 -> f64", [(0.0, INF), (4.0, 0.25)]),
    ("v_sqrt_f64_e32 v[0:1], v[2:3]", (0x7E006902,), "f64 -> f64", [(16.0, 4.0), (-1.0, NAN)]),
    # division helpers (the quotient estimate s0, the denominator s1, the numerator s2)
    ("v_div_fixup_f32 v0, v2, v4, v6", (0xD6270000, 0x041A0902), "f32 f32 f32 -> f32", [
        (2.0, -1.0, 2.0, -2.0), (1.0, 0.0, 1.0, INF), (1.0, 0.0, -1.0, -INF), (1.0, 0.0, 0.0, NAN),
        (1.0, INF, INF, NAN), (1.0, INF, 1.0, 0.0), (1.0, -2.0, 0.0, -0.0), (1.0, NAN, 1.0, NAN),
        (1.0, 1.0, -INF, -INF)]),
    ("v_div_scale_f32 v0, vcc_lo, v2, v4, v6", (0xD6FC6A00, 0x041A0902), "f32 f32 f32 -> f32 vcc", [
        (1.0, 2.0, 1.0, 1.0, False), (3.0, 0.0, 1.0, NAN, False), (2.0**-30, 2.0**-30, 2.0**100, 2.0**34, True),
        (DEN, DEN, 1.0, DEN * 2.0**64, True), (DEN, DEN, 2.0**-40, DEN * 2.0**64, False),
        (2.0**-140, 3.0, 2.0**-140, 2.0**-76, True), (1.0, 2.0**-20, 2.0**-110, 2.0**64, False),
        (2.0**127, 2.0**127, 1.0, 2.0**127, True)]),
    ("v_div_fmas_f32 v0, v2, v4, v6", (0xD6370000, 0x041A0902), "f32 f32 f32 vcc -> f32", [
        (2.0, 3.0, 1.0, False, 7.0), (2.0, 3.0, 1.0, True, 7.0 * 2.0**-64), (2.0, 3.0, 2.0**100, True, 2.0**164)]),
    # compares (VCC bit per lane; inactive lanes read 0)
    ("v_cmp_lt_f32_e32 vcc_lo, v2, v4", (0x7C220902,), "f32 f32 -> vcc", [
        (1.0, 2.0, True), (NAN, 2.0, False), (-0.0, 0.0, False), (-INF, INF, True)]),
    ("v_cmp_nge_f32_e32 vcc_lo, v2, v4", (0x7C320902,), "f32 f32 -> vcc", [
        (1.0, 2.0, True), (NAN, 1.0, True), (2.0, 2.0, False)]),
    ("v_cmp_u_f32_e32 vcc_lo, v2, v4", (0x7C300902,), "f32 f32 -> vcc", [
        (NAN, 1.0, True), (1.0, 1.0, False), (INF, -INF, False)]),
    ("v_cmp_neq_f32_e32 vcc_lo, v2, v4", (0x7C3A0902,), "f32 f32 -> vcc", [(NAN, NAN, True), (0.0, -0.0, False)]),
    # class bits: 0 sNaN, 1 qNaN, 2 -inf, 3 -normal, 4 -denormal, 5 -0, 6 +0, 7 +denormal, 8 +normal, 9 +inf
    ("v_cmp_class_f32_e32 vcc_lo, v2, v4", (0x7CFC0902,), "f32 u32 -> vcc", [
        (NAN, 1 << 1, True), (-INF, 1 << 2, True), (-1.0, 1 << 3, True), (-DEN, 1 << 4, True), (-0.0, 1 << 5, True),
        (0.0, 1 << 6, True), (DEN, 1 << 7, True), (1.0, 1 << 8, True), (INF, 1 << 9, True), (1.0, 0x2FF, False)]),
    ("v_cmp_class_f64_e32 vcc_lo, v[2:3], v4", (0x7CFE0902,), "f64 u32 -> vcc", [
        (5e-324, 1 << 7, True), (-0.0, 1 << 6, False)]),
    ("v_cmp_lt_f64_e32 vcc_lo, v[2:3], v[4:5]", (0x7C420902,), "f64 f64 -> vcc", [
        (1.0, 1.0 + 2.0**-52, True), (NAN, 1.0, False)]),
    ("v_cmp_gt_i64_e32 vcc_lo, v[2:3], v[4:5]", (0x7CA80902,), "i64 i64 -> vcc", [
        (-1, -(2**63), True), (2**32, 2**32 + 1, False)]),
    ("v_cmp_gt_u64_e32 vcc_lo, v[2:3], v[4:5]", (0x7CB80902,), "u64 u64 -> vcc", [
        (2**64 - 1, 2**63, True), (0, 1, False)]),
    ("v_cmp_lt_i32_e64 s10, v2, v4", (0xD441000A, 0x00020902), "i32 i32 -> s10", [
        (-1, 0, True), (2**31 - 1, -(2**31), False)]),
    ("v_cmp_ne_u16_e32 vcc_lo, v2, v4", (0x7C7A0902,), "u16 u16 -> vcc", [(1, 1, False), (0xFFFF, 0x7FFF, True)]),
    ("v_cmpx_gt_i32_e32 v2, v4", (0x7D880902,), "i32 i32 -> exec", [(1, 0, True), (-5, 3, False), (0, 0, False)]),
    # selects (mask from VCC or an SGPR; VOP3 takes float-style sign modifiers)
    ("v_cndmask_b32_e32 v0, v2, v4, vcc_lo", (0x02000902,), "u32 u32 vcc -> u32", [(1, 2, False, 1), (1, 2, True, 2)]),
    ("v_cndmask_b32_e64 v0, v2, -v4, s10", (0xD5010000, 0x402A0902), "u32 u32 s10 -> u32", [
        (1, 0x3F800000, True, 0xBF800000), (1, 2, False, 1)]),
    ("v_cndmask_b16 v0, v2, v4, s10", (0xD65D0000, 0x002A0902), "u16 u16 s10 -> u16", [
        (7, 9, True, 9), (7, 9, False, 7)]),
    # integer add/sub with carries: the carry out is per lane; the carry in (VCC) too
    ("v_add_co_u32 v0, vcc_lo, v2, v4", (0xD7006A00, 0x00020902), "u32 u32 -> u32 vcc", [
        (0xFFFFFFFF, 1, 0, True), (5, 6, 11, False), (0x80000000, 0x80000000, 0, True)]),
    ("v_add_co_ci_u32_e32 v0, vcc_lo, v2, v4, vcc_lo", (0x40000902,), "u32 u32 vcc -> u32 vcc", [
        (0xFFFFFFFF, 0, True, 0, True), (1, 2, True, 4, False), (0xFFFFFFFF, 0xFFFFFFFF, True, 0xFFFFFFFF, True)]),
    ("v_sub_co_u32 v0, vcc_lo, v2, v4", (0xD7016A00, 0x00020902), "u32 u32 -> u32 vcc", [
        (0, 1, 0xFFFFFFFF, True), (3, 3, 0, False)]),
    ("v_subrev_co_ci_u32_e32 v0, vcc_lo, v2, v4, vcc_lo", (0x44000902,), "u32 u32 vcc -> u32 vcc", [
        (1, 1, True, 0xFFFFFFFF, True), (1, 5, True, 3, False)]),
    ("v_add_nc_u32_e32 v0, v2, v4", (0x4A000902,), "u32 u32 -> u32", [(0xFFFFFFFF, 2, 1)]),
    ("v_sub_nc_u32_e32 v0, v2, v4", (0x4C000902,), "u32 u32 -> u32", [(0, 1, 0xFFFFFFFF)]),
    ("v_add3_u32 v0, v2, v4, v6", (0xD6550000, 0x041A0902), "u32 u32 u32 -> u32", [(0xFFFFFFFF, 0xFFFFFFFF, 3, 1)]),
    ("v_mad_u64_u32 v[0:1], null, v2, v4, v[6:7]", (0xD6FE7C00, 0x041A0902), "u32 u32 u64 -> u64", [
        (0xFFFFFFFF, 0xFFFFFFFF, 2**64 - 1, (0xFFFFFFFF**2 + 2**64 - 1) % 2**64), (3, 4, 5, 17)]),
    ("v_mad_i64_i32 v[0:1], null, v2, v4, v[6:7]", (0xD6FF7C00, 0x041A0902), "i32 i32 i64 -> i64", [
        (-1, 5, 3, -2), (-(2**31), -(2**31), 0, 2**62)]),
    ("v_mul_lo_u32 v0, v2, v4", (0xD72C0000, 0x00020902), "u32 u32 -> u32", [(0x10001, 0x10001, 0x20001)]),
    ("v_mul_hi_u32 v0, v2, v4", (0xD72D0000, 0x00020902), "u32 u32 -> u32", [(0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFE)]),
    # a 32-bit literal with bit 31 set in a 64-bit integer operand: sign-extended where the operand is signed
    # (v_cmp_*_i64, v_mad_i64_i32's addend, v_ashrrev_i64's value: -2^31), zero-extended elsewhere (+2^31)
    ("v_cmp_gt_i64_e32 vcc_lo, 0x80000000, v[4:5]", (0x7CA808FF, 0x80000000), "x i64 -> vcc", [
        (0, -(2**31) - 1, True), (0, 2**31 - 1, False), (0, -(2**31), False)]),
    ("v_cmp_gt_u64_e32 vcc_lo, 0x80000000, v[4:5]", (0x7CB808FF, 0x80000000), "x u64 -> vcc", [
        (0, 2**31 - 1, True), (0, 2**31, False)]),
    ("v_mad_i64_i32 v[0:1], null, v2, v4, 0x80000000", (0xD6FF7C00, 0x03FE0902, 0x80000000), "i32 i32 x -> i64", [
        (1, 1, 0, 1 - 2**31), (3, -2, 0, -6 - 2**31)]),
    ("v_mad_u64_u32 v[0:1], null, v2, v4, 0x80000000", (0xD6FE7C00, 0x03FE0902, 0x80000000), "u32 u32 x -> u64", [
        (1, 1, 0, 2**31 + 1)]),
    ("v_ashrrev_i64 v[0:1], v2, 0x80000000", (0xD73E0000, 0x0001FF02, 0x80000000), "u32 x -> i64", [
        (4, 0, -(2**27)), (0, 0, -(2**31)), (40, 0, -1)]),
    ("v_lshrrev_b64 v[0:1], v2, 0x80000000", (0xD73D0000, 0x0001FF02, 0x80000000), "u32 x -> u64", [
        (4, 0, 2**27), (0, 0, 2**31)]),
    ("v_mul_i32_i24_e32 v0, v2, v4", (0x12000902,), "u32 u32 -> i32", [(0xFF800000, 2, -(2**24)), (0x01000003, 5, 15)]),
    ("v_mul_u32_u24_e32 v0, v2, v4", (0x16000902,), "u32 u32 -> u32", [
        (0xFF000003, 0x01000005, 15), (0xFFFFFF, 0xFFFFFF, 0xFFFFFE000001 & FULL)]),
    ("v_mad_u32_u24 v0, v2, v4, v6", (0xD60B0000, 0x041A0902), "u32 u32 u32 -> u32", [(0x1000002, 3, 1, 7)]),
    ("v_max_i32_e32 v0, v2, v4", (0x24000902,), "i32 i32 -> i32", [(-1, 1, 1), (-(2**31), -5, -5)]),
    ("v_min_u32_e32 v0, v2, v4", (0x26000902,), "u32 u32 -> u32", [(0xFFFFFFFF, 1, 1)]),
    ("v_max_i16 v0, v2, v4", (0xD70A0000, 0x00020902), "i16 i16 -> i16", [(-1, 1, 1), (-32768, -5, -5)]),
    ("v_min3_i32 v0, v2, v4, v6", (0xD61A0000, 0x041A0902), "i32 i32 i32 -> i32", [(3, -7, 2, -7)]),
    ("v_max3_i32 v0, v2, v4, v6", (0xD61D0000, 0x041A0902), "i32 i32 i32 -> i32", [(3, -7, 2, 3)]),
    ("v_med3_f32 v0, v2, v4, v6", (0xD61F0000, 0x041A0902), "f32 f32 f32 -> f32", [
        (3.0, -7.0, 2.0, 2.0), (NAN, 1.0, 2.0, 1.0)]),
    # shifts use the low 5 (6) bits of the shift amount
    ("v_lshlrev_b32_e32 v0, v2, v4", (0x30000902,), "u32 u32 -> u32", [(33, 1, 2), (31, 3, 0x80000000)]),
    ("v_lshrrev_b32_e32 v0, v2, v4", (0x32000902,), "u32 u32 -> u32", [(32, 7, 7), (4, 0x80000000, 0x08000000)]),
    ("v_ashrrev_i32_e32 v0, v2, v4", (0x34000902,), "u32 i32 -> i32", [(31, -(2**31), -1), (36, -64, -4)]),
    ("v_lshlrev_b64 v[0:1], v2, v[4:5]", (0xD73C0000, 0x00020902), "u32 u64 -> u64", [(65, 1, 2), (63, 3, 2**63)]),
    ("v_ashrrev_i64 v[0:1], v2, v[4:5]", (0xD73E0000, 0x00020902), "u32 i64 -> i64", [
        (63, -(2**63), -1), (4, -256, -16)]),
    ("v_lshl_add_u32 v0, v2, v4, v6", (0xD6460000, 0x041A0902), "u32 u32 u32 -> u32", [
        (1, 33, 5, 7), (0x80000000, 1, 1, 1)]),
    ("v_lshl_or_b32 v0, v2, v4, v6", (0xD6560000, 0x041A0902), "u32 u32 u32 -> u32", [(1, 4, 1, 17)]),
    ("v_and_or_b32 v0, v2, v4, v6", (0xD6570000, 0x041A0902), "u32 u32 u32 -> u32", [(0xF0F0, 0xFF00, 1, 0xF001)]),
    ("v_alignbit_b32 v0, v2, v4, v6", (0xD6160000, 0x041A0902), "u32 u32 u32 -> u32", [
        (0x12345678, 0x9ABCDEF0, 8, 0x789ABCDE), (1, 2, 32, 2)]),
    ("v_bfe_u32 v0, v2, v4, v6", (0xD6100000, 0x041A0902), "u32 u32 u32 -> u32", [
        (0xABCD1234, 8, 8, 0x12), (0xFFFFFFFF, 4, 0, 0), (0x80000000, 31, 33, 1)]),
    ("v_bfe_i32 v0, v2, v4, v6", (0xD6110000, 0x041A0902), "u32 u32 u32 -> i32", [
        (0x00008000, 12, 4, -8), (0x7000, 12, 4, 7)]),
    ("v_bfrev_b32_e32 v0, v2", (0x7E007102,), "u32 -> u32", [(1, 0x80000000), (0x0000FFFF, 0xFFFF0000)]),
    ("v_cls_i32_e32 v0, v2", (0x7E007702,), "u32 -> i32", [
        (0, -1), (0xFFFFFFFF, -1), (1, 31), (0x40000000, 1), (0xC0000000, 2)]),
    ("v_xor_b16 v0, v2, v4", (0xD7640000, 0x00020902), "u16 u16 -> u16", [(0xF0F0, 0xFFFF, 0x0F0F)]),
    ("v_add_nc_u16 v0, v2, v4", (0xD7030000, 0x00020902), "u16 u16 -> u16", [(0xFFFF, 2, 1)]),
    # cross-lane and lane-index ops
    ("v_mbcnt_lo_u32_b32 v0, v2, v4", (0xD71F0000, 0x00020902), "u32 u32 -> u32", [
        (0xFFFFFFFF, 0, 0), (0xFFFFFFFF, 10, 11), (0xFFFFFFFF, 0, 2), (0x2, 0, 1)]),
    # packed and mixed 16-bit math
    ("v_pk_add_f16 v0, v2, v4", (0xCC0F4000, 0x18020902), "pk pk -> pk", [((1.0, 2.0), (0.5, -2.0), (1.5, 0.0))]),
    ("v_pk_mul_f16 v0, v2, v4 op_sel:[1,0] op_sel_hi:[0,1]", (0xCC104800, 0x10020902), "pk pk -> pk", [
        ((1.0, 2.0), (3.0, 5.0), (6.0, 5.0))]),
    ("v_fma_mix_f32 v0, v2, v4, v6 op_sel_hi:[1,1,0]", (0xCC200000, 0x1C1A0902), "f16 f16 f32 -> f32", [
        (1.5, 2.0, 0.25, 3.25)]),
    ("v_dot2_f32_f16 v0, v2, v4, v6", (0xCC134000, 0x1C1A0902), "pk pk f32 -> f32", [
        ((1.0, 2.0), (3.0, 4.0), 0.5, 11.5)]),
    # VOPD: both halves read their sources before either writes (v3 gets the old v0)
    ("v_dual_mov_b32 v0, v2 :: v_dual_mov_b32 v3, v0", (0xCA100102, 0x00020100), "u32 -> u32 v3", [(7, 7, V0_OLD)]),
]  # fmt: skip

# (text, words, "sources [scc] -> result [scc]", rows); sources s2, s4 (pairs s[2:3], s[4:5]), result s0 (s[0:1])
SALU_CASES: list[tuple[str, tuple[int, ...], str, list[tuple[Any, ...]]]] = [
    ("s_add_u32 s0, s2, s4", (0x80000402,), "u32 u32 -> u32 scc", [(0xFFFFFFFF, 1, 0, 1), (2, 3, 5, 0)]),
    ("s_addc_u32 s0, s2, s4", (0x82000402,), "u32 u32 scc -> u32 scc", [(0xFFFFFFFF, 0, 1, 0, 1), (2, 3, 1, 6, 0)]),
    ("s_sub_u32 s0, s2, s4", (0x80800402,), "u32 u32 -> u32 scc", [(0, 1, 0xFFFFFFFF, 1), (5, 5, 0, 0)]),
    ("s_subb_u32 s0, s2, s4", (0x82800402,), "u32 u32 scc -> u32 scc", [(5, 5, 1, 0xFFFFFFFF, 1), (5, 4, 1, 0, 0)]),
    ("s_add_i32 s0, s2, s4", (0x81000402,), "i32 i32 -> i32 scc", [(2**31 - 1, 1, -(2**31), 1), (-1, -1, -2, 0)]),
    ("s_sub_i32 s0, s2, s4", (0x81800402,), "i32 i32 -> i32 scc", [(-(2**31), 1, 2**31 - 1, 1), (0, 1, -1, 0)]),
    ("s_cselect_b32 s0, s2, s4", (0x98000402,), "u32 u32 scc -> u32 scc", [(1, 2, 1, 1, 1), (1, 2, 0, 2, 0)]),
    ("s_cselect_b64 s[0:1], s[2:3], s[4:5]", (0x98800402,), "u64 u64 scc -> u64", [(2**40, 3, 1, 2**40)]),
    ("s_and_b32 s0, s2, s4", (0x8B000402,), "u32 u32 -> u32 scc", [(0xF0, 0x0F, 0, 0), (0xF0, 0x30, 0x30, 1)]),
    ("s_and_not1_b32 s0, s2, s4", (0x91000402,), "u32 u32 -> u32 scc", [(0xFF, 0x0F, 0xF0, 1)]),
    ("s_xor_b64 s[0:1], s[2:3], s[4:5]", (0x8D800402,), "u64 u64 -> u64 scc", [(2**63 | 1, 1, 2**63, 1), (5, 5, 0, 0)]),
    ("s_lshl_b32 s0, s2, s4", (0x84000402,), "u32 u32 -> u32 scc", [(1, 33, 2, 1), (0x80000000, 1, 0, 0)]),
    ("s_lshl_b64 s[0:1], s[2:3], s4", (0x84800402,), "u64 u32 -> u64 scc", [(1, 65, 2, 1), (3, 63, 2**63, 1)]),
    ("s_lshr_b32 s0, s2, s4", (0x85000402,), "u32 u32 -> u32 scc", [(0x80000000, 63, 1, 1)]),
    ("s_ashr_i32 s0, s2, s4", (0x86000402,), "i32 u32 -> i32 scc", [(-(2**31), 31, -1, 1), (8, 4, 0, 0)]),
    ("s_bfe_u32 s0, s2, s4", (0x93000402,), "u32 u32 -> u32 scc", [
        (0xABCD1234, 8 | 8 << 16, 0x12, 1), (0xFF, 8 | 4 << 16, 0, 0)]),
    ("s_bfe_i32 s0, s2, s4", (0x93800402,), "u32 u32 -> i32 scc", [(0x8000, 12 | 4 << 16, -8, 1)]),
    ("s_brev_b32 s0, s2", (0xBE800402,), "u32 -> u32", [(1, 0x80000000)]),
    ("s_cls_i32 s0, s2", (0xBE800C02,), "u32 -> i32", [(0, -1), (1, 31), (0xFFFF0000, 16)]),
    ("s_ctz_i32_b32 s0, s2", (0xBE800802,), "u32 -> i32", [(0, -1), (8, 3)]),
    ("s_bcnt1_i32_b32 s0, s2", (0xBE801802,), "u32 -> u32 scc", [(0xF0F0, 8, 1), (0, 0, 0)]),
    ("s_sext_i32_i16 s0, s2", (0xBE800F02,), "u32 -> i32", [(0x12348000, -32768)]),
    ("s_abs_i32 s0, s2", (0xBE801502,), "i32 -> i32 scc", [(-5, 5, 1), (-(2**31), -(2**31), 1), (0, 0, 0)]),
    ("s_min_i32 s0, s2, s4", (0x89000402,), "i32 i32 -> i32 scc", [(-1, 1, -1, 1), (3, 2, 2, 0)]),
    ("s_max_u32 s0, s2, s4", (0x8A800402,), "u32 u32 -> u32 scc", [(0xFFFFFFFF, 1, 0xFFFFFFFF, 1)]),
    ("s_mul_i32 s0, s2, s4", (0x96000402,), "i32 i32 -> i32", [(-3, 0x40000001, 0x3FFFFFFD)]),
    ("s_mul_hi_u32 s0, s2, s4", (0x96800402,), "u32 u32 -> u32", [(0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFE)]),
    ("s_mul_hi_i32 s0, s2, s4", (0x97000402,), "i32 i32 -> i32", [(-1, 1, -1), (-(2**31), -(2**31), 2**30)]),
    ("s_lshl2_add_u32 s0, s2, s4", (0x87800402,), "u32 u32 -> u32 scc", [(0x40000000, 1, 1, 1), (1, 1, 5, 0)]),
    ("s_cmp_lt_i32 s2, s4", (0xBF040402,), "i32 i32 -> scc", [(-1, 0, 1), (0, -1, 0)]),
    ("s_cmp_lg_u64 s[2:3], s[4:5]", (0xBF110402,), "u64 u64 -> scc", [(2**32, 0, 1), (7, 7, 0)]),
    ("s_cmpk_lg_i32 s2, 0xfff0", (0xB202FFF0,), "i32 -> scc", [(-16, 0), (0xFFF0, 1)]),
    ("s_addk_i32 s0, 0xfffe", (0xB780FFFE,), "i32 -> i32 scc", [(1, -1, 0), (-(2**31), 2**31 - 2, 1)]),
    # literals of 64-bit operands: sign-extended for the signed ones (s_ashr_i64, s_cls_i32_i64), else zero-extended
    ("s_ashr_i64 s[0:1], 0x80000000, s4", (0x868004FF, 0x80000000), "x u32 -> i64 scc", [
        (0, 4, -(2**27), 1), (0, 0, -(2**31), 1)]),
    ("s_lshr_b64 s[0:1], 0x80000000, s4", (0x858004FF, 0x80000000), "x u32 -> u64 scc", [(0, 4, 2**27, 1)]),
    ("s_cls_i32_i64 s0, 0x80000000", (0xBE800DFF, 0x80000000), "x -> i32", [(0, 33)]),
]  # fmt: skip


def _f(width: int, x: float) -> int:
    return {16: N.f16_bits, 32: N.f32_bits, 64: N.f64_bits}[width](x)


def _width(ty: str) -> int:
    return 64 if ty.endswith("64") else 16 if ty.endswith(("16", "16h")) else 32


def _bits(ty: str, value: Any) -> int:
    """The raw bits of an operand value of type ty."""
    w = _width(ty)
    if ty == "pk":
        return _f(16, value[0]) | _f(16, value[1]) << 16
    if ty[0] == "f":
        return _f(w, value)
    return int(value) & ((1 << w) - 1)


def _check_float(ty: str, got: int, want: Any, where: str) -> None:
    w = _width(ty)
    value = {16: N.bits_f16, 32: N.bits_f32, 64: N.bits_f64}[w](got)
    if isinstance(want, Approx):
        ulps = abs(N.sext(got, w) - N.sext(_f(w, want.value), w))
        assert ulps <= 1, f"{where}: got {value!r}, expected {want} (within 1 ulp)"
    elif want != want:
        assert value != value, f"{where}: got {value!r}, expected NaN"
    else:
        assert got == _f(w, want), f"{where}: got {value!r} (0x{got:x}), expected {want!r} (0x{_f(w, want):x})"


def _run_valu(text: str, words: tuple[int, ...], sig: str, rows: list[tuple[Any, ...]]) -> None:
    ins, outs = (part.split() for part in sig.split("->"))
    n = len(rows)
    assert n <= 31, "lane 31 is the inactive lane"
    vgprs: dict[int, list[int]] = {0: [V0_OLD] * 32, 1: [V1_OLD] * 32, 3: [V0_OLD] * 32}
    sgprs: dict[int, int] = {}
    masks: dict[str, int] = {}
    for k, ty in enumerate(ins):
        if ty in ("vcc", "s10"):
            masks[ty] = sum(1 << i for i, r in enumerate(rows) if r[k])
            continue
        if ty in ("x", "acc"):
            if ty == "acc":  # v_fmac reads its destination
                vgprs[0] = [_f(32, r[k]) for r in rows] + [V0_OLD] * (32 - n)
            continue
        reg = 2 + 2 * k
        bits = [_bits(ty, r[k]) for r in rows] + [0] * (32 - n)
        if ty.endswith("16"):
            bits = [b | HI_JUNK << 16 for b in bits]
        elif ty.endswith("16h"):
            bits = [b << 16 | HI_JUNK for b in bits]
        vgprs[reg] = [b & FULL for b in bits]
        if _width(ty) == 64:
            vgprs[reg + 1] = [b >> 32 for b in bits]
    if "vcc" in masks:
        sgprs[106] = masks["vcc"]
    if "s10" in masks:
        sgprs[10] = masks["s10"]
    active = (1 << n) - 1
    w = run_code(struct.pack(f"<{len(words) + 1}I", *words, ENDPGM), vgprs=vgprs, sgprs=sgprs, exec_mask=active)
    for j, ty in enumerate(outs):
        col = len(ins) + j
        for i, r in enumerate(rows):
            where = f"{text} lane {i} {r}"
            want = r[col]
            if ty in ("vcc", "s10", "exec"):
                reg = {"vcc": 106, "s10": 10, "exec": 126}[ty]
                assert (w.s[reg] >> i & 1) == bool(want), f"{where}: {ty} bit {w.s[reg] >> i & 1}"
                continue
            if ty == "v3":
                assert w.v[3][i] == want, f"{where}: v3 = 0x{w.v[3][i]:x}"
                continue
            lo, hi = w.v[0][i], w.v[1][i]
            if ty in ("f16", "u16", "i16"):
                assert lo >> 16 == V0_OLD >> 16, f"{where}: the high half of v0 changed (0x{lo:08x})"
                got = lo & 0xFFFF
            elif ty == "f16h":
                assert lo & 0xFFFF == V0_OLD & 0xFFFF, f"{where}: the low half of v0 changed (0x{lo:08x})"
                got = lo >> 16
            elif ty == "pk":
                assert lo == _bits("pk", want), f"{where}: got 0x{lo:08x}"
                continue
            else:
                got = lo | hi << 32 if _width(ty) == 64 else lo
            if ty[0] == "f":
                _check_float(ty, got, want, where)
            else:
                assert got == _bits(ty, want), f"{where}: got 0x{got:x}, expected 0x{_bits(ty, want):x}"
        if ty in ("vcc", "s10"):
            assert not w.s[{"vcc": 106, "s10": 10}[ty]] >> 31 & 1, f"{text}: the inactive lane's {ty} bit is set"
    assert w.v[0][31] == V0_OLD and w.v[1][31] == V1_OLD, f"{text}: the inactive lane 31 changed"


def _run_salu(text: str, words: tuple[int, ...], sig: str, rows: list[tuple[Any, ...]]) -> None:
    ins, outs = (part.split() for part in sig.split("->"))
    for r in rows:
        sgprs, scc = {0: 0x5555AAAA, 1: 0x5555AAAA}, 0
        for k, ty in enumerate(ins):
            if ty == "scc":
                scc = int(r[k])
                continue
            reg = 2 + 2 * k
            bits = _bits(ty, r[k])
            if text.startswith("s_addk"):  # SOPK: the register is also the destination
                reg = 0
            sgprs[reg], sgprs[reg + 1] = bits & FULL, bits >> 32
        w = run_code(struct.pack(f"<{len(words) + 1}I", *words, ENDPGM), sgprs=sgprs, scc=scc)
        for j, ty in enumerate(outs):
            want, where = r[len(ins) + j], f"{text} {r}"
            if ty == "scc":
                assert w.scc == want, f"{where}: SCC {w.scc}"
            else:
                got = w.s[0] | w.s[1] << 32 if _width(ty) == 64 else w.s[0]
                assert got == _bits(ty, want), f"{where}: got 0x{got:x}, expected 0x{_bits(ty, want):x}"


@pytest.mark.parametrize("case", VALU_CASES, ids=[c[0] for c in VALU_CASES])
def test_valu_edge_cases(case: tuple[str, tuple[int, ...], str, list[tuple[Any, ...]]]) -> None:
    _run_valu(*case)


@pytest.mark.parametrize("case", SALU_CASES, ids=[c[0] for c in SALU_CASES])
def test_salu_edge_cases(case: tuple[str, tuple[int, ...], str, list[tuple[Any, ...]]]) -> None:
    _run_salu(*case)


def test_exec_saveexec_and_readlane_writelane() -> None:
    # s_and_saveexec_b32 s0, s2: s0 = old EXEC, EXEC &= s2, SCC = EXEC != 0
    w = run_code(struct.pack("<2I", 0xBE802002, ENDPGM), sgprs={2: 0x0F0F}, exec_mask=0x00FF)
    assert (w.s[0], w.s[126], w.scc) == (0x00FF, 0x000F, 1)
    w = run_code(struct.pack("<2I", 0xBE802002, ENDPGM), sgprs={2: 0xF000}, exec_mask=0x00FF, scc=1)
    assert (w.s[126], w.scc) == (0, 0)
    lanes = list(range(100, 132))
    # v_readlane_b32 s10, v2, s4 reads lane s4 & 31; v_readfirstlane_b32 s10, v2 the first active lane
    w = run_code(struct.pack("<3I", 0xD760000A, 0x00000902, ENDPGM), vgprs={2: lanes}, sgprs={4: 37})
    assert w.s[10] == 105
    w = run_code(struct.pack("<2I", 0x7E140502, ENDPGM), vgprs={2: lanes}, exec_mask=0xF0)
    assert w.s[10] == 104
    # v_writelane_b32 v0, s2, s4 writes lane s4 whatever EXEC is
    w = run_code(struct.pack("<3I", 0xD7610000, 0x00000802, ENDPGM), vgprs={0: lanes}, sgprs={2: 7, 4: 3}, exec_mask=0)
    assert w.v[0][3] == 7 and w.v[0][2] == 102


def test_vcc_branch_and_execz() -> None:
    # s_cbranch_execz 1 skips one instruction (v_mov_b32 v0, 1.0) when EXEC is 0
    code = struct.pack("<4I", 0xBFA50001, 0x7E0002F2, ENDPGM, ENDPGM)
    assert run_code(code, vgprs={0: [5] * 32}, exec_mask=0).v[0][0] == 5
    assert run_code(code, vgprs={0: [5] * 32}).v[0][0] == 0x3F800000


def test_denormals_flush_when_the_float_mode_says_so() -> None:
    # float_mode 0 (rsrc1 bits 19:12): f32 denormals are flushed on input and output
    code = struct.pack("<2I", 0x06000902, ENDPGM)  # v_add_f32 v0, v2, v4
    regs = {2: [N.f32_bits(DEN)] * 32, 4: [N.f32_bits(DEN)] * 32}
    assert N.bits_f32(run_code(code, vgprs=regs, rsrc1=0x000F0000).v[0][0]) == 2 * DEN
    assert run_code(code, vgprs=regs, rsrc1=0x00800000).v[0][0] in (0, 0x80000000)


def _llvm_mc(texts: list[str]) -> list[tuple[int, ...]]:
    out = subprocess.run(["llvm-mc-15", "-arch=amdgcn", "-mcpu=gfx1100", "-show-encoding"], input="\n".join(texts),
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    words = []
    for line in out.splitlines():
        if "encoding:" in line:
            data = bytes(int(b, 16) for b in line.split("encoding: [")[1].rstrip("]").split(","))
            words.append(struct.unpack(f"<{len(data) // 4}I", data))
    return words


@pytest.mark.skipif(shutil.which("llvm-mc-15") is None, reason="llvm-mc-15 is not installed")
def test_stored_words_are_what_llvm_mc_15_assembles() -> None:
    cases = VALU_CASES + SALU_CASES
    words = _llvm_mc([c[0] for c in cases])
    assert len(words) == len(cases)
    for (text, stored, _, _), assembled in zip(cases, words, strict=True):
        assert stored == assembled, (
            f"{text}: stored {[hex(x) for x in stored]}, llvm-mc-15 {[hex(x) for x in assembled]}"
        )
