"""SALU semantics as tables: mnemonic -> function of the source values (and SCC) returning (result, SCC).

Sources arrive as unsigned integers of the operand's width (32 or 64 bits); a returned SCC of None leaves SCC
unchanged. SOPC compares return only the new SCC. SOPK ops take the sign-extended 16-bit immediate.
"""

from __future__ import annotations

from collections.abc import Callable

from tg.runtime.amd.sim.ops.numerics import sext

M32, M64 = 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF


def _nz(v: int) -> int:
    return int(v != 0)


def _bfe(a: int, b: int, bits: int, signed: bool) -> tuple[int, int]:
    off, width = b & (bits - 1), (b >> 16) & 0x7F
    v = (a >> off) & ((1 << width) - 1) if width else 0
    if signed and width:
        v = sext(v, width)
    v &= (1 << bits) - 1
    return v, _nz(v)


def _add_i32(a: int, b: int) -> tuple[int, int]:
    r = sext(a, 32) + sext(b, 32)
    return r & M32, int(not -(1 << 31) <= r < (1 << 31))


def _sub_i32(a: int, b: int) -> tuple[int, int]:
    r = sext(a, 32) - sext(b, 32)
    return r & M32, int(not -(1 << 31) <= r < (1 << 31))


def _lshl_add(n: int) -> Callable[[int, int, int], tuple[int, int]]:
    def f(a: int, b: int, scc: int) -> tuple[int, int]:
        r = (a << n) + b
        return r & M32, int(r > M32)

    return f


# SOP2: (a, b, scc) -> (result, scc)
SOP2 = {
    "s_add_u32": lambda a, b, c: ((a + b) & M32, int(a + b > M32)),
    "s_sub_u32": lambda a, b, c: ((a - b) & M32, int(b > a)),
    "s_add_i32": lambda a, b, c: _add_i32(a, b),
    "s_sub_i32": lambda a, b, c: _sub_i32(a, b),
    "s_addc_u32": lambda a, b, c: ((a + b + c) & M32, int(a + b + c > M32)),
    "s_subb_u32": lambda a, b, c: ((a - b - c) & M32, int(b + c > a)),
    "s_absdiff_i32": lambda a, b, c: (abs(sext(a, 32) - sext(b, 32)) & M32, _nz(abs(sext(a, 32) - sext(b, 32)) & M32)),
    "s_lshl_b32": lambda a, b, c: ((a << (b & 31)) & M32, _nz((a << (b & 31)) & M32)),
    "s_lshl_b64": lambda a, b, c: ((a << (b & 63)) & M64, _nz((a << (b & 63)) & M64)),
    "s_lshr_b32": lambda a, b, c: (a >> (b & 31), _nz(a >> (b & 31))),
    "s_lshr_b64": lambda a, b, c: (a >> (b & 63), _nz(a >> (b & 63))),
    "s_ashr_i32": lambda a, b, c: ((sext(a, 32) >> (b & 31)) & M32, _nz(sext(a, 32) >> (b & 31))),
    "s_ashr_i64": lambda a, b, c: ((sext(a, 64) >> (b & 63)) & M64, _nz(sext(a, 64) >> (b & 63))),
    "s_lshl1_add_u32": _lshl_add(1),
    "s_lshl2_add_u32": _lshl_add(2),
    "s_lshl3_add_u32": _lshl_add(3),
    "s_lshl4_add_u32": _lshl_add(4),
    "s_min_i32": lambda a, b, c: (a if sext(a, 32) < sext(b, 32) else b, int(sext(a, 32) < sext(b, 32))),
    "s_min_u32": lambda a, b, c: (min(a, b), int(a < b)),
    "s_max_i32": lambda a, b, c: (a if sext(a, 32) > sext(b, 32) else b, int(sext(a, 32) > sext(b, 32))),
    "s_max_u32": lambda a, b, c: (max(a, b), int(a > b)),
    "s_and_b32": lambda a, b, c: (a & b, _nz(a & b)),
    "s_and_b64": lambda a, b, c: (a & b, _nz(a & b)),
    "s_or_b32": lambda a, b, c: (a | b, _nz(a | b)),
    "s_or_b64": lambda a, b, c: (a | b, _nz(a | b)),
    "s_xor_b32": lambda a, b, c: (a ^ b, _nz(a ^ b)),
    "s_xor_b64": lambda a, b, c: (a ^ b, _nz(a ^ b)),
    "s_nand_b32": lambda a, b, c: (~(a & b) & M32, _nz(~(a & b) & M32)),
    "s_nand_b64": lambda a, b, c: (~(a & b) & M64, _nz(~(a & b) & M64)),
    "s_nor_b32": lambda a, b, c: (~(a | b) & M32, _nz(~(a | b) & M32)),
    "s_nor_b64": lambda a, b, c: (~(a | b) & M64, _nz(~(a | b) & M64)),
    "s_xnor_b32": lambda a, b, c: (~(a ^ b) & M32, _nz(~(a ^ b) & M32)),
    "s_xnor_b64": lambda a, b, c: (~(a ^ b) & M64, _nz(~(a ^ b) & M64)),
    "s_and_not1_b32": lambda a, b, c: (a & ~b & M32, _nz(a & ~b & M32)),
    "s_and_not1_b64": lambda a, b, c: (a & ~b & M64, _nz(a & ~b & M64)),
    "s_or_not1_b32": lambda a, b, c: ((a | ~b) & M32, _nz((a | ~b) & M32)),
    "s_or_not1_b64": lambda a, b, c: ((a | ~b) & M64, _nz((a | ~b) & M64)),
    "s_bfe_u32": lambda a, b, c: _bfe(a, b, 32, False),
    "s_bfe_i32": lambda a, b, c: _bfe(a, b, 32, True),
    "s_bfe_u64": lambda a, b, c: _bfe(a, b, 64, False),
    "s_bfe_i64": lambda a, b, c: _bfe(a, b, 64, True),
    "s_bfm_b32": lambda a, b, c: ((((1 << (a & 31)) - 1) << (b & 31)) & M32, None),
    "s_bfm_b64": lambda a, b, c: ((((1 << (a & 63)) - 1) << (b & 63)) & M64, None),
    "s_mul_i32": lambda a, b, c: ((a * b) & M32, None),
    "s_mul_hi_u32": lambda a, b, c: ((a * b) >> 32, None),
    "s_mul_hi_i32": lambda a, b, c: (((sext(a, 32) * sext(b, 32)) >> 32) & M32, None),
    "s_cselect_b32": lambda a, b, c: (a if c else b, None),
    "s_cselect_b64": lambda a, b, c: (a if c else b, None),
    "s_pack_ll_b32_b16": lambda a, b, c: ((a & 0xFFFF) | (b & 0xFFFF) << 16, None),
    "s_pack_lh_b32_b16": lambda a, b, c: ((a & 0xFFFF) | (b & 0xFFFF0000), None),
    "s_pack_hh_b32_b16": lambda a, b, c: (a >> 16 | (b & 0xFFFF0000), None),
    "s_pack_hl_b32_b16": lambda a, b, c: (a >> 16 | (b & 0xFFFF) << 16, None),
}


