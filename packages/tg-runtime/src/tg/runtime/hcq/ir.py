"""Building and printing the HCQ IR (`Ops.QUEUE`, `QCMD`, `PACKET`, `GETADDR`, `HCQBUF`; arguments in tg.ir.hcq).

Every stage of tg.runtime.hcq builds its nodes with these helpers, so the shapes the spec checks
(`tg.ir.spec.hcq_spec`) and the encoders match on are made in one place:

- slots: ``slot_param(slot, device, dtype, size)`` is ``PARAM(DEVICE)`` with arg ``(slot, size)``, the buffer
  argument of a slotted schedule (the same form `tg.runtime.jit` uses for JIT inputs);
- placeholders: ``hcqbuf(device, role, key)`` and the named ones (``timeline``, ``queue_signal``, ...);
- commands: ``wait``, ``signal``, ``timestamp``, ``barrier`` (QCMDs), ``queue`` (a QUEUE), ``packet``;
- values: ``epoch(device)`` (the runtime load of the device's next timeline value), ``getaddr``.

``format_queue`` / ``render_word`` print queues and packet words for ``DEBUG>=4`` and the golden tests.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tg.ir import HCQRole, Ops, QOp, QueueKey, UOp, dtypes
from tg.ir.dtype import DType, PtrDType

U64 = dtypes.uint64
SIGNAL_WORDS = 2  # a signal is 16 bytes: u64 value at +0, u64 timestamp at +8


def device_uop(device: str) -> UOp:
    """The DEVICE node of a device name."""
    return UOp(Ops.DEVICE, arg=device)


def slot_param(slot: int, device: str, dtype: DType, size: int) -> UOp:
    """The buffer of slot ``slot`` of a slotted schedule: ``size`` elements of ``dtype`` on ``device``."""
    return UOp(Ops.PARAM, dtype, (device_uop(device),), (slot, size))


def hcqbuf(device: str, role: str, key: object = None, dtype: DType = U64, size: int = 1) -> UOp:
    """A placeholder for link-time memory of ``role`` on ``device`` (``size`` elements of ``dtype``)."""
    return UOp(Ops.HCQBUF, dtype.ptr(size), (device_uop(device),), HCQRole(role, key))


def signal_buf(device: str, role: str = "signal", key: object = None) -> UOp:
    """A 16-byte signal (value, timestamp) of ``role`` (signal, timeline, sentinel, epoch) on ``device``."""
    return hcqbuf(device, role, key, U64, SIGNAL_WORDS)


def timeline(device: str) -> UOp:
    """The device's timeline signal ``T_d``."""
    return signal_buf(device, "timeline")


def timeline_value(device: str) -> UOp:
    """The host-visible word ``V_d``: the next epoch the device will signal."""
    return hcqbuf(device, "timeline_value")


def epoch_slot(device: str) -> UOp:
    """``E_Pd``: the epoch the last execution of this linked program signals on ``device``."""
    return signal_buf(device, "epoch")


def queue_signal(device: str, queue: str) -> UOp:
    """``Q``: the signal a queue sets to 1 + the index of a call other queues wait for (reset before each exec)."""
    return signal_buf(device, "signal", ("queue", queue))


def profile_signal(device: str, call: int, end: bool) -> UOp:
    """The signal whose timestamp word gets the start (or end) time of call ``call``."""
    return signal_buf(device, "signal", ("profile", call, "end" if end else "start"))


def epoch(device: str) -> UOp:
    """The epoch of this execution on ``device``: a runtime load of ``V_d`` (the submitter reads it first)."""
    return timeline_value(device).index(UOp.const(dtypes.int32, 0)).load()


def minus(x: UOp, k: int) -> UOp:
    """``x - k`` on unsigned words, as one ADD of the wrapped constant (``epoch(d) - 1`` in the listings)."""
    bits = 8 * x.dtype.itemsize
    return x + UOp.const(x.dtype, ((1 << bits) - k) % (1 << bits))


def getaddr(buf: UOp, device: str) -> UOp:
    """uint64: the address ``device`` uses for ``buf`` (a slot PARAM or an HCQBUF), plus a view's byte offset."""
    if buf.op is Ops.BUFFER_VIEW:
        return getaddr(buf.src[0], device) + UOp.const(U64, view_byte_offset(buf))
    if buf.op not in (Ops.PARAM, Ops.HCQBUF):
        raise TypeError(f"getaddr needs a slot PARAM, a BUFFER_VIEW of one or an HCQBUF, got {buf.op}")
    return UOp(Ops.GETADDR, U64, (buf,), device)


def view_byte_offset(buf: UOp) -> int:
    """The byte offset of a (nested) BUFFER_VIEW into its base (args are (size, offset in source elements))."""
    off = 0
    while buf.op is Ops.BUFFER_VIEW:
        off += int(buf.arg[1]) * buf.src[0].dtype.itemsize
        buf = buf.src[0]
    return off


