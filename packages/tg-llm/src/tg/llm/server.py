"""An OpenAI-compatible HTTP server over an `LLM`: `/v1/chat/completions`, `/v1/completions` (both streaming with
server-sent events when `"stream": true`), `/v1/models`, and a chat web page at `/`.

Requests are validated before any work: a malformed body or parameter is an HTTP 400 with OpenAI's error object
(`{"error": {"message", "type", "param", "code"}}`), a missing or wrong API key a 401, a prompt longer than the
context a 400 with code `context_length_exceeded`. Unexpected failures are a 500 with the message; the server keeps
serving. Generation is one request at a time (the model's KV cache is shared); other requests wait.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any

from tg.llm.chat import ChatFormatError
from tg.llm.generate import ContextOverflowError, SamplingParams
from tg.llm.llm import LLM

MAX_BODY = 4 << 20
DEFAULT_MAX_TOKENS = {"chat": 1024, "completion": 16}


class RequestError(Exception):
    """A client error: HTTP `status` with an OpenAI-style error object."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.param, self.code, self.status = param, code, status

    def body(self) -> dict[str, Any]:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return {"error": {"message": str(self), "type": kind, "param": self.param, "code": self.code}}


def _number(body: dict[str, Any], key: str, default: float, lo: float, hi: float) -> float:
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
        raise RequestError(f"'{key}' must be a number in [{lo}, {hi}], got {value!r}", key)
    return float(value)


def _integer(body: dict[str, Any], key: str, default: int | None, lo: int, hi: int) -> int | None:
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise RequestError(f"'{key}' must be an integer in [{lo}, {hi}], got {value!r}", key)
    return value


def parse_sampling(body: dict[str, Any]) -> SamplingParams:
    """SamplingParams from a request body (OpenAI's temperature/top_p/seed plus top_k); defaults are greedy."""
    return SamplingParams(
        temperature=_number(body, "temperature", 0.0, 0.0, 2.0),
        top_p=_number(body, "top_p", 1.0, 1e-9, 1.0),
        top_k=_integer(body, "top_k", 0, 0, 1 << 30) or 0,
        seed=_integer(body, "seed", None, -(1 << 63), (1 << 64) - 1),
    )


