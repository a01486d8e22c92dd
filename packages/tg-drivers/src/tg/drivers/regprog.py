"""Register programs: a straight-line sequence of 32-bit register operations run as one unit.

A hardware transaction is often "save these registers, write modified values, check a status, trigger, poll, read the
result". Run op by op over a remote transport that costs one network round trip per read. A `RegisterProgram` states
the whole sequence up front, including writes computed from values read earlier in the same program and a check that
stops it early, so a transport can execute it in one go: `RemoteMMIO` sends it as one `MMIO_BATCH` request (one round
trip), every other view runs it locally, op by op, in exactly the order given.

```python
prog = RegisterProgram()
saved = prog.read32(0x10)                      # slot 0
prog.write32_from(0x10, saved, and_mask=~0x80)  # clear bit 7 of the value just read
prog.expect32(0x14, mask=1, want=1)             # stop here unless bit 0 of 0x14 is set
block = prog.read(0x100, 16)
result = run_program(view, prog)
result.values[saved], result.complete, result.blocks[block]
```
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = [
    "OP_EXPECT32",
    "OP_READ",
    "OP_READ32",
    "OP_WRITE32",
    "OP_WRITE32_FROM",
    "ProgramResult",
    "RegisterProgram",
    "post_writes",
    "run_program",
]

# op codes on the wire (one 16-byte record per op: "<BBHIQ" = op, slot, size, offset, value)
OP_READ32 = 1  # read a dword into the next value slot
OP_WRITE32 = 2  # write value (low 32 bits)
OP_WRITE32_FROM = 3  # write (values[slot] & and_mask) | or_value; value = and_mask | or_value << 32
OP_EXPECT32 = (
    4  # read a dword into the next slot; stop the program unless (v & mask) == want; value = mask | want << 32
)
OP_READ = 5  # read `size` bytes (a multiple of 4) into the next block
OP_CODES = frozenset({OP_READ32, OP_WRITE32, OP_WRITE32_FROM, OP_EXPECT32, OP_READ})
OP_RECORD = struct.Struct("<BBHIQ")
MAX_BLOCK = 4096  # largest single OP_READ
MAX_SLOTS = 256  # value slots are addressed by a u8
_U32 = 0xFFFFFFFF


class RegisterWindow(Protocol):
    """What a program needs to run locally: aligned dword reads/writes and block reads (an `MMIOView` has them)."""

    def read32(self, off: int) -> int: ...

    def write32(self, off: int, value: int) -> None: ...

    def read(self, off: int, n: int) -> bytes: ...


@dataclass
class ProgramResult:
    """What a program produced: `executed` ops (fewer than all when an `expect32` stopped it), the dword `values` of
    its reads and expects in order, and the byte `blocks` of its block reads."""

    executed: int
    total: int
    values: list[int] = field(default_factory=list)
    blocks: list[bytes] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """True when every op ran (no `expect32` stopped the program)."""
        return self.executed == self.total


class RegisterProgram:
    """A list of register ops; each builder method returns the slot (reads), block (block reads) or op index."""

    def __init__(self) -> None:
        self.ops: list[tuple[int, int, int, int, int]] = []  # (op, slot, size, offset, value)
        self.slots = 0
        self.nblocks = 0
        self.read_bytes = 0

    def _add(self, op: int, offset: int, value: int = 0, slot: int = 0, size: int = 0) -> int:
        if offset < 0 or offset % 4 or offset > _U32:
            raise ValueError(f"register offset must be a 4-aligned u32, got {offset:#x}")
        self.ops.append((op, slot, size, offset, value))
        return len(self.ops) - 1

    def _new_slot(self) -> int:
        if self.slots >= MAX_SLOTS:
            raise ValueError(f"a register program holds at most {MAX_SLOTS} read values")
        self.slots += 1
        self.read_bytes += 4
        return self.slots - 1

    def read32(self, offset: int) -> int:
        """Read the dword at `offset`; returns its value slot."""
        slot = self._new_slot()
        self._add(OP_READ32, offset)
        return slot

    def write32(self, offset: int, value: int) -> int:
        """Write `value` (masked to 32 bits) to `offset`; returns the op index."""
        return self._add(OP_WRITE32, offset, value & _U32)

    def write32_from(self, offset: int, slot: int, and_mask: int = _U32, or_value: int = 0) -> int:
        """Write `(values[slot] & and_mask) | or_value` to `offset`; `slot` must come from an earlier read."""
        if not 0 <= slot < self.slots:
            raise ValueError(f"slot {slot} has not been read yet")
        return self._add(OP_WRITE32_FROM, offset, (and_mask & _U32) | (or_value & _U32) << 32, slot)

    def expect32(self, offset: int, mask: int, want: int) -> int:
        """Read the dword at `offset` into a slot (returned); the program stops after it unless `v & mask == want`."""
        slot = self._new_slot()
        self._add(OP_EXPECT32, offset, (mask & _U32) | (want & _U32) << 32)
        return slot

    def read(self, offset: int, size: int) -> int:
        """Read `size` bytes (4..4096, a multiple of 4) at `offset`; returns the block index."""
        if not 0 < size <= MAX_BLOCK or size % 4:
            raise ValueError(f"block reads must be 4..{MAX_BLOCK} bytes, a multiple of 4; got {size}")
        self._add(OP_READ, offset, size=size)
        self.nblocks += 1
        self.read_bytes += size
        return self.nblocks - 1

    def extend(self, other: RegisterProgram, writes: dict[int, int] | None = None) -> tuple[int, int, int]:
        """Append `other`'s ops (a template built once, appended many times) and return where they start: `(first op
        index, first value slot, first block index)`. Its value slots and blocks are numbered after this program's,
        and `writes` gives new values (masked to 32 bits) for some of its `write32` ops, by their index in `other`."""
        if self.slots + other.slots > MAX_SLOTS:
            raise ValueError(f"a register program holds at most {MAX_SLOTS} read values")
        op_base, slot_base, block_base = len(self.ops), self.slots, self.nblocks
        ops = [
            rec if rec[0] != OP_WRITE32_FROM else (rec[0], rec[1] + slot_base, rec[2], rec[3], rec[4])
            for rec in other.ops
        ]
        for index, value in (writes or {}).items():
            op, slot, size, offset, _ = other.ops[index]
            if op != OP_WRITE32:
                raise ValueError(f"op {index} of the appended program is not a write32")
            ops[index] = (op, slot, size, offset, value & _U32)
        self.ops += ops
        self.slots += other.slots
        self.nblocks += other.nblocks
        self.read_bytes += other.read_bytes
        return op_base, slot_base, block_base

    # ---- execution ---------------------------------------------------------------------------------------------------

    def run_local(self, window: RegisterWindow) -> ProgramResult:
        """Run op by op on `window`. An exception escapes with the partial result as `exc.program_result`."""
        result = ProgramResult(0, len(self.ops))
        try:
            _execute(window, self.ops, result)
        except BaseException as exc:
            exc.program_result = result  # type: ignore[attr-defined]
            raise
        return result

    def encode(self, base: int = 0) -> bytes:
        """The `MMIO_BATCH` payload, with every offset moved by `base`."""
        return b"".join(
            OP_RECORD.pack(op, slot, size, offset + base, value) for op, slot, size, offset, value in self.ops
        )

    def decode(self, executed: int, data: bytes) -> ProgramResult:
        """Rebuild the result of a remote run from its executed-op count and its trailing data."""
        if not 0 <= executed <= len(self.ops):
            raise ValueError(f"batch reply says {executed} ops ran, the program has {len(self.ops)}")
        result = ProgramResult(executed, len(self.ops))
        pos = 0
        for op, _, size, _, _ in self.ops[:executed]:
            if op in (OP_READ32, OP_EXPECT32):
                (v,) = struct.unpack_from("<I", data, pos)
                result.values.append(v)
                pos += 4
            elif op == OP_READ:
                result.blocks.append(bytes(data[pos : pos + size]))
                pos += size
        if pos != len(data):
            raise ValueError(f"batch reply carries {len(data)} bytes, its {executed} ops produce {pos}")
        return result


def decode_ops(payload: bytes) -> list[tuple[int, int, int, int, int]]:
    """Split an `MMIO_BATCH` payload into `(op, slot, size, offset, value)` records (server side); ValueError if
    malformed: a partial record, an unknown op, a slot not read before, a bad block size or an unaligned offset."""
    if len(payload) % OP_RECORD.size:
        raise ValueError(f"MMIO_BATCH payload must be a multiple of {OP_RECORD.size} bytes, got {len(payload)}")
    ops = [OP_RECORD.unpack_from(payload, i) for i in range(0, len(payload), OP_RECORD.size)]
    slots = 0
    for i, (op, slot, size, offset, _) in enumerate(ops):
        if op not in OP_CODES:
            raise ValueError(f"MMIO_BATCH op {i}: unknown op code {op}")
        if offset % 4:
            raise ValueError(f"MMIO_BATCH op {i}: offset {offset:#x} is not 4-aligned")
        if op == OP_WRITE32_FROM and slot >= slots:
            raise ValueError(f"MMIO_BATCH op {i}: slot {slot} has not been read yet")
        if op == OP_READ and not (0 < size <= MAX_BLOCK and size % 4 == 0):
            raise ValueError(f"MMIO_BATCH op {i}: block size {size} must be 4..{MAX_BLOCK}, a multiple of 4")
        if op in (OP_READ32, OP_EXPECT32):
            slots += 1
            if slots > MAX_SLOTS:
                raise ValueError(f"MMIO_BATCH op {i}: more than {MAX_SLOTS} read values")
    return ops


def _execute(window: RegisterWindow, ops: list[tuple[int, int, int, int, int]], result: ProgramResult) -> None:
    """The one interpreter of register ops, used locally and by the server; fills `result` as it goes."""
    values, blocks = result.values, result.blocks
    for op, slot, size, offset, value in ops:
        result.executed += 1
        if op == OP_READ32:
            values.append(window.read32(offset) & _U32)
        elif op == OP_WRITE32:
            window.write32(offset, value & _U32)
        elif op == OP_WRITE32_FROM:
            window.write32(offset, (values[slot] & value) | (value >> 32))
        elif op == OP_EXPECT32:
            got = window.read32(offset) & _U32
            values.append(got)
            if got & value & _U32 != value >> 32:
                return
        else:
            blocks.append(bytes(window.read(offset, size)))


def run_ops(window: RegisterWindow, ops: list[tuple[int, int, int, int, int]]) -> tuple[int, bytes]:
    """Execute decoded ops on a view (server side); return `(executed, trailing data)` in op order."""
    result = ProgramResult(0, len(ops))
    _execute(window, ops, result)
    out = bytearray()
    values, blocks = iter(result.values), iter(result.blocks)
    for op, *_ in ops[: result.executed]:
        if op in (OP_READ32, OP_EXPECT32):
            out += struct.pack("<I", next(values))
        elif op == OP_READ:
            out += next(blocks)
    return result.executed, bytes(out)


def post_writes(window: Any, writes: list[tuple[int, int]]) -> bool:
    """Send `(offset, value)` dword writes as one posted program when `window` can (`post_program`); return whether
    it did. Otherwise the caller writes them itself (and can keep going past a failing one)."""
    poster = getattr(window, "post_program", None)
    if poster is None:
        return False
    program = RegisterProgram()
    for offset, value in writes:
        program.write32(offset, value)
    return bool(poster(program))


def run_program(window: Any, program: RegisterProgram) -> ProgramResult:
    """Run `program` on `window`: in one round trip when the window can (`run_program` method), else op by op."""
    runner = getattr(window, "run_program", None)
    if runner is not None:
        return runner(program)
    return program.run_local(window)
