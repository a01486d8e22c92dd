"""Chat templates of the supported families, written out in Python (the GGUF's Jinja template is not executed).

Llama 3: `<|begin_of_text|>` then per message `<|start_header_id|>ROLE<|end_header_id|>\\n\\nCONTENT<|eot_id|>`
(content stripped), the prompt ending with the assistant header. Qwen 3 (ChatML): per message
`<|im_start|>ROLE\\nCONTENT<|im_end|>\\n`, the prompt ending with `<|im_start|>assistant\\n`; earlier assistant turns
lose their `<think>...</think>` reasoning, as Qwen 3's template does.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

ROLES = ("system", "user", "assistant")
STOP_TOKENS = {
    "llama": ("<|eot_id|>", "<|end_of_text|>", "<|eom_id|>"),
    "qwen3": ("<|im_end|>", "<|endoftext|>"),
}
_THINK = re.compile(r"<think>.*?</think>\s*", re.DOTALL)


class ChatFormatError(ValueError):
    """The messages of a chat request are malformed."""


def check_messages(messages: Any) -> list[dict[str, str]]:
    """Validate `[{"role": ..., "content": ...}, ...]` (content a string, or OpenAI's list of text parts)."""
    if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)) or not messages:
        raise ChatFormatError("'messages' must be a non-empty list of {role, content} objects")
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise ChatFormatError(f"messages[{i}] must be an object with 'role' and 'content'")
        role, content = message.get("role"), message.get("content")
        if role not in ROLES:
            raise ChatFormatError(f"messages[{i}].role is {role!r}; expected one of {', '.join(ROLES)}")
        if isinstance(content, list):  # OpenAI content parts: keep the text ones
            parts = []
            for j, part in enumerate(content):
                if not isinstance(part, Mapping) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                    raise ChatFormatError(f"messages[{i}].content[{j}] must be {{'type': 'text', 'text': str}}")
                parts.append(part["text"])
            content = "".join(parts)
        if not isinstance(content, str):
            raise ChatFormatError(f"messages[{i}].content must be a string, got {type(content).__name__}")
        out.append({"role": role, "content": content})
    return out


def format_chat(arch: str, messages: Any, add_generation_prompt: bool = True) -> str:
    """The prompt text (with special-token spellings) for `messages` in the chat format of `arch`."""
    msgs = check_messages(messages)
    if arch == "llama":
        text = "<|begin_of_text|>"
        for m in msgs:
            text += f"<|start_header_id|>{m['role']}<|end_header_id|>\n\n{m['content'].strip()}<|eot_id|>"
        if add_generation_prompt:
            text += "<|start_header_id|>assistant<|end_header_id|>\n\n"
        return text
    if arch == "qwen3":
        text = ""
        for m in msgs:
            content = _THINK.sub("", m["content"]).lstrip() if m["role"] == "assistant" else m["content"]
            text += f"<|im_start|>{m['role']}\n{content}<|im_end|>\n"
        if add_generation_prompt:
            text += "<|im_start|>assistant\n"
        return text
    raise ChatFormatError(f"no chat template for architecture {arch!r}")
