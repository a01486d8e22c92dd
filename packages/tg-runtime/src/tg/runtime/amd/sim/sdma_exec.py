"""The mock GPU's copy queue: executes SDMA 6.0 packets from a ring in order (specs/amd.md 3.4, 3.8), parsing them
with the tables of tg.runtime.amd.sdma.

COPY_LINEAR copies bytes through GPU memory; WRITE stores its data dwords; FENCE writes a dword; TRAP raises an
interrupt with its context id; POLL_REGMEM compares a memory dword (``==``, ``!=``, ``>=`` under a mask) and stops the
queue there until it holds; TIMESTAMP writes the GPU clock; NOP skips its count (a zero dword is a one-dword NOP,
which is how the submitter fills the ring's tail before wrapping). Pointers are in bytes. Unknown packets, packets
running past the submitted bytes and register polls raise MockError naming the packet and its byte position.
"""

from __future__ import annotations

from tg.runtime.amd import sdma
from tg.runtime.amd.sim.gpu import MockError, MockGPU

COPY_CHUNK = 64 << 20  # bytes moved per read/write of a large copy


class SDMAExecutor:
    """An SDMA queue of ``gpu``: the ring at ``ring_va`` (``ring_bytes``), read and write pointers (u64, in bytes) in
    GPU memory at ``rptr_va`` and ``wptr_va``."""

    def __init__(self, gpu: MockGPU, ring_va: int, ring_bytes: int, rptr_va: int, wptr_va: int,
                 name: str = "SDMA0") -> None:  # fmt: skip
        if ring_bytes <= 0 or ring_bytes % 32:
            raise MockError(f"{gpu.name} {name}: an SDMA ring is a non-zero multiple of 32 bytes, got {ring_bytes}")
        self.gpu, self.name = gpu, name
        self.ring_va, self.ring_bytes, self.rptr_va, self.wptr_va = ring_va, ring_bytes, rptr_va, wptr_va
        self.halted = False
        self.waiting = ""
        self.handlers = {(p.op, p.sub_op): getattr(self, f"_{p.name.lower()}") for p in sdma.PACKETS.values()}

    def describe(self) -> str:
        state = "halted" if self.halted else (f"waiting in {self.waiting}" if self.waiting else "idle")
        return (f"{self.name} rptr {self.gpu.read_u64(self.rptr_va)} wptr {self.gpu.read_u64(self.wptr_va)}: "
                f"{state}")  # fmt: skip

    def step(self) -> bool:
        """Execute packets until the ring is empty or a POLL_REGMEM is unsatisfied; whether anything was executed."""
        rptr, wptr = self.gpu.read_u64(self.rptr_va), self.gpu.read_u64(self.wptr_va)
        if wptr - rptr > self.ring_bytes or (wptr - rptr) % 4:
            raise MockError(f"{self.gpu.name} {self.name}: write pointer {wptr} is not a whole number of dwords "
                            f"within a ring ({self.ring_bytes} bytes) of the read pointer {rptr}")  # fmt: skip
        moved = False
        while rptr < wptr:
            n = self._packet(rptr, wptr)
            if n == 0:
                break
            rptr += n
            moved = True
        self.gpu.write_u64(self.rptr_va, rptr)
        return moved

    def _dwords(self, pos: int, n: int) -> tuple[int, ...]:
        off = pos % self.ring_bytes
        if off + 4 * n <= self.ring_bytes:
            return self.gpu.read_dwords(self.ring_va + off, n)
        first = (self.ring_bytes - off) // 4
        return self.gpu.read_dwords(self.ring_va + off, first) + self.gpu.read_dwords(self.ring_va, n - first)

    def _packet(self, pos: int, end: int) -> int:
        """Execute the packet at byte ``pos``; its size in bytes, or 0 when it must wait."""
        (head,) = self._dwords(pos, 1)
        where = f"{self.gpu.name} {self.name} ring byte {pos} (at {self.ring_va + pos % self.ring_bytes:#x})"
        p = sdma.header_of(head)
        if p is None:
            f = sdma.unpack(sdma.HEADER_FIELDS, head)
            raise MockError(f"{where}: unknown SDMA packet op {f['op']} sub-op {f['sub_op']} (header {head:#010x})")
        if p.name == "NOP":
            n = 1 + sdma.unpack(sdma.NOP_HEADER_FIELDS, head)["count"]
        elif p.name == "WRITE":
            if pos + 16 > end:
                raise MockError(f"{where}: SDMA WRITE header without its address and count")
            n = 4 + (self._dwords(pos + 12, 1)[0] & 0xFFFFF) + 1
        else:
            assert p.body is not None
            n = 1 + len(p.body)
        if pos + 4 * n > end:
            raise MockError(f"{where}: SDMA {p.name} needs {4 * n} bytes, only {end - pos} were submitted")
        words = self._dwords(pos, n)
        if self.handlers[(p.op, p.sub_op)](words, where) is False:
            return 0
        return 4 * n

    # ---- packets -----------------------------------------------------------------------------------------------------

    def _nop(self, words: tuple[int, ...], where: str) -> None:
        pass

    def _copy_linear(self, words: tuple[int, ...], where: str) -> None:
        nbytes = sdma.unpack(sdma.COPY_COUNT_FIELDS, words[1])["count"] + 1
        src, dst = words[3] | words[4] << 32, words[5] | words[6] << 32
        for off in range(0, nbytes, COPY_CHUNK):
            n = min(COPY_CHUNK, nbytes - off)
            self.gpu.mem.write(dst + off, self.gpu.mem.read(src + off, n))

    def _write(self, words: tuple[int, ...], where: str) -> None:
        addr = words[1] | words[2] << 32
        for i, w in enumerate(words[4:]):
            self.gpu.write_u32(addr + 4 * i, w)

    def _fence(self, words: tuple[int, ...], where: str) -> None:
        self.gpu.write_u32(words[1] | words[2] << 32, words[3])

    def _trap(self, words: tuple[int, ...], where: str) -> None:
        self.gpu.on_interrupt(sdma.unpack(sdma.TRAP_FIELDS, words[1])["int_context"])

    def _poll_regmem(self, words: tuple[int, ...], where: str) -> bool:
        h = sdma.unpack(sdma.POLL_HEADER_FIELDS, words[0])
        if not h["mem_poll"]:
            raise MockError(f"{where}: SDMA POLL_REGMEM on a register is not modelled (mem_poll 0)")
        func = sdma.POLL_FUNCTIONS.get(h["func"])
        if func is None:
            raise MockError(f"{where}: SDMA POLL_REGMEM function {h['func']} is not modelled (3, 4, 5)")
        addr, ref, mask = words[1] | words[2] << 32, words[3], words[4]
        value = self.gpu.read_u32(addr) & mask
        ok = value == ref if func == "==" else value != ref if func == "!=" else value >= ref
        self.waiting = "" if ok else f"POLL_REGMEM(mem at {addr:#x} & {mask:#x} {func} {ref}), now {value}"
        return ok

    def _timestamp(self, words: tuple[int, ...], where: str) -> None:
        self.gpu.write_u64(words[1] | words[2] << 32, self.gpu.clock())
