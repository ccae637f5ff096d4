/** A transcription's answer formats (\`response_format\`), in a module of their own: \`kiln run --help\` lists them without loading the API. */
export const RESPONSE_FORMATS = ["json", "text", "srt", "vtt", "verbose_json"] as const;
export type TranscriptionResponseFormat = (typeof RESPONSE_FORMATS)[number];
