/**
 * The process's voice activity detector: Silero VAD's model pulled into the kiln home on first use
 * (pip, once; verified after) and loaded once, shared by every speech model, since the model is
 * small and keeps no state between calls.
 */
import { pullVadModel } from "../catalogue/pull/vad-model.js";
import { kilnHome } from "../catalogue/paths.js";
import { SileroVad } from "../runtime/audio/index.js";
import type { SpeechVad } from "../scheduler/speech/index.js";

const loaded = new Map<string, Promise<SileroVad>>();

/** The detector of the kiln home `home`, pulled and loaded on the first call; a failed try is not kept, so a later call tries again. */
export function loadVad(home = kilnHome()): Promise<SileroVad> {
  let pending = loaded.get(home);
  if (!pending) {
    pending = pullVadModel({ home }).then((path) => SileroVad.load(path));
    loaded.set(home, pending);
    pending.catch(() => loaded.delete(home));
  }
  return pending;
}

/** The speech models' VAD setting: filtered by default or not, the detector loaded when first needed. */
export function speechVad(byDefault: boolean, home?: string): SpeechVad {
  return { byDefault, detector: () => loadVad(home) };
}
