import type { ReadableSpan, SpanExporter } from '@opentelemetry/sdk-trace-base';
import type { Logger } from 'pino';

type ExportDone = Parameters<SpanExporter['export']>[1];

/** `ExportResultCode.SUCCESS` of @opentelemetry/core (not a dependency of ours). */
const EXPORT_SUCCESS = 0;

/**
 * Why an export failed, short and stable enough to say once: `HTTP 401`, `ECONNREFUSED`, `timeout`…
 * (the exporter's error carries the status as `code`, a network failure its cause's code).
 */
export function exportFailureReason(error: unknown): string {
  if (error === undefined || error === null) return 'unknown';
  const e = error as { code?: unknown; message?: unknown; cause?: { code?: unknown } };
  if (typeof e.code === 'number') return `HTTP ${e.code}`;
  if (typeof e.cause?.code === 'string') return e.cause.code;
  if (typeof e.code === 'string') return e.code;
  const message = typeof e.message === 'string' ? e.message : String(error);
  if (/timeout|timed out/i.test(message)) return 'timeout';
  const code = /\b(E[A-Z]{3,}|HTTP \d{3})\b/.exec(message)?.[1];
  return code ?? message.slice(0, 200);
}

/**
 * The OTLP exporter, reporting its failures: the SDK drops a batch it could not export without a word.
 * A failure is a warning naming the endpoint and the reason, once per reason while the endpoint fails
 * (a backend that goes from refusing the key to being down says so; the same reason again is only
 * counted); the first success after it says how many spans were dropped meanwhile.
 */
export class ReportingExporter implements SpanExporter {
  /** Reasons already said in this failing episode; empty while exports work. */
  private readonly said = new Set<string>();
  readonly counters = { export_failures: 0, spans_dropped: 0 };
  private droppedThisEpisode = 0;

  constructor(
    private readonly inner: SpanExporter,
    private readonly endpoint: string,
    private readonly logger: Logger,
  ) {}

  export(spans: ReadableSpan[], done: ExportDone): void {
    this.inner.export(spans, (result) => {
      if (result.code === EXPORT_SUCCESS) {
        if (this.said.size > 0) {
          this.logger.info(
            { endpoint: this.endpoint, spans_dropped: this.droppedThisEpisode, reasons: [...this.said] },
            'otel export works again',
          );
          this.said.clear();
          this.droppedThisEpisode = 0;
        }
      } else {
        this.counters.export_failures += 1;
        this.counters.spans_dropped += spans.length;
        this.droppedThisEpisode += spans.length;
        const reason = exportFailureReason(result.error);
        if (!this.said.has(reason)) {
          this.said.add(reason);
          this.logger.warn(
            { endpoint: this.endpoint, reason, spans: spans.length, err: result.error?.message ?? 'unknown' },
            `otel export failed (${reason}): spans are dropped until ${this.endpoint} takes them (said once per reason until it does)`,
          );
        }
      }
      done(result);
    });
  }

  shutdown(): Promise<void> {
    return this.inner.shutdown();
  }

  forceFlush(): Promise<void> {
    return this.inner.forceFlush?.() ?? Promise.resolve();
  }
}
