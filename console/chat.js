// The chat page: a model from /v1/models, the sampling controls, the conversation streamed from
// /v1/chat/completions with its TTFT and tokens/s, Stop (aborting the fetch; the server cancels
// the generation when its client goes away) and the request as curl and as client code.
import { api, authHeaders, el, field, fmt, getJson } from "./lib.js";

/** The conversation outlives page switches within the tab. */
const history = [];

export function chatPage(main) {
  const model = el("select", { name: "model" });
  const system = el("textarea", { rows: 3, placeholder: "You are a helpful assistant." });
  const temperature = el("input", { type: "number", min: 0, max: 2, step: 0.1, placeholder: "1" });
  const topP = el("input", { type: "number", min: 0, max: 1, step: 0.05, placeholder: "1" });
  const maxTokens = el("input", { type: "number", min: 1, step: 1, value: "256" });
  const seed = el("input", { type: "number", step: 1 });
  const stop = el("textarea", { rows: 2, placeholder: "one per line" });
  const format = el(
    "select",
    {},
    el("option", { value: "text" }, "Text"),
    el("option", { value: "json_object" }, "JSON mode"),
    el("option", { value: "json_schema" }, "JSON schema"),
  );
  const schema = el("textarea", { rows: 4, placeholder: '{"type":"object","properties":{"answer":{"type":"string"}},"required":["answer"]}' });
  const schemaField = field("JSON schema", schema);
  const toolChoice = el("select", {}, ...["auto", "required", "none"].map((c) => el("option", { value: c }, c)));
  const tools = el("textarea", {
    rows: 4,
    placeholder: '[{"type":"function","function":{"name":"get_weather","parameters":{…}}}]',
  });
  const message = el("textarea", { rows: 2, placeholder: "Ask something… (Enter sends, Shift+Enter adds a line)" });
  const send = el("button", { type: "submit", class: "primary" }, "Send");
  const stopButton = el("button", { type: "button", disabled: true }, "Stop");
  const clear = el("button", { type: "button" }, "New chat");
  const log = el("div", { class: "log", role: "log", "aria-label": "Conversation", "aria-live": "polite", tabindex: "0" });
  const stats = el("p", { class: "stats", "aria-live": "polite" });
  const curl = el("pre", { class: "curl", "aria-label": "curl command" });
  const client = el("pre", { class: "client", "aria-label": "Client code" });
  const copyCurl = el("button", { type: "button" }, "Copy curl");
  const copyClient = el("button", { type: "button" }, "Copy client code");

  schemaField.hidden = true;
  format.addEventListener("change", () => (schemaField.hidden = format.value !== "json_schema"));

  const form = el("form", { class: "composer", "aria-label": "Send a message" }, field("Message", message), send, stopButton);
  main.append(
    el("h1", {}, "Chat"),
    el(
      "div",
      { class: "split" },
      el(
        "section",
        { class: "panel settings", "aria-label": "Settings" },
        field("Model", model),
        field("System prompt", system),
        el("div", { class: "row" }, field("Temperature", temperature), field("Top p", topP)),
        el("div", { class: "row" }, field("Max tokens", maxTokens), field("Seed", seed)),
        field("Stop sequences", stop, "One per line, at most 4."),
        field("Response format", format),
        schemaField,
        field("Tools (JSON array)", tools),
        field("Tool choice", toolChoice),
      ),
      el(
        "section",
        { "aria-label": "Conversation" },
        log,
        stats,
        form,
        el("p", {}, clear),
        el(
          "details",
          {},
          el("summary", {}, "This request as code"),
          el("h2", {}, "curl"),
          curl,
          copyCurl,
          el("h2", {}, "Client (openai package)"),
          client,
          copyClient,
        ),
      ),
    ),
  );

  getJson("/v1/models")
    .then(({ data }) => {
      const text = data.filter((m) => m.capabilities.includes("chat"));
      text.sort((a, b) => rank(a) - rank(b) || a.id.localeCompare(b.id));
      model.replaceChildren(
        ...text.map((m) => el("option", { value: m.id }, `${m.id}${m.availability === "served" ? "" : ` (${m.availability?.replace("_", " ") ?? m.status})`}`)),
      );
      showCode();
    })
    .catch((err) => stats.replaceChildren(el("span", { class: "error-text" }, `Models: ${err.message}`)));

  for (const m of history) log.append(bubble(m.role, m.content, m.meta, m.reasoning));

  /** The request body as the controls say; throws on a JSON field that does not parse. */
  function body(messages) {
    const b = {
      model: model.value,
      messages: [...(system.value.trim() ? [{ role: "system", content: system.value.trim() }] : []), ...messages],
      stream: true,
      stream_options: { include_usage: true },
    };
    const number = (input) => (input.value === "" ? undefined : Number(input.value));
    if (number(temperature) !== undefined) b.temperature = number(temperature);
    if (number(topP) !== undefined) b.top_p = number(topP);
    if (number(maxTokens) !== undefined) b.max_tokens = number(maxTokens);
    if (number(seed) !== undefined) b.seed = number(seed);
    const stops = stop.value.split("\n").filter((s) => s !== "");
    if (stops.length > 0) b.stop = stops;
    if (format.value === "json_object") b.response_format = { type: "json_object" };
    if (format.value === "json_schema")
      b.response_format = { type: "json_schema", json_schema: { name: "answer", schema: parse(schema.value, "JSON schema") } };
    if (tools.value.trim()) {
      b.tools = parse(tools.value, "Tools");
      if (toolChoice.value !== "auto") b.tool_choice = toolChoice.value;
    }
    return b;
  }

  function showCode() {
    let b;
    try {
      b = body([...history.map(({ role, content }) => ({ role, content })), { role: "user", content: message.value || "Hello!" }]);
    } catch (err) {
      curl.textContent = client.textContent = err.message;
      return;
    }
    const origin = location.origin;
    const json = JSON.stringify(b);
    const key = authHeaders().authorization ? ` \\\n  -H "Authorization: Bearer $KILN_API_KEY"` : "";
    curl.textContent = `curl -N ${origin}/v1/chat/completions${key} \\\n  -H "Content-Type: application/json" \\\n  -d '${json.replace(/'/g, "'\\''")}'`;
    const { stream_options: _, ...rest } = b;
    client.textContent = `import OpenAI from "openai";\nconst client = new OpenAI({ baseURL: "${origin}/v1", apiKey: process.env.KILN_API_KEY ?? "local" });\nconst stream = await client.chat.completions.create(${JSON.stringify(rest, null, 2)});\nfor await (const chunk of stream) process.stdout.write(chunk.choices[0]?.delta?.content ?? "");`;
  }
  // On this page's own elements: <main> outlives the page.
  const page = main.querySelector(".split");
  page.addEventListener("input", showCode);
  page.addEventListener("change", showCode);
  copyCurl.addEventListener("click", () => copy(curl.textContent, copyCurl));
  copyClient.addEventListener("click", () => copy(client.textContent, copyClient));

  let controller = null;
  message.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      form.requestSubmit();
    }
  });
  stopButton.addEventListener("click", () => controller?.abort());
  clear.addEventListener("click", () => {
    controller?.abort();
    history.length = 0;
    log.replaceChildren();
    stats.textContent = "";
    showCode();
  });

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const text = message.value.trim();
    if (!text || controller) return;
    let request;
    try {
      request = body([...history.map(({ role, content }) => ({ role, content })), { role: "user", content: text }]);
    } catch (err) {
      stats.replaceChildren(el("span", { class: "error-text" }, err.message));
      return;
    }
    history.push({ role: "user", content: text });
    log.append(bubble("user", text));
    message.value = "";
    const answer = bubble("assistant", "");
    const content = answer.firstChild;
    log.append(answer);
    log.scrollTop = log.scrollHeight;

    controller = new AbortController();
    send.disabled = true;
    stopButton.disabled = false;
    const started = performance.now();
    let first = 0;
    let chunks = 0;
    let usage = null;
    let finish = null;
    const calls = [];
    let outcome = "";
    const tick = () => {
      const now = performance.now();
      const tokens = usage?.completion_tokens ?? chunks;
      const rate = first && now > first && tokens > 1 ? ((tokens - 1) * 1000) / (now - first) : null;
      stats.textContent = `TTFT ${first ? `${fmt(first - started, 0)} ms` : "…"} · ${fmt(rate)} tokens/s · ${tokens} tokens${finish ? ` · finish: ${finish}` : ""}${outcome}`;
    };
    try {
      const response = await api("/v1/chat/completions", {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(request),
        signal: controller.signal,
      });
      for await (const data of sse(response)) {
        if (data.usage) usage = data.usage;
        const choice = data.choices?.[0];
        if (!choice) continue;
        const delta = choice.delta ?? {};
        if (delta.content || delta.tool_calls || delta.reasoning_content) {
          if (!first) first = performance.now();
          chunks++;
        }
        if (delta.reasoning_content) thinking(answer).lastChild.textContent += delta.reasoning_content;
        if (delta.content) content.textContent += delta.content;
        for (const call of delta.tool_calls ?? []) {
          const slot = (calls[call.index ?? 0] ??= { name: "", arguments: "" });
          slot.name += call.function?.name ?? "";
          slot.arguments += call.function?.arguments ?? "";
          content.textContent = calls.map((c) => `${c.name}(${c.arguments})`).join("\n");
        }
        if (choice.finish_reason) finish = choice.finish_reason;
        tick();
        log.scrollTop = log.scrollHeight;
      }
    } catch (err) {
      if (err.name === "AbortError") outcome = " · stopped";
      else {
        answer.classList.add("error");
        content.textContent += `${content.textContent ? "\n" : ""}${err.message}`;
      }
    } finally {
      tick();
      const meta = stats.textContent;
      answer.lastChild.textContent = meta;
      const reasoning = answer.querySelector(".thinking")?.lastChild.textContent;
      history.push({ role: "assistant", content: content.textContent, meta, ...(reasoning !== undefined ? { reasoning } : {}) });
      controller = null;
      send.disabled = false;
      stopButton.disabled = true;
      showCode();
    }
  });

  return () => controller?.abort();
}

