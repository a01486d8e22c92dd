"""Developer script: build tg.runtime.amd.regs (register tables, constants, binary layouts) from the Linux amdgpu
headers (MIT-licensed) of a kernel tree, keeping only what tg's AM driver and its mock use.

    python scripts/gen_amd_regs.py /path/to/linux            # a kernel tree (or its drivers/gpu/drm/amd)

Register tables: for each IP version of amd.md 5.2 the ``reg*``/``mm*`` offsets and ``*_BASE_IDX`` segments of
``asic_reg/<ip>/<ip>_<ver>_offset.h`` and the ``REG__FIELD__SHIFT``/``_MASK`` bit fields of ``..._sh_mask.h``, for the
registers matching the name patterns below, go to ``regs/<ip>_<ver>.py`` as ``REGS = {name: (offset, segment,
{field: (lo, hi)})}`` (names without the ``reg``/``mm`` prefix, fields in lower case). Constants (``#define``s and
enum members matching the patterns) and C structs (the layouts of the discovery table, firmware headers, PSP ring
frames and commands, the v11 compute MQD) go to ``regs/defs.py`` as ints and ctypes classes; their sizes are checked
against what the headers state. Rerun only when the driver needs more; the output is committed.
"""

from __future__ import annotations

import argparse
import ctypes
import pathlib
import re
import shutil
import subprocess
import sys

OUT = pathlib.Path(__file__).resolve().parent.parent / "packages/tg-runtime/src/tg/runtime/amd/regs"

# ---- registers: (ip, version, header dir) -> name patterns (full-match regexes, without the reg/mm prefix) ----------

HUB = [  # one hub's registers; {p} is GC (GCVM/GCMC) or MM (MMVM/MMMC)
    r"{p}MC_VM_(AGP_BASE|AGP_BOT|AGP_TOP|SYSTEM_APERTURE_(LOW|HIGH)_ADDR|SYSTEM_APERTURE_DEFAULT_ADDR_(LSB|MSB))",
    r"{p}MC_VM_(FB_LOCATION_BASE|FB_LOCATION_TOP|FB_OFFSET|MX_L1_TLB_CNTL)",
    r"{p}VM_L2_(CNTL|CNTL2|CNTL3|CNTL4|CNTL5)",
    r"{p}VM_L2_PROTECTION_FAULT_(CNTL|CNTL2|STATUS|ADDR_LO32|ADDR_HI32|DEFAULT_ADDR_LO32|DEFAULT_ADDR_HI32)",
    r"{p}VM_CONTEXT0_(CNTL|PAGE_TABLE_(START|END|BASE)_ADDR_(LO|HI)32)",
    r"{p}VM_L2_CONTEXT1_IDENTITY_APERTURE_(LOW|HIGH)_ADDR_(LO|HI)32",
    r"{p}VM_L2_CONTEXT_IDENTITY_PHYSICAL_OFFSET_(LO|HI)32",
    r"{p}VM_INVALIDATE_ENG\d+_ADDR_RANGE_(LO|HI)32",
    r"{p}VM_INVALIDATE_ENG17_(REQ|ACK|SEM)",
]
REGISTERS: dict[tuple[str, str, str], list[str]] = {
    ("gc", "11_0_0", "gc"): [
        r"SCRATCH_REG[67]",
        r"GRBM_(GFX_CNTL|SOFT_RESET|CNTL)",
        r"CP_STAT",
        r"RLC_RLCS_BOOTLOAD_STATUS",
        r"CP_MEC_RS64_(PRGRM_CNTR_START|PRGRM_CNTR_START_HI|CNTL)",
        r"TCP_CNTL",
        r"RLC_(CNTL|SRM_CNTL|SPM_MC_CNTL)",
        r"SH_MEM_(CONFIG|BASES)",
        r"CP_MEC_DOORBELL_RANGE_(LOWER|UPPER)",
        r"CP_MQD_(BASE_ADDR|BASE_ADDR_HI|CONTROL)",
        r"CP_HQD_.*",
        r"SPI_COMPUTE_QUEUE_RESET",
        r"RLC_(SAFE_MODE|CGCG_CGLS_CTRL|CGTT_MGCG_OVERRIDE)",
        r"CP_(RB_WPTR_POLL_CNTL|INT_CNTL)",
        r"SDMA[01]_RLC_CGCG_CTRL",
        r"SDMA0_(WATCHDOG_CNTL|UTCL1_CNTL|UTCL1_PAGE)",
        r"SDMA0_(F32_CNTL|CNTL)",
        r"SDMA0_QUEUE0_(MINOR_PTR_UPDATE|RB_CNTL|IB_CNTL|DOORBELL|DOORBELL_OFFSET)",
        r"SDMA0_QUEUE0_RB_(RPTR|RPTR_HI|WPTR|WPTR_HI|BASE|BASE_HI|RPTR_ADDR_LO|RPTR_ADDR_HI)",
        r"SDMA0_QUEUE0_RB_WPTR_POLL_ADDR_(LO|HI)",
        r"SDMA0_STATUS_REG",
        *(p.format(p="GC") for p in HUB),
    ],
    ("mmhub", "3_0_0", "mmhub"): [*(p.format(p="MM") for p in HUB), r"MMVM_L2_BANK_SELECT_RESERVED_CID2"],
    ("nbio", "4_3_0", "nbio"): [
        r"BIF_BX_PF0_RSMU_(INDEX|DATA)",
        r"BIF_BX0_REMAP_HDP_MEM_FLUSH_CNTL",
        r"BIF_BX_PF0_GPU_HDP_FLUSH_(REQ|DONE)",
        r"RCC_DEV0_EPF2_STRAP2",
        r"RCC_DEV0_EPF0_RCC_(DOORBELL_APER_EN|CONFIG_MEMSIZE)",
        r"BIF_BX0_BIF_DOORBELL_INT_CNTL",
        r"S2A_DOORBELL_ENTRY_[0-3]_CTRL",
        r"BIF_BX_PF0_(MM_INDEX|MM_INDEX_HI|MM_DATA)",
    ],
    ("mp", "13_0_0", "mp"): [r"MP0_SMN_C2PMSG_\d+", r"MP1_SMN_C2PMSG_(53|54|66|75|82|90)"],
    ("osssys", "6_0_0", "oss"): [
        r"IH_RB_(BASE|BASE_HI|CNTL|WPTR|RPTR)(_RING1)?",
        r"IH_RB_WPTR_ADDR_(LO|HI)",
        r"IH_DOORBELL_RPTR(_RING1)?",
        r"IH_(STORM_CLIENT_LIST_CNTL|INT_FLOOD_CNTL|MSI_STORM_CTRL)",
    ],
    ("hdp", "6_0_0", "hdp"): [r"HDP_MEM_POWER_CTRL"],
}

