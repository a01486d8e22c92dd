"""Stage S4 of the HCQ pipeline: sort the patch words of the encoded blocks into classes.

- link: addresses of HCQBUFs (signals, command buffers, programs, rings) and constant expressions; written once,
  at link;
- input: the address of a slot buffer (+ a view's byte offset); per execution the host writes the input table (one
  u64 per (slot, device)) and the submitter copies its entries into the words;
- value: expressions of variables (kernel int arguments, launch dimensions, copy sizes), computed per execution by
  the submitter;
- epoch: expressions of the epoch (the runtime load of ``V_d``), computed per execution by the submitter.

Input words of the simple forms (the address, its low or high 32 bits) are gathered: a destination block with more
than ``GATHER_MIN`` of them gets a loop over a ``patch_pairs`` table (u64 quadruples: word index, input-table index,
byte offset, part) instead of one store per word, so the submitter's code does not grow with the program.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from tg.ir import Ops, UOp, dtypes
from tg.runtime.hcq.encode import Block

GATHER_MIN = 16  # more input words than this in one block: a gather loop over a table instead of straight stores


class PatchClass(Enum):
    """When a patch word gets its value (see the module docstring)."""

    LINK = "link"
    INPUT = "input"
    VALUE = "value"
    EPOCH = "epoch"


def classify(word: UOp) -> PatchClass:
    """The class of one patch word: epoch, else value, else input, else link (a word mixing classes is computed by
    the submitter and takes the latest of its classes)."""
    ops = {u.op for u in word.toposort()}
    if Ops.LOAD in ops:
        return PatchClass.EPOCH
    if Ops.DEFINE_VAR in ops:
        return PatchClass.VALUE
    if any(u.op is Ops.GETADDR and u.src[0].op is Ops.PARAM for u in word.toposort()):
        return PatchClass.INPUT
    return PatchClass.LINK


# parts of an address a gathered input word holds
PART_FULL, PART_LOW, PART_HIGH = 0, 1, 2


def input_form(word: UOp) -> tuple[int, str, int, int] | None:
    """(slot, device, byte offset, part) of an input word of a simple form: ``&slot + off`` as the word itself
    (uint64 words), its low 32 bits or its high 32 bits (uint32 words); None for anything else."""
    part = PART_FULL
    if word.op is Ops.CAST and word.dtype is dtypes.uint32 and word.src[0].dtype is dtypes.uint64:
        word, part = word.src[0], PART_LOW
        if word.op is Ops.SHR and word.src[1].op is Ops.CONST and word.src[1].arg == 32:
            word, part = word.src[0], PART_HIGH
        elif word.op is Ops.AND and word.src[1].op is Ops.CONST and word.src[1].arg == 0xFFFFFFFF:
            word = word.src[0]
    elif word.dtype is not dtypes.uint64:
        return None
    offset = 0
    if word.op is Ops.ADD and word.src[1].op is Ops.CONST:
        word, offset = word.src[0], int(word.src[1].arg)
    if word.op is Ops.GETADDR and word.src[0].op is Ops.PARAM:
        return int(word.src[0].arg[0]), str(word.arg), offset, part
    return None


@dataclass
class Gather:
    """A gather loop of one block: ``entries`` are (word index, input-table index, byte offset, part)."""

    block: Block
    entries: list[tuple[int, int, int, int]]
    table: UOp  # the HCQBUF of role patch_pairs holding the entries (4 u64 each)


@dataclass
class PatchPlan:
    """The patch words of a compiled program by class.

    ``link`` words are written once at link; ``runtime`` words (input, value, epoch, in block order) are computed by
    the submitter, except the input words in ``gathers`` (a loop per block). ``inputs`` lists the input table:
    entry i is the address of slot ``inputs[i][0]`` as device ``inputs[i][1]`` sees it.
    """

    link: list[tuple[Block, int, UOp]] = field(default_factory=list)
    runtime: list[tuple[Block, int, UOp, PatchClass]] = field(default_factory=list)
    gathers: list[Gather] = field(default_factory=list)
    inputs: list[tuple[int, str]] = field(default_factory=list)

    def counts(self) -> dict[PatchClass, int]:
        """How many words of each class (gathered input words counted as input)."""
        out = {c: 0 for c in PatchClass}
        out[PatchClass.LINK] = len(self.link)
        for _, _, _, c in self.runtime:
            out[c] += 1
        out[PatchClass.INPUT] += sum(len(g.entries) for g in self.gathers)
        return out

    def input_index(self, slot: int, device: str) -> int:
        """The input-table index of (slot, device), added on first use."""
        key = (slot, device)
        try:
            return self.inputs.index(key)
        except ValueError:
            self.inputs.append(key)
            return len(self.inputs) - 1


def plan_patches(blocks: list[Block]) -> PatchPlan:
    """S4: classify every patch word of ``blocks``; input words of simple forms become gather loops in blocks with
    more than GATHER_MIN of them."""
    from tg.runtime.hcq import ir

    plan = PatchPlan()
    for block in blocks:
        words = [(off, w, classify(w)) for off, w in block.patches]
        simple = [(off, w, f) for off, w, c in words if c is PatchClass.INPUT and (f := input_form(w)) is not None]
        gathered: set[int] = set()
        if len(simple) > GATHER_MIN:
            entries = []
            for off, _, (slot, dev, offset, part) in simple:
                entries.append((off // block.word_dtype.itemsize, plan.input_index(slot, dev), offset, part))
                gathered.add(off)
            table = ir.hcqbuf(block.device, "patch_pairs", block.buf.arg.key, dtypes.uint64, 4 * len(entries))
            plan.gathers.append(Gather(block, entries, table))
        for off, w, c in words:
            if off in gathered:
                continue
            if c is PatchClass.LINK:
                plan.link.append((block, off, w))
            else:
                plan.runtime.append((block, off, w, c))
                for u in w.toposort():
                    if u.op is Ops.GETADDR and u.src[0].op is Ops.PARAM:
                        plan.input_index(int(u.src[0].arg[0]), str(u.arg))
    return plan