def parse_request(llm: LLM, kind: str, body: Any) -> tuple[list[int], int, SamplingParams, bool]:
    """(prompt token ids, max tokens, sampling, stream) of a chat or completion request, or a RequestError."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    if kind == "chat":
        if "messages" not in body:
            raise RequestError("'messages' is required", "messages")
        try:
            ids = llm.encode_chat(body["messages"])
        except ChatFormatError as e:
            raise RequestError(str(e), "messages") from None
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            ids = list(prompt)
            if any(not 0 <= t < llm.config.vocab_size for t in ids):
                raise RequestError(f"'prompt' token ids must be in [0, {llm.config.vocab_size})", "prompt")
        elif isinstance(prompt, str) and prompt:
            ids = llm.encode_prompt(prompt)
        else:
            raise RequestError("'prompt' must be a non-empty string (or a list of token ids)", "prompt")
    key = "max_completion_tokens" if kind == "chat" and "max_completion_tokens" in body else "max_tokens"
    max_tokens = _integer(body, key, DEFAULT_MAX_TOKENS[kind], 0, 1 << 31)
    assert max_tokens is not None
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise RequestError(f"'stream' must be true or false, got {stream!r}", "stream")
    if len(ids) >= llm.max_context:
        raise RequestError(
            f"the prompt has {len(ids)} tokens but the model's context holds {llm.max_context}",
            "messages" if kind == "chat" else "prompt",
            "context_length_exceeded",
        )
    return ids, max_tokens, parse_sampling(body), stream


class Handler(BaseHTTPRequestHandler):
    """One HTTP connection; `server.llm`, `server.api_key` and `server.model_name` come from `make_server`."""

    protocol_version = "HTTP/1.1"
    server: Any

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.verbose:
            super().log_message(format, *args)

    def _head(self, status: int, headers: dict[str, str]) -> None:
        """The status line and `headers`, after the CORS origin every response carries (browsers call the API)."""
        self.send_response(status)
        for name, value in {"Access-Control-Allow-Origin": "*", **headers}.items():
            self.send_header(name, value)
        self.end_headers()

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self._head(status, {"Content-Type": content_type, "Content-Length": str(len(body))})
        self.wfile.write(body)

    def _json(self, status: int, obj: Any) -> None:
        self._send(status, json.dumps(obj).encode())

    def _error(self, err: RequestError) -> None:
        self._json(err.status, err.body())

    def _authorized(self) -> bool:
        key = self.server.api_key
        return key is None or self.headers.get("Authorization", "") == f"Bearer {key}"

    def do_OPTIONS(self) -> None:
        self._head(
            204,
            {
                "Access-Control-Allow-Methods": "GET, POST, OPTIONS",
                "Access-Control-Allow-Headers": "Content-Type, Authorization",
                "Content-Length": "0",
            },
        )

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path in ("/", "/index.html"):
            page = resources.files("tg.llm").joinpath("chat.html").read_bytes()
            self._send(200, page, "text/html; charset=utf-8")
        elif path == "/v1/models":
            if not self._authorized():
                self._error(RequestError("missing or wrong API key", status=401, code="invalid_api_key"))
                return
            model = {"id": self.server.model_name, "object": "model", "created": self.server.started, "owned_by": "tg"}
            self._json(200, {"object": "list", "data": [model]})
        elif path == "/health":
            self._json(200, {"status": "ok"})
        else:
            self._error(RequestError(f"no route GET {path}", status=404, code="not_found"))

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        kinds = {"/v1/chat/completions": "chat", "/v1/completions": "completion"}
        try:
            length = int(self.headers.get("Content-Length", "-1"))
        except ValueError:
            length = -1
        if length < 0 or length > MAX_BODY:
            self.close_connection = True
            msg = "Content-Length is required" if length < 0 else f"the body is larger than {MAX_BODY} bytes"
            self._error(RequestError(msg, status=411 if length < 0 else 413))
            return
        raw = self.rfile.read(length)
        if path not in kinds:
            self._error(RequestError(f"no route POST {path}", status=404, code="not_found"))
            return
        if not self._authorized():
            self._error(RequestError("missing or wrong API key", status=401, code="invalid_api_key"))
            return
        kind = kinds[path]
        try:
            try:
                body = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise RequestError(f"the body is not valid JSON: {e}") from None
            ids, max_tokens, params, stream = parse_request(self.server.llm, kind, body)
            if stream:
                self._stream(kind, ids, max_tokens, params)
            else:
                self._complete(kind, ids, max_tokens, params)
        except RequestError as e:
            self._error(e)
        except ContextOverflowError as e:
            self._error(RequestError(str(e), code="context_length_exceeded"))
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as e:  # the server must survive anything a request triggers
            self._error(RequestError(f"{type(e).__name__}: {e}", status=500, code="internal_error"))

    def _envelope(self, kind: str, rid: str) -> dict[str, Any]:
        obj = "chat.completion" if kind == "chat" else "text_completion"
        return {"id": rid, "object": obj, "created": int(time.time()), "model": self.server.model_name}

    def _usage(self, prompt_tokens: int) -> dict[str, int]:
        done = self.server.llm.stats.generated_tokens
        return {"prompt_tokens": prompt_tokens, "completion_tokens": done, "total_tokens": prompt_tokens + done}

    def _complete(self, kind: str, ids: list[int], max_tokens: int, params: SamplingParams) -> None:
        llm: LLM = self.server.llm
        text = "".join(llm.stream_tokens(ids, max_tokens, params))
        rid = ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex
        finish = llm.stats.finish_reason
        if kind == "chat":
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        self._json(200, {**self._envelope(kind, rid), "choices": [choice], "usage": self._usage(len(ids))})

    def _stream(self, kind: str, ids: list[int], max_tokens: int, params: SamplingParams) -> None:
        llm: LLM = self.server.llm
        pieces: Iterator[str] = llm.stream_tokens(ids, max_tokens, params)
        rid = ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex
        envelope = self._envelope(kind, rid)
        envelope["object"] = "chat.completion.chunk" if kind == "chat" else "text_completion"
        self._head(200, {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "Connection": "close"})
        self.close_connection = True

        def event(delta: str | None, finish: str | None, first: bool = False) -> None:
            if kind == "chat":
                d: dict[str, str] = {"role": "assistant"} if first else {}
                if delta is not None:
                    d["content"] = delta
                choice: dict[str, Any] = {"index": 0, "delta": d, "finish_reason": finish}
            else:
                choice = {"index": 0, "text": delta or "", "logprobs": None, "finish_reason": finish}
            self.wfile.write(f"data: {json.dumps({**envelope, 'choices': [choice]})}\n\n".encode())
            self.wfile.flush()

        try:
            if kind == "chat":
                event("", None, first=True)
            for piece in pieces:
                event(piece, None)
            event(None, llm.stats.finish_reason)
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except Exception as e:
            if not isinstance(e, (BrokenPipeError, ConnectionResetError)):
                error = RequestError(f"{type(e).__name__}: {e}", status=500, code="internal_error")
                try:
                    self.wfile.write(f"data: {json.dumps(error.body())}\n\n".encode())
                except OSError:
                    pass
        finally:
            close = getattr(pieces, "close", None)
            if close is not None:
                close()  # releases the model lock when the client went away mid-stream


def make_server(llm: LLM, host: str = "127.0.0.1", port: int = 8000, api_key: str | None = None,
                verbose: bool = False) -> ThreadingHTTPServer:  # fmt: skip
    """A ThreadingHTTPServer bound to (host, port) serving `llm` (port 0 picks a free one: `server.server_port`)."""
    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    server.llm = llm  # type: ignore[attr-defined]
    server.api_key = api_key  # type: ignore[attr-defined]
    server.model_name = llm.name  # type: ignore[attr-defined]
    server.started = int(time.time())  # type: ignore[attr-defined]
    server.verbose = verbose  # type: ignore[attr-defined]
    return server
