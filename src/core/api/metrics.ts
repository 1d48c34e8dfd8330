import type { IncomingMessage, ServerResponse } from 'node:http';
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';
import type { EventBus } from '../bus/event-bus.js';
import { type RawRoute, rawRoute } from '../http/routes.js';
import type { StreamingChannel } from '../runtime/streaming-channel.js';
import type { CloseCause, ReplayOutcome, StreamCounters } from '../stream/client-connection.js';
import { registerEventSeries, type SeriesSources } from './metrics-series.js';
import { EventTally } from './metrics-tally.js';

/** A connection's outbound queue, read at scrape time only. */
export interface QueueDepthSource {
  queueDepth(): { readonly events: number; readonly bytes: number };
}

export interface MetricsSources extends SeriesSources {
  readonly bus: EventBus;
  readonly streaming: StreamingChannel;
  readonly connections: () => Iterable<QueueDepthSource>;
  /** Node's process metrics (CPU, memory, event loop lag, GC): on for `metis serve`, off in tests. */
  readonly processMetrics?: boolean;
}

const CLOSE_CAUSES: readonly CloseCause[] = [
  'client_too_slow',
  'heartbeat_timeout',
  'client_closed',
  'protocol_error',
  'shutdown',
];
const REPLAY_OUTCOMES: readonly ReplayOutcome[] = ['served', 'cursor_expired', 'replay_too_large'];

/**
 * The server's Prometheus metrics (`GET /metrics`), in a registry of its own: tests run many servers in
 * one process, and the global default registry would mix them. Counts come from EventTally and the
 * connections' StreamCounters; gauges and the writer's retries are read when scraped.
 */
export class ServerMetrics implements StreamCounters {
  readonly registry = new Registry();
  private readonly tally: EventTally;
  private readonly commitSeconds: Histogram;
  private readonly batchEvents: Histogram;
  private readonly closes: Counter<'reason'>;
  private readonly lagWarnings: Counter;
  private readonly replays: Counter<'outcome'>;
  private readonly replayEvents: Histogram;

  constructor(sources: MetricsSources) {
    const registers = [this.registry];
    this.commitSeconds = new Histogram({
      name: 'metis_trace_commit_duration_seconds',
      help: 'Time spent in the transaction that committed one batch of events.',
      buckets: [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1],
      registers,
    });
    this.batchEvents = new Histogram({
      name: 'metis_trace_commit_batch_events',
      help: 'Events committed per batch (one dispatch tick, one transaction).',
      buckets: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000],
      registers,
    });
    this.tally = new EventTally(sources.bus, sources.writer, sources.streaming, (report) => {
      if (report.outcome !== 'committed') return;
      this.commitSeconds.observe(report.durationMs / 1000);
      this.batchEvents.observe(report.events.length);
    });
    registerEventSeries(registers, this.tally, sources);
    new Gauge({
      name: 'metis_bus_queued_events',
      help: 'Events emitted and waiting for the next dispatch tick.',
      registers,
      collect() {
        this.set(sources.bus.queued);
      },
    });
    new Gauge({
      name: 'metis_stream_connections',
      help: 'Open stream connections (WebSocket, SSE, and the AG-UI and AI SDK turn streams).',
      registers,
      collect() {
        let open = 0;
        for (const _ of sources.connections()) open += 1;
        this.set(open);
      },
    });
    for (const [unit, pick] of [
      ['events', (d: { events: number }) => d.events],
      ['bytes', (d: { bytes: number }) => d.bytes],
    ] as const) {
      new Gauge({
        name: `metis_stream_queue_depth_${unit}`,
        help: `Frames waiting in the clients' outbound queues, in ${unit}: the largest one and the sum.`,
        labelNames: ['stat'],
        registers,
        collect() {
          let max = 0;
          let sum = 0;
          for (const connection of sources.connections()) {
            const value = pick(connection.queueDepth());
            sum += value;
            if (value > max) max = value;
          }
          this.set({ stat: 'max' }, max);
          this.set({ stat: 'sum' }, sum);
        },
      });
    }
    this.closes = new Counter({
      name: 'metis_stream_closes_total',
      help: 'Stream connections (every transport) closed, by reason (client_too_slow is the 1008 eviction).',
      labelNames: ['reason'],
      registers,
    });
    for (const reason of CLOSE_CAUSES) this.closes.inc({ reason }, 0);
    this.lagWarnings = new Counter({
      name: 'metis_stream_lag_warnings_total',
      help: 'lag_warning frames sent to clients whose outbound queue passed half its bound.',
      registers,
    });
    this.replays = new Counter({
      name: 'metis_stream_replays_total',
      help: 'Subscribes with a `since` cursor, by outcome (served, cursor_expired, replay_too_large).',
      labelNames: ['outcome'],
      registers,
    });
    for (const outcome of REPLAY_OUTCOMES) this.replays.inc({ outcome }, 0);
    this.replayEvents = new Histogram({
      name: 'metis_stream_replay_events',
      help: 'Events sent by each served replay.',
      buckets: [0, 1, 10, 100, 1000, 10_000, 100_000],
      registers,
    });
    if (sources.processMetrics) {
      collectDefaultMetrics({ register: this.registry });
      dropMisnamedDefaultGauges(this.registry);
    }
  }

  connectionClosed(cause: CloseCause): void {
    this.closes.inc({ reason: cause });
  }

  lagWarning(): void {
    this.lagWarnings.inc();
  }

  replay(outcome: ReplayOutcome, events: number): void {
    this.replays.inc({ outcome });
    if (outcome === 'served') this.replayEvents.observe(events);
  }

  /** `GET /metrics` (and HEAD) in the Prometheus text format. */
  async respond(request: IncomingMessage, response: ServerResponse): Promise<void> {
    const text = await this.registry.metrics();
    response.writeHead(200, {
      'content-type': this.registry.contentType,
      'content-length': Buffer.byteLength(text),
      'cache-control': 'no-store',
      'x-content-type-options': 'nosniff',
    });
    response.end(request.method === 'HEAD' ? undefined : text);
  }

  close(): void {
    this.tally.close();
  }
}

/** `GET /metrics` (and HEAD): the Prometheus text of `metrics`. */
export function metricsRoute(metrics: ServerMetrics): RawRoute {
  return rawRoute(
    {
      method: 'GET',
      path: '/metrics',
      head: true,
      summary: 'Prometheus metrics',
      success: { status: 200, description: 'Prometheus text format', contentType: 'text/plain' },
      errors: [],
    },
    ({ request }, response) => metrics.respond(request, response),
  );
}

/**
 * Removes prom-client's gauges named like counters (`nodejs_active_handles_total` and its kin): a
 * `_total` suffix is a counter's, so `promtool check metrics` refuses them (issue 29 obs. E). Nothing
 * is lost: each is the sum of the per-type gauge of the same name without `_total`
 * (`sum(nodejs_active_handles)`), which stays.
 */
function dropMisnamedDefaultGauges(registry: Registry): void {
  for (const metric of registry.getMetricsAsArray()) {
    if (metric instanceof Gauge && metric.name.endsWith('_total')) registry.removeSingleMetric(metric.name);
  }
}