# ---- constants: header -> name patterns -----------------------------------------------------------------------------

CONSTANTS: dict[str, list[str]] = {
    "include/discovery.h": [
        r"PSP_HEADER_SIZE",
        r"BINARY_SIGNATURE",
        r"DISCOVERY_TABLE_SIGNATURE",
        r"GC_TABLE_ID",
        r"HARVEST_TABLE_SIGNATURE",
        r"IP_DISCOVERY",
        r"GC",
        r"HARVEST_INFO",
        r"TOTAL_TABLES",
    ],
    "include/soc15_hw_ip.h": [r"(GC|SDMA0|MMHUB|NBIO|NBIF|MP0|MP1|HDP|OSSSYS|ATHUB|SMUIO|DF|UMC)_HWID"],
    "include/soc15_ih_clientid.h": [r"SOC21_IH_CLIENTID_\w+"],
    "include/ivsrcid/gfx/irqsrcs_gfx_11_0_0.h": [r"GFX_11_0_0__SRCID__\w+"],
    "include/ivsrcid/sdma0/irqsrcs_sdma0_5_0.h": [r"SDMA0_5_0__SRCID__SDMA_TRAP"],
    "include/ivsrcid/vmc/irqsrcs_vmc_1_0.h": [r"VMC_1_0__SRCID__VM_FAULT", r"UTCL2_1_0__SRCID__FAULT"],
    "amdgpu/amdgpu_doorbell.h": [r"AMDGPU_NAVI10_DOORBELL_(MEC_RING0|sDMA_ENGINE0|IH)"],
    "amdgpu/amdgpu_psp.h": [
        r"PSP_1_MEG",
        r"PSP_TMR_ALIGNMENT",
        r"PSP_FENCE_BUFFER_SIZE",
        r"PSP_CMD_BUFFER_SIZE",
        r"PSP_BL__\w+",
        r"PSP_RING_TYPE__\w+",
    ],
    "amdgpu/psp_gfx_if.h": [r"GFX_CTRL_CMD_ID_\w+", r"GFX_CMD_ID_\w+", r"GFX_FW_TYPE_\w+", r"GFX_FLAG_RESPONSE"],
    "amdgpu/amdgpu_ucode.h": [r"PSP_FW_TYPE_\w+"],
    "amdgpu/amdgpu_vm.h": [r"AMDGPU_VM_(PDB2|PDB1|PDB0|PTB)"],
    "pm/swsmu/inc/pmfw_if/smu_v13_0_0_ppsmc.h": [
        r"PPSMC_MSG_(GetSmuVersion|SetDriverDramAddrHigh|SetDriverDramAddrLow|EnableAllSmuFeatures|GetDpmFreqByIndex"
        r"|SetSoftMinByFreq|SetSoftMaxByFreq|SetPptLimit|TestMessage|Mode1Reset)"
    ],
    "pm/swsmu/inc/pmfw_if/smu13_driver_if_v13_0_0.h": [r"PPCLK_(GFXCLK|SOCCLK|UCLK|FCLK)"],
}

