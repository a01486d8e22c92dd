"""Developer script: build the RDNA3 (gfx1100) opcode tables of tg.runtime.amd.sim from LLVM's own decoder.

Every opcode of every encoding is probed with llvm-mc-15 --disassemble, using words whose register fields hold
distinct registers, so the printed operands tell which fields an opcode uses and how many dwords each spans.
Names follow LLVM 22's spelling (a short rename list covers what changed since LLVM 15). The result is written as
data to packages/tg-runtime/src/tg/runtime/amd/sim/isa_tables.py; run it again only when the tables must grow:

    python scripts/gen_rdna3_tables.py [--llvm-mc llvm-mc-15]
"""

from __future__ import annotations

import argparse
import pathlib
import re
import struct
import subprocess
import tempfile

OUT = pathlib.Path(__file__).resolve().parent.parent / "packages/tg-runtime/src/tg/runtime/amd/sim/isa_tables.py"

# LLVM 15 -> LLVM 22 renames of gfx11 mnemonics (checked against LLVM 22 listings of the corpus)
RENAMES: dict[str, str] = {}

# gfx11 opcodes LLVM 15 does not decode yet but LLVM 22 emits (true16 moves; cache invalidates after acquire fences)
EXTRAS: dict[str, dict[int, tuple]] = {
    "VOP1": {28: ("v_mov_b16_e32", 1, 1), 102: ("v_swap_b16_e32", 1, 1)},
    "VOP3": {412: ("v_mov_b16_e64", 1, 1, 0, 0)},
    "MUBUF": {43: ("buffer_gl0_inv",), 44: ("buffer_gl1_inv",)},
}


