"""The OpenAI-compatible server: routes, streaming, errors as HTTP 400 JSON, API key; it survives bad requests."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tg.llm import LLM
from tg.llm.server import make_server


@pytest.fixture(scope="module")
def server(tiny_llm: LLM) -> Iterator[tuple[str, int]]:
    srv = make_server(tiny_llm, "127.0.0.1", 0, api_key="sekrit")
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield "127.0.0.1", srv.server_port
    srv.shutdown()
    srv.server_close()


def request(server: tuple[str, int], method: str, path: str, body: Any = None, key: str | None = "sekrit",
            raw: bytes | None = None) -> tuple[int, str, bytes]:  # fmt: skip
    conn = http.client.HTTPConnection(*server, timeout=300)
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    conn.request(method, path, body=data, headers=headers)
    response = conn.getresponse()
    out = response.status, response.getheader("Content-Type") or "", response.read()
    conn.close()
    return out


def sse_events(payload: bytes) -> list[Any]:
    events = []
    for block in payload.decode().split("\n\n"):
        if block.startswith("data: "):
            data = block[len("data: ") :]
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


def test_models_page_and_health(server: tuple[str, int], tiny_llm: LLM) -> None:
    status, _, body = request(server, "GET", "/v1/models")
    assert status == 200 and json.loads(body)["data"][0]["id"] == tiny_llm.name
    status, ctype, body = request(server, "GET", "/", key=None)
    assert status == 200 and ctype.startswith("text/html") and b'id="prompt"' in body
    assert request(server, "GET", "/nope")[0] == 404


def test_chat_completion_and_stream_agree(server: tuple[str, int]) -> None:
    body = {"messages": [{"role": "user", "content": "Hello 🙂"}], "max_tokens": 6}
    status, _, raw = request(server, "POST", "/v1/chat/completions", body)
    assert status == 200
    reply = json.loads(raw)
    assert reply["object"] == "chat.completion" and reply["choices"][0]["message"]["role"] == "assistant"
    usage = reply["usage"]
    assert (
        usage["completion_tokens"] <= 6 and usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    )
    status, ctype, raw = request(server, "POST", "/v1/chat/completions", {**body, "stream": True})
    assert status == 200 and ctype == "text/event-stream"
    events = sse_events(raw)
    assert events[-1] == "[DONE]" and events[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in events[:-1])
    assert text == reply["choices"][0]["message"]["content"]  # greedy: the same reply
    assert events[-2]["choices"][0]["finish_reason"] in ("stop", "length")


def test_text_completion(server: tuple[str, int]) -> None:
    sampled = {"prompt": "Once upon", "max_tokens": 4, "seed": 3, "temperature": 0.7, "top_k": 20, "top_p": 0.9}
    status, _, raw = request(server, "POST", "/v1/completions", sampled)
    assert status == 200 and json.loads(raw)["object"] == "text_completion"
    status, _, raw = request(
        server, "POST", "/v1/completions", {"prompt": "Once upon", "max_tokens": 3, "stream": True}
    )
    events = sse_events(raw)
    assert status == 200 and events[-1] == "[DONE]" and all("text" in e["choices"][0] for e in events[:-1])


@pytest.mark.parametrize(
    "path,body,raw,status,fragment",
    [
        ("/v1/chat/completions", None, b"{not json", 400, "not valid JSON"),
        ("/v1/chat/completions", [1, 2], None, 400, "JSON object"),
        ("/v1/chat/completions", {"model": "x"}, None, 400, "'messages' is required"),
        ("/v1/chat/completions", {"messages": "hi"}, None, 400, "non-empty list"),
        ("/v1/chat/completions", {"messages": [{"role": "user"}]}, None, 400, "content must be a string"),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "x"}], "max_tokens": -1},
            None,
            400,
            "max_tokens",
        ),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "x"}], "temperature": "hot"},
            None,
            400,
            "temperature",
        ),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "x"}], "stream": "yes"},
            None,
            400,
            "stream",
        ),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "word " * 400}]}, None, 400, "context"),
        ("/v1/completions", {"prompt": ""}, None, 400, "'prompt'"),
        ("/v1/completions", {"prompt": [1, 10**9]}, None, 400, "token ids"),
        ("/v1/embeddings", {}, None, 404, "no route"),
    ],
)
def test_bad_requests_get_json_errors(server: tuple[str, int], path: str, body: Any, raw: bytes | None, status: int,
                                      fragment: str) -> None:  # fmt: skip
    got, ctype, payload = request(server, "POST", path, body, raw=raw)
    assert got == status and ctype == "application/json"
    error = json.loads(payload)["error"]
    assert fragment in error["message"] and error["type"] == "invalid_request_error"
    assert request(server, "GET", "/health")[0] == 200  # still serving


def test_api_key_is_required(server: tuple[str, int]) -> None:
    body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 1}
    for key in (None, "wrong"):
        status, _, raw = request(server, "POST", "/v1/chat/completions", body, key=key)
        assert status == 401 and json.loads(raw)["error"]["code"] == "invalid_api_key"
    assert request(server, "GET", "/v1/models", key=None)[0] == 401
