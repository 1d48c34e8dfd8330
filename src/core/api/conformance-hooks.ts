import { z } from 'zod';
import { microsToIso, nowMicros } from '../events/clock.js';
import { newEventId } from '../events/ids.js';
import { type JsonRoute, jsonRoute } from '../http/routes.js';
import type { StoreContext } from '../store/store-context.js';
import type { StreamHub } from '../stream/stream-hub.js';

export interface ConformanceSettings {
  readonly heartbeatIntervalMs: number;
  readonly maxQueueEvents: number;
  readonly replayCap: number;
  readonly faults: readonly string[];
}

const FloodBody = z.strictObject({
  session_id: z.string().min(1),
  count: z.number().int().min(1).max(100_000),
});
const UnknownBody = z.strictObject({ session_id: z.string().min(1) });
const StallBody = z.strictObject({ ms: z.number().int().min(0).max(30_000) });

/** A catalog type with a small payload, to fill a session's trace quickly. */
const FLOOD_PAYLOAD = {
  type: 'accept' as const,
  confidence: 0.5,
  subject_turn_id: null,
  context: { conformance: true },
};
/** Small chunks with a commit between them, so clients that keep up read between chunks. */
const FLOOD_CHUNK = 500;
const FLOOD_PAUSE_MS = 10;

/**
 * HTTP hooks that exist only with `metis serve --conformance` (documented in docs/conformance.md):
 *
 *   GET  /_conformance          the settings the suite can rely on (heartbeat ms, queue bound, replay cap)
 *   POST /_conformance/flood    {session_id, count}: store `count` events in a session (replay_too_large)
 *   POST /_conformance/unknown  {session_id}: stream an event of a type no catalog has (forward compat)
 *   POST /_conformance/stall-storage  {ms}: hold the store's commits for `ms` from another connection,
 *                                as a backup or a prune would: commits wait, the loop runs on;
 *                                `ms: 0` lets a stall go now
 */
export function conformanceRoutes(
  trace: Pick<StoreContext, 'bus' | 'flush' | 'stall'>,
  settings: ConformanceSettings,
  hub: StreamHub,
): JsonRoute[] {
  let releaseStall: (() => Promise<void>) | null = null;
  /** Stores `count` events in the session, chunk by chunk; the last one's id. */
  const flood = async (sessionId: string, count: number): Promise<string> => {
    let last = '';
    for (let done = 0; done < count; done += FLOOD_CHUNK) {
      const n = Math.min(FLOOD_CHUNK, count - done);
      for (let i = 0; i < n; i += 1)
        last = trace.bus.emit({
          type: 'feedback.implicit',
          session_id: sessionId,
          payload: FLOOD_PAYLOAD,
        })!.id;
      await trace.flush();
      // Let clients read between chunks, as they would between real turns.
      await new Promise((resolve) => setTimeout(resolve, FLOOD_PAUSE_MS));
    }
    return last;
  };
  const hook = (path: string, summary: string) => ({
    method: 'POST' as const,
    path,
    summary,
    success: { status: 200, description: 'what the hook did' },
    errors: [],
  });
  return [
    jsonRoute(
      {
        method: 'GET',
        path: '/_conformance',
        summary: 'Conformance: the settings the suite can rely on (--conformance only)',
        success: { status: 200, description: 'heartbeat_interval_ms, max_queue_events, replay_cap, faults' },
        errors: [],
      },
      async () => [
        200,
        {
          heartbeat_interval_ms: settings.heartbeatIntervalMs,
          max_queue_events: settings.maxQueueEvents,
          replay_cap: settings.replayCap,
          faults: settings.faults,
          hooks: ['flood', 'unknown', 'stall-storage'],
        },
      ],
    ),
    jsonRoute(
      { ...hook('/_conformance/flood', 'Conformance: store count events in a session'), body: FloodBody },
      async ({ body }) => {
        // The flood tests a slow client's closure (1008): no heartbeat closes it first (stream-hub.ts).
        const release = hub.holdHeartbeats(body.session_id);
        try {
          return [200, { emitted: body.count, last_event_id: await flood(body.session_id, body.count) }];
        } finally {
          release();
        }
      },
    ),
    jsonRoute(
      {
        ...hook('/_conformance/unknown', 'Conformance: stream an event of an unknown type'),
        body: UnknownBody,
      },
      async ({ body }) => {
        const id = newEventId();
        hub.injectForConformance({
          id,
          timestamp: microsToIso(nowMicros()),
          session_id: body.session_id,
          turn_id: null,
          parent_event_id: null,
          type: 'conformance.future_type',
          actor: 'system',
          payload: { note: 'a type from a future catalog' },
          sensitivity: 'pseudonymous',
          seq: null,
        });
        return [200, { event_id: id }];
      },
    ),
    jsonRoute(
      {
        ...hook('/_conformance/stall-storage', "Conformance: hold the store's commits"),
        body: StallBody,
      },
      async ({ body }) => {
        const previous = releaseStall;
        releaseStall = null;
        await previous?.();
        if (body.ms > 0) releaseStall = await trace.stall.hold(body.ms);
        return [200, { stalled_ms: body.ms }];
      },
    ),
  ];
}
