// The transcribe page: an uploaded file (or a recording from the microphone) sent to /v1/audio/transcriptions in the chosen response
// format; verbose_json's segments listed with their times, each a button that seeks the audio,
// the one playing highlighted.
import { api, el, field, getJson } from "./lib.js";

const FORMATS = ["verbose_json", "json", "text", "srt", "vtt"];

export function transcribePage(main) {
  const model = el("select");
  const file = el("input", { type: "file", accept: "audio/*,video/*" });
  const format = el("select", {}, ...FORMATS.map((f) => el("option", { value: f }, f)));
  const words = el("input", { type: "checkbox" });
  const go = el("button", { type: "submit", class: "primary" }, "Transcribe");
  // Recording needs a secure context (127.0.0.1 and localhost are; plain http to another host is not).
  const canRecord = Boolean(navigator.mediaDevices?.getUserMedia && window.MediaRecorder);
  const record = canRecord ? el("button", { type: "button", "aria-pressed": "false" }, "Record") : null;
  const status = el("p", { class: "stats", "aria-live": "polite" });
  const audio = el("audio", { controls: true, hidden: true });
  const output = el("section", { "aria-label": "Transcript", "aria-live": "polite" });
  const form = el(
    "form",
    { class: "panel" },
    field("Model", model),
    field("Audio file", file),
    record ? el("p", {}, record, " from the microphone") : null,
    field("Response format", format),
    el("div", { class: "field" }, el("label", {}, words, " Word timestamps (verbose_json)")),
    go,
  );
  main.append(el("h1", {}, "Transcribe"), el("div", { class: "split" }, form, el("div", {}, status, audio, output)));

  getJson("/v1/models")
    .then(({ data }) => {
      const speech = data.filter((m) => m.capabilities.includes("transcription"));
      speech.sort((a, b) => (a.availability === "served" ? 0 : 1) - (b.availability === "served" ? 0 : 1));
      model.replaceChildren(
        ...speech.map((m) =>
          el("option", { value: m.id }, `${m.id}${m.availability === "served" ? "" : ` (${(m.availability ?? m.status).replace("_", " ")})`}`),
        ),
      );
    })
    .catch((err) => status.replaceChildren(el("span", { class: "error-text" }, `Models: ${err.message}`)));

  let url = null;
  let recorder = null;
  record?.addEventListener("click", async () => {
    if (recorder) {
      recorder.stop();
      return;
    }
    let stream;
    try {
      stream = await navigator.mediaDevices.getUserMedia({ audio: true });
    } catch (err) {
      status.replaceChildren(el("span", { class: "error-text" }, `Microphone: ${err.message}`));
      return;
    }
    const chunks = [];
    recorder = new MediaRecorder(stream);
    recorder.ondataavailable = (event) => chunks.push(event.data);
    recorder.onstop = () => {
      for (const track of stream.getTracks()) track.stop();
      const type = recorder.mimeType.split(";")[0] || "audio/webm";
      const name = `recording.${type.split("/")[1] ?? "webm"}`;
      // The recording becomes the file input's file, so it is sent (and played) as an upload is.
      const files = new DataTransfer();
      files.items.add(new File(chunks, name, { type }));
      file.files = files.files;
      file.dispatchEvent(new Event("change"));
      recorder = null;
      record.textContent = "Record";
      record.setAttribute("aria-pressed", "false");
      status.textContent = `Recorded ${name}: press Transcribe.`;
    };
    recorder.start();
    record.textContent = "Stop recording";
    record.setAttribute("aria-pressed", "true");
    status.textContent = "Recording…";
  });
  file.addEventListener("change", () => {
    if (url) URL.revokeObjectURL(url);
    const f = file.files?.[0];
    url = f ? URL.createObjectURL(f) : null;
    audio.hidden = !url;
    if (url) audio.src = url;
  });

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const f = file.files?.[0];
    if (!f) {
      status.replaceChildren(el("span", { class: "error-text" }, "Choose an audio file first."));
      return;
    }
    const data = new FormData();
    data.append("file", f);
    data.append("model", model.value);
    data.append("response_format", format.value);
    if (words.checked && format.value === "verbose_json") {
      data.append("timestamp_granularities[]", "segment");
      data.append("timestamp_granularities[]", "word");
    }
    go.disabled = true;
    status.textContent = "Transcribing…";
    output.replaceChildren();
    const started = performance.now();
    try {
      const response = await api("/v1/audio/transcriptions", { method: "POST", body: data });
      const seconds = ((performance.now() - started) / 1000).toFixed(1);
      if (format.value === "json" || format.value === "verbose_json") {
        const result = await response.json();
        status.textContent = `Done in ${seconds} s${result.duration ? ` · ${result.duration.toFixed(1)} s of audio` : ""}`;
        output.append(el("h2", {}, "Text"), el("p", { class: "transcript-text" }, result.text.trim() || "No speech found."));
        if (result.segments?.length) showSegments(result);
      } else {
        status.textContent = `Done in ${seconds} s`;
        output.append(el("pre", { class: "transcript-text" }, await response.text()));
      }
    } catch (err) {
      status.replaceChildren(el("span", { class: "error-text" }, err.message));
    } finally {
      go.disabled = false;
    }
  });

  function showSegments(result) {
    const items = result.segments.map((s) =>
      el(
        "li",
        {},
        el(
          "button",
          { type: "button", onclick: () => ((audio.currentTime = s.start), audio.play().catch(() => {})) },
          el("span", { class: "time" }, `${clock(s.start)} → ${clock(s.end)}`),
          el("span", {}, s.text.trim()),
        ),
      ),
    );
    output.append(el("h2", {}, "Segments"), el("ol", { class: "segments" }, items));
    if (result.words?.length) output.append(el("h2", {}, "Words"), el("p", {}, result.words.map((w) => `${w.word.trim()} (${w.start.toFixed(2)})`).join(" ")));
    audio.ontimeupdate = () => {
      result.segments.forEach((s, i) => items[i].firstChild.setAttribute("aria-current", String(audio.currentTime >= s.start && audio.currentTime < s.end)));
    };
  }

  return () => {
    if (recorder) recorder.stop();
    if (url) URL.revokeObjectURL(url);
  };
}

const clock = (t) => `${Math.floor(t / 60)}:${(t % 60).toFixed(2).padStart(5, "0")}`;