def _bcnt(v: int) -> int:
    return bin(v).count("1")


def _ff1(v: int, bits: int) -> int:
    return (v & -v).bit_length() - 1 if v else M32


def _flbit(v: int, bits: int) -> int:
    return bits - v.bit_length() if v else M32


# SOP1 value ops: (a, scc) -> (result, scc); the exec-mask ops (saveexec, wrexec) are built in emu.py
SOP1 = {
    "s_mov_b32": lambda a, c: (a, None),
    "s_mov_b64": lambda a, c: (a, None),
    "s_not_b32": lambda a, c: (~a & M32, _nz(~a & M32)),
    "s_not_b64": lambda a, c: (~a & M64, _nz(~a & M64)),
    "s_brev_b32": lambda a, c: (int(f"{a:032b}"[::-1], 2), None),
    "s_brev_b64": lambda a, c: (int(f"{a:064b}"[::-1], 2), None),
    "s_ctz_i32_b32": lambda a, c: (_ff1(a, 32), None),
    "s_ctz_i32_b64": lambda a, c: (_ff1(a, 64), None),
    "s_clz_i32_u32": lambda a, c: (_flbit(a, 32), None),
    "s_clz_i32_u64": lambda a, c: (_flbit(a, 64), None),
    "s_sext_i32_i8": lambda a, c: (sext(a, 8) & M32, None),
    "s_sext_i32_i16": lambda a, c: (sext(a, 16) & M32, None),
    "s_abs_i32": lambda a, c: (abs(sext(a, 32)) & M32, _nz(abs(sext(a, 32)) & M32)),
    "s_bcnt0_i32_b32": lambda a, c: (32 - _bcnt(a), _nz(32 - _bcnt(a))),
    "s_bcnt0_i32_b64": lambda a, c: (64 - _bcnt(a), _nz(64 - _bcnt(a))),
    "s_bcnt1_i32_b32": lambda a, c: (_bcnt(a), _nz(_bcnt(a))),
    "s_bcnt1_i32_b64": lambda a, c: (_bcnt(a), _nz(_bcnt(a))),
}
# s_bitset0/1 write one bit of the destination (they read it too)
BITSET = {"s_bitset0_b32": (0, 32), "s_bitset0_b64": (0, 64), "s_bitset1_b32": (1, 32), "s_bitset1_b64": (1, 64)}

