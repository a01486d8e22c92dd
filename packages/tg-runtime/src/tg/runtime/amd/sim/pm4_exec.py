"""The mock GPU's compute queue: executes PM4 packets from a ring and the indirect buffers it names, in order
(specs/amd.md 3.8), parsing them with the tables of tg.runtime.amd.pm4.

- register packets (SET_SH_REG, SET_UCONFIG_REG) write the GPU's register file;
- ACQUIRE_MEM and EVENT_WRITE change nothing (the simulation is coherent and runs one dispatch at a time);
- RELEASE_MEM writes the low 32 bits, 64 bits or the GPU clock to memory and, with ``int_sel`` 2, raises an interrupt
  carrying its context id (KFD: sets that event);
- WAIT_REG_MEM compares a memory dword (``==``, ``!=``, ``>=`` under a mask); when unsatisfied the queue stops there
  and retries at the next pump; the register write-then-wait form (the HDP flush) passes at once;
- INDIRECT_BUFFER runs the buffer before the packets after it (a WAIT inside it resumes inside it);
- DISPATCH_DIRECT launches the grid on the emulator with the registers loaded (entry, resource descriptors, user
  data, work-group size, LDS, scratch per lane from COMPUTE_TMPRING_SIZE).

Anything else (another packet type, an unknown opcode, a body length that does not match the table, an IB without
its valid bit, a wave64 dispatch) raises MockError naming the packet and its dword position.
"""

from __future__ import annotations

from dataclasses import dataclass

from tg.runtime.amd import pm4
from tg.runtime.amd.sim.gpu import MockError, MockGPU

R = pm4.GC_REGS
MAX_IB_DEPTH = 4


@dataclass
class _Stream:
    """Dwords the command processor fetches: the ring (``wrap``, positions are the running write/read pointers) or
    an indirect buffer (positions from 0 to its size). ``words`` holds [pos, end) as fetched: submitted commands do
    not change."""

    va: int
    size_dw: int
    pos: int
    end: int
    wrap: bool
    where: str
    words: tuple[int, ...] = ()
    first: int = 0  # the position of words[0]

    def address(self, pos: int) -> int:
        return self.va + 4 * (pos % self.size_dw if self.wrap else pos)


