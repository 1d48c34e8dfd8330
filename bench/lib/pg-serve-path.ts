/**
 * The write path of `metis serve` on PostgreSQL alone (issue 35): events emitted on the bus of the
 * server's own context (openPostgresContext) and the rows a turn writes through its sink, group
 * committed by PgStoreWriter, against the raw driver writing the same rows by COPY.
 */
import { performance } from 'node:perf_hooks';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';
import { nowMicros } from '../../src/core/events/clock.js';
import { newEventId } from '../../src/core/events/ids.js';
import { silentLogger } from '../../src/core/logger.js';
import { openPostgresContext } from '../../src/core/store/postgres/pg-context.js';
import { PgEventStore } from '../../src/core/store/postgres/pg-event-store.js';
import { copyTextField } from '../../src/core/store/postgres/pg-util.js';
import type { RowChange } from '../../src/core/store/row-change.js';
import { freshDatabase, type PostgresServer } from '../../test/helpers/postgres.js';
import { collectGarbage, type Figure, figure } from './stats.js';
import { BENCH_EVENT_TYPE, benchPayload } from './store-fixtures.js';

const SESSIONS = 50;
/** Stored events of one turn: its start and end, two model calls, a tool call, a few marks. */
const EVENTS_PER_TURN = 10;
/** Deltas of one turn the stream archive keeps (two archive ticks of 20). */
const DELTAS_PER_TURN = 40;
const DELTAS_PER_ARCHIVE_TICK = 20;

/** One turn's writes, in the order a server queues them: rows and events interleaved. */
interface Turn {
  readonly sessionId: string;
  readonly turnId: string;
  readonly rows: readonly RowChange[];
}

/**
 * The row changes of a turn that calls one tool between two model calls: the user's message, the
 * assistant's tool use, the tool call inserted and completed, its result, the final answer (4
 * messages), a spend per model call, and its deltas archived in two ticks.
 */
function turnRows(sessionId: string, turnId: string, round: number): RowChange[] {
  const atUs = nowMicros();
  const message = (k: number, role: 'user' | 'assistant' | 'tool', content: string): RowChange => ({
    kind: 'message.upsert',
    id: `msg_${turnId}_${k}`,
    sessionId,
    turnId,
    role,
    contentJson: JSON.stringify([{ type: 'text', text: content }]),
    status: 'complete',
    model: role === 'assistant' ? 'claude-sonnet-4-5-20250929' : null,
    usageJson: role === 'assistant' ? '{"input_tokens":18000,"output_tokens":1000}' : null,
    createdAtUs: atUs + k,
  });
  const call = `call_${turnId}`;
  const archive = (tick: number): RowChange => ({
    kind: 'archive.insert',
    events: Array.from({ length: DELTAS_PER_ARCHIVE_TICK }, (_, d) => ({
      sessionId,
      id: `evt_${String(round).padStart(6, '0')}_${sessionId}_${tick}_${String(d).padStart(2, '0')}`,
      timestampUs: atUs + d,
      eventJson: `{"type":"text.delta","session_id":"${sessionId}","turn_id":"${turnId}","payload":{"message_id":"msg_${turnId}_3","content_block_index":0,"text":"token ${d} "}}`,
    })),
  });
  return [
    message(0, 'user', 'Please read the file and summarise it.'),
    message(1, 'assistant', 'I will read it.'),
    {
      kind: 'toolCall.insert',
      rowId: null,
      id: call,
      sessionId,
      turnId,
      messageId: `msg_${turnId}_1`,
      toolName: 'read_file',
      inputJson: '{"path":"src/index.ts"}',
      status: 'running',
      atUs,
    },
    { kind: 'budget.spend', sessionId, usd: 0.0731, tokens: 19_000 },
    archive(0),
    {
      kind: 'toolCall.update',
      id: call,
      sessionId,
      turnId,
      messageId: `msg_${turnId}_1`,
      status: 'completed',
      outputJson: JSON.stringify('x'.repeat(400)),
      errorClass: null,
      atUs: atUs + 1,
    },
    message(2, 'tool', 'x'.repeat(400)),
    message(3, 'assistant', 'The file exports the entry point and starts the server.'),
    { kind: 'budget.spend', sessionId, usd: 0.0731, tokens: 19_000 },
    archive(1),
  ];
}

