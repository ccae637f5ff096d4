/**
 * Turns generated token ids into text deltas for streaming. A byte-level token can end in the middle
 * of a UTF-8 character (an emoji is often two or more tokens), so bytes of an unfinished character
 * are held back until the token that completes it arrives; nothing half-formed is ever emitted.
 * Bytes that can never form a character come out as U+FFFD, as in a non-streamed decode.
 */
export class StreamDecoder {
  // TextDecoder's streaming mode implements exactly the hold-back rule (WHATWG "stream: true").
  private readonly decoder = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });

  constructor(private readonly pieceOf: (id: number) => Uint8Array) {}

  /** The text this token completes; "" while a character is still incomplete. */
  push(id: number): string {
    return this.pushBytes(this.pieceOf(id));
  }

  /** The text these bytes complete (a piece already looked up, or trimmed). */
  pushBytes(bytes: Uint8Array): string {
    return this.decoder.decode(bytes, { stream: true });
  }

  /** Ends the stream: a still-incomplete character becomes U+FFFD. The decoder can then be reused. */
  flush(): string {
    return this.decoder.decode();
  }
}
