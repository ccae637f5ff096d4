/** The series kiln exposes on GET /metrics, and the calls that feed them. */
import { renderEngineMetrics, type EngineSnapshotSource } from "./engine-metrics.js";
import { Counter, Gauge, Histogram, Registry } from "./prometheus.js";

const LATENCY_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];
const PER_TOKEN_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28];

/** One finished (or cancelled) generation request, as the routes report it. */
export interface GenerationRecord {
  model: string;
  /** The artifact that generated (a live switch changes it); its throughput is measured apart. */
  artifactId?: string;
  promptTokens: number;
  completionTokens: number;
  /** Seconds from the request's arrival to its first generated token; undefined when none came. */
  ttftSeconds?: number;
  /** Seconds per output token after the first, per choice (for choices with two tokens or more). */
  perTokenSeconds: number[];
  /** Decode seconds and tokens (after the first of each choice), for the measured throughput. */
  decodeSeconds: number;
  decodeTokens: number;
  cancelled: boolean;
}

/** One finished (or cancelled) transcription request, as its route reports it. */
export interface TranscriptionRecord {
  model: string;
  /** Seconds of audio in the request (0 when it never got decoded). */
  audioSeconds: number;
  cancelled: boolean;
}

export class KilnMetrics {
  readonly registry = new Registry();
  readonly requests = this.registry.register(new Counter("kiln_http_requests_total", "HTTP requests answered, by route, method and status."));
  readonly promptTokens = this.registry.register(new Counter("kiln_prompt_tokens_total", "Prompt tokens processed, by model."));
  readonly completionTokens = this.registry.register(new Counter("kiln_completion_tokens_total", "Completion tokens generated, by model."));
  readonly ttft = this.registry.register(
    new Histogram("kiln_time_to_first_token_seconds", "Seconds from a request's arrival to its first generated token, by model.", LATENCY_BUCKETS),
  );
  readonly tpot = this.registry.register(
    new Histogram("kiln_time_per_output_token_seconds", "Seconds per output token after the first, by model.", PER_TOKEN_BUCKETS),
  );
  readonly cancelled = this.registry.register(
    new Counter("kiln_requests_cancelled_total", "Generation and transcription requests cancelled because the client went away, by model."),
  );
  readonly transcriptions = this.registry.register(
    new Counter("kiln_transcription_requests_total", "Transcription requests that reached their model (finished or cancelled), by model."),
  );
  readonly audioSeconds = this.registry.register(new Counter("kiln_audio_seconds_total", "Seconds of audio transcribed, by model."));
  readonly batchRequests = this.registry.register(
    new Counter(
      "kiln_batch_requests_total",
      "Requests of Batch API batches answered by this server, by endpoint and outcome (completed: a 2xx answer, to the output file; failed: any other, to the error file).",
    ),
  );
  /** Decode time and tokens per model, and per artifact within it. */
  private readonly decode = new Map<string, Map<string, { seconds: number; tokens: number }>>();

  /**
   * @param queue reads each model's queue when scraped (waiting and running requests).
   * @param engines reads each model's scheduler statistics when scraped (see engine-metrics.ts).
   */
  constructor(
    queue: () => Array<{ model: string; waiting: number; running: number }> = () => [],
    private readonly engines: EngineSnapshotSource = () => [],
  ) {
    this.registry.register(
      new Gauge("kiln_queue_requests", "Generation requests per model, by state (waiting or running).", () =>
        queue().flatMap((q) => [
          { labels: { model: q.model, state: "waiting" }, value: q.waiting },
          { labels: { model: q.model, state: "running" }, value: q.running },
        ]),
      ),
    );
  }

  request(route: string, method: string, status: number): void {
    this.requests.inc({ route, method, status: String(status) });
  }

  generation(r: GenerationRecord): void {
    const labels = { model: r.model };
    this.promptTokens.inc(labels, r.promptTokens);
    this.completionTokens.inc(labels, r.completionTokens);
    if (r.ttftSeconds !== undefined) this.ttft.observe(r.ttftSeconds, labels);
    for (const s of r.perTokenSeconds) this.tpot.observe(s, labels);
    this.cancelled.inc(labels, r.cancelled ? 1 : 0);
    const artifacts = this.decode.get(r.model) ?? new Map<string, { seconds: number; tokens: number }>();
    const d = artifacts.get(r.artifactId ?? "") ?? { seconds: 0, tokens: 0 };
    d.seconds += r.decodeSeconds;
    d.tokens += r.decodeTokens;
    artifacts.set(r.artifactId ?? "", d);
    this.decode.set(r.model, artifacts);
  }

  /** A batch's request answered: to the output file, or (`failed`) to the error file. */
  batchRequest(endpoint: string, failed: boolean): void {
    this.batchRequests.inc({ endpoint, outcome: failed ? "failed" : "completed" });
  }

  transcription(r: TranscriptionRecord): void {
    const labels = { model: r.model };
    this.transcriptions.inc(labels);
    this.audioSeconds.inc(labels, r.audioSeconds);
    this.cancelled.inc(labels, r.cancelled ? 1 : 0);
  }

  /** Output tokens per second measured so far on `model` (decode only), on `artifactId` alone when given; null before any. */
  throughput(model: string, artifactId?: string): number | null {
    let seconds = 0;
    let tokens = 0;
    for (const [id, d] of this.decode.get(model) ?? []) {
      if (artifactId !== undefined && id !== artifactId) continue;
      seconds += d.seconds;
      tokens += d.tokens;
    }
    return seconds > 0 ? Math.round((tokens / seconds) * 10) / 10 : null;
  }

  /** The exposition text; `engines` (default: the constructor's) supplies the scheduler series. */
  render(engines: EngineSnapshotSource = this.engines): string {
    return this.registry.render() + renderEngineMetrics(engines());
  }
}
