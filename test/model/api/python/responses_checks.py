"""The Responses API through real Python clients, used unmodified.

Usage: responses_checks.py client|langchain BASE_URL [API_KEY] [MODEL]

`client` runs the official openai client's checks (responses.create, responses.stream, a
conversation by previous_response_id, a function-call round trip with function_call_output,
responses.parse with a pydantic model as a strict text.format); `langchain` runs LangChain's
ChatOpenAI in Responses mode (use_responses_api=True: invoke, stream, bind_tools,
with_structured_output). Every check runs, whatever the others do, and ONE JSON object goes to
stdout: {"versions": {...}, "checks": {name: {...observed values...} | {"error": ..., "traceback": ...}}}.
The caller decides what is right; this script records what each library handed back.
"""

from __future__ import annotations

import importlib.metadata
import json
import sys
import traceback
from typing import Any, Callable

from pydantic import BaseModel, Field

MODE = sys.argv[1]
BASE_URL = sys.argv[2].rstrip("/")
API_KEY = sys.argv[3] if len(sys.argv) > 3 else "sk-local-anything"
MODEL = sys.argv[4] if len(sys.argv) > 4 else "smollm2-135m-instruct"
MAX_TOKENS = 24

WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 32}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}


class City(BaseModel):
    """A city and its country."""

    city: str = Field(max_length=24)
    country: str = Field(max_length=24)


def usage(u: Any) -> dict[str, Any] | None:
    return None if u is None else u.model_dump()


# --- the official client ---------------------------------------------------------------------
def client():
    from openai import OpenAI

    return OpenAI(base_url=BASE_URL, api_key=API_KEY, max_retries=0, timeout=60.0)


def check_create() -> dict[str, Any]:
    r = client().responses.create(model=MODEL, input="Name three primary colors.", max_output_tokens=MAX_TOKENS, temperature=0)
    return {
        "id": r.id,
        "object": r.object,
        "status": r.status,
        "output_text": r.output_text,
        "output_types": [item.type for item in r.output],
        "usage": usage(r.usage),
    }


def check_stream() -> dict[str, Any]:
    types: list[str] = []
    deltas = ""
    with client().responses.stream(model=MODEL, input="Name three primary colors.", max_output_tokens=48, temperature=0) as stream:
        for event in stream:
            types.append(event.type)
            if event.type == "response.output_text.delta":
                deltas += event.delta
        # The helper's final response exists only after response.completed (not after response.incomplete).
        final = stream.get_final_response()
    return {"types": types, "deltas": deltas, "status": final.status, "output_text": final.output_text, "id": final.id}


def check_conversation() -> dict[str, Any]:
    c = client()
    first = c.responses.create(model=MODEL, input="My name is Ada.", max_output_tokens=MAX_TOKENS, temperature=0)
    second = c.responses.create(model=MODEL, previous_response_id=first.id, input="What is my name?", max_output_tokens=MAX_TOKENS, temperature=0)
    items = c.responses.input_items.list(second.id, order="asc")
    retrieved = c.responses.retrieve(second.id)
    return {
        "first_id": first.id,
        "previous_response_id": second.previous_response_id,
        "output_text": second.output_text,
        "input_texts": [part.text for item in items.data if item.type == "message" for part in item.content if hasattr(part, "text")],
        "retrieved_equal": retrieved.model_dump() == second.model_dump(),
        "second_input_tokens": second.usage.input_tokens if second.usage else None,
        "first_input_tokens": first.usage.input_tokens if first.usage else None,
    }


def check_function_call() -> dict[str, Any]:
    c = client()
    first = c.responses.create(
        model=MODEL, input="What is the weather in Paris?", tools=[WEATHER_TOOL], tool_choice="required", max_output_tokens=48, temperature=0
    )
    calls = [item for item in first.output if item.type == "function_call"]
    observed: dict[str, Any] = {"calls": [{"name": x.name, "arguments": x.arguments, "call_id": x.call_id, "id": x.id} for x in calls]}
    if not calls:
        return observed
    second = c.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": calls[0].call_id, "output": json.dumps({"celsius": 18})}],
        tools=[WEATHER_TOOL],
        max_output_tokens=MAX_TOKENS,
        temperature=0,
    )
    observed.update({"status": second.status, "output_types": [item.type for item in second.output]})
    return observed


def check_parse() -> dict[str, Any]:
    r = client().responses.parse(
        model=MODEL, input="Paris is a city in France. Give the city and country as JSON.", text_format=City, max_output_tokens=40, temperature=0
    )
    parsed = r.output_parsed
    return {"class": type(parsed).__name__, "is_city": isinstance(parsed, City), "value": parsed.model_dump() if parsed else None, "output_text": r.output_text}


# --- LangChain in Responses mode ---------------------------------------------------------------
def chat(**kwargs: Any):
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(model=MODEL, base_url=BASE_URL, api_key=API_KEY, use_responses_api=True, temperature=0, max_retries=0, timeout=60, **kwargs)


def check_langchain_invoke() -> dict[str, Any]:
    message = chat(max_tokens=MAX_TOKENS).invoke("Name three primary colors.")
    return {"class": type(message).__name__, "text": message.text, "id": message.id, "usage": message.usage_metadata}


def check_langchain_stream() -> dict[str, Any]:
    chunks = list(chat(max_tokens=MAX_TOKENS).stream("Say hello."))
    merged = chunks[0]
    for chunk in chunks[1:]:
        merged = merged + chunk
    return {"chunks": len(chunks), "text": merged.text}


def check_langchain_tools() -> dict[str, Any]:
    message = chat(max_tokens=48).bind_tools([WEATHER_TOOL], tool_choice="get_weather").invoke("What is the weather in Paris?")
    return {"tool_calls": [{"name": c["name"], "args": c["args"], "id": c["id"]} for c in message.tool_calls], "invalid_tool_calls": message.invalid_tool_calls}


def check_langchain_structured() -> dict[str, Any]:
    value = chat(max_tokens=40).with_structured_output(City).invoke("Paris is a city in France. Give the city and country.")
    return {"class": type(value).__name__, "is_city": isinstance(value, City), "value": value.model_dump() if isinstance(value, BaseModel) else repr(value)}


CHECKS: dict[str, dict[str, Callable[[], dict[str, Any]]]] = {
    "client": {"create": check_create, "stream": check_stream, "conversation": check_conversation, "function_call": check_function_call, "parse": check_parse},
    "langchain": {
        "langchain_invoke": check_langchain_invoke,
        "langchain_stream": check_langchain_stream,
        "langchain_tools": check_langchain_tools,
        "langchain_structured": check_langchain_structured,
    },
}


def main() -> None:
    versions: dict[str, str | None] = {}
    for package in ["openai", "pydantic"] + (["langchain-openai", "langchain-core"] if MODE == "langchain" else []):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    results: dict[str, Any] = {}
    for name, check in CHECKS[MODE].items():
        try:
            results[name] = check()
        except Exception as e:  # noqa: BLE001 - every failure is recorded for the caller
            results[name] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
    print(json.dumps({"versions": versions, "checks": results}, default=str))


if __name__ == "__main__":
    main()
