"""`python -m tg.llm`: help, one prompt, benchmark, clear errors for bad files."""

from __future__ import annotations

import io
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from tg.llm.cli import benchmark, main


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as e:
            code = int(e.code or 0)
    return code, out.getvalue(), err.getvalue()


def test_help_lists_the_options() -> None:
    result = subprocess.run([sys.executable, "-m", "tg.llm", "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0
    for option in ("--model", "--prompt", "--max-tokens", "--benchmark", "--serve", "--host", "--api-key"):
        assert option in result.stdout


def test_errors_are_one_line(tmp_path: Path, tiny_models: dict[tuple[str, str], Path]) -> None:
    truncated = tmp_path / "t.gguf"
    truncated.write_bytes(tiny_models[("llama", "F32")].read_bytes()[:5000])
    code, _, err = run("--model", str(truncated), "--prompt", "hi")
    assert code == 2 and err.startswith("error: ") and "Traceback" not in err and "t.gguf" in err
    code, _, err = run("--model", "no-such-model")
    assert code == 2 and "unknown model" in err
    code, _, err = run("--prompt", "hi")
    assert code == 2 and "--model is required" in err
    code, out, _ = run("--list-models")
    assert code == 0 and "qwen3:0.6b" in out


def test_prompt_and_benchmark(tiny_models: dict[tuple[str, str], Path], tiny_llm: object) -> None:
    code, out, err = run("--model", str(tiny_models[("qwen3", "Q8_0")]), "--prompt", "Hi", "--max-tokens", "3",
                         "--max-context", "160", "--no-jit")  # fmt: skip
    assert code == 0, err
    assert out.endswith("\n")
    stream = io.StringIO()
    result = benchmark(tiny_llm, 8, stream)
    assert result["prefill_tok_s"] > 0 and result["decode_tok_s"] > 0 and "tok/s" in stream.getvalue()
    assert 0 < result["first_reply_s"] <= result["warmup_s"] and "warm-up" in stream.getvalue()


@pytest.mark.parametrize("flag", ["--temperature", "--top-p"])
def test_bad_sampling_flags(tiny_models: dict[tuple[str, str], Path], flag: str) -> None:
    code, _, err = run("--model", str(tiny_models[("qwen3", "Q8_0")]), "--prompt", "x", flag, "-3")
    assert code == 2 and flag.lstrip("-").replace("-", "_") in err
