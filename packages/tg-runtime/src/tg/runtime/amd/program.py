"""AMD GPU code objects (gfx11, wave32): header checks, kernel descriptor, kernarg layout (specs/amd.md 2.3-2.4).

`CodeObject(lib, name)` takes the relocatable ELF that LLVM (llvmlite) or clang writes for one kernel, checks that
it is a gfx1100 HSA code object tg can load without a linker, finds the kernel (FUNC symbol `name`) and its 64-byte
descriptor (OBJECT `name.kd`), links the image at address 0 (`link(base)` relinks it for a device address) and
validates the descriptor: LDS within 64 KiB, the kernel-argument pointer and wave32 enabled, no kernarg preload, and
none of the ABI features tg's launch does not provide (dispatch pointer, queue pointer, private segment buffer,
dispatch id, flat scratch init, private segment size), each refused with an error naming it.

Kernel arguments (2.4): 8-byte buffer addresses in `ProgramSpec.globals` order, then the int32 variables in
`ProgramSpec.vars` order at natural alignment; `kernarg_layout` gives the offsets, `CodeObject.check_kernargs`
compares the descriptor's `kernarg_size` with it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from tg.runtime.device import CompileError
from tg.runtime.elf import AMDGPU_RELOCATIONS, EM_AMDGPU, ET_REL, ElfObject, LinkedImage, Section, link

ELFOSABI_AMDGPU_HSA = 0x40
ABI_VERSIONS = {2: "v4", 3: "v5", 4: "v6"}  # EI_ABIVERSION -> code object version
GFX_MACHINES = {0x41: "gfx1100"}  # e_flags & 0xFF (EF_AMDGPU_MACH)
LDS_MAX = 65536
SECTION_ALIGN = {".text": 256, ".rodata": 64}

# kernel_code_properties bits (amd.md 2.3)
KCP_PRIVATE_SEGMENT_BUFFER, KCP_DISPATCH_PTR, KCP_QUEUE_PTR, KCP_KERNARG_SEGMENT_PTR = 0, 1, 2, 3
KCP_DISPATCH_ID, KCP_FLAT_SCRATCH_INIT, KCP_PRIVATE_SEGMENT_SIZE, KCP_WAVEFRONT_SIZE32 = 4, 5, 6, 10
UNSUPPORTED_FEATURES = {
    KCP_PRIVATE_SEGMENT_BUFFER: "private segment buffer", KCP_DISPATCH_PTR: "dispatch ptr", KCP_QUEUE_PTR: "queue ptr",
    KCP_DISPATCH_ID: "dispatch id", KCP_FLAT_SCRATCH_INIT: "flat scratch init",
    KCP_PRIVATE_SEGMENT_SIZE: "private segment size",
}  # fmt: skip


def _bits(value: int, lo: int, hi: int) -> int:
    return (value >> lo) & ((1 << (hi - lo + 1)) - 1)


@dataclass(frozen=True)
class KernelDescriptor:
    """The 64-byte kernel descriptor (`name.kd`) of a gfx11 kernel, with its packed register fields decoded."""

    group_segment_fixed_size: int  # LDS bytes
    private_segment_fixed_size: int  # scratch bytes per lane
    kernarg_size: int
    kernel_code_entry_byte_offset: int  # entry = descriptor address + this
    compute_pgm_rsrc3: int
    compute_pgm_rsrc1: int
    compute_pgm_rsrc2: int
    kernel_code_properties: int
    kernarg_preload: int

    SIZE = 64

    @classmethod
    def parse(cls, data: bytes) -> KernelDescriptor:
        """Decode the 64 descriptor bytes (after relocation)."""
        if len(data) != cls.SIZE:
            raise CompileError(f"kernel descriptor must be {cls.SIZE} bytes, got {len(data)}")
        group, private, kernarg = struct.unpack_from("<III", data, 0)
        (entry,) = struct.unpack_from("<q", data, 0x10)
        rsrc3, rsrc1, rsrc2 = struct.unpack_from("<III", data, 0x2C)
        props, preload = struct.unpack_from("<HH", data, 0x38)
        return cls(group, private, kernarg, entry, rsrc3, rsrc1, rsrc2, props, preload)

    # compute_pgm_rsrc1
    @property
    def vgprs(self) -> int:
        """VGPRs a wave32 lane uses (granule 8)."""
        return (_bits(self.compute_pgm_rsrc1, 0, 5) + 1) * 8

    @property
    def float_mode(self) -> int:
        return _bits(self.compute_pgm_rsrc1, 12, 19)

    @property
    def ieee_mode(self) -> bool:
        return bool(_bits(self.compute_pgm_rsrc1, 23, 23))

    @property
    def dx10_clamp(self) -> bool:
        return bool(_bits(self.compute_pgm_rsrc1, 21, 21))

    @property
    def wgp_mode(self) -> bool:
        return bool(_bits(self.compute_pgm_rsrc1, 29, 29))

    # compute_pgm_rsrc2
    @property
    def scratch_enabled(self) -> bool:
        return bool(_bits(self.compute_pgm_rsrc2, 0, 0))

    @property
    def user_sgprs(self) -> int:
        """SGPRs preloaded from COMPUTE_USER_DATA_* (the kernarg address is in the first two)."""
        return _bits(self.compute_pgm_rsrc2, 1, 5)

    @property
    def workgroup_id_enabled(self) -> tuple[bool, bool, bool]:
        """Whether TGID_X/Y/Z are loaded into the SGPRs after the user SGPRs (in that order)."""
        return tuple(bool(_bits(self.compute_pgm_rsrc2, b, b)) for b in (7, 8, 9))  # type: ignore[return-value]

    @property
    def workgroup_info_enabled(self) -> bool:
        return bool(_bits(self.compute_pgm_rsrc2, 10, 10))

    @property
    def workitem_id_dims(self) -> int:
        """1 + the highest work-item id dimension the kernel reads (v0 packs x | y << 10 | z << 20)."""
        return _bits(self.compute_pgm_rsrc2, 11, 12) + 1

    # kernel_code_properties
    @property
    def wave32(self) -> bool:
        return bool(_bits(self.kernel_code_properties, KCP_WAVEFRONT_SIZE32, KCP_WAVEFRONT_SIZE32))

    @property
    def kernarg_pointer(self) -> bool:
        return bool(_bits(self.kernel_code_properties, KCP_KERNARG_SEGMENT_PTR, KCP_KERNARG_SEGMENT_PTR))


def kernarg_layout(nbufs: int, nvars: int) -> tuple[list[int], int]:
    """(offset of each argument, total bytes): `nbufs` 8-byte addresses, then `nvars` int32 values (amd.md 2.4)."""
    offsets = [8 * i for i in range(nbufs)] + [8 * nbufs + 4 * j for j in range(nvars)]
    return offsets, 8 * nbufs + 4 * nvars


def _min_align(sec: Section) -> int:
    return SECTION_ALIGN.get(sec.name, 1)


class CodeObject:
    """A loaded gfx11 code object: its linked image, the kernel's entry and descriptor (see the module docstring)."""

    def __init__(self, lib: bytes, name: str) -> None:
        self.name = name
        self.elf = ElfObject(lib, f"code object of kernel {name}")
        self._check_header()
        kernel, kd = self.elf.symbol(name), self.elf.symbol(f"{name}.kd")
        if kernel is None or kd is None:
            raise CompileError(f"code object has no kernel {name!r} (FUNC {name} and OBJECT {name}.kd); symbols: "
                               f"{', '.join(s.name for s in self.elf.symbols if s.name) or 'none'}")  # fmt: skip
        if kd.size != KernelDescriptor.SIZE:
            raise CompileError(f"kernel {name}: descriptor {name}.kd is {kd.size} bytes, expected 64")
        self.linked = self.link(0)
        self.kd_offset = self.linked.symbols[f"{name}.kd"]
        self.descriptor = KernelDescriptor.parse(self.linked.image[self.kd_offset : self.kd_offset + 64])
        self.entry_offset = self.kd_offset + self.descriptor.kernel_code_entry_byte_offset
        if self.entry_offset != self.linked.symbols[name]:
            raise CompileError(f"kernel {name}: descriptor entry offset points at {self.entry_offset:#x}, the kernel "
                               f"symbol is at {self.linked.symbols[name]:#x}")  # fmt: skip
        self._check_descriptor()

    @property
    def image(self) -> bytes:
        """The image linked at address 0 (position-independent apart from R_AMDGPU_ABS64 relocations)."""
        return self.linked.image

    def link(self, base: int) -> LinkedImage:
        """The image relinked for device address `base`."""
        return link(self.elf, AMDGPU_RELOCATIONS, self.name, base, _min_align)

    def _check_header(self) -> None:
        e, where = self.elf, f"code object of kernel {self.name}"
        if e.machine != EM_AMDGPU:
            raise CompileError(f"{where}: e_machine {e.machine:#x} is not EM_AMDGPU (0xe0)")
        if e.osabi != ELFOSABI_AMDGPU_HSA:
            raise CompileError(f"{where}: EI_OSABI {e.osabi:#x} is not AMDGPU HSA (0x40)")
        if e.abi_version not in ABI_VERSIONS:
            raise CompileError(f"{where}: ABI version {e.abi_version} is not supported (2-4: code object v4-v6)")
        if e.type != ET_REL:
            raise CompileError(f"{where}: e_type {e.type} is not REL (tg loads relocatable objects without a linker)")
        if (mach := e.flags & 0xFF) not in GFX_MACHINES:
            raise CompileError(
                f"{where}: e_flags machine {mach:#x} is not supported ({', '.join(GFX_MACHINES.values())})"
            )

    def _check_descriptor(self) -> None:
        kd, where = self.descriptor, f"kernel {self.name}"
        if kd.group_segment_fixed_size > LDS_MAX:
            raise CompileError(f"{where}: too many resources: LDS ({kd.group_segment_fixed_size} bytes > {LDS_MAX})")
        for bit, feature in UNSUPPORTED_FEATURES.items():
            if kd.kernel_code_properties >> bit & 1:
                raise CompileError(f"{where}: unsupported kernel ABI feature: {feature} (kernel_code_properties "
                                   f"{kd.kernel_code_properties:#06x})")  # fmt: skip
        if not kd.kernarg_pointer:
            raise CompileError(f"{where}: the kernel does not take the kernarg segment pointer (properties bit 3)")
        if not kd.wave32:
            raise CompileError(
                f"{where}: the kernel is not wave32 (properties bit 10); tg runs gfx11 kernels in wave32"
            )
        if kd.kernarg_preload:
            raise CompileError(f"{where}: kernarg preload ({kd.kernarg_preload:#x}) is not supported")

    def check_kernargs(self, nbufs: int, nvars: int) -> None:
        """Raise CompileError unless the descriptor's kernarg_size is the layout of `nbufs` buffers and `nvars`
        int32 variables."""
        _, size = kernarg_layout(nbufs, nvars)
        if self.descriptor.kernarg_size != size:
            raise CompileError(f"kernel {self.name}: kernarg_size {self.descriptor.kernarg_size} is not the layout of "
                               f"{nbufs} buffers and {nvars} int32 variables ({size} bytes)")  # fmt: skip

    def __repr__(self) -> str:
        return f"<CodeObject {self.name} {len(self.image)} bytes, entry {self.entry_offset:#x}>"
