/** Provisioning's defaults, in a module of their own: \`kiln serve\`'s help shows them without loading models. */

/** Beams of a transcription's beam search (faster-whisper's); 1 is greedy decoding. */
export const DEFAULT_BEAM_SIZE = 5;
/** Transcriptions decoded at once per speech model. */
export const DEFAULT_SPEECH_SLOTS = 4;
