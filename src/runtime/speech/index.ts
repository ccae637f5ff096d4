/** Whisper's rules beside the speech worker: its languages, its decoding rules and word alignment. */
export { languageName, LANGUAGE_NAMES } from "./languages.js";