class PM4Executor:
    """A PM4 compute queue of ``gpu``: the ring at ``ring_va`` (``ring_bytes``), read and write pointers (u64, in
    dwords) in GPU memory at ``rptr_va`` and ``wptr_va``."""

    def __init__(self, gpu: MockGPU, ring_va: int, ring_bytes: int, rptr_va: int, wptr_va: int,
                 name: str = "COMPUTE") -> None:  # fmt: skip
        if ring_bytes <= 0 or ring_bytes % 16:
            raise MockError(f"{gpu.name} {name}: a PM4 ring must be a non-zero multiple of 16 bytes, got {ring_bytes}")
        self.gpu, self.name = gpu, name
        self.ring_va, self.ring_dw, self.rptr_va, self.wptr_va = ring_va, ring_bytes // 4, rptr_va, wptr_va
        self.ibs: list[_Stream] = []  # indirect buffers being executed, innermost last
        self.current: _Stream | None = None  # the stream of the packet being executed
        self.halted = False
        self.waiting = ""  # the WAIT the queue stopped at, for hang messages
        self.handlers = {p.opcode: getattr(self, f"_{p.name.lower()}") for p in pm4.PACKETS.values()}

    def describe(self) -> str:
        rptr = self.gpu.read_u64(self.rptr_va)
        state = "halted" if self.halted else (f"waiting in {self.waiting}" if self.waiting else "idle")
        return f"{self.name} rptr {rptr} wptr {self.gpu.read_u64(self.wptr_va)}: {state}"

    # ---- fetching ----------------------------------------------------------------------------------------------------

    def step(self) -> bool:
        """Execute packets until the ring is empty or a WAIT is unsatisfied; whether anything was executed."""
        moved = False
        while True:
            if self.ibs:
                ib = self.ibs[-1]
                if ib.pos >= ib.end:
                    self.ibs.pop()
                    continue
                if not self._packet(ib):
                    return moved
                moved = True
                continue
            rptr, wptr = self.gpu.read_u64(self.rptr_va), self.gpu.read_u64(self.wptr_va)
            if rptr >= wptr:
                return moved
            if wptr - rptr > self.ring_dw:
                raise MockError(f"{self.gpu.name} {self.name}: write pointer {wptr} is more than a ring "
                                f"({self.ring_dw} dwords) ahead of the read pointer {rptr}")  # fmt: skip
            ring = self._fetch(_Stream(self.ring_va, self.ring_dw, rptr, wptr, True, "ring"))
            while ring.pos < ring.end and not self.ibs:
                if not self._packet(ring):
                    self.gpu.write_u64(self.rptr_va, ring.pos)
                    return moved
                moved = True
            self.gpu.write_u64(self.rptr_va, ring.pos)

    def _fetch(self, s: _Stream) -> _Stream:
        """The stream with its dwords [pos, end) read from memory (the ring's wrap in two reads)."""
        n, pos = s.end - s.pos, s.pos
        if not s.wrap or pos % s.size_dw + n <= s.size_dw:
            s.words = self.gpu.read_dwords(s.address(pos), n)
        else:
            first = s.size_dw - pos % s.size_dw
            s.words = self.gpu.read_dwords(s.address(pos), first) + self.gpu.read_dwords(s.va, n - first)
        s.first = pos
        return s

    def _packet(self, s: _Stream) -> bool:
        """Execute the packet at ``s.pos`` and advance; False (not advanced) when it must wait."""
        at = s.pos - s.first
        head = s.words[at]
        kind, n, op = head >> 30, (head >> 16 & 0x3FFF) + 1, head >> 8 & 0xFF  # HEADER_FIELDS
        if kind == 2:  # a type-2 filler dword
            s.pos += 1
            return True
        p = pm4.BY_OPCODE.get(op) if kind == 3 else None
        if p is None or (p.body is not None and n != len(p.body)) or s.pos + 1 + n > s.end:
            raise MockError(self._bad(s, head))
        self.current = s
        if self.handlers[op](s.words[at + 1 : at + 1 + n]) is False:
            return False
        s.pos += 1 + n
        return True

    def where(self, s: _Stream | None = None) -> str:
        """``GPU queue ring|IB dword N (at address)`` of the packet being executed (or of ``s``'s next one)."""
        s = s if s is not None else self.current
        return f"{self.gpu.name} {self.name} " + (f"{s.where} dword {s.pos} (at {s.address(s.pos):#x})" if s else "")

    def _bad(self, s: _Stream, head: int) -> str:
        h = pm4.unpack(pm4.HEADER_FIELDS, head)
        where, n, p = self.where(s), h["count"] + 1, pm4.BY_OPCODE.get(h["opcode"])
        if h["type"] != 3:
            return f"{where}: PM4 packet type {h['type']} (header {head:#010x}); only type 3 is executed"
        if p is None:
            return f"{where}: unknown PM4 opcode {h['opcode']:#x} (header {head:#010x})"
        if p.body is not None and n != len(p.body):
            return f"{where}: PM4 {p.name} with {n} body dwords; it has {len(p.body)} ({', '.join(p.body)})"
        return f"{where}: PM4 {p.name} needs {n} body dwords, only {s.end - s.pos - 1} were submitted"

    # ---- packets -----------------------------------------------------------------------------------------------------

    def _nop(self, body: tuple[int, ...]) -> None:
        pass

    def _set_sh_reg(self, body: tuple[int, ...]) -> None:
        self._set_regs(pm4.SH_REG_BASE, body, "SET_SH_REG")

    def _set_uconfig_reg(self, body: tuple[int, ...]) -> None:
        self._set_regs(pm4.UCONFIG_REG_BASE, body, "SET_UCONFIG_REG")

    def _set_regs(self, base: int, body: tuple[int, ...], name: str) -> None:
        if len(body) < 2:
            raise MockError(f"{self.where()}: PM4 {name} needs a register offset and at least one value")
        reg = base + body[0]
        for i, v in enumerate(body[1:]):
            self.gpu.regs[reg + i] = v

    def _acquire_mem(self, body: tuple[int, ...]) -> None:
        pass  # coherent simulation: nothing to invalidate

    def _event_write(self, body: tuple[int, ...]) -> None:
        pass  # dispatches run to completion one at a time: a partial flush has nothing to wait for

    def _release_mem(self, body: tuple[int, ...]) -> None:
        ev = pm4.unpack(pm4.RELEASE_EVENT_FIELDS, body[0])
        sel = pm4.unpack(pm4.RELEASE_SELECT_FIELDS, body[1])
        if sel["dst_sel"] != 0:
            raise MockError(f"{self.where()}: PM4 RELEASE_MEM dst_sel {sel['dst_sel']} (only memory, 0, is modelled)")
        addr, data = body[2] | body[3] << 32, body[4] | body[5] << 32
        if sel["data_sel"] == pm4.DATA_LOW32:
            self.gpu.write_u32(addr, data)
        elif sel["data_sel"] == pm4.DATA_64:
            self.gpu.write_u64(addr, data)
        elif sel["data_sel"] == pm4.DATA_CLOCK:
            if ev["event_type"] != pm4.CACHE_FLUSH_AND_INV_TS_EVENT:
                raise MockError(
                    f"{self.where()}: PM4 RELEASE_MEM writes the clock only on CACHE_FLUSH_AND_INV_TS events"
                )
            self.gpu.write_u64(addr, self.gpu.clock())
        elif sel["data_sel"] != pm4.DATA_NONE:
            raise MockError(f"{self.where()}: PM4 RELEASE_MEM data_sel {sel['data_sel']} is not modelled")
        if sel["int_sel"] == pm4.INT_AFTER_WRITE:
            self.gpu.on_interrupt(body[6])
        elif sel["int_sel"] != pm4.INT_NONE:
            raise MockError(f"{self.where()}: PM4 RELEASE_MEM int_sel {sel['int_sel']} is not modelled")

    def _wait_reg_mem(self, body: tuple[int, ...]) -> bool:
        info = pm4.unpack(pm4.WAIT_INFO_FIELDS, body[0])
        func = pm4.WAIT_FUNCTIONS.get(info["function"])
        if func is None:
            raise MockError(f"{self.where()}: PM4 WAIT_REG_MEM function {info['function']} is not modelled (3, 4, 5)")
        ref, mask = body[3], body[4]
        if info["mem_space"] == 1:
            addr = body[1] | body[2] << 32
            value = self.gpu.read_u32(addr) & mask
            what = f"WAIT_REG_MEM(mem at {addr:#x} & {mask:#x} {func} {ref})"
        elif info["operation"] == 1:
            return True  # write the request register, then wait for its done register: the mock's flush is instant
        else:
            value = self.gpu.regs.get(body[1], 0) & mask
            what = f"WAIT_REG_MEM(reg {body[1]:#x} & {mask:#x} {func} {ref})"
        ok = value == ref if func == "==" else value != ref if func == "!=" else value >= ref
        self.waiting = "" if ok else f"{what}, now {value}"
        return ok

    def _indirect_buffer(self, body: tuple[int, ...]) -> None:
        ctl = pm4.unpack(pm4.IB_CONTROL_FIELDS, body[2])
        addr = body[0] | body[1] << 32
        if not ctl["valid"]:
            raise MockError(f"{self.where()}: PM4 INDIRECT_BUFFER without the valid bit (control {body[2]:#x})")
        if addr % 4 or ctl["size_dw"] == 0:
            raise MockError(
                f"{self.where()}: PM4 INDIRECT_BUFFER at {addr:#x} of {ctl['size_dw']} dwords "
                "(must be 4-byte aligned and non-empty)"
            )
        if len(self.ibs) >= MAX_IB_DEPTH:
            raise MockError(f"{self.where()}: indirect buffers nested deeper than {MAX_IB_DEPTH}")
        # the packet is consumed before the buffer runs (its caller advances past it): push it for the next fetch
        self.ibs.append(self._fetch(_Stream(addr, ctl["size_dw"], 0, ctl["size_dw"], False, f"IB {addr:#x}")))

    def _dispatch_direct(self, body: tuple[int, ...]) -> None:
        init = pm4.unpack(pm4.DISPATCH_INITIATOR_FIELDS, body[3])
        if not init["compute_shader_en"] or not init["cs_w32_en"]:
            raise MockError(f"{self.where()}: PM4 DISPATCH_DIRECT initiator {body[3]:#x}: the mock runs wave32 compute "
                            f"dispatches only (compute_shader_en and cs_w32_en set)")  # fmt: skip
        regs = self.gpu.regs
        entry = (regs.get(R["COMPUTE_PGM_LO"], 0) | regs.get(R["COMPUTE_PGM_HI"], 0) << 32) << 8
        rsrc1, rsrc2 = regs.get(R["COMPUTE_PGM_RSRC1"], 0), regs.get(R["COMPUTE_PGM_RSRC2"], 0)
        user = [regs.get(R["COMPUTE_USER_DATA_0"] + i, 0) for i in range(rsrc2 >> 1 & 0x1F)]
        local = tuple(regs.get(R[f"COMPUTE_NUM_THREAD_{a}"], 0) for a in "XYZ")
        tmpring = pm4.unpack(pm4.TMPRING_FIELDS, regs.get(R["COMPUTE_TMPRING_SIZE"], 0))
        lds = (rsrc2 >> pm4.RSRC2_LDS_SHIFT & 0x1FF) * pm4.LDS_BLOCK
        if entry == 0 or min(local) <= 0:
            raise MockError(
                f"{self.where()}: PM4 DISPATCH_DIRECT with COMPUTE_PGM {entry:#x} and work-group size {local} "
                "(registers not loaded)"
            )
        groups = (body[0], body[1], body[2])
        self.gpu.dispatch(entry, rsrc1, rsrc2, user, groups, local, lds, tmpring["wavesize"] * 256 // 64)  # type: ignore[arg-type]
