"""SALU semantics as tables: mnemonic -> (result expression, SCC expression or None when SCC is left unchanged).

Expressions are Python source over the sources `{a}`, `{b}` (unsigned integers of the operand's width, 32 or 64 bits)
and `{c}` (the old SCC); the translator (gen_scalar.py) binds the sources to locals first. Results are the bits of the
destination; an SCC expression gives 0 or 1. Helpers used here are `SALU_HELPERS`.
"""

from __future__ import annotations

from tg.runtime.amd.sim.ops.numerics import sext

M32, M64 = 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF


def sop_bfe(a: int, b: int, bits: int, signed: bool) -> int:
    """s_bfe: the field of `a` at offset b[5:0] (b[4:0] for 32 bits), width b[22:16], zero or sign extended."""
    off, width = b & (bits - 1), (b >> 16) & 0x7F
    v = (a >> off) & ((1 << width) - 1) if width else 0
    if signed and width:
        v = sext(v, width)
    return v & ((1 << bits) - 1)


def sop_ctz(v: int) -> int:
    return (v & -v).bit_length() - 1 if v else M32


def sop_clz(v: int, bits: int) -> int:
    return bits - v.bit_length() if v else M32


def sop_cls(v: int, bits: int) -> int:
    """Leading bits equal to the sign bit, the sign bit included (-1 when all are: 0 and -1)."""
    x = sext(v, bits)
    return M32 if x in (0, -1) else bits - (x if x >= 0 else ~x).bit_length()


def sop_bitrev(v: int, bits: int) -> int:
    return int(f"{v:0{bits}b}"[::-1], 2)


def _signed_add_overflow(r: str) -> str:
    return f"int(not -2147483648 <= {r} < 2147483648)"


_ADD_I32 = "sext({a}, 32) + sext({b}, 32)"
_SUB_I32 = "sext({a}, 32) - sext({b}, 32)"