def base_of(buf: UOp) -> UOp:
    """The base PARAM/BUFFER under BUFFER_VIEWs."""
    return buf.under((Ops.BUFFER_VIEW,))


def nbytes_of(buf: UOp) -> int:
    """Bytes of a slot PARAM (arg (slot, size)), a BUFFER (arg size) or a BUFFER_VIEW (arg (size, offset))."""
    if buf.op is Ops.PARAM:
        return int(buf.arg[1]) * buf.dtype.itemsize
    if buf.op is Ops.BUFFER:
        return int(buf.arg) * buf.dtype.itemsize
    if buf.op is Ops.BUFFER_VIEW:
        return int(buf.arg[0]) * buf.dtype.itemsize
    if buf.op is Ops.HCQBUF:
        assert isinstance(buf.dtype, PtrDType)
        return buf.dtype.size * buf.dtype.base.itemsize
    raise TypeError(f"not a buffer argument: {buf.op}")


def device_of(buf: UOp) -> str:
    """The device name of a buffer argument (its base's DEVICE)."""
    base = base_of(buf)
    dev = base.src[-1].arg if base.src and base.src[-1].op is Ops.DEVICE else None
    if not isinstance(dev, str):
        raise ValueError(f"a buffer argument must be on one device, got {dev!r}")
    return dev


# ---- commands -----------------------------------------------------------------------------------------------------


def _value(v: UOp | int) -> UOp:
    return v if isinstance(v, UOp) else UOp.const(U64, v)


def wait(sig: UOp, value: UOp | int) -> UOp:
    """WAIT until ``(sig & 0xFFFFFFFF) >= value``."""
    return UOp(Ops.QCMD, dtypes.void, (sig, _value(value)), QOp.WAIT)


def signal(sig: UOp, value: UOp | int) -> UOp:
    """SIGNAL: write ``value`` into ``sig`` after every earlier command of the queue completed."""
    return UOp(Ops.QCMD, dtypes.void, (sig, _value(value)), QOp.SIGNAL)


def timestamp(sig: UOp) -> UOp:
    """TIMESTAMP: the device tick count into the timestamp word (+8) of ``sig``."""
    return UOp(Ops.QCMD, dtypes.void, (sig,), QOp.TIMESTAMP)


def barrier() -> UOp:
    """BARRIER: make memory written by the host and other queues visible to the commands after it."""
    return UOp(Ops.QCMD, dtypes.void, (), QOp.BARRIER)


def queue(devices: str | tuple[str, ...], name: str, commands: Iterable[UOp]) -> UOp:
    """QUEUE: one submit of ``commands`` (QCMDs/CALLs, or PACKETs after encoding) to queue ``name``."""
    devs = (devices,) if isinstance(devices, str) else tuple(devices)
    return UOp(Ops.QUEUE, dtypes.void, tuple(commands), QueueKey(devs, name))


def packet(name: str, words: Sequence[UOp | int], dtype: DType = dtypes.uint32) -> UOp:
    """PACKET ``name`` of ``words`` (ints become CONSTs of ``dtype``; UOps keep their dtype, uint32 or uint64)."""
    ws = tuple(w if isinstance(w, UOp) else UOp.const(dtype, w) for w in words)
    return UOp(Ops.PACKET, dtypes.void, ws, name)


# ---- printing -----------------------------------------------------------------------------------------------------

_INFIX = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.AND: "&", Ops.OR: "|", Ops.SHR: ">>", Ops.SHL: "<<",
          Ops.IDIV: "/", Ops.MOD: "%", Ops.XOR: "^", Ops.CMPLT: "<"}  # fmt: skip


def buf_name(buf: UOp) -> str:
    """``s3`` for slot 3, ``T[CPU]`` for a timeline, ``Q[CPU COPY:0]`` for a queue signal, ``P2s[CPU]`` for the
    start timestamp signal of call 2, ``role[key]@CPU`` for other HCQBUFs."""
    if buf.op is Ops.PARAM:
        return f"s{buf.arg[0]}"
    if buf.op is Ops.BUFFER_VIEW:
        return f"{buf_name(base_of(buf))}+{view_byte_offset(buf)}"
    if buf.op is Ops.HCQBUF:
        dev, role, key = buf.src[0].arg, buf.arg.role, buf.arg.key
        if role == "timeline":
            return f"T[{dev}]"
        if role == "signal" and isinstance(key, tuple) and key[0] == "queue":
            return f"Q[{dev} {key[1]}]"
        if role == "signal" and isinstance(key, tuple) and key[0] == "profile":
            return f"P{key[1]}{key[2][0]}[{dev}]"
        return f"{buf.arg}@{dev}"
    return f"{buf.op.name.lower()}"


