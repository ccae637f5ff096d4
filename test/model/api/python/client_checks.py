"""End-to-end checks of a running kiln server with the official `openai` Python client.

Usage: client_checks.py BASE_URL [API_KEY] [MODEL]
(or KILN_BASE_URL / KILN_API_KEY / KILN_MODEL in the environment).

Runs every check, whatever the others do, and prints ONE JSON object on stdout:
{"openai_version": ..., "checks": {name: {...observed values...} | {"error": "..."}}}.
The caller (test/model/api/python-client.test.ts) decides what is right; this script only records
what the client saw, so a failure there shows the observed values.
"""

from __future__ import annotations

import http.client
import json
import os
import sys
import traceback
import urllib.parse
from typing import Any, Callable

import openai
from openai import OpenAI


def arg(index: int, env: str, default: str | None = None) -> str:
    value = sys.argv[index] if len(sys.argv) > index else os.environ.get(env, default)
    if not value:
        sys.exit(f"usage: client_checks.py BASE_URL [API_KEY] [MODEL] (or set {env})")
    return value


BASE_URL = arg(1, "KILN_BASE_URL")
API_KEY = arg(2, "KILN_API_KEY", "sk-local-anything")
MODEL = arg(3, "KILN_MODEL", "smollm2-135m-instruct")

client = OpenAI(base_url=BASE_URL, api_key=API_KEY, max_retries=0, timeout=60.0)


def api_error(e: openai.APIError) -> dict[str, Any]:
    """What the client exposes on an API error: its class, status and the parsed error body."""
    return {
        "class": type(e).__name__,
        "is_bad_request": isinstance(e, openai.BadRequestError),
        "is_not_found": isinstance(e, openai.NotFoundError),
        "is_authentication": isinstance(e, openai.AuthenticationError),
        "status": getattr(e, "status_code", None),
        "code": e.code,
        "param": e.param,
        "type": e.type,
        "body": e.body,
    }


def expect_api_error(call: Callable[[], Any]) -> dict[str, Any]:
    try:
        result = call()
    except openai.APIError as e:
        return api_error(e)
    return {"class": None, "unexpected_success": repr(result)[:500]}


def check_models() -> dict[str, Any]:
    ids = [m.id for m in client.models.list().data]
    one = client.models.retrieve(MODEL)
    return {"count": len(ids), "ids": ids, "retrieved_id": one.id, "retrieved_object": one.object}


def check_chat() -> dict[str, Any]:
    request: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "What colour is the sky?"}],
        "temperature": 0,
        "max_tokens": 16,
    }
    whole = client.chat.completions.create(**request)
    text = ""
    roles = 0
    finish = None
    chunks = 0
    usage_chunks: list[int] = []  # indexes of chunks that carried usage
    last_usage = None
    for i, chunk in enumerate(client.chat.completions.create(**request, stream=True, stream_options={"include_usage": True})):
        chunks += 1
        if chunk.usage is not None:
            usage_chunks.append(i)
            last_usage = chunk.usage.model_dump()
        if chunk.choices:
            delta = chunk.choices[0].delta
            roles += 1 if delta.role else 0
            text += delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
    return {
        "object": whole.object,
        "model": whole.model,
        "content": whole.choices[0].message.content,
        "finish_reason": whole.choices[0].finish_reason,
        "usage": whole.usage.model_dump() if whole.usage else None,
        "stream": {
            "chunks": chunks,
            "content": text,
            "roles": roles,
            "finish_reason": finish,
            "usage_chunk_indexes": usage_chunks,
            "usage": last_usage,
        },
    }


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 40}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}


