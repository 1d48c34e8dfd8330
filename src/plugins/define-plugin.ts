import type { Logger } from 'pino';
import type { Actor, MetisEvent } from '../core/events/envelope.js';
import type { ReplayQuery } from '../core/store/trace-store.js';

/** Which events a plugin receives (bus spec §3.1): `null` or absent on a dimension means "all". */
export interface PluginFilter {
  readonly session_ids?: readonly string[] | null;
  readonly event_types?: readonly string[] | null;
  readonly actors?: readonly Actor[] | null;
}

/** One problem found in a plugin's options; `path` is where inside the options, e.g. `['rotation', 'max']`. */
export interface OptionsIssue {
  readonly path: readonly PropertyKey[];
  readonly message: string;
}

/**
 * Anything with zod's `safeParse`: a zod schema works, and so does a hand-written object, so a plugin
 * needs no dependency on zod or on metis.
 */
export interface OptionsSchema<T> {
  safeParse(
    input: unknown,
  ): { success: true; data: T } | { success: false; error: { issues: readonly OptionsIssue[] } };
}

/**
 * Read-only queries over the trace store, for batch plugins that need history or the causal chain.
 *
 * The synchronous reads are exact on a SQLite store (the default): each is answered from the file at
 * the call. On PostgreSQL alone (`store.working_copy: false`) no file of this process holds the trace,
 * so the host answers them from the newest events this process dispatched on its bus (10,000 of them,
 * less any its writer gave up on), and only where that answer is exact:
 *
 * | read | PostgreSQL alone |
 * | --- | --- |
 * | `getEvent(id)` | the event when still held; otherwise refused |
 * | `causalChain(id)` | the whole chain when every link up to the root is held; otherwise refused, never a part |
 * | `replay`, `sessionEvents`, `messagesBefore`, `toolCall` | refused (history and content are not on the bus) |
 *
 * A refused read throws a `MetisError` whose `code` is `'METIS_ERR_TRACE_READ_REFUSED'` (check the
 * code; a plugin needs no import of metis). `async` answers every read exactly on every store: use it
 * where a refusal would matter, or fall back to it on the refusal, as the built-in `otel` plugin does.
 */
export interface TraceQuery {
  /** Events after a cursor, in id order, at most `limit`; `tooLarge` says whether more matched. */
  replay(query: ReplayQuery): { events: MetisEvent[]; tooLarge: boolean };
  /** Every stored event of a session, in id order. */
  sessionEvents(sessionId: string): MetisEvent[];
  /** The event, or null when the store has none of that id (SQLite; see above for PostgreSQL alone). */
  getEvent(id: string): MetisEvent | null;
  /** The causal chain from an event back to its root (bus spec §4.3), the event itself first. */
  causalChain(eventId: string): MetisEvent[];
  /**
   * The newest `limit` messages of a session stored before an event, oldest first: the conversation's
   * content, for a plugin that exports it on the user's opt-in (`otel`'s `capture_content`). Optional:
   * a host without a message store has none.
   */
  messagesBefore?(sessionId: string, eventId: string, limit: number): StoredMessage[];
  /** A session's stored tool call (input, output) by its tool_use_id, or null. */
  toolCall?(sessionId: string, toolUseId: string): StoredToolCall | null;
  /**
   * The same reads, asynchronous, each exact on every store: over SQLite the synchronous answers,
   * resolved; over PostgreSQL one indexed query each. Every event written before the call was stored is
   * seen, including those older than the host's memory.
   */
  readonly async: AsyncTraceQuery;
}

/**
 * The trace reads as promises (`TraceQuery.async`): exact on every store. On PostgreSQL alone a read
 * first waits (up to 5 s) for the newest event this process dispatched to be committed; it rejects with
 * `METIS_ERR_STORE_UNAVAILABLE` when that does not happen in time or the store is away, rather than
 * answer without those events.
 */
