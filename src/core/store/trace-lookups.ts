import type { Db } from './database.js';

/** A stored event as the readers of its payload need it: the JSON is parsed by the caller. */
export interface PayloadRow {
  readonly id: string;
  readonly session_id: string;
  readonly timestamp_us: number;
  readonly type: string;
  readonly turn_id: string | null;
  readonly payload_json: string;
}

/**
 * Point questions the runtime and the stream layer ask of stored events and messages (where a turn
 * started and ended, what a session's evidence is). Part of the store port, asynchronous so that a store
 * over the network can answer (docs/plans/store-port.md step 3); the SQLite adapter answers each with
 * one indexed statement, at the call.
 */
export interface TraceLookups {
  /** The id of a turn's `turn.started`, or null when it is not stored (never ran here, or not yet). */
  turnStartedId(sessionId: string, turnId: string): Promise<string | null>;
  /** The id of a turn's end (`turn.completed` or `turn.cancelled`), null while it runs. */
  turnEndId(sessionId: string, turnId: string): Promise<string | null>;
  /** The id of the session's newest `session.ended`, null while it goes on. */
  sessionEndedId(sessionId: string): Promise<string | null>;
  /** A session's events of these types, in id order. */
  eventsOfTypes(sessionId: string, types: readonly string[]): Promise<PayloadRow[]>;
  /** The text of the user's message that began a turn, or null when none is stored. */
  userTextOfTurn(sessionId: string, turnId: string): Promise<string | null>;
  /**
   * The model the session's last turn was routed to (or moved to by an override), null before any.
   * An AG-UI run reads it once as it starts and follows the run's routing events from there.
   */
  lastRoutedModel(sessionId: string): Promise<string | null>;
}

const TURN_ENDS = "('turn.completed', 'turn.cancelled')";

/** The text blocks of a stored message's content (`content_json`), joined: what a user typed. */
export function textOfUserContent(contentJson: string): string {
  const content = JSON.parse(contentJson) as { type: string; text?: string }[];
  return content
    .filter((block) => block.type === 'text')
    .map((block) => block.text ?? '')
    .join('');
}

function prepareUserMessage(db: Db) {
  return db
    .prepare(
      "SELECT content_json FROM messages WHERE session_id = ? AND turn_id = ? AND role = 'user' ORDER BY id LIMIT 1",
    )
    .pluck();
}

export class SqliteTraceLookups implements TraceLookups {
  private readonly turnStarted;
  private readonly turnEnd;
  private readonly sessionEnded;
  /** Prepared on first use: the bench reads the trace store of a file that has only the events table. */
  private userMessage: ReturnType<typeof prepareUserMessage> | undefined;
  private readonly routedModel;

  constructor(private readonly db: Db) {
    this.turnStarted = db
      .prepare("SELECT id FROM events WHERE session_id = ? AND turn_id = ? AND type = 'turn.started' LIMIT 1")
      .pluck();
    this.turnEnd = db
      .prepare(`SELECT id FROM events WHERE session_id = ? AND turn_id = ? AND type IN ${TURN_ENDS} LIMIT 1`)
      .pluck();
    this.sessionEnded = db
      .prepare(
        "SELECT id FROM events WHERE session_id = ? AND type = 'session.ended' ORDER BY id DESC LIMIT 1",
      )
      .pluck();
    this.routedModel = db
      .prepare(
        `SELECT coalesce(json_extract(payload_json, '$.chosen_model'), json_extract(payload_json, '$.new_chosen_model'))
         FROM events WHERE session_id = ? AND type IN ('route.decided', 'route.overridden') ORDER BY id DESC LIMIT 1`,
      )
      .pluck();
  }

  async turnStartedId(sessionId: string, turnId: string): Promise<string | null> {
    return (this.turnStarted.get(sessionId, turnId) as string | undefined) ?? null;
  }

  async turnEndId(sessionId: string, turnId: string): Promise<string | null> {
    return (this.turnEnd.get(sessionId, turnId) as string | undefined) ?? null;
  }

  async sessionEndedId(sessionId: string): Promise<string | null> {
    return (this.sessionEnded.get(sessionId) as string | undefined) ?? null;
  }

  async eventsOfTypes(sessionId: string, types: readonly string[]): Promise<PayloadRow[]> {
    return this.db
      .prepare(
        `SELECT id, session_id, timestamp_us, type, turn_id, payload_json FROM events
         WHERE session_id = ? AND type IN (SELECT value FROM json_each(?)) ORDER BY id`,
      )
      .all(sessionId, JSON.stringify(types)) as PayloadRow[];
  }

  /** Confirmation requests and resolutions of these sessions up to and including `throughId`. */
  confirmationEventsThrough(sessionIds: readonly string[], throughId: string): PayloadRow[] {
    return this.db
      .prepare(
        `SELECT id, session_id, timestamp_us, type, turn_id, payload_json FROM events
         WHERE session_id IN (SELECT value FROM json_each(?)) AND id <= ?
           AND type IN ('tool.confirmation_requested', 'tool.confirmation_resolved')
         ORDER BY id`,
      )
      .all(JSON.stringify(sessionIds), throughId) as PayloadRow[];
  }

  async userTextOfTurn(sessionId: string, turnId: string): Promise<string | null> {
    this.userMessage ??= prepareUserMessage(this.db);
    const json = this.userMessage.get(sessionId, turnId) as string | undefined;
    return json === undefined ? null : textOfUserContent(json);
  }

  async lastRoutedModel(sessionId: string): Promise<string | null> {
    return this.routedModelNow(sessionId);
  }

  /** `lastRoutedModel` at the call, for a family load inside its read transaction. */
  routedModelNow(sessionId: string): string | null {
    return (this.routedModel.get(sessionId) as string | null | undefined) ?? null;
  }
}
