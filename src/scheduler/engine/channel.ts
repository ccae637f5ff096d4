/**
 * A one-consumer async queue: the engine pushes events as they happen, the caller iterates them
 * at its own pace. Ending the iteration early (break / return()) calls `onCancel`; taking an item
 * calls `onTake`, so a producer that stopped for a slow consumer can go on.
 */
export class Channel<T> implements AsyncIterable<T> {
  private readonly items: T[] = [];
  private waiter: ((r: IteratorResult<T>) => void) | null = null;
  private failer: ((e: unknown) => void) | null = null;
  private ended = false;
  private error: { value: unknown } | null = null;

  /**
   * @param onCancel called once when the consumer stops before the end.
   * @param onTake called after the consumer takes a queued item.
   */
  constructor(
    private readonly onCancel: () => void = () => {},
    private readonly onTake: () => void = () => {},
  ) {}

  /** Items pushed and not yet taken by the consumer. */
  get backlog(): number {
    return this.items.length;
  }

  push(item: T): void {
    if (this.ended) return;
    if (this.waiter) {
      const wake = this.waiter;
      this.waiter = this.failer = null;
      wake({ value: item, done: false });
    } else this.items.push(item);
  }

  end(): void {
    if (this.ended) return;
    this.ended = true;
    if (this.waiter) {
      const wake = this.waiter;
      this.waiter = this.failer = null;
      wake({ value: undefined, done: true });
    }
  }

  fail(error: unknown): void {
    if (this.ended) return;
    this.error = { value: error };
    this.ended = true;
    if (this.failer) {
      const fail = this.failer;
      this.waiter = this.failer = null;
      fail(error);
    }
  }

  [Symbol.asyncIterator](): AsyncIterator<T> {
    return {
      next: () => {
        if (this.items.length > 0) {
          const value = this.items.shift()!;
          this.onTake();
          return Promise.resolve({ value, done: false });
        }
        if (this.error) {
          const { value } = this.error;
          this.error = null;
          return Promise.reject(value);
        }
        if (this.ended) return Promise.resolve({ value: undefined, done: true });
        return new Promise((resolve, reject) => {
          this.waiter = resolve;
          this.failer = reject;
        });
      },
      return: () => {
        if (!this.ended) {
          this.ended = true;
          this.items.length = 0;
          this.onCancel();
        }
        return Promise.resolve({ value: undefined, done: true });
      },
    };
  }
}
