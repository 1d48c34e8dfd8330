import { z } from 'zod';
import { CATALOG_ENTRIES } from '../events/catalog/index.js';
import { payloadJsonSchema } from '../events/describe.js';
import { ActorSchema, SensitivitySchema } from '../events/envelope.js';
import { STREAMING_ENTRIES } from '../events/streaming.js';
import { ClientFrameSchema } from '../stream/client-frames.js';

/**
 * What the streams carry, as schemas for the OpenAPI document's components (issue 29, point 3): the
 * event envelope with each catalog and streaming type's payload, the frames of the WebSocket and SSE
 * stream (streaming spec §4.2, §4.3), and the events of the AG-UI and AI SDK streams as far as metis
 * writes them. The frame schemas are zod, so a test can hold real frames against them.
 */

const Envelope = z.object({
  id: z.string(),
  timestamp: z.string(),
  session_id: z.string(),
  turn_id: z.string().nullable(),
  parent_event_id: z.string().nullable(),
  type: z.string(),
  actor: ActorSchema,
  sensitivity: SensitivitySchema,
  /** Null for streaming events, which are never stored. */
  seq: z.number().int().positive().nullable(),
  payload: z.record(z.string(), z.unknown()),
});

const SessionSummary = z.looseObject({
  id: z.string(),
  workspace_path: z.string(),
  active_model: z.string(),
  cost_so_far_usd: z.number(),
  turn_count: z.number(),
  current_turn_id: z.string().nullable(),
  current_turn_status: z.literal('in_flight').nullable(),
  parent_session_id: z.string().nullable(),
  status: z.string(),
});

const StoredMessage = z.looseObject({
  id: z.string(),
  role: z.enum(['user', 'assistant', 'tool']),
  content: z.array(z.unknown()),
});

/** A frame the server writes on the WebSocket (and as the data of each SSE event). */
export const ServerFrameSchema = z.discriminatedUnion('type', [
  z.object({ type: z.literal('event'), event: Envelope }),
  z.object({
    type: z.literal('subscribe_ack'),
    resolved_filter: z.looseObject({}),
    since: z.string().nullable(),
    snapshot: z.boolean(),
    replay_event_count: z.number().int().nonnegative(),
  }),
  z.looseObject({
    type: z.literal('snapshot'),
    session: SessionSummary,
    messages: z.array(StoredMessage),
    snapshot_at_event_id: z.string().nullable(),
    in_flight_events: z.array(Envelope).optional(),
    pending_confirmations: z.array(z.looseObject({ confirmation_request_id: z.string() })).optional(),
  }),
  z.object({ type: z.literal('subscribe_error'), code: z.string(), message: z.string() }),
  z.object({ type: z.literal('error'), code: z.string(), message: z.string() }),
  z.object({
    type: z.literal('lag_warning'),
    queued_events: z.number(),
    queued_bytes: z.number(),
    limit_events: z.number(),
    limit_bytes: z.number(),
  }),
  z.object({ type: z.literal('ping'), nonce: z.string() }),
  z.object({ type: z.literal('pong'), nonce: z.string() }),
]);

/** The event types whose payload each member of `MetisEvent` describes, in catalog order. */
export const DOCUMENTED_EVENT_TYPES: readonly string[] = [...CATALOG_ENTRIES, ...STREAMING_ENTRIES].map(
  (entry) => entry.type,
);

function jsonSchemaOf(schema: z.ZodType): Record<string, unknown> {
  const { $schema: _, ...rest } = z.toJSONSchema(schema, { io: 'output', unrepresentable: 'any' }) as Record<
    string,
    unknown
  >;
  return rest;
}

/** The envelope, one member per event type: `type` names it and `payload` is that type's payload. */
function metisEventSchema(): Record<string, unknown> {
  const envelope = jsonSchemaOf(Envelope);
  return {
    description:
      'An event of the catalog (stored, seq set) or a streaming event (seq null), as the streams and GET /sessions/{id}/events carry it.',
    oneOf: [...CATALOG_ENTRIES, ...STREAMING_ENTRIES].map((entry) => {
      const { $schema: _, ...payload } = payloadJsonSchema(entry);
      return {
        ...envelope,
        title: entry.type,
        properties: {
          ...(envelope.properties as Record<string, unknown>),
          type: { const: entry.type },
          payload,
        },
      };
    }),
  };
}

/** Each data line of an AG-UI stream (`POST /ag-ui`): an AG-UI event (docs/ag-ui.md). */
const AgUiEvent = {
  description:
    'An AG-UI event (https://docs.ag-ui.com/concepts/events); metis writes RUN_STARTED, RUN_FINISHED, RUN_ERROR, STEP_*, TEXT_MESSAGE_*, REASONING_*, TOOL_CALL_*, STATE_SNAPSHOT, STATE_DELTA, MESSAGES_SNAPSHOT and CUSTOM.',
  type: 'object',
  required: ['type'],
  properties: { type: { type: 'string', pattern: '^[A-Z_]+$' } },
  additionalProperties: true,
};

/** Each data line of an AI SDK UI message stream (`POST /api/chat`), before the closing `[DONE]`. */
const UiMessageChunk = {
  description:
    "A chunk of the AI SDK's UI message stream (https://ai-sdk.dev/docs/ai-sdk-ui/stream-protocol): start, start-step, text-*, reasoning-*, tool-*, tool-approval-request, finish-step, finish, abort, error.",
  type: 'object',
  required: ['type'],
  properties: { type: { type: 'string', pattern: '^[a-z-]+$' } },
  additionalProperties: true,
};

/** The components the OpenAPI document adds to its schemas. */
export function streamComponentSchemas(): Record<string, unknown> {
  return {
    MetisEvent: metisEventSchema(),
    ServerFrame: jsonSchemaOf(ServerFrameSchema),
    ClientFrame: jsonSchemaOf(ClientFrameSchema),
    AgUiEvent,
    UiMessageChunk,
  };
}
