import { describe, expect, it } from 'vitest';
import { microsToIso, nowMicros } from '../../src/core/events/clock.js';
import type { MetisEvent } from '../../src/core/events/envelope.js';
import { eventJson } from '../../src/core/events/event-json.js';
import { newEventId } from '../../src/core/events/ids.js';
import { PgStreamArchiveRows } from '../../src/core/store/postgres/pg-stream-archive-rows.js';
import { SqliteStreamArchiveRows, type StreamArchiveRows } from '../../src/core/store/stream-archive-rows.js';
import { StreamArchive } from '../../src/core/stream/stream-archive.js';
import { openPgWriter } from '../helpers/pg-store-writer.js';
import { postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { tempTraceContext } from '../helpers/tmp.js';

/**
 * The stream archive's rows (stream-archive-rows.ts) answer the same on both stores
 * (docs/plans/store-port.md §2 I): SQLite's through its TraceWriter, PostgreSQL's through a
 * PgStoreWriter. Each is held to a model of the archive (what was written, what a prune leaves), and
 * one transcript of every read is compared across the two.
 */

const server = postgresForFile();

interface Subject {
  readonly rows: StreamArchiveRows;
  /** Waits until every row write queued is committed. */
  flush(): Promise<void>;
}

const ADAPTERS: readonly { name: string; runs: boolean; open(): Promise<Subject> }[] = [
  {
    name: 'SQLite',
    runs: true,
    open: async () => {
      const context = tempTraceContext();
      return { rows: new SqliteStreamArchiveRows(context.db), flush: () => context.flush() };
    },
  },
  {
    name: 'PostgreSQL',
    runs: postgresTestsRun,
    open: async () => {
      const pg = await openPgWriter(server);
      return { rows: new PgStreamArchiveRows(pg.pool, pg.writer), flush: pg.flush };
    },
  },
];

const MINUTE_US = 60_000_000;

/** A streaming event of `sessionId` stamped `timestampUs`, with an id after every one made before. */
function delta(sessionId: string, timestampUs: number, text = 'x'): MetisEvent {
  return {
    id: newEventId(),
    timestamp: microsToIso(timestampUs),
    session_id: sessionId,
    turn_id: 'turn_1',
    parent_event_id: null,
    type: 'text.delta',
    actor: 'agent',
    payload: { message_id: `msg_${sessionId}`, content_block_index: 0, text },
    sensitivity: 'private',
    seq: null,
  };
}

/**
 * Three sessions' deltas, interleaved in id order: each has `old` stamped an hour ago, then `recent`
 * stamped now. Text with quotes, a backslash and non-ASCII, so the JSON is stored as it was written.
 */
function archiveOf(old: number, recent: number): MetisEvent[] {
  const sessions = ['sess_b', 'sess_a', 'sess_c'];
  const events: MetisEvent[] = [];
  const now = nowMicros();
  for (let i = 0; i < old + recent; i += 1)
    for (const sessionId of sessions)
      events.push(delta(sessionId, i < old ? now - 60 * MINUTE_US : now, `"${i}" \\ é ✓`));
  return events;
}

/** Writes `events` in batches of `size` and waits for their commit; resolves with each batch's `settled`. */
async function writeInBatches(subject: Subject, events: readonly MetisEvent[], size: number) {
  const settled: boolean[] = [];
  for (let i = 0; i < events.length; i += size)
    subject.rows.write(events.slice(i, i + size), (committed) => settled.push(committed));
  await subject.flush();
  return settled;
}

const jsonOf = (events: readonly MetisEvent[]) => events.map((event) => eventJson(event));
const ofSession = (events: readonly MetisEvent[], sessionId: string) =>
  events.filter((event) => event.session_id === sessionId);

describe.each(ADAPTERS)('StreamArchiveRows on $name', ({ runs, open }) => {
  it.runIf(runs)(
    'gives back each session’s batches in id order, after any cursor, at most the limit',
    async () => {
      const subject = await open();
      const { rows } = subject;
      expect(await rows.archivedSessions()).toEqual([]);
      const events = archiveOf(0, 12);
      // A batch spans sessions, and a session's events span batches.
      expect(await writeInBatches(subject, events, 7)).toEqual([true, true, true, true, true, true]);

      expect(await rows.archivedSessions()).toEqual(['sess_a', 'sess_b', 'sess_c']);
      for (const sessionId of ['sess_a', 'sess_b', 'sess_c']) {
        const own = ofSession(events, sessionId);
        expect(await rows.after(sessionId, '', 1_000)).toEqual(jsonOf(own));
        // StreamArchive's limit when it has none.
        expect(await rows.after(sessionId, '', Number.MAX_SAFE_INTEGER)).toEqual(jsonOf(own));
        expect(await rows.after(sessionId, own[4]!.id, 1_000)).toEqual(jsonOf(own.slice(5)));
        expect(await rows.after(sessionId, own[4]!.id, 3)).toEqual(jsonOf(own.slice(5, 8)));
        expect(await rows.after(sessionId, '', 1)).toEqual(jsonOf(own.slice(0, 1)));
        // A cursor of another session's, between two of this one's ids.
        const between = events.find((event) => event.session_id !== sessionId && event.id > own[2]!.id)!;
        expect(await rows.after(sessionId, between.id, 1_000)).toEqual(
          jsonOf(own.filter((event) => event.id > between.id)),
        );
        expect(await rows.after(sessionId, own.at(-1)!.id, 1_000)).toEqual([]);
        expect(await rows.horizon(sessionId)).toBeUndefined();
      }
      expect(await rows.after('sess_none', '', 1_000)).toEqual([]);
      expect(await rows.horizon('sess_none')).toBeUndefined();
    },
  );

  it.runIf(runs)(
    'a prune drops what is both older than the cutoff and beyond the newest kept, and raises the horizon',
    async () => {
      const subject = await open();
      const { rows } = subject;
      const events = archiveOf(6, 3);
      await writeInBatches(subject, events, 5);
      const cutoffUs = nowMicros() - 30 * MINUTE_US;
      const a = ofSession(events, 'sess_a');
      const b = ofSession(events, 'sess_b');
      const c = ofSession(events, 'sess_c');

      // sess_a keeps its newest 5 (3 recent, 2 old); sess_b is not named; a second prune is a no-op.
      rows.prune(['sess_a', 'sess_c'], cutoffUs, 5);
      await subject.flush();
      expect(await rows.after('sess_a', '', 1_000)).toEqual(jsonOf(a.slice(4)));
      expect(await rows.horizon('sess_a')).toBe(a[4]!.id);
      expect(await rows.after('sess_b', '', 1_000)).toEqual(jsonOf(b));
      expect(await rows.horizon('sess_b')).toBeUndefined();
      expect(await rows.after('sess_c', '', 1_000)).toEqual(jsonOf(c.slice(4)));

      // Keeping fewer than the recent ones: the cutoff still keeps every recent one.
      rows.prune(['sess_b'], cutoffUs, 1);
      // Keep 0 keeps the newest all the same (SQLite's OFFSET -1 reads as 0).
      rows.prune(['sess_c'], nowMicros() + MINUTE_US, 0);
      await subject.flush();
      expect(await rows.after('sess_b', '', 1_000)).toEqual(jsonOf(b.slice(6)));
      expect(await rows.horizon('sess_b')).toBe(b[6]!.id);
      expect(await rows.after('sess_c', '', 1_000)).toEqual(jsonOf(c.slice(8)));
      expect(await rows.horizon('sess_c')).toBe(c[8]!.id);

      // A prune that drops nothing leaves the horizon where it was, never lower.
      rows.prune(['sess_a', 'sess_b', 'sess_c'], cutoffUs, 100);
      await subject.flush();
      expect(await rows.horizon('sess_a')).toBe(a[4]!.id);
      expect(await rows.horizon('sess_c')).toBe(c[8]!.id);
      expect(await rows.archivedSessions()).toEqual(['sess_a', 'sess_b', 'sess_c']);
    },
  );

  it.runIf(runs)(
    'under StreamArchive: served from memory until committed, then from the rows; pruned past the window',
    async () => {
      const subject = await open();
      const archive = new StreamArchive(subject.rows, { minAgeMs: 0, minEvents: 2, pruneEveryMs: 0 });
      const first = [delta('sess_a', nowMicros()), delta('sess_a', nowMicros())];
      for (const event of first) archive.record(event);
      // Not flushed yet (20 ms): the answer comes from memory.
      expect(await archive.after(['sess_a'], null)).toEqual(first);
      await new Promise((resolve) => setTimeout(resolve, 40));
      await subject.flush();
      expect(await subject.rows.after('sess_a', '', 10)).toEqual(jsonOf(first));
      const later = [delta('sess_a', nowMicros()), delta('sess_a', nowMicros())];
      for (const event of later) archive.record(event);
      // The flush writes them and prunes to the newest two.
      archive.close();
      await subject.flush();
      expect(await archive.after(['sess_a'], null)).toEqual(later);
      expect(await archive.missingAfter('sess_a', first[1]!.id)).toBe(true);
      expect(await archive.missingAfter('sess_a', later[0]!.id)).toBe(false);
    },
  );
});

describe.runIf(postgresTestsRun)('StreamArchiveRows on SQLite and on PostgreSQL', () => {
  it('answer every read the same, byte for byte, after the same writes and prunes', async () => {
    const subjects = await Promise.all(ADAPTERS.map((adapter) => adapter.open()));
    const events = archiveOf(5, 4);
    const sessionIds = ['sess_a', 'sess_b', 'sess_c', 'sess_none'];
    // Every stored id, the empty cursor, and ids between and around them.
    const cursors = ['', ...events.flatMap((event) => [event.id, `${event.id}~`]), 'evt_', 'evt_~'];
    const cutoffUs = nowMicros() - 30 * MINUTE_US;

    const transcript = async ({ rows }: Subject) => {
      const answers: unknown[] = [await rows.archivedSessions()];
      for (const sessionId of sessionIds) {
        answers.push(await rows.horizon(sessionId));
        for (const cursor of cursors)
          for (const limit of [1, 4, 1_000]) answers.push(await rows.after(sessionId, cursor, limit));
      }
      return answers;
    };
    const transcripts = await Promise.all(
      subjects.map(async (subject) => {
        await writeInBatches(subject, events, 4);
        const written = await transcript(subject);
        subject.rows.prune(['sess_a', 'sess_b', 'sess_none'], cutoffUs, 6);
        subject.rows.prune(['sess_c'], cutoffUs, 0);
        await subject.flush();
        return [written, await transcript(subject)];
      }),
    );
    expect(transcripts[1]).toEqual(transcripts[0]);
    // Something to compare: the prune changed what is read.
    expect(transcripts[0]![1]).not.toEqual(transcripts[0]![0]);
  });
});