# ---- structs: header -> struct names (dependencies are pulled in) ----------------------------------------------

STRUCTS: dict[str, list[str]] = {
    "include/discovery.h": [
        "binary_header",
        "ip_discovery_header",
        "die_header",
        "ip_v4",
        "gpu_info_header",
        "gc_info_v1_0",
        "gc_info_v2_0",
        "gc_info_v2_1",
        "harvest_info_header",
        "harvest_info",
        "harvest_table",
    ],
    "amdgpu/amdgpu_ucode.h": [
        "common_firmware_header",
        "psp_fw_bin_desc",
        "psp_firmware_header_v2_0",
        "smc_firmware_header_v1_0",
        "sdma_firmware_header_v2_0",
        "gfx_firmware_header_v2_0",
        "imu_firmware_header_v1_0",
        "rlc_firmware_header_v2_0",
        "rlc_firmware_header_v2_1",
        "rlc_firmware_header_v2_2",
        "rlc_firmware_header_v2_3",
    ],
    "amdgpu/psp_gfx_if.h": ["psp_gfx_cmd_resp", "psp_gfx_rb_frame"],
    "include/v11_structs.h": ["v11_compute_mqd"],
}
EXPECTED_SIZES = {"psp_gfx_cmd_resp": 1024, "psp_gfx_rb_frame": 64, "v11_compute_mqd": 2048}

CTYPES = {"uint8_t": "c_uint8", "uint16_t": "c_uint16", "uint32_t": "c_uint32", "uint64_t": "c_uint64",
          "int8_t": "c_int8", "int16_t": "c_int16", "int32_t": "c_int32", "int64_t": "c_int64", "char": "c_char",
          "u8": "c_uint8", "u16": "c_uint16", "u32": "c_uint32", "u64": "c_uint64"}  # fmt: skip


def header(root: pathlib.Path, rel: str) -> str:
    return (root / rel).read_text(errors="replace")


def amd_root(path: str) -> pathlib.Path:
    p = pathlib.Path(path).resolve()
    for cand in (p, p / "drivers/gpu/drm/amd"):
        if (cand / "include/asic_reg").is_dir():
            return cand
    sys.exit(f"{path}: not a Linux tree (no drivers/gpu/drm/amd/include/asic_reg below it)")


# ---- register tables -------------------------------------------------------------------------------------------------


def registers(root: pathlib.Path, ip: str, ver: str, subdir: str, patterns: list[str]) -> dict[str, tuple]:
    base = root / "include/asic_reg" / subdir / f"{ip}_{ver}"
    offsets = base.with_name(base.name + "_offset.h").read_text()
    masks = base.with_name(base.name + "_sh_mask.h").read_text()
    defs = dict(re.findall(r"#define\s+(?:reg|mm)(\w+)\s+(0x[0-9a-fA-F]+|\d+)", offsets))
    wanted = [re.compile(p) for p in patterns]
    fields: dict[str, dict[str, list[int]]] = {}
    for name, field, kind, value in re.findall(r"#define\s+(\w+?)__(\w+?)(__SHIFT|_MASK)\s+(0x[0-9a-fA-F]+|\d+)L?",
                                               masks):  # fmt: skip
        fields.setdefault(name, {}).setdefault(field.lower(), [0, 0])[kind == "_MASK"] = int(value, 0)
    out: dict[str, tuple] = {}
    for name, value in defs.items():
        if name.endswith("_BASE_IDX") or not any(w.fullmatch(name) for w in wanted):
            continue
        seg = int(defs.get(f"{name}_BASE_IDX", "0"), 0)
        fs = {}
        for f, (shift, mask) in sorted(fields.get(name, {}).items(), key=lambda kv: kv[1][0]):
            if mask:
                fs[f] = (shift, mask.bit_length() - 1)
        out[name] = (int(value, 0), seg, fs)
    missing = [p for p, w in zip(patterns, wanted, strict=True) if not any(w.fullmatch(n) for n in out)]
    if missing:
        sys.exit(f"{ip} {ver}: no register matches {missing}")
    return dict(sorted(out.items()))


