import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';
import { microsToIso, nowMicros } from '../../src/core/events/clock.js';
import type { MetisEvent } from '../../src/core/events/envelope.js';
import { newEventId } from '../../src/core/events/ids.js';

/** Events per transaction in the pg-store suite's commits, raw and metis's alike. */
export const BATCH = 500;

/** `count` text deltas spread over `sessions` sessions, seq numbered per session. */
export function events(count: number, sessions: number): MetisEvent[] {
  const seqs = new Array<number>(sessions).fill(0);
  return Array.from({ length: count }, (_, i) => {
    const session = i % sessions;
    seqs[session]! += 1;
    return {
      id: newEventId(),
      timestamp: microsToIso(nowMicros()),
      session_id: `sess_bench_${session}`,
      turn_id: 'turn_bench',
      parent_event_id: null,
      type: 'text.delta',
      actor: 'agent',
      payload: { message_id: 'msg_bench', content_block_index: 0, text: `token ${i} ` },
      sensitivity: 'pseudonymous',
      seq: seqs[session]!,
    } satisfies MetisEvent;
  });
}

function copyRows(batch: readonly MetisEvent[]): string {
  return batch
    .map(
      (e) =>
        `${e.session_id}\t${e.id}\t${e.seq}\t${Date.parse(e.timestamp) * 1000}\t${e.turn_id}\t\\N\t${e.type}\t${e.actor}\t${e.sensitivity}\t${JSON.stringify(e.payload)}\n`,
    )
    .join('');
}

/** The baseline: `all` by the raw driver's COPY, BATCH rows a transaction. */
export async function rawCopy(client: pg.ClientBase, all: readonly MetisEvent[]): Promise<void> {
  for (let i = 0; i < all.length; i += BATCH) {
    await client.query('BEGIN');
    await pipeline(
      Readable.from([copyRows(all.slice(i, i + BATCH))]),
      client.query(
        copyFrom(
          'COPY events (session_id, id, seq, timestamp_us, turn_id, parent_event_id, type, actor, sensitivity, payload_json) FROM STDIN',
        ),
      ),
    );
    await client.query('COMMIT');
  }
}
