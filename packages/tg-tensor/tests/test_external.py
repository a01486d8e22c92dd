"""Tensor.from_blob over numpy/ctypes memory (no copy, writes through, errors) and Tensor.from_url against a local
http.server (download, cache, gunzip, HTTP errors)."""

import ctypes

import numpy as np
import pytest

from tg.tensor import Tensor, dtypes


def test_from_blob_reads_the_memory_without_a_copy():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = Tensor.from_blob(a.ctypes.data, a.shape, dtype=dtypes.float32)
    assert t.shape == (3, 4) and t.dtype == dtypes.float32 and t.device == "CPU"
    np.testing.assert_array_equal(t.numpy(), a)
    np.testing.assert_array_equal((t * 2 + 1).numpy(), a * 2 + 1)
    a[0, 0] = 100.0  # the tensor is the memory: a later kernel sees the change
    assert (t + 0).numpy()[0, 0] == 100.0
    np.testing.assert_array_equal(Tensor.from_blob(a.ctypes.data, 12, dtype="float32").to("PYTHON").numpy(), a.ravel())


def test_from_blob_in_place_writes_go_to_the_memory():
    a = np.zeros(6, dtype=np.int32)
    t = Tensor.from_blob(a.ctypes.data, (2, 3), dtype=dtypes.int32)
    t[1, 2] = 7
    t.realize()
    assert a[5] == 7
    t.assign(Tensor([[1, 2, 3], [4, 5, 6]], dtype=dtypes.int32, device=t.device)).realize()
    np.testing.assert_array_equal(a, [1, 2, 3, 4, 5, 6])
    t += 10
    t.realize()
    np.testing.assert_array_equal(a, [11, 12, 13, 14, 15, 16])


def test_from_blob_ctypes_array_dtypes_and_empty():
    raw = (ctypes.c_uint16 * 4)(1, 2, 65535, 0)
    t = Tensor.from_blob(ctypes.addressof(raw), (4,), dtype=dtypes.uint16)
    assert t.tolist() == [1, 2, 65535, 0]
    assert Tensor.from_blob(ctypes.addressof(raw), (2,), dtype=dtypes.uint32).tolist() == [
        int(np.frombuffer(bytes(raw), np.uint32)[0]),
        int(np.frombuffer(bytes(raw), np.uint32)[1]),
    ]
    empty = Tensor.from_blob(0, (0, 3))
    assert empty.shape == (0, 3) and empty.numpy().shape == (0, 3) and empty.dtype == dtypes.default_float


def test_from_blob_errors():
    a = np.zeros(4, dtype=np.float32)
    with pytest.raises(ValueError, match=r"not aligned to the 4 bytes of dtypes\.float32"):
        Tensor.from_blob(a.ctypes.data + 1, (2,), dtype=dtypes.float32)
    with pytest.raises(ValueError, match="device PYTHON cannot use host memory at a raw pointer"):
        Tensor.from_blob(a.ctypes.data, (4,), device="PYTHON")
    with pytest.raises(TypeError, match="ptr must be an int address, got str"):
        Tensor.from_blob("0x10", (4,))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"negative dimension in shape \(-1,\)"):
        Tensor.from_blob(a.ctypes.data, (-1,))
    with pytest.raises(ValueError, match="not a valid address"):
        Tensor.from_blob(0, (4,))


@pytest.fixture
def server(tmp_path, monkeypatch):
    """A local HTTP server over a temp folder (no network), counting GET requests; tg's cache in tmp_path."""
    import functools
    import http.server
    import threading

    root = tmp_path / "www"
    root.mkdir()
    hits: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def do_GET(self):
            hits.append(self.path)
            super().do_GET()

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(root)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("TG_CACHE_DIR", str(tmp_path / "cache"))
    try:
        yield root, f"http://127.0.0.1:{httpd.server_address[1]}", hits
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_from_url_downloads_once_and_reads_through_disk(server, capsys):
    root, base, hits = server
    data = np.random.default_rng(3).integers(0, 256, 3 << 20, dtype=np.uint8)  # 3 MiB: several read chunks
    (root / "w.bin").write_bytes(data.tobytes())
    t = Tensor.from_url(f"{base}/w.bin")
    assert t.shape == (data.size,) and t.dtype == dtypes.uint8 and t.device.startswith("DISK")
    np.testing.assert_array_equal(t.numpy(), data)
    assert "w.bin" in capsys.readouterr().err  # the tqdm bar names the URL
    again = Tensor.from_url(f"{base}/w.bin", device="CPU")  # from the cache: no second request
    assert hits == ["/w.bin"] and again.device == "CPU"
    np.testing.assert_array_equal(again[:8].bitcast(dtypes.uint32).numpy(), data[:8].view(np.uint32))


def test_from_url_gunzip_and_empty_file(server):
    import gzip

    root, base, _ = server
    text = b"tg " * 10000
    blob = gzip.compress(text)  # once: the gzip header holds the time of compression
    (root / "t.gz").write_bytes(blob)
    assert bytes(Tensor.from_url(f"{base}/t.gz", gunzip=True, progress=False).numpy()) == text
    assert bytes(Tensor.from_url(f"{base}/t.gz", progress=False).numpy()) == blob  # cached apart
    (root / "empty").write_bytes(b"")
    assert Tensor.from_url(f"{base}/empty", progress=False).shape == (0,)


def test_from_url_errors(server):
    root, base, _ = server
    with pytest.raises(RuntimeError, match=r"from_url: GET http://127\.0\.0\.1:\d+/missing failed: HTTP 404"):
        Tensor.from_url(f"{base}/missing")
    (root / "bad.gz").write_bytes(b"not gzip at all")
    with pytest.raises(RuntimeError, match=r"from_url: reading .*bad\.gz failed"):
        Tensor.from_url(f"{base}/bad.gz", gunzip=True)
    with pytest.raises(RuntimeError, match=r"from_url: cannot fetch http://127\.0\.0\.1:1/x"):
        Tensor.from_url("http://127.0.0.1:1/x")
    with pytest.raises(ValueError, match="needs a URL"):
        Tensor.from_url("w.bin")