export interface AsyncTraceQuery {
  /** Events after a cursor, in id order, at most `limit`; `tooLarge` says whether more matched. */
  replay(query: ReplayQuery): Promise<{ events: MetisEvent[]; tooLarge: boolean }>;
  /** Every stored event of a session, in id order. */
  sessionEvents(sessionId: string): Promise<MetisEvent[]>;
  /** The stored event, or null when there is none of that id. */
  getEvent(id: string): Promise<MetisEvent | null>;
  /** The causal chain from an event back to its root, the event first; [] for an id not stored. */
  causalChain(eventId: string): Promise<MetisEvent[]>;
  /** The newest `limit` messages of a session stored before an event, oldest first. */
  messagesBefore(sessionId: string, eventId: string, limit: number): Promise<StoredMessage[]>;
  /** A session's stored tool call by its tool_use_id (the newest, should an id repeat), or null. */
  toolCall(sessionId: string, toolUseId: string): Promise<StoredToolCall | null>;
}

/** A stored message: content blocks `text | thinking | tool_use | tool_result`. */
export interface StoredMessage {
  readonly id: string;
  readonly role: 'user' | 'assistant' | 'tool';
  readonly content: readonly { readonly type: string; readonly [key: string]: unknown }[];
  readonly status: string;
}

export interface StoredToolCall {
  readonly id: string;
  readonly tool_name: string;
  readonly input: unknown;
  readonly output: unknown;
  readonly status: string;
  readonly error_class: string | null;
}

/** What `create` receives besides the validated options. */
export interface PluginContext {
  /** The plugin's `name`. */
  readonly name: string;
  /** A pino child logger bound to `{ plugin: name }`; logs go to stderr with metis's own. */
  readonly logger: Logger;
  readonly store: TraceQuery;
  /** The folder that holds the database (`$METIS_HOME` by default): a place for the plugin's files. */
  readonly dataDir: string;
  /** The folder of the config file that named the plugin, or null when there is none. */
  readonly configDir: string | null;
}

/** What `create` returns: a bus subscriber (bus spec §3.1, §3.4, §5.1). */
export interface PluginInstance {
  readonly filter?: PluginFilter;
  /**
   * `true` runs `handle` inside the dispatch worker: it must finish in well under 1 ms and never wait.
   * Default `false`: events reach `handle` through the plugin's own bounded mailbox, on its own schedule.
   */
  readonly fastPath?: boolean;
  /** Called once per matching event; may return a promise (awaited on the batch path only). */
  handle(event: MetisEvent): void | Promise<void>;
  /** Optional, batch path only: receives every queued event at once instead of one `handle` call each. */
  handleBatch?(events: readonly MetisEvent[]): void | Promise<void>;
  /** Awaited before the plugin is subscribed; a throw stops startup. */
  start?(): void | Promise<void>;
  /** Awaited at shutdown, after its queued events were handled (bounded by a timeout). */
  stop?(): void | Promise<void>;
  /** Counters the plugin keeps itself; `failed` and `dropped` are added to what the bus counted. */
  stats?(): Readonly<Record<string, number>>;
}

/** The default export of a plugin module. */
export interface PluginDefinition<T = unknown> {
  /** Shown by `metis plugins`, used in logs and as the subscription name `plugin:<name>`. */
  readonly name: string;
  /** Validates the options written in config before startup; its output is what `create` receives. */
  readonly optionsSchema?: OptionsSchema<T>;
  create(options: T, ctx: PluginContext): PluginInstance | Promise<PluginInstance>;
}

/**
 * Types a plugin definition; it returns its argument unchanged, so a plain default export
 * `{ name, optionsSchema?, create }` works exactly the same (docs/plugins.md).
 *
 * @example
 * export default definePlugin({
 *   name: 'counter',
 *   optionsSchema: z.object({ every: z.number().int().positive().default(100) }),
 *   create(options, ctx) {
 *     let seen = 0;
 *     return {
 *       filter: { event_types: ['turn.completed'] },
 *       handle() {
 *         if (++seen % options.every === 0) ctx.logger.info({ seen }, 'turns completed');
 *       },
 *     };
 *   },
 * });
 */
export function definePlugin<T = Record<string, unknown>>(
  definition: PluginDefinition<T>,
): PluginDefinition<T> {
  return definition;
}