def render_word(w: UOp) -> str:
    """A packet word or QCMD value as text: constants, ``&s3`` (address of slot 3), ``&timeline@CPU``,
    ``e(CPU)`` (the epoch: the runtime timeline load), variables by name, infix arithmetic."""
    cache: dict[UOp, str] = {}
    for u in w.toposort():
        s = [cache.get(x, "") for x in u.src]
        if u.op is Ops.CONST:
            r = hex(u.arg) if isinstance(u.arg, int) and u.arg >= 4096 else str(u.arg)
        elif u.op is Ops.GETADDR:
            r = f"&{buf_name(u.src[0])}" + ("" if u.src[0].op is Ops.HCQBUF and u.src[0].src[0].arg == u.arg
                                            else f"[{u.arg}]")  # fmt: skip
        elif u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.HCQBUF:
            b = u.src[0].src[0]
            r = f"e({b.src[0].arg})" if b.arg.role == "timeline_value" else f"*{buf_name(b)}"
        elif u.op in (Ops.INDEX, Ops.HCQBUF, Ops.DEVICE, Ops.PARAM):
            r = buf_name(u) if u.op in (Ops.HCQBUF, Ops.PARAM) else ""
        elif u.op is Ops.DEFINE_VAR:
            r = str(u.arg[0])
        elif u.op is Ops.CAST:
            r = s[0] if u.src[0].dtype.itemsize <= u.dtype.itemsize else f"({u.dtype.name}){s[0]}"
        elif u.op in _INFIX:
            if u.op is Ops.ADD and u.src[1].op is Ops.CONST and isinstance(u.src[1].arg, int) and \
                    u.src[1].arg >= 1 << (8 * u.dtype.itemsize - 1):  # fmt: skip
                r = f"({s[0]}-{(1 << 8 * u.dtype.itemsize) - u.src[1].arg})"  # a wrapped subtraction
            else:
                r = f"({s[0]}{_INFIX[u.op]}{s[1]})"
        else:
            r = f"{u.op.name}({', '.join(s)})"
        cache[u] = r
    out = cache[w]
    return out[1:-1] if out.startswith("(") and out.endswith(")") and _balanced(out[1:-1]) else out


def _balanced(s: str) -> bool:
    depth = 0
    for c in s:
        depth += {"(": 1, ")": -1}.get(c, 0)
        if depth < 0:
            return False
    return depth == 0


def render_command(cmd: UOp) -> str:
    """One queue command as text: ``WAIT(timeline@CPU, epoch(CPU)-1)``, ``E_4(s1, s0)``, ``COPY s2<-s0``, or a
    packet ``NAME(w0, w1, ...)``."""
    if cmd.op is Ops.QCMD:
        args = [buf_name(cmd.src[0])] if cmd.src else []
        args += [render_word(v) for v in cmd.src[1:]]
        return f"{cmd.arg.name}({', '.join(args)})" if args else cmd.arg.name
    if cmd.op is Ops.CALL:
        body, args = cmd.src[0], [buf_name(a) for a in cmd.src[1:]]
        if body.op is Ops.COPY:
            return f"COPY {args[0]}<-{args[1]}"
        name = getattr(body.arg, "name", None) or body.op.name
        return f"{name}({', '.join(args)})"
    if cmd.op is Ops.PACKET:
        return f"{cmd.arg}({', '.join(render_word(w) for w in cmd.src)})"
    return cmd.op.name


def format_queue(q: UOp, width: int = 110) -> str:
    """``DEV QUEUE    cmd; cmd; ...`` for one QUEUE, wrapped at ``width`` columns between commands."""
    return _wrap(f"{q.arg!s:<14s}", [render_command(c) for c in q.src], width)


def _wrap(head: str, parts: list[str], width: int) -> str:
    lines, line = [], head
    for i, p in enumerate(parts):
        piece = p + (";" if i < len(parts) - 1 else "")
        if len(line) + 1 + len(piece) > width and line.strip():
            lines.append(line)
            line = " " * len(head)
        line += " " + piece
    lines.append(line)
    return "\n".join(lines)


def format_queues(queues: Iterable[UOp], width: int = 110) -> str:
    """Each QUEUE as ``format_queue`` (non-QUEUE steps, host calls, as ``HOST <call>``)."""
    lines = []
    for q in queues:
        lines.append(format_queue(q, width) if q.op is Ops.QUEUE else f"{'HOST':<14s} {render_command(q)}")
    return "\n".join(lines)


def is_ptr(dtype: DType) -> bool:
    """Whether ``dtype`` is a pointer dtype (HCQBUFs carry one)."""
    return isinstance(dtype, PtrDType)