# SOP2: result and SCC from {a}, {b}, {c}
SOP2: dict[str, tuple[str, str | None]] = {
    "s_add_u32": ("({a} + {b}) & M32", "int({a} + {b} > M32)"),
    "s_sub_u32": ("({a} - {b}) & M32", "int({b} > {a})"),
    "s_add_i32": (f"({_ADD_I32}) & M32", _signed_add_overflow(f"({_ADD_I32})")),
    "s_sub_i32": (f"({_SUB_I32}) & M32", _signed_add_overflow(f"({_SUB_I32})")),
    "s_addc_u32": ("({a} + {b} + {c}) & M32", "int({a} + {b} + {c} > M32)"),
    "s_subb_u32": ("({a} - {b} - {c}) & M32", "int({b} + {c} > {a})"),
    "s_absdiff_i32": ("abs(sext({a}, 32) - sext({b}, 32)) & M32", "int(sext({a}, 32) != sext({b}, 32))"),
    "s_lshl_b32": ("({a} << ({b} & 31)) & M32", "int(({a} << ({b} & 31)) & M32 != 0)"),
    "s_lshl_b64": ("({a} << ({b} & 63)) & M64", "int(({a} << ({b} & 63)) & M64 != 0)"),
    "s_lshr_b32": ("{a} >> ({b} & 31)", "int({a} >> ({b} & 31) != 0)"),
    "s_lshr_b64": ("{a} >> ({b} & 63)", "int({a} >> ({b} & 63) != 0)"),
    "s_ashr_i32": ("(sext({a}, 32) >> ({b} & 31)) & M32", "int(sext({a}, 32) >> ({b} & 31) != 0)"),
    "s_ashr_i64": ("(sext({a}, 64) >> ({b} & 63)) & M64", "int(sext({a}, 64) >> ({b} & 63) != 0)"),
    **{f"s_lshl{n}_add_u32": (f"(({{a}} << {n}) + {{b}}) & M32", f"int(({{a}} << {n}) + {{b}} > M32)")
       for n in (1, 2, 3, 4)},
    "s_min_i32": ("{a} if sext({a}, 32) < sext({b}, 32) else {b}", "int(sext({a}, 32) < sext({b}, 32))"),
    "s_min_u32": ("{a} if {a} < {b} else {b}", "int({a} < {b})"),
    "s_max_i32": ("{a} if sext({a}, 32) > sext({b}, 32) else {b}", "int(sext({a}, 32) > sext({b}, 32))"),
    "s_max_u32": ("{a} if {a} > {b} else {b}", "int({a} > {b})"),
    **{f"s_{op}_b{w}": (expr.replace("M", f"M{w}"), f"int(({expr.replace('M', f'M{w}')}) != 0)")
       for op, expr in (("and", "{a} & {b}"), ("or", "{a} | {b}"), ("xor", "{a} ^ {b}"), ("nand", "~({a} & {b}) & M"),
                        ("nor", "~({a} | {b}) & M"), ("xnor", "~({a} ^ {b}) & M"), ("and_not1", "{a} & ~{b} & M"),
                        ("or_not1", "({a} | ~{b}) & M"))
       for w in (32, 64)},
    "s_bfe_u32": ("sop_bfe({a}, {b}, 32, False)", "int(sop_bfe({a}, {b}, 32, False) != 0)"),
    "s_bfe_i32": ("sop_bfe({a}, {b}, 32, True)", "int(sop_bfe({a}, {b}, 32, True) != 0)"),
    "s_bfe_u64": ("sop_bfe({a}, {b}, 64, False)", "int(sop_bfe({a}, {b}, 64, False) != 0)"),
    "s_bfe_i64": ("sop_bfe({a}, {b}, 64, True)", "int(sop_bfe({a}, {b}, 64, True) != 0)"),
    "s_bfm_b32": ("(((1 << ({a} & 31)) - 1) << ({b} & 31)) & M32", None),
    "s_bfm_b64": ("(((1 << ({a} & 63)) - 1) << ({b} & 63)) & M64", None),
    "s_mul_i32": ("({a} * {b}) & M32", None),
    "s_mul_hi_u32": ("({a} * {b}) >> 32", None),
    "s_mul_hi_i32": ("((sext({a}, 32) * sext({b}, 32)) >> 32) & M32", None),
    "s_cselect_b32": ("{a} if {c} else {b}", None),
    "s_cselect_b64": ("{a} if {c} else {b}", None),
    "s_pack_ll_b32_b16": ("({a} & 0xFFFF) | ({b} & 0xFFFF) << 16", None),
    "s_pack_lh_b32_b16": ("({a} & 0xFFFF) | ({b} & 0xFFFF0000)", None),
    "s_pack_hh_b32_b16": ("{a} >> 16 | ({b} & 0xFFFF0000)", None),
    "s_pack_hl_b32_b16": ("{a} >> 16 | ({b} & 0xFFFF) << 16", None),
}  # fmt: skip

# SOP1 value ops: result and SCC from {a}, {c}; the exec-mask ops are SAVEEXEC below
SOP1: dict[str, tuple[str, str | None]] = {
    "s_mov_b32": ("{a}", None),
    "s_mov_b64": ("{a}", None),
    "s_cmov_b32": ("{a} if {c} else {d}", None),
    "s_cmov_b64": ("{a} if {c} else {d}", None),
    "s_not_b32": ("~{a} & M32", "int(~{a} & M32 != 0)"),
    "s_not_b64": ("~{a} & M64", "int(~{a} & M64 != 0)"),
    "s_brev_b32": ("sop_bitrev({a}, 32)", None),
    "s_brev_b64": ("sop_bitrev({a}, 64)", None),
    "s_ctz_i32_b32": ("sop_ctz({a})", None),
    "s_ctz_i32_b64": ("sop_ctz({a})", None),
    "s_clz_i32_u32": ("sop_clz({a}, 32)", None),
    "s_clz_i32_u64": ("sop_clz({a}, 64)", None),
    "s_cls_i32": ("sop_cls({a}, 32)", None),
    "s_cls_i32_i64": ("sop_cls({a}, 64)", None),
    "s_sext_i32_i8": ("sext({a}, 8) & M32", None),
    "s_sext_i32_i16": ("sext({a}, 16) & M32", None),
    "s_abs_i32": ("abs(sext({a}, 32)) & M32", "int({a} != 0)"),
    "s_bcnt0_i32_b32": ("32 - bin({a}).count('1')", "int({a} != M32)"),
    "s_bcnt0_i32_b64": ("64 - bin({a}).count('1')", "int({a} != M64)"),
    "s_bcnt1_i32_b32": ("bin({a}).count('1')", "int({a} != 0)"),
    "s_bcnt1_i32_b64": ("bin({a}).count('1')", "int({a} != 0)"),
    # s_bitset0/1 write one bit of the destination {d} (they read it)
    "s_bitset0_b32": ("{d} & ~(1 << ({a} & 31))", None),
    "s_bitset0_b64": ("{d} & ~(1 << ({a} & 63))", None),
    "s_bitset1_b32": ("{d} | 1 << ({a} & 31)", None),
    "s_bitset1_b64": ("{d} | 1 << ({a} & 63)", None),
}