def disassemble(llvm_mc: str, words: list[list[int]]) -> dict[bytes, str]:
    """Map each probed instruction's bytes to llvm-mc's text for it (words LLVM rejects are absent)."""
    text = "\n".join(",".join(f"0x{b:02x}" for w in ws for b in struct.pack("<I", w)) for ws in words) + "\n"
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
        f.write(text)
        f.flush()
        out = subprocess.run(
            [llvm_mc, "-arch=amdgcn", "-mcpu=gfx1100", "--disassemble", "-show-encoding", f.name],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
    found = {}
    for line in out.splitlines():
        m = re.match(r"\s*(\S.*?)\s*; encoding: \[(.*)\]", line)
        if m:
            found[bytes(int(b, 16) for b in m.group(2).split(","))] = m.group(1)
    return found


def as_bytes(ws: list[int]) -> bytes:
    return b"".join(struct.pack("<I", w) for w in ws)


REG = re.compile(r"^(?:([sv])(\d+)|([sv])\[(\d+):(\d+)\])$")


def operand_widths(text: str) -> tuple[str, list[tuple[str, int, int]]]:
    """Split 'name a, b, c mods' into the name and its register operands as (file, first, dwords)."""
    name, _, rest = text.partition(" ")
    regs = []
    for tok in re.split(r"[,\s]+", rest.split("::")[0]):
        m = REG.match(tok)
        if m and m.group(1):
            regs.append((m.group(1), int(m.group(2)), 1))
        elif m:
            regs.append((m.group(3), int(m.group(4)), int(m.group(5)) - int(m.group(4)) + 1))
    return name, regs


def probe(llvm_mc: str, variants_of: dict[int, list[list[int]]]) -> dict[int, tuple]:
    """For each op, the first variant LLVM decodes (variants are ordered from most fields set to fewest)."""
    flat = [v for vs in variants_of.values() for v in vs]
    found = disassemble(llvm_mc, flat)
    table = {}
    for op, variants in variants_of.items():
        for v in variants:
            text = found.get(as_bytes(v))
            if text is not None:
                table[op] = operand_widths(text)
                if "::" in text:  # VOPD: keep the Y half's mnemonic too
                    table[op] = (table[op][0], [("y", 0, 0)], text.split("::")[1].split()[0])
                break
    return table


def width_of(regs: list[tuple[str, int, int]], first: int, file: str = "v") -> int:
    """Dwords of the operand that starts at register `first` (0 when the op does not use that field)."""
    for f, r, n in regs:
        if f == file and r == first:
            return n
    return 0


def build(llvm_mc: str) -> dict[str, dict[int, tuple]]:
    tables: dict[str, dict[int, tuple]] = {}
    # scalar ALU: dst s4, src0 s2, src1 s6 (widths from the s[...] ranges)
    sop2 = probe(
        llvm_mc, {op: [[0x80000000 | op << 23 | 4 << 16 | 6 << 8 | 2]] for op in range(0x60)}
    )  # 0x60+ are SOPK words
    tables["SOP2"] = {
        op: (n, width_of(r, 4, "s"), width_of(r, 2, "s"), width_of(r, 6, "s")) for op, (n, r, *_) in sop2.items()
    }
    sop1 = probe(
        llvm_mc,
        {
            op: [[0xBE800000 | 4 << 16 | op << 8 | 2], [0xBE800000 | op << 8 | 2], [0xBE800000 | 4 << 16 | op << 8]]
            for op in range(256)
        },
    )
    tables["SOP1"] = {op: (n, width_of(r, 4, "s"), width_of(r, 2, "s")) for op, (n, r, *_) in sop1.items()}
    sopc = probe(llvm_mc, {op: [[0xBF000000 | op << 16 | 6 << 8 | 2]] for op in range(128)})
    tables["SOPC"] = {op: (n, width_of(r, 2, "s"), width_of(r, 6, "s")) for op, (n, r, *_) in sopc.items()}
    sopk = probe(
        llvm_mc, {op: [[0xB0000000 | op << 23 | 4 << 16 | 0x1234]] for op in range(29)}
    )  # 29+ are SOP1/SOPC/SOPP words
    tables["SOPK"] = {op: (n, width_of(r, 4, "s")) for op, (n, r, *_) in sopk.items()}
    sopp = probe(llvm_mc, {op: [[0xBF800000 | op << 16 | 3], [0xBF800000 | op << 16]] for op in range(128)})
    tables["SOPP"] = {op: (n,) for op, (n, r, *_) in sopp.items()}
    smem = probe(llvm_mc, {op: [[0xF4000000 | op << 18 | 8 << 6 | 2, 0xF8000000 | 0x10]] for op in range(256)})
    tables["SMEM"] = {op: (n, width_of(r, 8, "s")) for op, (n, r, *_) in smem.items()}
    # vector ALU: src0 v1, vsrc1 v2, src2 v5 (VOP3), vdst v3
    vop1 = probe(
        llvm_mc,
        {
            op: [[0x7E000000 | 3 << 17 | op << 9 | 257], [0x7E000000 | op << 9], [0x7E000000 | 3 << 17 | op << 9]]
            for op in range(256)
        },
    )
    tables["VOP1"] = {
        op: (n, max(width_of(r, 3), width_of(r, 3, "s")), width_of(r, 1)) for op, (n, r, *_) in vop1.items()
    }
    vop2 = probe(llvm_mc, {op: [[op << 25 | 3 << 17 | 2 << 9 | 257]] for op in range(62)})  # 62, 63 are VOPC, VOP1
    # v_fmaak/v_fmamk always carry a literal K: probed on their own so the stream stays aligned
    vop2k = probe(llvm_mc, {op: [[op << 25 | 3 << 17 | 2 << 9 | 257, 0x3F800000]] for op in range(62)})
    vop2.update({op: v for op, v in vop2k.items() if "fmaak" in v[0] or "fmamk" in v[0]})
    tables["VOP2"] = {op: (n, width_of(r, 3), width_of(r, 1), width_of(r, 2)) for op, (n, r, *_) in vop2.items()}
    vopc = probe(llvm_mc, {op: [[0x7C000000 | op << 17 | 2 << 9 | 257]] for op in range(256)})
    tables["VOPC"] = {op: (n, width_of(r, 1), width_of(r, 2)) for op, (n, r, *_) in vopc.items()}
    v3 = {}
    for op in range(1024):
        dw0 = 0xD4000000 | op << 16 | 3
        v3[op] = [
            [dw0, 261 << 18 | 258 << 9 | 257],
            [dw0, 258 << 9 | 257],
            [dw0, 257],
            [0xD4000000 | op << 16 | 0x7C00 | 3, 261 << 18 | 258 << 9 | 257],
            [0xD4000000 | op << 16 | 0x7C00 | 3, 258 << 9 | 257],
        ]
    vop3 = probe(llvm_mc, v3)
    tables["VOP3"] = {
        op: (n, max(width_of(r, 3), width_of(r, 3, "s")), width_of(r, 1), width_of(r, 2), width_of(r, 5))
        for op, (n, r, *_) in vop3.items()
    }
    # op_sel_hi defaults to all ones (dw0 bit 14 is its third bit): LLVM rejects two-source packed ops without it
    v3p = {
        op: [
            [0xCC000000 | op << 16 | 3, 3 << 27 | 261 << 18 | 258 << 9 | 257],
            [0xCC000000 | op << 16 | 3, 3 << 27 | 258 << 9 | 257],
            [0xCC000000 | op << 16 | 1 << 14 | 3, 3 << 27 | 261 << 18 | 258 << 9 | 257],
            [0xCC000000 | op << 16 | 1 << 14 | 3, 3 << 27 | 258 << 9 | 257],
        ]
        for op in range(128)
    }
    vop3p = probe(llvm_mc, v3p)
    tables["VOP3P"] = {
        op: (n, width_of(r, 3), width_of(r, 1), width_of(r, 2), width_of(r, 5)) for op, (n, r, *_) in vop3p.items()
    }

    # VOPD: X and Y halves probed separately (Y paired with v_dual_mov_b32, X with v_dual_mov_b32)
    def vopd(x: int, y: int, x1: int, y1: int) -> list[int]:
        return [0xC8000000 | x << 22 | y << 17 | x1 << 9 | 257, 3 << 24 | 2 << 17 | y1 << 9 | 262]

    vopdx_texts = probe(llvm_mc, {x: [vopd(x, 8, x1, 0)] for x in range(16) for x1 in (2,)})
    vopdx_texts.update(
        {x: t for x, t in probe(llvm_mc, {x: [vopd(x, 8, 0, 0)] for x in range(16)}).items() if x not in vopdx_texts}
    )
    k = probe(llvm_mc, {x: [[*vopd(x, 8, 2, 0), 0x3F800000]] for x in range(16)})
    vopdx_texts.update({x: t for x, t in k.items() if x not in vopdx_texts and "fma" in t[0]})
    tables["VOPDX"] = {op: (t[0],) for op, t in vopdx_texts.items()}
    vopdy = probe(llvm_mc, {y: [vopd(8, y, 0, 6)] for y in range(32)})
    vopdy.update(
        {y: t for y, t in probe(llvm_mc, {y: [vopd(8, y, 0, 0)] for y in range(32)}).items() if y not in vopdy}
    )
    k = probe(llvm_mc, {y: [[*vopd(8, y, 0, 6), 0x3F800000]] for y in range(32)})
    vopdy.update({y: t for y, t in k.items() if y not in vopdy and "fma" in t[2]})
    tables["VOPDY"] = {op: (t[2],) for op, t in vopdy.items()}
    # DS: addr v1, data0 v5, data1 v6 (v[..] widths), vdst v3
    ds = {}
    for op in range(256):
        base = 0xD8000000 | op << 18 | 0x10
        ds[op] = [
            [base, vd << 24 | d1 << 16 | d0 << 8 | a] for vd in (3, 0) for d0 in (5, 0) for d1 in (6, 0) for a in (1, 0)
        ]
    dsr = probe(llvm_mc, ds)
    tables["DS"] = {
        op: (n, width_of(r, 3), width_of(r, 1), width_of(r, 5), width_of(r, 6)) for op, (n, r, *_) in dsr.items()
    }
    for seg, key in ((0, "FLAT"), (1, "SCRATCH"), (2, "GLOBAL")):
        fl = {}
        for op in range(128):
            base = 0xDC000000 | op << 18 | seg << 16 | 0x10
            fl[op] = [
                [base, vd << 24 | 0x7C << 16 | sve << 23 | d << 8 | a]
                for sve in (0, 1)
                for a in (2, 0)
                for vd in (3, 0)
                for d in (5, 0)
            ]
        flr = probe(llvm_mc, fl)
        tables[key] = {op: (n, width_of(r, 3), width_of(r, 5)) for op, (n, r, *_) in flr.items()}
    for key, extra in EXTRAS.items():
        tables.setdefault(key, {}).update({op: v for op, v in extra.items() if op not in tables.get(key, {})})
    return tables


def render(tables: dict[str, dict[int, tuple]]) -> str:
    lines = [
        '"""gfx1100 opcode tables, generated by scripts/gen_rdna3_tables.py from LLVM\'s decoder (do not edit).',
        "",
        "Per encoding, op -> (mnemonic, operand widths in dwords; 0 = field unused):",
        "SOP2 (sdst, ssrc0, ssrc1); SOP1 (sdst, ssrc0); SOPC (ssrc0, ssrc1); SOPK (sdst,); SOPP (); SMEM (sdata,);",
        "VOP1 (vdst, src0); VOP2 (vdst, src0, vsrc1); VOPC (src0, vsrc1); VOP3/VOP3P (vdst, src0, src1, src2);",
        "VOPDX/VOPDY (); DS (vdst, addr, data0, data1); FLAT/SCRATCH/GLOBAL (vdst, data); MUBUF (cache controls only).",
        '"""',
        "",
    ]
    for key, table in tables.items():
        lines.append(f"{key}: dict[int, tuple] = {{")
        for op in sorted(table):
            name, *widths = table[op]
            name = RENAMES.get(name, name)
            lines.append(f"    {op}: {(name, *widths)!r},")
        lines.append("}")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llvm-mc", default="llvm-mc-15")
    args = parser.parse_args()
    OUT.write_text(render(build(args.llvm_mc)))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
