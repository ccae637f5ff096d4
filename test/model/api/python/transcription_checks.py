"""The official openai Python client against kiln's /v1/audio/transcriptions: prints one JSON object
of what it observed. Usage: transcription_checks.py BASE_URL MODEL AUDIO_FILE TEXT_MODEL"""

import json
import sys

import openai
from openai import OpenAI

base_url, model, audio, text_model = sys.argv[1:5]
client = OpenAI(base_url=base_url, api_key="test")
out = {}

with open(audio, "rb") as f:
    r = client.audio.transcriptions.create(model=model, file=f)
out["json"] = {"text": r.text}

with open(audio, "rb") as f:
    r = client.audio.transcriptions.create(model=model, file=f, response_format="verbose_json", timestamp_granularities=["word", "segment"])
out["verbose"] = {
    "text": r.text,
    "language": r.language,
    "duration": r.duration,
    "segments": [{"start": s.start, "end": s.end, "text": s.text} for s in (r.segments or [])],
    "words": [{"word": w.word, "start": w.start, "end": w.end} for w in (r.words or [])],
}

with open(audio, "rb") as f:
    srt = client.audio.transcriptions.create(model=model, file=f, response_format="srt")
out["srt"] = srt if isinstance(srt, str) else str(srt)

with open(audio, "rb") as f:
    events = list(client.audio.transcriptions.create(model=model, file=f, stream=True))
out["stream"] = {
    "types": [e.type for e in events],
    "deltas": "".join(e.delta for e in events if e.type == "transcript.text.delta"),
    "done_text": next((e.text for e in events if e.type == "transcript.text.done"), None),
}

try:
    with open(audio, "rb") as f:
        client.audio.transcriptions.create(model=text_model, file=f)
    out["text_model"] = None
except openai.BadRequestError as e:
    out["text_model"] = {"status": e.status_code, "param": (e.body or {}).get("param") if isinstance(e.body, dict) else None}

print(json.dumps(out))
