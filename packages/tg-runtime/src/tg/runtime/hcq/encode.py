"""Stage S3 of the HCQ pipeline: encode each QUEUE for its device, by the device's rule table.

A device describes its queues with :class:`QueueSpec` and gives ``pm_encode``, a PatternMatcher whose rules turn
one queue command (a ``QCMD``, a kernel ``CALL(PROGRAM)``, a ``CALL(COPY)``) into ``PACKET``s, called with an
:class:`EncodeCtx`. A rule returns a PACKET, a ``LINEAR`` of PACKETs (several packets) or ``NOOP`` (nothing to
send, e.g. a BARRIER on coherent host memory). Encoders may put argument data in memory of its own
(``ctx.data_block``: AMD kernel arguments), addressed by a link-time ``GETADDR`` word.

Encoder contract (every device): (a) each command's memory writes are visible to later commands of the same queue,
and to the host after a later SIGNAL on that queue; (b) WAIT compares ``(value & 0xFFFFFFFF) >= ref``; (c) SIGNAL
writes the value with release semantics; (d) TIMESTAMP writes a u64 tick count at signal + 8 after all earlier
commands completed.

``make_block`` packs the words of a queue's packets into a :class:`Block`: CONST words go into the blob, every
other word becomes a patch (byte offset, word UOp) that stage S4 classifies. Block sizes are static, so the ring
space a submit needs is known at compile time.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tg.ir import Ops, UOp, dtypes
from tg.ir.dtype import DType
from tg.runtime.hcq import ir


@dataclass(frozen=True)
class QueueSpec:
    """A device queue as the compiler sees it.

    ``kind`` is ``compute`` or ``copy``; ``word_dtype`` the type of a command word (uint32 for PM4/SDMA, uint64 for
    the CPU worker); ``ring_words`` the ring capacity in words; ``entry_words`` the fixed size of one ring entry in
    words (the CPU worker: 64; 0 = packets of any length); a submit larger than the ring is refused at compile time.
    """

    kind: str
    word_dtype: DType
    ring_words: int
    entry_words: int = 0

    def __post_init__(self) -> None:
        if self.kind not in ("compute", "copy"):
            raise ValueError(f"QueueSpec.kind must be 'compute' or 'copy', got {self.kind!r}")
        if self.word_dtype not in (dtypes.uint32, dtypes.uint64):
            raise ValueError(f"QueueSpec.word_dtype must be uint32 or uint64, got {self.word_dtype}")


@dataclass
class Block:
    """Memory of a compiled program that the link step fills and executions patch: a command buffer (one per
    submit) or a data block an encoder asked for (kernel arguments).

    ``buf`` is its HCQBUF (size in words of ``word_dtype``), ``blob`` the initial bytes (CONST words), ``patches``
    the other words as (byte offset, word UOp), ``packets`` (name, first word, word count) for listings.
    """

    buf: UOp
    word_dtype: DType
    blob: bytes
    patches: list[tuple[int, UOp]]
    packets: list[tuple[str, int, int]] = field(default_factory=list)
    align: int = 128

    @property
    def device(self) -> str:
        """The device whose memory holds the block."""
        return str(self.buf.src[0].arg)

    @property
    def nbytes(self) -> int:
        """Size in bytes."""
        return len(self.blob)

    @property
    def nwords(self) -> int:
        """Size in words."""
        return len(self.blob) // self.word_dtype.itemsize


@dataclass
class EncodeCtx:
    """What an encoder rule gets as ``ctx``: the device and queue it encodes for, the device's static ``facts``
    (arch, register offsets, limits), and ``data_block`` for argument memory. ``submit`` is the index of the QUEUE in
    its batch: data blocks of different submits to one queue are different memory."""

    device: str
    queue: str
    facts: Mapping[str, Any]
    blocks: list[Block] = field(default_factory=list)
    submit: int = 0

    def data_block(self, role: str, words: Sequence[UOp | int], dtype: DType = dtypes.uint32, align: int = 128) -> UOp:
        """Memory holding ``words`` (CONSTs or patch expressions), e.g. kernel arguments; returns its HCQBUF (use
        ``ir.getaddr(buf, device)`` for its address in a packet)."""
        ws = [w if isinstance(w, UOp) else UOp.const(dtype, w) for w in words]
        key = (self.queue, self.submit, len(self.blocks), len(ws))
        buf = ir.hcqbuf(self.device, role, key, dtype, max(len(ws), 1))
        self.blocks.append(make_block(buf, [ir.packet(role, ws)], dtype, align))
        return buf


def encode_command(cmd: UOp, dev: Any, ctx: EncodeCtx) -> list[UOp]:
    """The PACKETs of one queue command by ``dev.pm_encode``."""
    res = dev.pm_encode.rewrite(cmd, ctx)
    if res is None:
        raise RuntimeError(f"{dev.device} has no encoder rule for {ir.render_command(cmd)} on {ctx.queue}")
    if res.op is Ops.PACKET:
        return [res]
    if res.op is Ops.NOOP:
        return []
    if res.op in (Ops.LINEAR, Ops.GROUP) and all(p.op is Ops.PACKET for p in res.src):
        return list(res.src)
    raise RuntimeError(f"{dev.device} encoder returned {res.op} for {ir.render_command(cmd)}; expected PACKETs")


def make_block(buf: UOp, packets: Sequence[UOp], word_dtype: DType, align: int = 128) -> Block:
    """Pack ``packets`` into a Block: CONST words into the blob, other words as patches at their byte offsets."""
    blob = bytearray()
    patches: list[tuple[int, UOp]] = []
    layout: list[tuple[str, int, int]] = []
    wsize = word_dtype.itemsize
    for p in packets:
        first = len(blob) // wsize
        for w in p.src:
            if w.dtype is not word_dtype:
                raise RuntimeError(f"packet {p.arg} has a {w.dtype} word; this queue's words are {word_dtype}")
            if w.op is Ops.CONST:
                blob += struct.pack("<I" if wsize == 4 else "<Q", w.arg)
            else:
                patches.append((len(blob), w))
                blob += bytes(wsize)
        layout.append((str(p.arg), first, len(p.src)))
    return Block(buf, word_dtype, bytes(blob), patches, layout, align)


@dataclass
class EncodedQueue:
    """One encoded submit: its QUEUE of PACKETs, its command buffer and the data blocks its encoder made."""

    queue: UOp
    cmdbuf: Block
    data: list[Block]

    @property
    def key(self) -> tuple[str, str]:
        """(device, queue name)."""
        return self.queue.arg.device, self.queue.arg.name


def encode_queue(q: UOp, dev: Any, index: int) -> EncodedQueue:
    """S3 for one QUEUE on HCQ device ``dev``: PACKETs by ``dev.pm_encode``, then its command buffer (an HCQBUF of
    role ``cmdbuf`` keyed by the submit index ``index``)."""
    name = q.arg.name
    spec: QueueSpec | None = dev.queues.get(name)
    if spec is None:
        raise RuntimeError(f"{dev.device} has no queue {name}; its queues: {', '.join(dev.queues)}")
    ctx = EncodeCtx(dev.device, name, dev.encode_facts, submit=index)
    packets = [p for cmd in q.src for p in encode_command(cmd, dev, ctx)]
    if spec.entry_words:
        for p in packets:
            if len(p.src) != spec.entry_words:
                raise RuntimeError(f"{dev.device} {name}: packet {p.arg} has {len(p.src)} words, entries have "
                                   f"{spec.entry_words}")  # fmt: skip
    nwords = sum(len(p.src) for p in packets)
    if nwords > spec.ring_words:
        unit = "dword" if spec.word_dtype.itemsize == 4 else "word"
        raise RuntimeError(f"{name} submit of {nwords} {unit}s exceeds the {spec.ring_words}-{unit} ring of "
                           f"{dev.device}; lower HCQ_BATCH_SIZE")  # fmt: skip
    buf = ir.hcqbuf(dev.device, "cmdbuf", (name, index), spec.word_dtype, max(nwords, 1))
    return EncodedQueue(ir.queue(q.arg.devices, name, packets), make_block(buf, packets, spec.word_dtype), ctx.blocks)


def decode_block(block: Block) -> str:
    """The packets of a block, one per line: ``name  w0 w1 ...`` (patch words rendered as expressions)."""
    fmt = "<I" if block.word_dtype.itemsize == 4 else "<Q"
    ws = block.word_dtype.itemsize
    patched = {off // ws: w for off, w in block.patches}
    lines = []
    for name, first, n in block.packets:
        words = []
        for k in range(first, first + n):
            words.append(f"[{ir.render_word(patched[k])}]" if k in patched else
                         hex(struct.unpack_from(fmt, block.blob, k * ws)[0]))  # fmt: skip
        padding = 0
        while len(words) - padding > 1 and words[len(words) - 1 - padding] == "0x0":
            padding += 1
        if padding > 2:  # fixed-size entries: trailing zero words shown as a count
            words = [*words[: len(words) - padding], f"(+{padding} zero words)"]
        lines.append(f"  {name:<12s} {' '.join(words)}")
    return "\n".join(lines)