def write_registers(ip: str, ver: str, subdir: str, regs: dict[str, tuple]) -> None:
    lines = [f'"""{ip.upper()} {ver.replace("_", ".")} registers: generated by scripts/gen_amd_regs.py from the Linux '
             f'amdgpu headers',
             f"asic_reg/{subdir}/{ip}_{ver}_offset.h and _sh_mask.h (MIT). Do not edit: rerun the script.", "",
             "REGS[name] = (dword offset in its IP segment, segment index, {field: (low bit, high bit)})", '"""', "",
             "REGS: dict[str, tuple[int, int, dict[str, tuple[int, int]]]] = {"]  # fmt: skip
    for name, (off, seg, fs) in regs.items():
        fields = ", ".join(f'"{f}": ({lo}, {hi})' for f, (lo, hi) in fs.items())
        lines.append(f'    "{name}": ({off:#x}, {seg}, {{{fields}}}),')
    lines.append("}")
    (OUT / f"{ip}_{ver}.py").write_text("\n".join(lines) + "\n")


# ---- C parsing (the subset these headers use) ------------------------------------------------------------------------

TRUE_MACROS = {"LITTLEENDIAN_CPU"}


def preprocess(text: str) -> str:
    """Drop comments, evaluate #if/#ifdef blocks on endianness macros (little endian), keep #pragma pack lines."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"\\\n", " ", text)
    out: list[str] = []
    stack = [(True, True)]  # per open #if: (lines active, some branch taken)
    for line in text.splitlines():
        s = line.strip()
        m = re.match(r"#\s*(ifdef|ifndef|if|elif|else|endif)\b(.*)", s)
        if m:
            kind, cond = m.group(1), m.group(2)
            macros = re.findall(r"defined\s*\(?\s*(\w+)", cond) or re.findall(r"(\w+)", cond)
            truth = any(mac in TRUE_MACROS for mac in macros)
            if kind == "ifndef":
                truth = not truth
            parent = stack[-2][0] if kind in ("elif", "else") else stack[-1][0]
            if kind in ("if", "ifdef", "ifndef"):
                stack.append((parent and truth, truth))
            elif kind == "elif":
                taken = stack[-1][1]
                stack[-1] = (parent and not taken and truth, taken or truth)
            elif kind == "else":
                taken = stack[-1][1]
                stack[-1] = (parent and not taken, True)
            else:
                stack.pop()
            continue
        if stack[-1][0] and (not s.startswith("#") or s.startswith(("#pragma", "#define"))):
            out.append(line)
    return "\n".join(out)


def tokens(text: str) -> list[str]:
    text = re.sub(r"DECLARE_FLEX_ARRAY\s*\(\s*(\w+)\s*,\s*(\w+)\s*\)\s*;", r"\1 \2[];", text)
    text = re.sub(r"__(packed|attribute__\s*\(\(\s*packed\s*\)\))", "", text)
    return re.findall(r"#pragma[^\n]*|sizeof\s*\(\s*(?:struct|union)?\s*\w+\s*\)|0x[0-9a-fA-F]+|\w+|[{}\[\];:,=()*+\-]",
                      text)  # fmt: skip


class Parser:
    """Struct/union definitions and enums of one header."""

    anon = 0  # anonymous aggregates are numbered across headers so their class names never collide

    def __init__(self, text: str, consts: dict[str, int]) -> None:
        self.toks, self.pos, self.pack = tokens(preprocess(text)), 0, 0
        self.consts = consts
        self.structs: dict[str, tuple[str, list, int]] = {}  # name -> (kind, members, pack)

    def peek(self, k: int = 0) -> str:
        return self.toks[self.pos + k] if self.pos + k < len(self.toks) else ""

    def take(self, expect: str | None = None) -> str:
        t = self.toks[self.pos]
        if expect is not None and t != expect:
            raise SyntaxError(f"expected {expect!r}, got {t!r} near {' '.join(self.toks[self.pos - 5 : self.pos + 5])}")
        self.pos += 1
        return t

    def run(self) -> None:
        while self.pos < len(self.toks):
            t = self.peek()
            if t.startswith("#pragma"):
                m = re.search(r"pack\s*\(\s*(\d*)", t)
                if m:
                    self.pack = int(m.group(1) or 0)
                self.pos += 1
            elif t in ("struct", "union") and (self.peek(2) == "{" or self.peek(1) == "{"):
                self.aggregate()
                self.skip_statement()
            elif t == "typedef" and self.peek(1) in ("struct", "union") and "{" in (self.peek(2), self.peek(3)):
                self.take()
                name = self.aggregate()
                alias = self.take()
                if alias != ";":
                    self.structs[alias] = self.structs[name]
                self.skip_statement()
            elif (t == "enum" or (t == "typedef" and self.peek(1) == "enum")) and "{" in (
                self.peek(1),
                self.peek(2),
                self.peek(3),
            ):
                self.enum()
            else:
                self.pos += 1

    def skip_statement(self) -> None:
        while self.pos < len(self.toks) and self.take() != ";":
            pass

    def enum(self) -> None:
        while self.take() != "{":
            pass
        value = -1
        while self.peek() != "}":
            name = self.take()
            if self.peek() == "=":
                self.take()
                expr = []
                while self.peek() not in (",", "}"):
                    expr.append(self.take())
                value = self.eval(expr)
                if value is None:
                    value = -1  # an enum member we cannot evaluate is not one we use
            else:
                value += 1
            self.consts.setdefault(name, value)
            if self.peek() == ",":
                self.take()
        self.take("}")
        self.skip_statement()

    def eval(self, expr: list[str]) -> int | None:
        text = []
        for t in expr:
            m = re.fullmatch(r"sizeof\s*\(\s*(?:struct|union)?\s*(\w+)\s*\)", t)
            if m:
                text.append(str(ctypes.sizeof(build(self.structs, m.group(1), {}))))
            elif t in self.consts:
                text.append(str(self.consts[t]))
            elif re.fullmatch(r"0x[0-9a-fA-F]+|\d+|[()*+\-]", t):
                text.append(t)
            else:
                return None  # not needed unless a wanted struct uses it (build() then refuses it)
        try:
            return int(eval(" ".join(text), {"__builtins__": {}}))  # arithmetic on literals only (checked above)
        except SyntaxError:
            return None

    def aggregate(self) -> str:
        kind = self.take()
        name = self.take() if self.peek() != "{" else f"_anon{Parser.anon}"
        if name.startswith("_anon"):
            Parser.anon += 1
        self.take("{")
        members: list = []
        while self.peek() != "}":
            if self.peek() in ("struct", "union") and "{" in (self.peek(1), self.peek(2)):
                sub = self.aggregate()
                names = self.declarators()
                members += [(n, sub, dims, None) for n, dims, _ in names] or [(None, sub, [], None)]
                continue
            if self.peek() == "enum":  # C enums are int-sized
                self.take()
                self.take()
                ctype = "uint32_t"
            else:
                if self.peek() in ("struct", "union"):
                    self.take()
                ctype = self.take()
            for n, dims, bits in self.declarators():
                members.append((n, ctype, dims, bits))
        self.take("}")
        self.structs[name] = (kind, members, self.pack)
        return name

    def declarators(self) -> list[tuple[str, list[int], int | None]]:
        out = []
        while self.peek() != ";":
            name = self.take()
            dims: list[int] = []
            bits = None
            while self.peek() == "[":
                self.take()
                expr = []
                while self.peek() != "]":
                    expr.append(self.take())
                self.take("]")
                dims.append(self.eval(expr) if expr else 0)  # type: ignore[arg-type]
            if self.peek() == ":":
                self.take()
                bits = int(self.take(), 0)
            out.append((name, dims, bits))
            if self.peek() == ",":
                self.take()
        self.take(";")
        return out


def build(structs: dict, name: str, cache: dict) -> type:
    """A ctypes class for a parsed struct/union (members' types built first)."""
    if name in cache:
        return cache[name]  # type: ignore[no-any-return]
    kind, members, pack = structs[name]
    fields, anonymous = [], []
    for i, (mname, mtype, dims, bits) in enumerate(members):
        t = getattr(ctypes, CTYPES[mtype]) if mtype in CTYPES else build(structs, mtype, cache)
        if None in dims:
            raise SyntaxError(f"struct {name}: the size of member {mname} could not be evaluated")
        for d in reversed(dims):
            t = t * d
        field_name = mname or f"_u{i}"
        if mname is None:
            anonymous.append(field_name)
        fields.append((field_name, t, bits) if bits is not None else (field_name, t))
    ns: dict = {"_fields_": fields}
    if pack:
        ns["_pack_"] = pack
    if anonymous:
        ns["_anonymous_"] = anonymous
    cls = type(name, (ctypes.Union if kind == "union" else ctypes.Structure,), ns)
    cache[name] = cls
    return cls


def emit_struct(structs: dict, name: str, done: set[str], out: list[str]) -> None:
    if name in done:
        return
    kind, members, pack = structs[name]
    for _, mtype, _, _ in members:
        if mtype not in CTYPES:
            emit_struct(structs, mtype, done, out)
    done.add(name)
    base = "ctypes.Union" if kind == "union" else "ctypes.Structure"
    body = []
    if pack:
        body.append(f"    _pack_ = {pack}")
    anon = [f"_u{i}" for i, (m, *_) in enumerate(members) if m is None]
    if anon:
        body.append(f"    _anonymous_ = {tuple(anon)!r}")
    fields = []
    for i, (mname, mtype, dims, bits) in enumerate(members):
        t = f"ctypes.{CTYPES[mtype]}" if mtype in CTYPES else mtype
        for d in reversed(dims):
            t = f"{t} * {d}" if not t.startswith("(") else f"({t}) * {d}"
            t = f"({t})"
        fields.append(f'("{mname or f"_u{i}"}", {t}{f", {bits}" if bits is not None else ""})')
    body.append("    _fields_ = [" + ", ".join(fields) + "]")
    out += ["", "", f"class {name}({base}):", *body]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("linux", help="a Linux kernel tree (or its drivers/gpu/drm/amd directory)")
    args = ap.parse_args()
    root = amd_root(args.linux)
    OUT.mkdir(parents=True, exist_ok=True)
    for (ip, ver, subdir), patterns in REGISTERS.items():
        regs = registers(root, ip, ver, subdir, patterns)
        write_registers(ip, ver, subdir, regs)
        print(f"{ip}_{ver}: {len(regs)} registers")

    consts: dict[str, int] = {}
    for rel in CONSTANTS:
        text = preprocess(header(root, rel))
        for name, value in re.findall(r"#define\s+(\w+)\s+\(?(0x[0-9a-fA-F]+|\d+)[uUlL]*\)?\s*$", text, re.M):
            consts.setdefault(name, int(value, 0))
        Parser(header(root, rel), consts).run()  # enums
    parsed: dict[str, dict] = {}
    for rel in STRUCTS:
        p = Parser(header(root, rel), dict(consts))
        p.run()
        parsed[rel] = p.structs
    kept_consts = {}
    for rel, patterns in CONSTANTS.items():
        text = preprocess(header(root, rel))
        names = set(re.findall(r"\b(\w+)\b", text))
        for pat in patterns:
            hits = [n for n in names if re.fullmatch(pat, n) and n in consts]
            if not hits:
                sys.exit(f"{rel}: no constant matches {pat!r}")
            kept_consts.update({n: consts[n] for n in hits})
    lines = ['"""Constants and binary layouts of the AMD GPU interfaces the AM driver uses: generated by',
             "scripts/gen_amd_regs.py from the Linux amdgpu headers (MIT):", *(f"  {rel}" for rel in
             sorted({*CONSTANTS, *STRUCTS})), "Do not edit: rerun the script.", '"""', "",
             "import ctypes", ""]  # fmt: skip
    lines += [f"{n} = {v:#x}" for n, v in sorted(kept_consts.items())]
    done: set[str] = set()
    for rel, names in STRUCTS.items():
        cache: dict = {}
        for name in names:
            cls = build(parsed[rel], name, cache)
            if name in EXPECTED_SIZES and ctypes.sizeof(cls) != EXPECTED_SIZES[name]:
                sys.exit(f"{name}: {ctypes.sizeof(cls)} bytes, the header says {EXPECTED_SIZES[name]}")
            emit_struct(parsed[rel], name, done, lines)
    (OUT / "defs.py").write_text("\n".join(lines) + "\n")
    print(f"defs: {len(kept_consts)} constants, {len(done)} structs")
    files = [str(p) for p in OUT.glob("*.py") if p.name != "__init__.py"]
    ruff = shutil.which("ruff")
    cmd = [ruff, "format", "--quiet", *files] if ruff else ["hatch", "run", "lint:ruff", "format", "--quiet", *files]
    subprocess.run(cmd, check=False)


if __name__ == "__main__":
    main()