def check_tools() -> dict[str, Any]:
    """A required tool call, the same streamed, then the conversation replayed with the call's result."""
    messages: list[Any] = [{"role": "user", "content": "What is the weather in Oslo?"}]
    request: dict[str, Any] = {
        "model": MODEL,
        "messages": messages,
        "tools": [WEATHER_TOOL],
        "tool_choice": "required",
        "temperature": 0,
        "max_tokens": 80,
    }
    r = client.chat.completions.create(**request)
    message = r.choices[0].message
    calls = [{"id": c.id, "type": c.type, "name": c.function.name, "arguments": c.function.arguments} for c in message.tool_calls or []]
    streamed: dict[int, dict[str, Any]] = {}
    repeated_ids = 0
    for chunk in client.chat.completions.create(**request, stream=True):
        for f in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            entry = streamed.setdefault(f.index, {"id": None, "name": None, "arguments": ""})
            if f.id is not None:
                repeated_ids += entry["id"] is not None
                entry["id"] = f.id
            if f.function is not None:
                if f.function.name:
                    entry["name"] = f.function.name
                entry["arguments"] += f.function.arguments or ""
    replay = messages + [message.model_dump(exclude_none=True)] + [
        {"role": "tool", "tool_call_id": c["id"], "content": '{"temperature": 3}'} for c in calls
    ]
    second = client.chat.completions.create(model=MODEL, messages=replay, tools=[WEATHER_TOOL], temperature=0, max_tokens=24)
    return {
        "finish_reason": r.choices[0].finish_reason,
        "content": message.content,
        "calls": calls,
        "streamed": [streamed[i] for i in sorted(streamed)],
        "repeated_ids": repeated_ids,
        "replay_finish_reason": second.choices[0].finish_reason,
        "replay_prompt_tokens": second.usage.prompt_tokens if second.usage else None,
        "first_prompt_tokens": r.usage.prompt_tokens if r.usage else None,
    }


def check_completion() -> dict[str, Any]:
    r = client.completions.create(model=MODEL, prompt="The capital of France is", temperature=0)
    return {
        "object": r.object,
        "text": r.choices[0].text,
        "finish_reason": r.choices[0].finish_reason,
        "usage": r.usage.model_dump() if r.usage else None,
    }


def check_invalid_temperature() -> dict[str, Any]:
    return expect_api_error(
        lambda: client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}], temperature=5)
    )


def check_unknown_model() -> dict[str, Any]:
    return expect_api_error(
        lambda: client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "x"}])
    )


def check_empty_api_key() -> dict[str, Any]:
    # The client itself refuses an empty key before sending anything...
    try:
        OpenAI(base_url=BASE_URL, api_key="", max_retries=0)
        refused = None
    except openai.OpenAIError as e:
        refused = type(e).__name__
    # ...so override the header for one request of a client that has a key. The client's HTTP
    # stack (h11) rejects a header value with trailing whitespace, and HTTP strips it anyway
    # (RFC 9110 5.5), so an empty bearer token goes on the wire as `Authorization: Bearer`.
    seen = expect_api_error(lambda: client.models.list(extra_headers={"Authorization": "Bearer"}))
    # And literally `Authorization: Bearer ` (trailing space), sent raw with the standard library,
    # to see the server's own answer: status and the exact error body.
    url = urllib.parse.urlsplit(BASE_URL)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    try:
        conn.request("GET", url.path.rstrip("/") + "/models", headers={"Authorization": "Bearer "})
        response = conn.getresponse()
        raw = {"status": response.status, "body": json.loads(response.read())}
    finally:
        conn.close()
    return {"client_refuses_empty_key": refused, **seen, "raw": raw}


CHECKS: dict[str, Callable[[], dict[str, Any]]] = {
    "models": check_models,
    "chat": check_chat,
    "completion": check_completion,
    "tools": check_tools,
    "invalid_temperature": check_invalid_temperature,
    "unknown_model": check_unknown_model,
    "empty_api_key": check_empty_api_key,
}


def main() -> None:
    results: dict[str, Any] = {}
    for name, check in CHECKS.items():
        try:
            results[name] = check()
        except Exception as e:  # recorded, so one broken check does not hide the others
            results[name] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(limit=5)}
    print(json.dumps({"openai_version": openai.__version__, "checks": results}))


if __name__ == "__main__":
    main()
