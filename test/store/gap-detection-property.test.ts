import { copyFileSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { encodeTime } from 'ulid';
import { describe, expect, it, onTestFinished } from 'vitest';
import { AUDIT_EVENT_TYPES } from '../../src/core/events/catalog/index.js';
import { EVENT_ID_PREFIX } from '../../src/core/events/ids.js';
import { type Db, openDatabase } from '../../src/core/store/database.js';
import { scanForGaps } from '../../src/core/store/gap-detector.js';
import { handOff, pendingHandoffs, settleHandoffs } from '../../src/core/store/handoff-queue.js';
import { plan, sweep } from '../../src/core/store/retention-sweep.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * Two writer connections on one real SQLite file (think: a server's and a prune's). Each owns its own
 * sessions, stamps ids from one shared clock and seq from its own counters, and commits its batches in
 * order but at random moments, so commits of the two land out of id order. Random prunes (deletes of
 * old rows, audit types kept) and random gap scans run in between, from either connection. A batch may
 * be dropped (never committed): that is the only honest gap.
 */

const AUDIT = JSON.stringify([...AUDIT_EVENT_TYPES]);
const BASE_MS = Date.UTC(2026, 0, 1);
const OWNED: readonly (readonly string[])[] = [
  ['system', 'a1', 'a2'],
  ['b1', 'b2'],
];

type Action =
  | { kind: 'stamp'; conn: number; session: number; count: number; audit: boolean }
  | { kind: 'commit'; conn: number }
  | { kind: 'drop'; conn: number }
  | { kind: 'prune'; conn: number; age: number; batchSize: number }
  | { kind: 'scan'; conn: number };

const conn = fc.integer({ min: 0, max: 1 });
const action: fc.Arbitrary<Action> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.record({
      kind: fc.constant('stamp' as const),
      conn,
      session: fc.nat(2),
      count: fc.integer({ min: 1, max: 3 }),
      audit: fc.boolean(),
    }),
  },
  { weight: 4, arbitrary: fc.record({ kind: fc.constant('commit' as const), conn }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('drop' as const), conn }) },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant('prune' as const),
      conn,
      age: fc.nat(30),
      batchSize: fc.constantFrom(2, 1000),
    }),
  },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('scan' as const), conn }) },
);

interface Row {
  readonly session: string;
  readonly id: string;
  readonly seq: number;
  readonly ms: number;
  readonly type: string;
}

interface Reported {
  readonly session_id: string;
  readonly gap_start_id: string;
  readonly gap_end_id: string;
  readonly estimated_missing_count: number;
}

class World {
  readonly dbs: Db[];
  private clock = 0;
  private readonly seqs = new Map<string, number>();
  private readonly pending: Row[][][] = [[], []];
  /** Every row ever committed, by session (prunes delete from the table, not from here). */
  readonly committed = new Map<string, Row[]>();
  readonly reported: Reported[] = [];
  private readonly insert: { run(...params: unknown[]): unknown }[];

  constructor(path: string) {
    this.dbs = [openDatabase(path), openDatabase(path)];
    this.insert = this.dbs.map((db) =>
      db.prepare(
        `INSERT INTO events (session_id, id, seq, timestamp_us, turn_id, parent_event_id, type, actor, sensitivity, payload_json)
         VALUES (?, ?, ?, ?, NULL, NULL, ?, 'system', 'pseudonymous', '{}')`,
      ),
    );
    for (const db of this.dbs)
      db.prepare(
        "INSERT OR IGNORE INTO sessions (id, created_at_us, updated_at_us) VALUES ('a1', 0, 0), ('a2', 0, 0), ('b1', 0, 0), ('b2', 0, 0)",
      ).run();
  }

  private ownerOf(session: string): number {
    return OWNED.findIndex((sessions) => sessions.includes(session));
  }

  /** Stamps a batch now (ids and seq), to be committed later by its owner's connection. */
  stamp(owner: number, session: string, types: readonly string[]): void {
    const batch = types.map((type) => {
      this.clock += 1;
      const seq = (this.seqs.get(session) ?? 0) + 1;
      this.seqs.set(session, seq);
      const ms = BASE_MS + this.clock;
      return { session, id: `${EVENT_ID_PREFIX}${encodeTime(ms, 10)}${'0'.repeat(16)}`, seq, ms, type };
    });
    this.pending[owner]!.push(batch);
  }

  commit(owner: number): void {
    const batch = this.pending[owner]!.shift();
    if (batch === undefined) return;
    const db = this.dbs[owner]!;
    db.transaction(() => {
      for (const r of batch) this.insert[owner]!.run(r.session, r.id, r.seq, r.ms * 1000, r.type);
    }).immediate();
    for (const r of batch) this.committed.set(r.session, [...(this.committed.get(r.session) ?? []), r]);
  }