/** One turn of every session: a round, what the server commits as one batch. */
function roundOfTurns(round: number): Turn[] {
  return Array.from({ length: SESSIONS }, (_, s) => {
    const sessionId = `sess_path_${s}`;
    const turnId = `turn_${round}_${s}`;
    return { sessionId, turnId, rows: turnRows(sessionId, turnId, round) };
  });
}

/**
 * Runs `rounds` rounds, each one turn of every session, through the server's context: per turn its
 * rows and events interleaved (a row between each two events, as a turn alternates), then waits until
 * the round's last event is committed. Seconds spent.
 */
async function throughServer(url: string, rounds: number, firstRound: number): Promise<number> {
  const context = await openPostgresContext({ url, setting: '--store', logger: silentLogger() });
  try {
    for (let s = 0; s < SESSIONS; s += 1) {
      const sessionId = `sess_path_${s}`;
      context.bus.seedSeq(sessionId, firstRound * EVENTS_PER_TURN);
      context.writer.writeRow({ what: 'session', change: sessionCreate(sessionId) });
    }
    await context.flush();
    collectGarbage();
    const began = performance.now();
    for (let round = firstRound; round < firstRound + rounds; round += 1) {
      let last: string | null = null;
      for (const turn of roundOfTurns(round)) {
        for (let e = 0; e < EVENTS_PER_TURN; e += 1) {
          const row = turn.rows[e];
          if (row !== undefined) context.writer.writeRow({ what: row.kind, change: row });
          const event = context.bus.emit({
            type: BENCH_EVENT_TYPE,
            session_id: turn.sessionId,
            turn_id: turn.turnId,
            parent_event_id: null,
            payload: benchPayload(round * EVENTS_PER_TURN + e),
          });
          if (event === null) throw new Error('the bus dropped a benchmark event');
          last = event.id;
        }
      }
      await context.bus.flush();
      if (last !== null) await context.writer.whenCommitted(last);
    }
    return (performance.now() - began) / 1000;
  } finally {
    await context.close();
  }
}

function sessionCreate(sessionId: string): RowChange {
  return {
    kind: 'session.create',
    sessionId,
    parentSessionId: null,
    workspacePath: '/w',
    workspaceHash: 'h',
    activeModel: 'claude-sonnet-4-5-20250929',
    stickyModel: null,
    atUs: nowMicros(),
  };
}

function lines(rows: readonly (readonly (string | number | null)[])[]): string {
  return rows.map((row) => `${row.map(copyTextField).join('\t')}\n`).join('');
}

async function copy(client: pg.Client, table: string, text: string): Promise<void> {
  await pipeline(Readable.from([text]), client.query(copyFrom(`COPY ${table} FROM STDIN`)));
}

/**
 * The baseline: the same rounds written by the raw driver, each one transaction holding the rows
 * in their final state (the events, the messages, the tool calls, the archived deltas, each table by
 * one COPY) and the spend as one UPDATE. Seconds spent.
 */
