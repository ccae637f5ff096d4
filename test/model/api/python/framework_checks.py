"""Structured outputs and tool calling through real Python frameworks, used unmodified.

Usage: framework_checks.py ROOT [API_KEY] [MODEL]

ROOT is an address such that ROOT/<tag>/v1 is kiln's /v1 (frameworks.test.ts puts a recording
proxy there, so each check's requests are told apart by <tag>, the check's name). Every check
runs, whatever the others do, and ONE JSON object goes to stdout:
{"versions": {...}, "checks": {name: {...observed values...} | {"error": ..., "traceback": ...}}}.
The caller decides what is right; this script records what each library handed back.
"""

from __future__ import annotations

import importlib.metadata
import json
import sys
import traceback
from typing import Annotated, Any, Callable, Literal

from pydantic import BaseModel, Field

ROOT = sys.argv[1].rstrip("/")
API_KEY = sys.argv[2] if len(sys.argv) > 2 else "sk-local-anything"
MODEL = sys.argv[3] if len(sys.argv) > 3 else "smollm2-135m-instruct"
MAX_TOKENS = 160


def base_url(tag: str) -> str:
    return f"{ROOT}/{tag}/v1"


# --- the schemas: a nested object, an enum, a bounded array, an integer with bounds -----------
class Address(BaseModel):
    city: str = Field(max_length=24)
    country: str = Field(max_length=24)


class Person(BaseModel):
    """A person described in the text."""

    name: str = Field(max_length=24)
    age: int = Field(ge=0, le=120)
    role: Literal["admin", "user", "guest"]
    hobbies: list[Annotated[str, Field(max_length=24)]] = Field(max_length=3)
    address: Address


PERSON_PROMPT = [
    {"role": "system", "content": "Extract the person as JSON."},
    {"role": "user", "content": "Ada is 36, an admin from London, England, who likes chess and tea."},
]
TOOL_PROMPT = [{"role": "user", "content": "What is the weather in Paris, in celsius?"}]


def person(value: Any) -> dict[str, Any]:
    """What a parsed value is: its class, whether it is a Person, and its fields re-validated."""
    observed: dict[str, Any] = {"class": type(value).__name__, "is_person": isinstance(value, Person)}
    if isinstance(value, BaseModel):
        observed["value"] = value.model_dump()
        Person.model_validate(observed["value"])  # raises (recorded) if the library let something through
    else:
        observed["value"] = repr(value)[:500]
    return observed


# --- openai: chat.completions.parse with a pydantic model ------------------------------------
def check_openai_parse() -> dict[str, Any]:
    from openai import OpenAI

    client = OpenAI(base_url=base_url("openai_parse"), api_key=API_KEY, max_retries=0, timeout=60.0)
    r = client.chat.completions.parse(
        model=MODEL, messages=PERSON_PROMPT, response_format=Person, temperature=0, max_tokens=MAX_TOKENS
    )
    message = r.choices[0].message
    return {
        **person(message.parsed),
        "content": message.content,
        "refusal": message.refusal,
        "finish_reason": r.choices[0].finish_reason,
    }


# --- LangChain ---------------------------------------------------------------------------------
def chat_openai(tag: str):
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        base_url=base_url(tag), api_key=API_KEY, model=MODEL, temperature=0, max_tokens=MAX_TOKENS, max_retries=0, timeout=60
    )


def structured(tag: str, **kwargs: Any) -> dict[str, Any]:
    # include_raw keeps the raw message and the parsing error (instead of raising) for the report;
    # `parsed` is what the plain with_structured_output(Person) would have returned.
    out = chat_openai(tag).with_structured_output(Person, include_raw=True, **kwargs).invoke(PERSON_PROMPT)
    raw = out["raw"]
    error = out.get("parsing_error")
    return {
        **person(out["parsed"]),
        "parsing_error": None if error is None else f"{type(error).__name__}: {error}"[:1000],
        "raw_content": raw.content,
        "raw_tool_calls": getattr(raw, "tool_calls", None),
        "finish_reason": raw.response_metadata.get("finish_reason"),
    }


def check_langchain_structured() -> dict[str, Any]:
    return structured("langchain_structured")  # the default method (json_schema for ChatOpenAI)


def check_langchain_function_calling() -> dict[str, Any]:
    return structured("langchain_function_calling", method="function_calling")


def weather_tools():
    from langchain_core.tools import tool

    @tool
    def get_weather(city: Annotated[str, Field(max_length=32)], unit: Literal["celsius", "fahrenheit"]) -> str:
        """Get the current weather in a city."""
        return f"20 degrees {unit} in {city}"

    @tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    return [get_weather, add]