const rank = (m) => ({ served: 0, loadable: 1 })[m.availability] ?? 2;

function bubble(role, text, meta = "", reasoning) {
  const b = el("div", { class: `msg ${role}` }, el("span", {}, text), el("span", { class: "meta" }, meta));
  if (reasoning !== undefined) thinking(b).lastChild.textContent = reasoning;
  return b;
}

/** A reasoning model's thinking in an answer's bubble, folded away under its answer's text (made on first use). */
function thinking(bubble) {
  let block = bubble.querySelector(".thinking");
  if (!block) {
    block = el("details", { class: "thinking" }, el("summary", {}, "Thinking"), el("span", {}, ""));
    bubble.insertBefore(block, bubble.firstChild);
  }
  return block;
}

function parse(text, what) {
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new Error(`${what} is not valid JSON: ${err.message}`);
  }
}

/** The JSON payloads of an SSE response, up to `[DONE]`. */
async function* sse(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const frame = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = frame
        .split("\n")
        .filter((l) => l.startsWith("data:"))
        .map((l) => l.slice(5).trimStart())
        .join("\n");
      if (data === "[DONE]") return;
      if (!data) continue;
      const parsed = JSON.parse(data);
      if (parsed.error) throw new Error(parsed.error.message);
      yield parsed;
    }
  }
}

async function copy(text, button) {
  try {
    await navigator.clipboard.writeText(text);
    button.dataset.label ??= button.textContent;
    button.textContent = "Copied";
    setTimeout(() => (button.textContent = button.dataset.label), 1500);
  } catch {
    button.textContent = "Copy failed: select the text";
  }
}
