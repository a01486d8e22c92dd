"""The RDNA3 emulator runs the corpus kernels (LLVM 22 and clang-15 objects) and matches numpy."""

from __future__ import annotations

import pathlib
import struct

import numpy as np
import pytest

from tg.runtime.amd.program import CodeObject
from tg.runtime.amd.sim.decode import EmulatorError
from tg.runtime.amd.sim.emu import HostMemory, code_in_memory, dispatch, launch, pack_args, run_code

CORPUS = pathlib.Path(__file__).parent / "amd_corpus"
OUT, IN1, IN2, IN3, IN4 = 0x10_0000, 0x20_0000, 0x30_0000, 0x40_0000, 0x50_0000


def obj(name: str) -> bytes:
    return (CORPUS / f"{name}.o").read_bytes()


def run(name: str, kernel: str, arrays: list[np.ndarray], groups: tuple, local: tuple, variables: tuple = ()) -> list:
    addrs = [OUT, IN1, IN2, IN3, IN4][: len(arrays)]
    bufs = {a: bytearray(x.tobytes()) for a, x in zip(addrs, arrays, strict=False)}
    launch(obj(name), kernel, bufs, pack_args(addrs, variables), groups, local)
    return [np.frombuffer(bytes(bufs[a]), x.dtype) for a, x in zip(addrs, arrays, strict=False)]


def bits(x: np.ndarray) -> np.ndarray:
    return x.view(np.uint32 if x.itemsize == 4 else np.uint64 if x.itemsize == 8 else np.uint16)


rng = np.random.default_rng(0)


def test_elementwise_f32_bit_exact() -> None:
    a, b = rng.standard_normal(128).astype(np.float32), rng.standard_normal(128).astype(np.float32)
    a[:4] = [np.nan, np.inf, -0.0, 1e-40]
    (out, *_) = run("elem_f32", "E_f32", [np.zeros(128, np.float32), a, b], (2, 1, 1), (64, 1, 1))
    c = a + b
    s = c * np.float32(3.5) - a
    x = np.fmax(s, np.float32(0))
    y = (x.astype(np.float64) * b + np.float64(-1.25)).astype(np.float32)  # exact fma of f32 values in f64
    t = np.floor(np.trunc(y))
    w = np.where(t < a, t, c)
    want = -np.where(w != w, np.float32(np.nan), w)
    np.testing.assert_array_equal(bits(out), bits(want.astype(np.float32)))