# s_<op>_saveexec_b32 / s_<op>_wrexec_b32: the new EXEC from the source {a} and the old EXEC {e}; saveexec writes the
# old EXEC to its destination, wrexec the new one; SCC = new EXEC != 0
SAVEEXEC = {
    "and": "{a} & {e}",
    "or": "{a} | {e}",
    "xor": "{a} ^ {e}",
    "nand": "~({a} & {e}) & M32",
    "nor": "~({a} | {e}) & M32",
    "xnor": "~({a} ^ {e}) & M32",
    "and_not0": "~{a} & {e} & M32",
    "or_not0": "(~{a} | {e}) & M32",
    "and_not1": "{a} & ~{e} & M32",
    "or_not1": "({a} | ~{e}) & M32",
}

_ORDER = {"eq": "==", "lg": "!=", "gt": ">", "ge": ">=", "lt": "<", "le": "<="}

# SOPC: SCC from {a}, {b} (u32/i32/u64 values)
SOPC: dict[str, str] = {
    **{f"s_cmp_{p}_i32": f"int(sext({{a}}, 32) {op} sext({{b}}, 32))" for p, op in _ORDER.items()},
    **{f"s_cmp_{p}_u32": f"int({{a}} {op} {{b}})" for p, op in _ORDER.items()},
    "s_cmp_eq_u64": "int({a} == {b})",
    "s_cmp_lg_u64": "int({a} != {b})",
    "s_bitcmp0_b32": "int(not {a} >> ({b} & 31) & 1)",
    "s_bitcmp1_b32": "int({a} >> ({b} & 31) & 1)",
    "s_bitcmp0_b64": "int(not {a} >> ({b} & 63) & 1)",
    "s_bitcmp1_b64": "int({a} >> ({b} & 63) & 1)",
}

# SOPK: result (None: none) and SCC from the register {d} and the 16-bit immediate {k} (raw; sext16 as needed)
SOPK: dict[str, tuple[str | None, str | None]] = {
    "s_movk_i32": ("sext({k}, 16) & M32", None),
    "s_cmovk_i32": ("(sext({k}, 16) & M32) if {c} else {d}", None),
    "s_addk_i32": ("(sext({d}, 32) + sext({k}, 16)) & M32", _signed_add_overflow("(sext({d}, 32) + sext({k}, 16))")),
    "s_mulk_i32": ("(sext({d}, 32) * sext({k}, 16)) & M32", None),
    **{f"s_cmpk_{p}_i32": (None, f"int(sext({{d}}, 32) {op} sext({{k}}, 16))") for p, op in _ORDER.items()},
    **{f"s_cmpk_{p}_u32": (None, f"int({{d}} {op} {{k}})") for p, op in _ORDER.items()},
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
# SOPK forms of s_waitcnt: no-ops too
SOPK_NOPS = frozenset({"s_waitcnt_vscnt", "s_waitcnt_vmcnt", "s_waitcnt_expcnt", "s_waitcnt_lgkmcnt"})

# conditional branches: name -> condition on the block's locals (scc, ex) and VCC (s[106])
BRANCHES = {
    "s_branch": "True",
    "s_cbranch_scc0": "scc == 0",
    "s_cbranch_scc1": "scc != 0",
    "s_cbranch_vccz": "s[106] == 0",
    "s_cbranch_vccnz": "s[106] != 0",
    "s_cbranch_execz": "ex == 0",
    "s_cbranch_execnz": "ex != 0",
}

# (named apart from the VALU lane helpers: one block's namespace holds both)
SALU_HELPERS = {
    "M32": M32,
    "M64": M64,
    "sext": sext,
    "sop_bfe": sop_bfe,
    "sop_ctz": sop_ctz,
    "sop_clz": sop_clz,
    "sop_cls": sop_cls,
    "sop_bitrev": sop_bitrev,
}