def bound_tools(tag: str, tool_choice: str, stream: bool = False) -> dict[str, Any]:
    tools = weather_tools()
    by_name = {t.name: t for t in tools}
    bound = chat_openai(tag).bind_tools(tools, tool_choice=tool_choice)
    chunks = 0
    if stream:  # LangChain merges the streamed tool-call fragments (AIMessageChunk + ...)
        message = None
        for chunk in bound.stream(TOOL_PROMPT):
            chunks += 1
            message = chunk if message is None else message + chunk
    else:
        message = bound.invoke(TOOL_PROMPT)
    calls = []
    for call in message.tool_calls:
        t = by_name.get(call["name"])
        valid: bool | str = False
        if t is not None:
            try:
                t.tool_call_schema.model_validate(call["args"])
                valid = True
            except Exception as e:  # recorded: the args did not validate
                valid = f"{type(e).__name__}: {e}"[:500]
        calls.append({"name": call["name"], "args": call["args"], "id": call["id"], "args_is_dict": isinstance(call["args"], dict), "valid": valid})
    return {
        "class": type(message).__name__,
        "tool_calls": calls,
        "invalid_tool_calls": [dict(c) for c in message.invalid_tool_calls],
        "content": message.content,
        "finish_reason": message.response_metadata.get("finish_reason"),
        "chunks": chunks,
    }


def check_langchain_tools_any() -> dict[str, Any]:
    return bound_tools("langchain_tools_any", "any")


def check_langchain_tools_named() -> dict[str, Any]:
    return bound_tools("langchain_tools_named", "get_weather")


def check_langchain_tools_stream() -> dict[str, Any]:
    return bound_tools("langchain_tools_stream", "get_weather", stream=True)


# --- instructor: the default mode (TOOLS) ----------------------------------------------------
def check_instructor() -> dict[str, Any]:
    import instructor
    from openai import OpenAI

    client = instructor.from_openai(OpenAI(base_url=base_url("instructor"), api_key=API_KEY, max_retries=0, timeout=60.0))
    value = client.chat.completions.create(
        model=MODEL, messages=PERSON_PROMPT, response_model=Person, max_retries=0, temperature=0, max_tokens=MAX_TOKENS
    )
    return {**person(value), "mode": str(client.mode)}


# --- the OpenAI Agents SDK: an agent with a tool and an output type, on chat and on Responses ---
class Forecast(BaseModel):
    city: str = Field(max_length=32)
    summary: str = Field(max_length=60)


def agent_run(tag: str, api: str, stream: bool = False) -> dict[str, Any]:
    from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=base_url(tag), api_key=API_KEY, max_retries=0, timeout=60.0)
    model = OpenAIChatCompletionsModel(model=MODEL, openai_client=client) if api == "chat" else OpenAIResponsesModel(model=MODEL, openai_client=client)
    cities: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """Current weather in a city."""
        cities.append(city)
        return f"Sunny and 21 C in {city}."

    agent = Agent(
        name="forecaster",
        instructions="Answer with the forecast. Use the tool when you need the weather.",
        tools=[get_weather],
        output_type=Forecast,
        model=model,
        model_settings=ModelSettings(temperature=0, max_tokens=MAX_TOKENS),
    )
    question = "What is the weather in Paris?"
    events: dict[str, int] = {}
    if stream:
        import asyncio

        async def streamed() -> Any:
            run = Runner.run_streamed(agent, question, max_turns=4)
            async for event in run.stream_events():
                kind = event.type if event.type != "raw_response_event" else f"raw:{getattr(event.data, 'type', '?')}"
                events[kind] = events.get(kind, 0) + 1
            return run

        result = asyncio.run(streamed())
    else:
        result = Runner.run_sync(agent, question, max_turns=4)
    final = result.final_output
    return {
        "events": events,
        "class": type(final).__name__,
        "is_forecast": isinstance(final, Forecast),
        "value": final.model_dump() if isinstance(final, BaseModel) else final,
        "tool_cities": cities,
        "turns": len(result.raw_responses),
    }


def check_agents_chat() -> dict[str, Any]:
    return agent_run("agents_chat", "chat")


def check_agents_responses() -> dict[str, Any]:
    return agent_run("agents_responses", "responses")


def check_agents_responses_stream() -> dict[str, Any]:
    return agent_run("agents_responses_stream", "responses", stream=True)


CHECKS: dict[str, Callable[[], dict[str, Any]]] = {
    "openai_parse": check_openai_parse,
    "langchain_structured": check_langchain_structured,
    "langchain_function_calling": check_langchain_function_calling,
    "langchain_tools_any": check_langchain_tools_any,
    "langchain_tools_named": check_langchain_tools_named,
    "langchain_tools_stream": check_langchain_tools_stream,
    "instructor": check_instructor,
    "agents_chat": check_agents_chat,
    "agents_responses": check_agents_responses,
    "agents_responses_stream": check_agents_responses_stream,
}


def version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def main() -> None:
    # One check after another: run all at once (threads) they measured slower, each request
    # taking about as long as the whole sequence does.
    results: dict[str, Any] = {}
    for name, check in CHECKS.items():
        try:
            results[name] = check()
        except Exception as e:  # recorded, so one broken check does not hide the others
            results[name] = {"error": f"{type(e).__name__}: {e}"[:2000], "traceback": traceback.format_exc(limit=8)}
    versions = {d: version(d) for d in ("openai", "langchain-openai", "langchain-core", "instructor", "openai-agents", "pydantic")}
    print(json.dumps({"versions": versions, "checks": results}, default=repr))


if __name__ == "__main__":
    main()