  drop(owner: number): void {
    this.pending[owner]!.shift();
  }

  /** A prune from `via`: deletes rows older than `age` ticks ago, then hands its trace.swept over. */
  prune(via: number, age: number, batchSize: number): Promise<void> {
    const db = this.dbs[via]!;
    const cutoffUs = (BASE_MS + Math.max(0, this.clock - age)) * 1000;
    return sweep(db, plan(db, cutoffUs), AUDIT, batchSize).then(() => {
      db.transaction(() => handOff(db, 'system', 'trace.swept', { rows_deleted: 0 })).immediate();
    });
  }

  /** A scan from `via`; then each owner emits what was handed to it (a new event in that session). */
  scan(via: number): void {
    scanForGaps(this.dbs[via]!);
    this.drain();
  }

  drain(): void {
    const db = this.dbs[0]!;
    const handoffs = pendingHandoffs(db);
    for (const h of handoffs) {
      if (h.type === 'bus.gap_detected') this.reported.push(h.payload as unknown as Reported);
      this.stamp(this.ownerOf(h.session_id), h.session_id, [h.type]);
    }
    settleHandoffs(db, handoffs);
  }

  async run(actions: readonly Action[]): Promise<void> {
    for (const a of actions) {
      const session = OWNED[a.conn]![a.kind === 'stamp' ? a.session % OWNED[a.conn]!.length : 0]!;
      if (a.kind === 'stamp') {
        const type = a.audit ? 'tool.confirmation_resolved' : 'turn.started';
        this.stamp(
          a.conn,
          session,
          Array.from({ length: a.count }, () => type),
        );
      } else if (a.kind === 'commit') this.commit(a.conn);
      else if (a.kind === 'drop') this.drop(a.conn);
      else if (a.kind === 'prune') await this.prune(a.conn, a.age, a.batchSize);
      else this.scan(a.conn);
    }
    // The end: everything still waiting commits, a last scan (and the drain it causes) settles.
    for (let round = 0; round < 3; round += 1) {
      while (this.pending[0]!.length + this.pending[1]!.length > 0) {
        this.commit(0);
        this.commit(1);
      }
      this.scan(round % 2);
    }
  }

  /** The holes in what was ever committed: each missing run of seq between two committed rows. */
  expectedGaps(): Reported[] {
    const gaps: Reported[] = [];
    for (const [session, rows] of this.committed) {
      const sorted = [...rows].sort((a, b) => a.seq - b.seq);
      for (let i = 1; i < sorted.length; i += 1) {
        const [before, after] = [sorted[i - 1]!, sorted[i]!];
        if (after.seq > before.seq + 1) {
          gaps.push({
            session_id: session,
            gap_start_id: before.id,
            gap_end_id: after.id,
            estimated_missing_count: after.seq - before.seq - 1,
          });
        }
      }
    }
    return gaps;
  }

  duplicateSeqs(): unknown[] {
    return this.dbs[0]!.prepare(
      'SELECT session_id, seq FROM events GROUP BY session_id, seq HAVING count(*) > 1',
    ).all();
  }

  close(): void {
    for (const db of this.dbs) db.close();
  }
}

const byKey = (gaps: readonly Reported[]) =>
  gaps
    .map(({ session_id, gap_start_id, gap_end_id, estimated_missing_count }) => ({
      session_id,
      gap_start_id,
      gap_end_id,
      estimated_missing_count,
    }))
    .sort((a, b) => (a.session_id + a.gap_start_id).localeCompare(b.session_id + b.gap_start_id));

describe('gap detection with two writers, late commits and prunes (issue 12)', () => {
  it('property: no false gap, every honest gap reported exactly once, no duplicate seq', async () => {
    // Thousands of small databases: in memory-backed /dev/shm where there is one (no disk syncs).
    const dir = existsSync('/dev/shm') ? mkdtempSync('/dev/shm/metis-gaps-') : tempDir();
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
    const template = join(dir, 'template.db');
    openDatabase(template, { create: true }).close();
    let run = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(action, { minLength: 5, maxLength: 40 }), async (actions) => {
        const path = join(dir, `run-${run++}.db`);
        copyFileSync(template, path);
        const world = new World(path);
        try {
          await world.run(actions);
          expect(byKey(world.reported)).toEqual(byKey(world.expectedGaps()));
          expect(world.duplicateSeqs()).toEqual([]);
          expect(pendingHandoffs(world.dbs[0]!)).toEqual([]);
        } finally {
          world.close();
          rmSync(path, { force: true });
          rmSync(`${path}-wal`, { force: true });
          rmSync(`${path}-shm`, { force: true });
        }
      }),
      { numRuns: 2000 },
    );
  }, 180_000);
});