def test_integer_ops_with_bounds_and_int8_int64() -> None:
    n = 40
    a = rng.integers(-(2**31), 2**31, 64, dtype=np.int64).astype(np.int32)
    b = rng.integers(-1000, 1000, 64).astype(np.int32)
    b[b == 0] = 3
    b[0], a[0] = -1, -(2**31)  # INT_MIN / -1 wraps on the GPU
    i8 = rng.integers(-128, 128, 64).astype(np.int8)
    i64 = rng.integers(-(2**40), 2**40, 64).astype(np.int64)
    out, _, _, o8, o64 = run("elem_int", "E_int", [np.full(64, 7, np.int32), a, b, i8.copy(), i64.copy()], (2, 1, 1),
                             (32, 1, 1), (n,))  # fmt: skip
    A, B = a.astype(np.int64), b.astype(np.int64)
    q = np.trunc(A / B).astype(np.int64)
    q[0] = -(2**31)
    r = A - q * B
    uq, ur = (A & 0xFFFFFFFF) // 7, (B & 0xFFFFFFFF) % 10
    s = ((q + r) & 0xFFFFFFFF) ^ uq
    s = ((s << 3) & 0xFFFFFFFF).astype(np.uint32).view(np.int32).astype(np.int64) >> 1
    s = ((s & 0xFFFFFFFF) >> ur) & 65535 | ur
    s = np.where(s > 100, s, -5)
    mx = np.maximum(s, A)
    want = np.minimum(mx & 0xFFFFFFFF, B & 0xFFFFFFFF).astype(np.uint32).view(np.int32)
    np.testing.assert_array_equal(out[:n], want[:n])
    np.testing.assert_array_equal(out[n:], np.full(64 - n, 7, np.int32))  # lanes past n are masked off
    np.testing.assert_array_equal(o8[:n], (i8.astype(np.int64) * A).astype(np.int8)[:n])
    m64 = i64 * A
    d64 = np.trunc(m64 / 1000003).astype(np.int64)
    d64 = np.array([int(x / 1) if False else (abs(int(m)) // 1000003) * (1 if m >= 0 else -1) for x, m in
                    zip(d64, m64, strict=False)], np.int64)  # fmt: skip
    np.testing.assert_array_equal(o64[:n], (d64.view(np.uint64) >> np.uint64(5)).view(np.int64)[:n])


def test_reduction_through_lds_and_barrier() -> None:
    a = rng.standard_normal(3 * 1024).astype(np.float32)
    (out, _) = run("reduce_lds", "r_lds", [np.zeros(3, np.float32), a], (3, 1, 1), (64, 1, 1))
    want = []
    for g in range(3):
        acc = np.zeros(64, np.float32)
        for j in range(16):
            acc = acc + a[g * 1024 + j * 64 : g * 1024 + j * 64 + 64]
        s = np.float32(0)
        for v in acc:
            s = np.float32(s + v)
        want.append(s)
    np.testing.assert_array_equal(out, np.array(want, np.float32))


@pytest.mark.parametrize("k", [0, 5, 36, 40])
def test_private_array_in_scratch(k: int) -> None:
    a = rng.standard_normal(32 + 37).astype(np.float32)
    (out, _) = run("private", "priv", [np.zeros(32, np.float32), a], (1, 1, 1), (32, 1, 1), (k,))
    np.testing.assert_array_equal(out, a[np.arange(32) + k % 37])


def test_matmul_64_two_dimensional_grid() -> None:
    a, b = rng.standard_normal((64, 64)).astype(np.float32), rng.standard_normal((64, 64)).astype(np.float32)
    (out, *_) = run("matmul", "r_mm", [np.zeros(64 * 64, np.float32), a.ravel(), b.ravel()], (4, 4, 1), (16, 16, 1))
    # the kernel multiplies a[row, k:k+4] by the one value b[k, col] (a 4-wide accumulator), k = 0, 4, ..., 60
    want = a.reshape(64, 16, 4).transpose(0, 2, 1) @ b[::4]
    np.testing.assert_allclose(out.reshape(64, 64), want.sum(1), rtol=1e-5, atol=1e-4)


def test_half_and_double_kernels() -> None:
    a = rng.standard_normal(64).astype(np.float16)
    b = (rng.random(64) + 0.5).astype(np.float16)
    (out, *_) = run("elem_f16", "E_f16", [np.zeros(64, np.float16), a, b], (2, 1, 1), (32, 1, 1))
    assert np.isfinite(out.astype(np.float32)).sum() > 0  # transcendentals: checked loosely against f32 math
    a64, b64 = rng.standard_normal(64) * 100, rng.random(64) + 0.5
    (o64, *_) = run("elem_f64", "E_f64", [np.zeros(64), a64, b64], (2, 1, 1), (32, 1, 1))
    c = a64 + b64
    x = np.fmax(np.sqrt(c * 3.14159 / b64), 1.0)
    t = np.trunc(x * b64 + -1.0)
    w = np.where(t < a64, t, c)
    want = (np.trunc(w).astype(np.int64) * 7).astype(np.float64).astype(np.float32).astype(np.float64)
    np.testing.assert_array_equal(o64, want)


def test_clang15_objects_run() -> None:
    a, b = rng.standard_normal(128).astype(np.float32), rng.standard_normal(128).astype(np.float32)
    bufs = {OUT: bytearray(512), IN1: bytearray(a.tobytes()), IN2: bytearray(b.tobytes())}
    args = pack_args([OUT, IN1, IN2]) + struct.pack("<f", 2.5)
    launch(obj("clang15"), "cl_axpy", bufs, args, (2, 1, 1), (64, 1, 1))
    want = (np.float64(2.5) * a + b).astype(np.float32)  # fma: one rounding
    np.testing.assert_array_equal(np.frombuffer(bytes(bufs[OUT]), np.float32), want)
    ia = rng.integers(-(2**31), 2**31, 64, dtype=np.int64).astype(np.int32)
    ib = rng.integers(-50, 50, 64).astype(np.int32)
    out = run("clang15", "cl_idiv", [np.zeros(64, np.int32), ia, ib], (2, 1, 1), (32, 1, 1))[0]
    d = np.where(ib == 0, 1, ib).astype(np.int64)
    A = ia.astype(np.int64)
    q = np.trunc(A / d).astype(np.int64)
    q = np.array([(abs(x) // abs(y)) * (1 if (x >= 0) == (y > 0) else -1) for x, y in zip(A, d, strict=False)])
    want = (q + (A - np.trunc(A / 7).astype(np.int64) * 7) - ((A & 0xFFFFFFFF) >> 3)) & 0xFFFFFFFF
    r7 = np.array([x - (abs(x) // 7) * (1 if x >= 0 else -1) * 7 for x in A])
    want = ((q + r7 - ((A & 0xFFFFFFFF) >> 3)) & 0xFFFFFFFF).astype(np.uint32).view(np.int32)
    np.testing.assert_array_equal(out, want)
    r = rng.standard_normal(512).astype(np.float32)
    (red, _) = run("clang15", "cl_reduce", [np.zeros(2, np.float32), r], (2, 1, 1), (64, 1, 1))
    np.testing.assert_allclose(red, r.reshape(2, 256).sum(1), rtol=1e-5)


def test_invalid_instruction_patched_over_s_endpgm_fails_at_once_naming_it() -> None:
    blob = bytearray(obj("elem_f32"))
    i = blob.index(struct.pack("<I", 0xBFB00000))  # the first s_endpgm
    blob[i : i + 4] = struct.pack("<I", 0x7E01FE00)
    bufs = {OUT: bytearray(512), IN1: bytearray(512), IN2: bytearray(512)}
    with pytest.raises(EmulatorError, match="unknown rdna3 instruction word=0x7e01fe00"):
        launch(bytes(blob), "E_f32", bufs, pack_args([OUT, IN1, IN2]), (1, 1, 1), (64, 1, 1))


def test_out_of_bounds_access_names_lane_address_and_instruction() -> None:
    bufs = {OUT: bytearray(16), IN1: bytearray(512), IN2: bytearray(512)}  # output too small for 64 lanes
    with pytest.raises(
        EmulatorError, match=r"lane 4 of wave 0 \(group 0,0,0\) wrote 4 bytes at unmapped .*E_f32: global_store_b32"
    ):
        launch(obj("elem_f32"), "E_f32", bufs, pack_args([OUT, IN1, IN2]), (1, 1, 1), (64, 1, 1))


def test_runaway_loop_hits_the_watchdog(monkeypatch: pytest.MonkeyPatch) -> None:
    from tg.runtime.amd.sim import emu

    monkeypatch.setattr(emu, "MAX_STEPS_BETWEEN_BARRIERS", 50)
    a = rng.standard_normal(3 * 1024).astype(np.float32)
    with pytest.raises(EmulatorError, match="infinite loop"):
        run("reduce_lds", "r_lds", [np.zeros(3, np.float32), a], (1, 1, 1), (64, 1, 1))


def test_unknown_kernel_lists_the_kernels() -> None:
    with pytest.raises(EmulatorError, match=r"no kernel 'nope' .*symbols: .*E_f32\.kd"):
        launch(obj("elem_f32"), "nope", {}, b"", (1, 1, 1), (1, 1, 1))


def test_corpus_descriptors_give_the_launch_state() -> None:
    k = CodeObject(obj("private"), "priv").descriptor
    assert k.private_segment_fixed_size > 0 and k.scratch_enabled
    assert k.kernarg_pointer and k.wave32
    assert CodeObject(obj("reduce_lds"), "r_lds").descriptor.group_segment_fixed_size == 256


def _dispatch_from_memory(blob: bytes, kernel: str, bufs: dict[int, bytearray], local: tuple) -> None:
    """What a mock GPU does: the code object uploaded to GPU memory, dispatch given only the entry address."""
    base = 0x5000_0000
    co = CodeObject(blob, kernel)
    image = co.link(base)
    mem = HostMemory()
    for va, buf in bufs.items():
        mem.map(va, buf)
    mem.map(base, bytearray(image.image))
    args = bytearray(pack_args(sorted(bufs)) + bytes(256))
    mem.map(0x6000_0000, args)
    kd = co.descriptor
    dispatch(mem, base + co.entry_offset, kd.compute_pgm_rsrc1, kd.compute_pgm_rsrc2, [0x6000_0000, 0], (1, 1, 1),
             local, kd.group_segment_fixed_size, kd.private_segment_fixed_size, kernel=kernel)  # fmt: skip


def test_dispatch_reads_the_code_from_gpu_memory() -> None:
    a, b = rng.standard_normal(64).astype(np.float32), rng.standard_normal(64).astype(np.float32)
    bufs = {OUT: bytearray(256), IN1: bytearray(a.tobytes()), IN2: bytearray(b.tobytes())}
    _dispatch_from_memory(obj("elem_f32"), "E_f32", bufs, (64, 1, 1))
    want = bytearray(256)
    launch(obj("elem_f32"), "E_f32", {OUT: want, IN1: bytearray(a.tobytes()), IN2: bytearray(b.tobytes())},
           pack_args([OUT, IN1, IN2]), (1, 1, 1), (64, 1, 1))  # fmt: skip
    assert bufs[OUT] == want and any(want)
    entry = 0x5000_0000 + CodeObject(obj("elem_f32"), "E_f32").entry_offset
    code, base = code_in_memory(_image_memory(obj("elem_f32")), entry)
    assert base == entry
    assert code.endswith(struct.pack("<I", 0xBF9F0000)) and struct.pack("<I", 0xBFB00000) in code  # up to s_code_end


def _image_memory(blob: bytes) -> HostMemory:
    mem = HostMemory()
    mem.map(0x5000_0000, bytearray(CodeObject(blob, "E_f32").link(0x5000_0000).image))
    return mem


def test_an_invalid_word_in_gpu_memory_fails_at_once() -> None:
    blob = bytearray(obj("elem_f32"))
    i = blob.index(struct.pack("<I", 0xBFB00000))
    blob[i : i + 4] = struct.pack("<I", 0x7E01FE00)
    bufs = {OUT: bytearray(512), IN1: bytearray(512), IN2: bytearray(512)}
    with pytest.raises(EmulatorError, match="unknown rdna3 instruction word=0x7e01fe00 at pc=0x5000"):
        _dispatch_from_memory(bytes(blob), "E_f32", bufs, (64, 1, 1))


class _MappedRunMemory(HostMemory):
    """HostMemory that also tells where a mapped run ends, as the mock GPUs' memories do (read at once by
    code_in_memory, which remembers the text found in those bytes)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def read(self, va: int, n: int) -> bytes:
        self.reads += 1
        return super().read(va, n)

    def extent(self, va: int) -> int:
        buf, off = self._find(va, 1)
        return va - off + len(buf)


def test_code_in_memory_with_mapped_runs_matches_the_chunked_scan() -> None:
    blob = obj("elem_f32")
    entry = 0x5000_0000 + CodeObject(blob, "E_f32").entry_offset
    mem = _MappedRunMemory()
    mem.map(0x5000_0000, bytearray(CodeObject(blob, "E_f32").link(0x5000_0000).image))
    assert code_in_memory(mem, entry) == code_in_memory(_image_memory(blob), entry)
    mem.reads = 0
    assert code_in_memory(mem, entry) == code_in_memory(_image_memory(blob), entry)
    assert mem.reads == 1  # one read of the mapped run; the text's end is remembered for the same bytes
    buf, off = mem._find(entry, 4)
    i = bytes(buf).index(struct.pack("<I", 0xBFB00000), off)
    buf[i : i + 4] = struct.pack("<I", 0x7E01FE00)  # other bytes: scanned again, and the bad word fails at once
    with pytest.raises(EmulatorError, match="unknown rdna3 instruction word=0x7e01fe00 at pc=0x5000"):
        code_in_memory(mem, entry, "E_f32")


ENDPGM_WORD = 0xBFB00000
DS_LOAD_B32 = (0xD8D80000, 0x00000001)  # ds_load_b32 v0, v1 (llvm-mc-15)
DS_STORE_B32 = (0xD8340000, 0x00000201)  # ds_store_b32 v1, v2
SCRATCH_LOAD_B32 = (0xDC510000, 0x00FC0001)  # scratch_load_b32 v0, v1, off


@pytest.mark.parametrize(
    ("words", "kw", "message"),
    [
        (DS_LOAD_B32, {"lds_bytes": 64}, r"lane 3 .*read 4 bytes at LDS 0x40 outside 64 bytes.*ds_load_b32"),
        (DS_STORE_B32, {"lds_bytes": 64}, r"lane 3 .*wrote 4 bytes at LDS 0x40 outside 64 bytes.*ds_store_b32"),
        (SCRATCH_LOAD_B32, {"scratch_bytes": 64}, r"lane 3 .*read 4 bytes at scratch 0x40 outside 64 bytes"),
    ],
)
def test_lds_and_scratch_accesses_out_of_bounds_fault_naming_the_lane(
    words: tuple[int, int], kw: dict[str, int], message: str
) -> None:
    code = struct.pack("<3I", *words, ENDPGM_WORD)
    addrs = [0, 4, 60, 64] + [0] * 28  # lane 3 is the first one past the end
    with pytest.raises(EmulatorError, match=message):
        run_code(code, vgprs={1: addrs, 2: [7] * 32}, **kw)


def test_differential_compare_rules() -> None:
    from tg.ir.dtype import dtypes
    from tg.runtime.amd.sim.differential import compare

    def f32(*xs: float) -> bytes:
        return struct.pack(f"<{len(xs)}f", *xs)

    def ulps_up(x: float, k: int) -> float:
        return struct.unpack("<f", struct.pack("<i", struct.unpack("<i", struct.pack("<f", x))[0] + k))[0]

    want = f32(1.5, 100.0, float("nan"))
    assert compare(f32(1.5, 100.0, float("nan")), want, dtypes.float32) is None  # NaNs equal
    assert compare(f32(1.5, ulps_up(100.0, 1), float("nan")), want, dtypes.float32) is not None  # exact: 1 ulp fails
    assert compare(f32(1.5, ulps_up(100.0, 3), float("nan")), want, dtypes.float32, "approximate") is None
    # approximate results fed through more arithmetic: a few tens of ulps (within 64 eps of the value) still agree
    assert compare(f32(1.5, ulps_up(100.0, 40), float("nan")), want, dtypes.float32, "approximate") is None
    msg = compare(f32(1.5, 100.01, float("nan")), want, dtypes.float32, "approximate")
    assert msg is not None and "first at [1]" in msg
    assert compare(f32(1, 2), f32(1, 3), dtypes.float32, "approximate") is not None
    assert compare(bytes([1, 2]), bytes([1, 3]), dtypes.uint8, "approximate") is not None  # integers: exact always
    # a float reduction with hardware approximations: a small output cancelled out of large terms differs by a few eps
    # of the outputs' magnitude (too many of its own ulps for 'approximate' alone)
    sums, want = f32(1.4018733e-06, 2.5), f32(1.4018345e-06, 2.5)
    assert compare(sums, want, dtypes.float32, "approximate") is not None
    assert compare(sums, want, dtypes.float32, "approximate, reordered") is None
    assert compare(f32(1e-3, 2.5), want, dtypes.float32, "approximate, reordered") is not None


def test_transcendentals_match_the_python_device_on_tgs_polynomials() -> None:
    # float64 SIN and POW are tg's polynomials on the GPU (no instruction for them); the PYTHON device made to use the
    # same polynomials (TRANSCENDENTAL=2) is the reference, while its own math differs in the last bits (by up to ~130
    # ulps for tan in the tg-tensor suite)
    pytest.importorskip("llvmlite")
    from tg.runtime.amd.sim.differential import record_calls, replay
    from tg.tensor import Tensor

    x = np.linspace(-3, 3, 32)
    with record_calls() as rec:
        Tensor(x, device="PYTHON").sin().realize()
        (Tensor(np.abs(x) + 0.1, device="PYTHON") ** Tensor(x / 2, device="PYTHON")).realize()
    failures, counts = replay(rec.calls, listings=False)
    assert failures == [] and len(rec.calls) == 2, failures
    # SIN bit for bit; POW's division uses v_rcp_f64 (a hardware approximation refined by FMAs), so within ulps
    assert counts["exact (tg's polynomials)"] >= 1, counts
    assert counts["exact (tg's polynomials)"] + counts["approximate (tg's polynomials)"] == 2, counts


def test_llvm_listing_spells_smem_offsets_as_the_decoder() -> None:
    from tg.runtime.amd.sim.kernel import normalise_llvm_assembly

    # s_load with an SGPR offset and immediate 0: the SGPR+immediate opcode LLVM picked is encoded as the SGPR-only one
    text = "k:\n\ts_load_b32 s5, s[2:3], s5 offset:0x0\n\ts_load_b32 s6, s[2:3], s5 offset:0x10\n\ts_endpgm\n"
    assert normalise_llvm_assembly(text)["k"] == ["s_load_b32 s5, s[2:3], s5", "s_load_b32 s6, s[2:3], s5 offset:0x10",
                                                  "s_endpgm"]  # fmt: skip


def test_only_hardware_approximations_make_a_kernel_approximate() -> None:
    pytest.importorskip("llvmlite")
    from tg.runtime.amd.sim.differential import record_calls
    from tg.runtime.amd.sim.kernel import EmulatedKernel
    from tg.tensor import Tensor

    x = np.linspace(-3, 3, 64, dtype=np.float32)
    with record_calls() as rec:
        Tensor(x, device="PYTHON").sin().realize()  # tg's polynomial: v_ldexp_f64 and fma, all exact
        Tensor(x, device="PYTHON").exp2().realize()  # v_exp_f32: a hardware approximation
    sin_kernel, exp_kernel = (EmulatedKernel(c.ast) for c in rec.calls)
    assert "v_ldexp_f64" in sin_kernel.listing()
    assert not sin_kernel.approximate
    assert "v_exp_f32" in exp_kernel.listing() and exp_kernel.approximate
