import { z } from 'zod';

/**
 * Client → server frames (streaming spec §4.3, §2.2). Unknown fields are ignored, in the frames and in
 * the filter (§9.2 forward compatibility works both ways; `subscribe_ack.resolved_filter` says what the
 * server applied). What protects the server stays strict: the frame `type`, each known field's type and
 * size, the required fields, the frame's size and depth.
 */
const ExplicitFilterSchema = z.object({
  event_types: z.array(z.string().min(1).max(200)).max(1000).nullable().default(null),
  actors: z
    .array(z.enum(['user', 'agent', 'system', 'tool', 'worker']))
    .nullable()
    .default(null),
  include_worker_sessions: z.boolean().default(false),
  /** The bus spec's EventFilter key (event-bus §3.1): null is every session the stream may carry. */
  session_ids: z.array(z.string().min(1).max(100)).min(1).max(1000).nullable().default(null),
});

export const SubscribeFrameSchema = z.object({
  type: z.literal('subscribe'),
  filter: z.union([z.literal('preset:chat'), z.literal('preset:full'), ExplicitFilterSchema], {
    error: 'must be "preset:chat", "preset:full" or {event_types, actors, include_worker_sessions}',
  }),
  since: z.string().min(1).max(100).nullable().default(null),
  snapshot: z.boolean().default(false),
});

export const CancelFrameSchema = z.object({
  type: z.literal('cancel'),
  turn_id: z.string().min(1).max(100),
  reason: z.string().max(200).optional(),
});

export const PingFrameSchema = z.object({ type: z.literal('ping'), nonce: z.string().max(200) });
export const PongFrameSchema = z.object({ type: z.literal('pong'), nonce: z.string().max(200) });
/**
 * §2.2 names `ack` among the client's control messages without a shape: metis reads an optional
 * `event_id` (the last event the client processed) and takes no action on it (docs/decisions.md
 * "Client frames").
 */
export const AckFrameSchema = z.object({ type: z.literal('ack'), event_id: z.string().max(100).optional() });

export const ClientFrameSchema = z.discriminatedUnion('type', [
  SubscribeFrameSchema,
  CancelFrameSchema,
  PingFrameSchema,
  PongFrameSchema,
  AckFrameSchema,
]);

/** The fields each frame type knows; only the `strict-client-frames` fault refuses others. */
export const KNOWN_FRAME_FIELDS: Readonly<Record<string, readonly string[]>> = {
  subscribe: Object.keys(SubscribeFrameSchema.shape),
  cancel: Object.keys(CancelFrameSchema.shape),
  ping: Object.keys(PingFrameSchema.shape),
  pong: Object.keys(PongFrameSchema.shape),
  ack: Object.keys(AckFrameSchema.shape),
};

export type SubscribeFrame = z.output<typeof SubscribeFrameSchema>;
export type ClientFrame = z.output<typeof ClientFrameSchema>;

/**
 * The first problem of a frame that failed validation, as `field: problem`. Inside a union (the
 * subscribe `filter`) it names the problem of the branch that got into the value, e.g.
 * `filter.actors.0: Invalid option ...`, instead of the union's generic message.
 */
export function describeFrameIssue(issues: readonly z.core.$ZodIssue[]): string {
  let issue = issues[0];
  let path: PropertyKey[] = [];
  while (issue?.code === 'invalid_union') {
    const deeper = issue.errors.flat().find((inner) => inner.path.length > 0);
    if (deeper === undefined) break;
    path = [...path, ...issue.path];
    issue = deeper;
  }
  if (issue === undefined) return 'frame: invalid';
  const full = [...path, ...issue.path];
  return truncate(`${full.length ? full.map(String).join('.') : 'frame'}: ${issue.message}`);
}

/** Longest error message sent back: zod lists every unrecognized key, and a reply must stay small. */
const MAX_PROBLEM_CHARS = 300;

function truncate(text: string): string {
  return text.length <= MAX_PROBLEM_CHARS ? text : `${text.slice(0, MAX_PROBLEM_CHARS - 1)}…`;
}

/** Close codes the server uses; 1008 `client_too_slow` is the spec's, the 44xx are metis's. */
export const CLOSE = {
  /** A stream that ends by itself: a turn's own stream (AI SDK, AG-UI) after its turn's last event. */
  normal: 1000,
  clientTooSlow: 1008,
  tooBig: 1009,
  heartbeatTimeout: 4408,
  unsupportedData: 1003,
  serverShutdown: 1001,
  /** A cluster node lost its broker: the session's live events no longer reach it; reconnect. */
  tryAgainLater: 1013,
  /** SSE only: the subscription was refused (its `subscribe_error` event came first). */
  subscribeRefused: 4400,
} as const;

/** Deeper nesting than this in a client frame is refused before it is validated. */
export const MAX_FRAME_DEPTH = 32;

export function depthOf(value: unknown, limit = MAX_FRAME_DEPTH): number {
  let max = 0;
  const stack: [unknown, number][] = [[value, 1]];
  while (stack.length > 0) {
    const [node, depth] = stack.pop()!;
    if (node === null || typeof node !== 'object') continue;
    if (depth > max) max = depth;
    if (max > limit) return max;
    for (const child of Object.values(node)) stack.push([child, depth + 1]);
  }
  return max;
}