async function throughRawCopy(client: pg.Client, rounds: number, firstRound: number): Promise<number> {
  collectGarbage();
  const began = performance.now();
  for (let round = firstRound; round < firstRound + rounds; round += 1) {
    const events: (string | number | null)[][] = [];
    const messages: (string | number | null)[][] = [];
    const calls: (string | number | null)[][] = [];
    const deltas: (string | number | null)[][] = [];
    const spend = new Map<string, { usd: number; tokens: number }>();
    for (const turn of roundOfTurns(round)) {
      for (let e = 0; e < EVENTS_PER_TURN; e += 1) {
        const seq = round * EVENTS_PER_TURN + e + 1;
        events.push([
          turn.sessionId,
          newEventId(),
          seq,
          nowMicros(),
          turn.turnId,
          null,
          BENCH_EVENT_TYPE,
          'agent',
          'pseudonymous',
          JSON.stringify(benchPayload(round * EVENTS_PER_TURN + e)),
        ]);
      }
      const updates = new Map<string, Extract<RowChange, { kind: 'toolCall.update' }>>();
      for (const row of turn.rows) if (row.kind === 'toolCall.update') updates.set(row.id, row);
      for (const row of turn.rows) {
        if (row.kind === 'message.upsert')
          messages.push([
            row.id,
            row.sessionId,
            row.turnId,
            row.role,
            row.contentJson,
            row.status,
            row.model,
            row.usageJson,
            row.createdAtUs,
          ]);
        else if (row.kind === 'toolCall.insert') {
          const done = updates.get(row.id)!;
          calls.push([
            row.id,
            row.sessionId,
            row.turnId,
            row.messageId,
            row.toolName,
            row.inputJson,
            done.status,
            done.outputJson,
            done.errorClass,
            row.atUs,
            done.atUs,
          ]);
        } else if (row.kind === 'archive.insert')
          for (const d of row.events) deltas.push([d.sessionId, d.id, d.timestampUs, d.eventJson]);
        else if (row.kind === 'budget.spend') {
          const sum = spend.get(row.sessionId) ?? { usd: 0, tokens: 0 };
          spend.set(row.sessionId, { usd: sum.usd + row.usd, tokens: sum.tokens + row.tokens });
        }
      }
    }
    await client.query('BEGIN');
    await copy(
      client,
      'events (session_id, id, seq, timestamp_us, turn_id, parent_event_id, type, actor, sensitivity, payload_json)',
      lines(events),
    );
    await copy(
      client,
      'messages (id, session_id, turn_id, role, content_json, status, model, usage_json, created_at_us)',
      lines(messages),
    );
    await copy(
      client,
      'tool_calls (id, session_id, turn_id, message_id, tool_name, input_json, status, output_json, error_class, created_at_us, updated_at_us)',
      lines(calls),
    );
    await copy(client, 'stream_events (session_id, id, timestamp_us, event_json)', lines(deltas));
    await client.query(
      `UPDATE sessions s SET spent_usd = s.spent_usd + c.usd, spent_tokens = s.spent_tokens + c.tokens
         FROM unnest($1::text[], $2::float8[], $3::bigint[]) AS c(id, usd, tokens) WHERE s.id = c.id`,
      [[...spend.keys()], [...spend.values()].map((v) => v.usd), [...spend.values()].map((v) => v.tokens)],
    );
    await client.query('COMMIT');
  }
  return (performance.now() - began) / 1000;
}

/**
 * The figure: `total` events (and their turns' rows) through a server's context and by raw COPY,
 * rounds alternating in four runs to share the noise; target ≥ 0.8× of raw.
 */
export async function benchServePath(server: PostgresServer, total: number): Promise<Figure> {
  const rounds = Math.max(4, Math.round(total / (SESSIONS * EVENTS_PER_TURN)));
  const serverUrl = freshDatabase(server);
  const rawUrl = freshDatabase(server);
  await (await PgEventStore.open({ url: rawUrl })).close(); // the schema
  const raw = new pg.Client({ connectionString: rawUrl });
  await raw.connect();
  const runs = 4;
  const perRun = Math.ceil(rounds / runs);
  let serverSeconds = 0;
  let rawSeconds = 0;
  try {
    await raw.query(
      `INSERT INTO sessions (id, created_at_us, updated_at_us) SELECT 'sess_path_' || n, 0, 0 FROM generate_series(0, $1 - 1) n`,
      [SESSIONS],
    );
    for (let run = 0; run < runs; run += 1) {
      serverSeconds += await throughServer(serverUrl, perRun, run * perRun);
      rawSeconds += await throughRawCopy(raw, perRun, run * perRun);
    }
  } finally {
    await raw.end();
  }
  const events = perRun * runs * SESSIONS * EVENTS_PER_TURN;
  const rawRate = events / rawSeconds;
  console.log(
    `  serve path: ${events.toLocaleString()} events in turns of ${EVENTS_PER_TURN} events, 4 messages, a tool call, 2 spends and ${DELTAS_PER_TURN} archived deltas; ${SESSIONS} sessions`,
  );
  return figure({
    name: 'metis serve on PostgreSQL alone: bus → PgStoreWriter, turns of events and rows',
    value: events / serverSeconds,
    unit: 'events/s',
    baseline: { name: 'raw COPY of the same rows, a round of turns a transaction', value: rawRate },
    target: { op: '>=', value: Math.round(0.8 * rawRate) },
  });
}
