"""`python -m tg.llm`: chat with a GGUF model in the terminal, answer one prompt, benchmark it, or serve it."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TextIO

from tg.llm.generate import ContextOverflowError, SamplingParams
from tg.llm.models import MODELS, resolve_model
from tg.llm.quant import UnsupportedWeightType
from tg.llm.tokenizer import TokenizerError
from tg.llm.weights import ModelFormatError
from tg.tensor.nn.state import FormatError

USER_ERRORS = (FileNotFoundError, FormatError, ModelFormatError, UnsupportedWeightType, TokenizerError,
               ContextOverflowError, ValueError, RuntimeError)  # fmt: skip


def parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    p = argparse.ArgumentParser(
        prog="python -m tg.llm",
        description="Run a GGUF language model (Llama 3.x, Qwen 3; F32/F16/BF16/Q8_0/Q4_K/Q6_K) with tg.",
        epilog=f"known model names: {', '.join(MODELS)}",
    )
    p.add_argument("--model", "-m", help="GGUF file path, URL, or a known name (downloaded once and cached)")
    p.add_argument("--prompt", "-p", help="answer this one message (chat format) and exit")
    p.add_argument("--raw", action="store_true", help="with --prompt: complete the text as is, no chat template")
    p.add_argument("--max-tokens", type=int, default=512, help="most tokens to generate per reply (default 512)")
    p.add_argument("--max-context", type=int, default=None, help="KV cache positions (default min(model's, 4096))")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-k", type=int, default=0, help="sample among the k most likely tokens (0 = all)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling threshold (default 1.0)")
    p.add_argument("--seed", type=int, default=None, help="random seed for sampling")
    p.add_argument("--system", default=None, help="system message for chat")
    p.add_argument("--device", default=None, help="device to run on (default: tg's default device)")
    p.add_argument("--benchmark", type=int, metavar="N", help="prefill N tokens and decode N tokens; print tokens/s")
    p.add_argument("--serve", type=int, nargs="?", const=8000, metavar="PORT",
                   help="serve the OpenAI-compatible API and the chat page (default port 8000)")  # fmt: skip
    p.add_argument("--host", default="127.0.0.1", help="address to bind with --serve (default 127.0.0.1)")
    p.add_argument("--api-key", default=None, help="with --serve: require 'Authorization: Bearer KEY'")
    p.add_argument("--list-models", action="store_true", help="print the known model names and exit")
    p.add_argument("--no-jit", action="store_true", help="run every step eagerly (debugging)")
    return p


def benchmark(llm: object, n: int, out: TextIO) -> dict[str, float]:
    """Prefill n tokens, then decode n tokens (after a warm-up that compiles and captures); print and return the
    rates in tokens/s, the weight bandwidth of decoding and the warm-up's seconds (`warmup_s`, of which the first
    reply `first_reply_s`)."""
    from tg.llm.llm import LLM

    assert isinstance(llm, LLM)
    vocab = llm.config.vocab_size
    n = max(2, min(n, llm.max_context // 2 - 1))
    prompt = [(i * 7919 + 13) % vocab for i in range(n)]
    greedy = SamplingParams()
    start = time.perf_counter()
    for _ in llm.generator.generate(prompt, 3, greedy):  # warm-up: compile and capture both steps
        pass
    first_s = time.perf_counter() - start
    llm.generator.reset()
    for _ in llm.generator.generate(prompt, 3, greedy):  # second run: the JIT captures
        pass
    warmup_s = time.perf_counter() - start
    llm.generator.reset()
    start = time.perf_counter()
    llm.generator.prefill(prompt)
    prefill_s = time.perf_counter() - start
    llm.generator.reset()
    count = 0
    for _ in llm.generator.generate(prompt[:1], n, greedy):
        count += 1
    stats = llm.generator.stats
    decode_s = stats.decode_seconds
    weight_bytes = llm.model.weights_nbytes()
    result = {
        "prefill_tok_s": n / prefill_s,
        # the first token comes from the prefill's logits: count - 1 decode steps ran in decode_s
        "decode_tok_s": (count - 1) / decode_s if decode_s and count > 1 else 0.0,
        "weight_gb": weight_bytes / 1e9,
        "first_reply_s": first_s,
        "warmup_s": warmup_s,
    }
    result["decode_gb_s"] = result["decode_tok_s"] * weight_bytes / 1e9
    print(
        f"{llm.name}: prefill {n} tokens {result['prefill_tok_s']:.2f} tok/s, decode {count} tokens "
        f"{result['decode_tok_s']:.2f} tok/s ({result['decode_gb_s']:.2f} GB/s of {result['weight_gb']:.3f} GB "
        f"weights per token); warm-up {warmup_s:.1f} s (prompt + 3 tokens twice while kernels compile and the JITs "
        f"capture; the first time {first_s:.1f} s)",
        file=out,
    )
    return result


def interactive(llm: object, args: argparse.Namespace, params: SamplingParams) -> None:
    """A terminal chat: one line per message, `/reset` starts over, an empty line or EOF quits."""
    from tg.llm.llm import LLM

    assert isinstance(llm, LLM)
    messages: list[dict[str, str]] = [{"role": "system", "content": args.system}] if args.system else []
    print(f"chatting with {llm.name} ({llm.config.arch}); /reset to start over, Ctrl-D to quit", flush=True)
    while True:
        try:
            line = input(">>> ")
        except EOFError:
            print()
            return
        if line.strip() == "/reset":
            messages = messages[:1] if args.system else []
            continue
        if not line.strip():
            continue
        messages.append({"role": "user", "content": line})
        try:
            reply = ""
            for piece in llm.chat(messages, args.max_tokens, params):
                reply += piece
                print(piece, end="", flush=True)
            print(flush=True)
            messages.append({"role": "assistant", "content": reply})
        except ContextOverflowError as e:
            messages.pop()
            print(f"error: {e} (use /reset)", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (2 for bad input, with a one-line message and no traceback)."""
    args = parser().parse_args(argv)
    if args.list_models:
        for name, url in MODELS.items():
            print(f"{name:18} {url}")
        return 0
    if not args.model:
        parser().error("--model is required (a GGUF path, a URL or a known name; see --list-models)")
    try:
        params = SamplingParams(args.temperature, args.top_k, args.top_p, args.seed)
        from tg.llm.llm import LLM

        llm = LLM(resolve_model(args.model), max_context=args.max_context, device=args.device, jit=not args.no_jit)
        if args.benchmark is not None:
            benchmark(llm, args.benchmark, sys.stdout)
        elif args.serve is not None:
            from tg.llm.server import make_server

            server = make_server(llm, args.host, args.serve, args.api_key, verbose=True)
            print(f"serving {llm.name} on http://{args.host}:{server.server_port}/ (Ctrl-C stops)", flush=True)
            try:
                server.serve_forever()
            except KeyboardInterrupt:
                pass
            finally:
                server.server_close()
        elif args.prompt is not None:
            if args.raw:
                pieces = llm.complete(args.prompt, args.max_tokens, params)
            else:
                messages = [{"role": "system", "content": args.system}] if args.system else []
                pieces = llm.chat([*messages, {"role": "user", "content": args.prompt}], args.max_tokens, params)
            for piece in pieces:
                print(piece, end="", flush=True)
            print()
        else:
            interactive(llm, args, params)
    except USER_ERRORS as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0
