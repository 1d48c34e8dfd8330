import { performance } from 'node:perf_hooks';
import type pg from 'pg';
import { applyRowChanges } from '../../src/core/store/postgres/pg-row-applier.js';
import { migratePostgres } from '../../src/core/store/postgres/schema.js';
import type { RowChange } from '../../src/core/store/row-change.js';
import { type Figure, figure, percentile } from './stats.js';

const SESSIONS = 50;

/**
 * One writer tick's row changes as the queue holds them, session after session: per session four model
 * messages, each with a tool call inserted and completed and five deltas archived, two spends, a sticky
 * model and its queue (1,000 changes).
 */
function tick(round: number): RowChange[] {
  const changes: RowChange[] = [];
  for (let s = 0; s < SESSIONS; s += 1) {
    const sessionId = `sess_${s}`;
    const turnId = `turn_${round}`;
    for (let k = 0; k < 4; k += 1) {
      const messageId = `msg_${s}_${round}_${k}`;
      const id = `call_${round}_${k}`;
      const atUs = round * 1000 + k;
      changes.push(
        {
          kind: 'message.upsert',
          id: messageId,
          sessionId,
          turnId,
          role: 'assistant',
          contentJson: '[{"type":"text","text":"hello there"}]',
          status: 'complete',
          model: 'm',
          usageJson: '{"input_tokens":10,"output_tokens":20}',
          createdAtUs: atUs,
        },
        {
          kind: 'toolCall.insert',
          rowId: null,
          id,
          sessionId,
          turnId,
          messageId,
          toolName: 'read_file',
          inputJson: '{"path":"a"}',
          status: 'running',
          atUs,
        },
        {
          kind: 'toolCall.update',
          id,
          sessionId,
          turnId,
          messageId,
          status: 'completed',
          outputJson: '"ok"',
          errorClass: null,
          atUs: atUs + 1,
        },
        {
          kind: 'archive.insert',
          events: Array.from({ length: 5 }, (_, e) => ({
            sessionId,
            id: `evt_${String(round).padStart(5, '0')}_${k}_${e}`,
            timestampUs: atUs,
            eventJson: '{"type":"text.delta","text":"x"}',
          })),
        },
      );
    }
    changes.push(
      { kind: 'budget.spend', sessionId, usd: 0.001, tokens: 30 },
      { kind: 'budget.spend', sessionId, usd: 0.002, tokens: 40 },
      { kind: 'session.sticky', sessionId, model: 'm', atUs: round },
      { kind: 'queue.save', sessionId, queueJson: null },
    );
  }
  return changes;
}

/**
 * A writer tick's row changes committed in one transaction, as PostgreSQL's row applier groups them
 * (pg-row-schedule.ts), beside the same changes sent one statement each: what grouping saves a group
 * commit. Rounds alternate to share the noise; the first two of each are warm-up.
 */
export async function benchRowBatch(client: pg.Client, quick: boolean): Promise<Figure> {
  await migratePostgres(client);
  await client.query('BEGIN');
  await applyRowChanges(
    client,
    Array.from({ length: SESSIONS }, (_, s) => ({
      kind: 'session.create' as const,
      sessionId: `sess_${s}`,
      parentSessionId: null,
      workspacePath: '/w',
      workspaceHash: 'h',
      activeModel: 'm',
      stickyModel: null,
      atUs: 0,
    })),
  );
  await client.query('COMMIT');
  const grouped: number[] = [];
  const single: number[] = [];
  let statements = 0;
  let size = 0;
  let round = 0;
  for (let rep = 0; rep < (quick ? 3 : 12); rep += 1) {
    for (const oneByOne of [false, true]) {
      round += 1;
      const changes = tick(round);
      size = changes.length;
      const began = performance.now();
      await client.query('BEGIN');
      if (oneByOne) for (const change of changes) await applyRowChanges(client, [change]);
      else statements = (await applyRowChanges(client, changes)).statements;
      await client.query('COMMIT');
      if (rep >= 2) (oneByOne ? single : grouped).push(performance.now() - began);
    }
  }
  const median = (list: number[]) =>
    percentile(
      [...list].sort((a, b) => a - b),
      50,
    );
  console.log(`  row changes: ${size.toLocaleString()} a tick in ${statements} statements`);
  return figure({
    name: `PostgreSQL row changes, ${size.toLocaleString()} of ${SESSIONS} sessions in one transaction (median)`,
    value: median(grouped),
    unit: 'ms',
    baseline: { name: 'the same changes one statement each', value: median(single) },
  });
}
