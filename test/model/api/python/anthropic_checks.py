"""End-to-end checks of a running kiln server with Anthropic's official `anthropic` Python client.

Usage: anthropic_checks.py BASE_URL [API_KEY] [MODEL]

Runs every check, whatever the others do, and prints ONE JSON object on stdout:
{"anthropic_version": ..., "checks": {name: {...observed values...} | {"error": "..."}}}.
The caller (test/model/api/python-anthropic.test.ts) decides what is right; this script only
records what the client saw.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from typing import Any, Callable

import anthropic
from pydantic import BaseModel

BASE_URL = sys.argv[1]
API_KEY = sys.argv[2] if len(sys.argv) > 2 else "sk-local-anything"
MODEL = sys.argv[3] if len(sys.argv) > 3 else "smollm2-135m-instruct"

client = anthropic.Anthropic(base_url=BASE_URL, api_key=API_KEY, max_retries=0, timeout=60.0)
QUESTION = [{"role": "user", "content": "Name three colours of the rainbow."}]
# The client's newest signatures leave out `temperature` (Anthropic's newest models take none); the
# API, vLLM's and kiln's still do, and a greedy answer is what these checks compare.
GREEDY = {"temperature": 0}


def message() -> dict[str, Any]:
    whole = client.messages.create(model=MODEL, max_tokens=24, messages=QUESTION, extra_body=GREEDY)
    streamed_text = ""
    with client.messages.stream(model=MODEL, max_tokens=24, messages=QUESTION, extra_body=GREEDY) as stream:
        for text in stream.text_stream:
            streamed_text += text
        final = stream.get_final_message()
    counted = client.messages.count_tokens(model=MODEL, messages=QUESTION)
    return {
        "type": whole.type,
        "model": whole.model,
        "text": whole.content[0].text,
        "stop_reason": whole.stop_reason,
        "input_tokens": whole.usage.input_tokens + (whole.usage.cache_read_input_tokens or 0),
        "output_tokens": whole.usage.output_tokens,
        "streamed_text": streamed_text,
        "streamed_final_text": final.content[0].text,
        "streamed_output_tokens": final.usage.output_tokens,
        "counted_input_tokens": counted.input_tokens,
    }


def batch() -> dict[str, Any]:
    created = client.messages.batches.create(
        requests=[
            {"custom_id": "colours", "params": {"model": MODEL, "max_tokens": 12, "messages": QUESTION}},
            {"custom_id": "no-model", "params": {"model": "no-such-model", "max_tokens": 12, "messages": QUESTION}},
        ]
    )
    batch = created
    deadline = time.time() + 60
    while batch.processing_status != "ended" and time.time() < deadline:
        time.sleep(0.2)
        batch = client.messages.batches.retrieve(created.id)
    results = {r.custom_id: r.result for r in client.messages.batches.results(created.id)}
    listed = [b.id for b in client.messages.batches.list(limit=5)]
    deleted = client.messages.batches.delete(created.id)
    colours = results.get("colours")
    errored = results.get("no-model")
    return {
        "id": created.id,
        "created_status": created.processing_status,
        "processing_status": batch.processing_status,
        "request_counts": batch.request_counts.model_dump(),
        "results_url": batch.results_url,
        "result_types": {k: v.type for k, v in results.items()},
        "colours_text": colours.message.content[0].text if colours is not None and colours.type == "succeeded" else None,
        "no_model_error_type": errored.error.error.type if errored is not None and errored.type == "errored" else None,
        "listed": created.id in listed,
        "deleted_type": deleted.type,
    }


class Rainbow(BaseModel):
    # No bounds: the client moves bounds into descriptions (Anthropic's API takes none), so they would not hold.
    first: str
    second: str
    third: str


COLOUR_SCHEMA = {
    "type": "object",
    "properties": {"first": {"type": "string", "maxLength": 20}, "count": {"type": "integer", "minimum": 1, "maximum": 7}},
    "required": ["first", "count"],
    "additionalProperties": False,
}


def structured() -> dict[str, Any]:
    """`messages.parse` with a pydantic type (sent as output_config.format), and the beta's top-level output_format."""
    parsed = client.messages.parse(model=MODEL, max_tokens=80, messages=QUESTION, output_format=Rainbow, extra_body=GREEDY)
    # The client's own types dropped the beta's field once the API took output_config: sent as older clients send it.
    beta = client.messages.create(
        model=MODEL,
        max_tokens=60,
        messages=QUESTION,
        extra_headers={"anthropic-beta": "structured-outputs-2025-11-13"},
        extra_body={**GREEDY, "output_format": {"type": "json_schema", "schema": COLOUR_SCHEMA}},
    )
    return {
        "parsed_class": type(parsed.parsed_output).__name__,
        "parsed": parsed.parsed_output.model_dump() if parsed.parsed_output is not None else None,
        "parsed_stop_reason": parsed.stop_reason,
        "beta_text": beta.content[0].text,
        "beta_stop_reason": beta.stop_reason,
    }


def errors() -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for name, call in {
        "unknown_model": lambda: client.messages.create(model="no-such-model", max_tokens=4, messages=QUESTION),
        "bad_temperature": lambda: client.messages.create(model=MODEL, max_tokens=4, messages=QUESTION, extra_body={"temperature": 3}),
    }.items():
        try:
            call()
            seen[name] = {"class": None}
        except anthropic.APIStatusError as e:
            seen[name] = {"class": type(e).__name__, "status": e.status_code, "type": (e.body or {}).get("error", {}).get("type")}
    return seen


def run(checks: dict[str, Callable[[], dict[str, Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, fn in checks.items():
        try:
            out[name] = fn()
        except Exception as e:  # noqa: BLE001 - every check runs; the caller reads what failed
            out[name] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
    return out


print(json.dumps({"anthropic_version": anthropic.__version__, "checks": run({"message": message, "batch": batch, "structured": structured, "errors": errors})}))