# s_*_saveexec: new exec = f(src, old exec); the destination gets the old exec; SCC = new exec != 0
SAVEEXEC = {
    "and": lambda s, e, m: s & e,
    "or": lambda s, e, m: s | e,
    "xor": lambda s, e, m: s ^ e,
    "nand": lambda s, e, m: ~(s & e) & m,
    "nor": lambda s, e, m: ~(s | e) & m,
    "xnor": lambda s, e, m: ~(s ^ e) & m,
    "and_not0": lambda s, e, m: ~s & e & m,
    "or_not0": lambda s, e, m: (~s | e) & m,
    "and_not1": lambda s, e, m: s & ~e & m,
    "or_not1": lambda s, e, m: (s | ~e) & m,
}

_ORDER = {"eq": int.__eq__, "lg": int.__ne__, "gt": int.__gt__, "ge": int.__ge__, "lt": int.__lt__, "le": int.__le__}


def _sopc(compare: Callable[[int, int], bool], signed: bool) -> Callable[[int, int], int]:
    if signed:
        return lambda a, b: int(compare(sext(a, 32), sext(b, 32)))
    return lambda a, b: int(compare(a, b))


def _sopk_cmp(compare: Callable[[int, int], bool], signed: bool) -> Callable[[int, int], tuple[None, int]]:
    if signed:
        return lambda d, k: (None, int(compare(sext(d, 32), sext(k, 16))))
    return lambda d, k: (None, int(compare(d, k)))


# SOPC: (a, b) -> scc, on u32/i32/u64 values
SOPC = {
    **{f"s_cmp_{p}_i32": _sopc(f, True) for p, f in _ORDER.items()},
    **{f"s_cmp_{p}_u32": _sopc(f, False) for p, f in _ORDER.items()},
    "s_cmp_eq_u64": lambda a, b: int(a == b),
    "s_cmp_lg_u64": lambda a, b: int(a != b),
    "s_bitcmp0_b32": lambda a, b: int(not a >> (b & 31) & 1),
    "s_bitcmp1_b32": lambda a, b: int(a >> (b & 31) & 1),
    "s_bitcmp0_b64": lambda a, b: int(not a >> (b & 63) & 1),
    "s_bitcmp1_b64": lambda a, b: int(a >> (b & 63) & 1),
}

# SOPK: (register value, simm16) -> (result or None, scc or None); s_cmovk_i32 needs SCC and is built in emu.py
SOPK = {
    "s_movk_i32": lambda d, k: (sext(k, 16) & M32, None),
    "s_addk_i32": lambda d, k: _add_i32(d, sext(k, 16) & M32),
    "s_mulk_i32": lambda d, k: ((sext(d, 32) * sext(k, 16)) & M32, None),
    **{f"s_cmpk_{p}_i32": _sopk_cmp(f, True) for p, f in _ORDER.items()},
    **{f"s_cmpk_{p}_u32": _sopk_cmp(f, False) for p, f in _ORDER.items()},
}

# SOPP instructions that do nothing in a simulation where memory completes at once
SOPP_NOPS = frozenset(
    {
        "s_nop",
        "s_waitcnt",
        "s_waitcnt_depctr",
        "s_delay_alu",
        "s_clause",
        "s_sendmsg",
        "s_set_inst_prefetch_distance",
        "s_sleep",
        "s_setprio",
        "s_icache_inv",
        "s_wait_idle",
        "s_round_mode",
        "s_denorm_mode",
        "s_incperflevel",
        "s_decperflevel",
        "s_ttracedata",
        "s_ttracedata_imm",
    }
)
# conditional branches: name -> predicate on the wave (scc, vcc, exec)
BRANCHES = {
    "s_branch": lambda scc, vcc, exec_: True,
    "s_cbranch_scc0": lambda scc, vcc, exec_: scc == 0,
    "s_cbranch_scc1": lambda scc, vcc, exec_: scc == 1,
    "s_cbranch_vccz": lambda scc, vcc, exec_: vcc == 0,
    "s_cbranch_vccnz": lambda scc, vcc, exec_: vcc != 0,
    "s_cbranch_execz": lambda scc, vcc, exec_: exec_ == 0,
    "s_cbranch_execnz": lambda scc, vcc, exec_: exec_ != 0,
}
