"""The RDNA3 decoder against LLVM's own listings (committed corpus) and hand-assembled words."""

from __future__ import annotations

import pathlib
import re
import shutil
import struct
import subprocess

import pytest

from tg.runtime.amd.program import CodeObject
from tg.runtime.amd.sim.decode import EmulatorError, decode, decode_one
from tg.runtime.elf import ElfObject

CORPUS = pathlib.Path(__file__).parent / "amd_corpus"
LLVM22 = sorted(CORPUS.glob("*.llvm22.lst"))


def listing(obj: bytes, llvm15: bool = False) -> dict[str, list[str]]:
    """Per kernel, the decoder's text of each instruction (branch targets as @<instruction index>)."""
    elf = ElfObject(obj)
    names = [s.name for s in elf.symbols if s.name and elf.symbol(s.name + ".kd") is not None]
    out = {}
    for name in names:
        co = CodeObject(obj, name)
        text = co.elf.section(".text")
        assert text is not None
        start = co.linked.section_offsets[text.index]
        prog = decode(co.image[start : start + text.size], start)
        size = co.elf.symbol(name).size  # type: ignore[union-attr]
        insts = [i for i in prog.instructions if co.entry_offset <= i.pc < co.entry_offset + size]
        index = {i.pc: n for n, i in enumerate(insts)}
        lines = []
        for i in insts:
            text = i.text
            if i.name.startswith(("s_branch", "s_cbranch")):
                imm = i.fields["simm16"]
                target = i.pc + 4 + 4 * (imm - 0x10000 if imm & 0x8000 else imm)
                text = f"{i.name} @{index[target]}"
            if llvm15 and i.name == "s_waitcnt_depctr":  # LLVM 15 prints the raw immediate
                text = f"s_waitcnt_depctr 0x{i.fields['simm16']:x}"
            lines.append(_as_llvm15(text) if llvm15 else text)
        out[name] = lines
    return out


def expected(lst: pathlib.Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    cur = None
    for line in lst.read_text().splitlines():
        if line.endswith(":"):
            cur = line[:-1]
            out[cur] = []
        elif cur is not None:
            out[cur].append(line)
    return out


@pytest.mark.parametrize("lst", LLVM22, ids=[p.name.split(".")[0] for p in LLVM22])
def test_listing_equals_llvm22(lst: pathlib.Path) -> None:
    mine = listing((CORPUS / (lst.name.split(".")[0] + ".o")).read_bytes())
    want = expected(lst)
    assert set(mine) == set(want)
    for kernel, lines in want.items():
        assert mine[kernel] == lines, kernel


def _as_llvm15(text: str) -> str:
    """LLVM 15 spellings: true16 halves as v<n> / v<128+n>, a zero SMEM offset as `null`."""
    text = re.sub(r"\bv(\d+)\.h\b", lambda m: f"v{128 + int(m.group(1))}", text)
    text = re.sub(r"\bv(\d+)\.l\b", r"v\1", text)
    return re.sub(r"^(s_load_b\d+ \S+ s\[\d+:\d+\]), 0x0$", r"\1, null", text)


def test_listing_equals_objdump15_for_clang15_objects() -> None:
    mine = listing((CORPUS / "clang15.o").read_bytes(), llvm15=True)
    want = expected(CORPUS / "clang15.objdump15.lst")
    assert set(mine) == set(want)
    for kernel, lines in want.items():
        got = mine[kernel]
        assert got == lines[: len(got)], kernel
        assert all(t in ("s_nop 0", "s_code_end") for t in lines[len(got) :]), kernel  # padding after the kernel


# words checked with llvm-mc-15 -show-encoding (amd.md 4.3) and their LLVM 22 text
HAND_ASSEMBLED = [
    ([0xBE800001], "s_mov_b32 s0, s1"),
    ([0xCA080100, 0x04000702], "v_dual_mov_b32 v4, v0 :: v_dual_add_f32 v1, v2, v3"),
    ([0xDC6A1FF8, 0x007C0200], "global_store_b32 v[0:1], v2, off offset:-8"),
    ([0x7E020302], "v_mov_b32_e32 v1, v2"),
    ([0x06000080], "v_add_f32_e32 v0, 0, v0"),
    ([0xD6130006, 0x23CA0B04], "v_fma_f32 v6, -v4, v5, 1.0"),
    ([0x100600FF, 0x4F800000], "v_mul_f32_e32 v3, 0x4f800000, v0"),
    ([0xBF850001], "s_clause 0x1"),
    ([0xBF870091], "s_delay_alu instid0(VALU_DEP_1) | instskip(NEXT) | instid1(VALU_DEP_1)"),
    ([0xBF89FC07], "s_waitcnt lgkmcnt(0)"),
    ([0xBF880F9F], "s_waitcnt_depctr depctr_va_vdst(0)"),
    ([0xD7006A03, 0x00020206], "v_add_co_u32 v3, vcc_lo, s6, v1"),
    ([0xD5207C04, 0x01AA0407], "v_add_co_ci_u32_e64 v4, null, s7, v2, vcc_lo"),
    ([0xBFB00000], "s_endpgm"),
]


@pytest.mark.parametrize("words,text", HAND_ASSEMBLED, ids=[t.split()[0] for _, t in HAND_ASSEMBLED])
def test_hand_assembled_words(words: list[int], text: str) -> None:
    inst = decode_one(struct.pack(f"<{len(words)}I", *words), 0, 0)
    assert inst.size == 4 * len(words)
    assert inst.text == text


@pytest.mark.skipif(shutil.which("llvm-mc-15") is None, reason="llvm-mc-15 is not installed")
def test_hand_assembled_words_match_llvm_mc() -> None:
    src = "\n".join(_as_llvm15(t) for _, t in HAND_ASSEMBLED) + "\n"
    out = subprocess.run(["llvm-mc-15", "-arch=amdgcn", "-mcpu=gfx1100", "-show-encoding"], input=src,
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    encodings = [bytes(int(b, 16) for b in m.split(",")) for m in re.findall(r"encoding: \[([^\]]*)\]", out)]
    assert encodings == [struct.pack(f"<{len(w)}I", *w) for w, _ in HAND_ASSEMBLED]


@pytest.mark.parametrize("word", [0x7E01FE00, 0xE0000000, 0xF0000000, 0xCD000000])
def test_unknown_words_raise_at_once_naming_the_word(word: int) -> None:
    code = struct.pack("<4I", 0xBE800001, word, 0, 0)
    with pytest.raises(EmulatorError, match=f"unknown rdna3 instruction word=0x{word:08x} at pc=0x104"):
        decode(code, 0x100)


def test_truncated_instruction_is_an_error() -> None:
    with pytest.raises(EmulatorError, match="truncated"):
        decode(struct.pack("<I", 0xD6130006), 0)
