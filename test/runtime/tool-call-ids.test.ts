import { join } from 'node:path';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { openDatabase } from '../../src/core/store/database.js';
import { MIGRATIONS, SCHEMA_VERSION } from '../../src/core/store/schema.js';
import { SessionStore } from '../../src/core/store/session-store.js';
import { tempDir } from '../helpers/tmp.js';

/** A database as metis wrote it at schema version 2: tool_calls keyed by the provider's id alone. */
function versionTwoDatabase(path: string): void {
  const db = new Database(path);
  db.exec(MIGRATIONS[0] as string);
  db.exec(MIGRATIONS[1] as string);
  db.pragma('user_version = 2');
  db.exec(`
    INSERT INTO sessions (id, status, created_at_us, updated_at_us) VALUES ('sess_a', 'active', 1, 1);
    INSERT INTO tool_calls (id, session_id, turn_id, message_id, tool_name, input_json, status, output_json,
                            error_class, created_at_us, updated_at_us)
    VALUES ('call_2', 'sess_a', 'turn_1', 'msg_1', 'shell', '{}', 'completed', '"ok"', NULL, 20, 21),
           ('call_1', 'sess_a', 'turn_1', 'msg_1', 'read_file', '{"path":"a"}', 'failed', '"no"', 'not_found', 10, 11);`);
  db.close();
}

describe('tool-call rows are keyed by their message, not the provider id alone (schema version 3)', () => {
  it('a version-2 database migrates with every row, in creation order', () => {
    const path = join(tempDir(), 'metis.db');
    versionTwoDatabase(path);
    const db = openDatabase(path);
    try {
      expect(db.pragma('user_version', { simple: true })).toBe(SCHEMA_VERSION);
      expect(
        db.prepare('SELECT row_id, id, status, error_class FROM tool_calls ORDER BY row_id').all(),
      ).toEqual([
        { row_id: 1, id: 'call_1', status: 'failed', error_class: 'not_found' },
        { row_id: 2, id: 'call_2', status: 'completed', error_class: null },
      ]);
      expect(new SessionStore(db).toolCall('call_1')).toMatchObject({
        id: 'call_1',
        session_id: 'sess_a',
        input: { path: 'a' },
        output: 'no',
      });
    } finally {
      db.close();
    }
  });

  it('the same provider id in two turns is two rows; an update reaches only its own', () => {
    const db = openDatabase(join(tempDir(), 'metis.db'), { create: true });
    try {
      const store = new SessionStore(db);
      store.createSession({ id: 'sess_b', workspace_path: '/w', workspace_hash: 'h', active_model: null });
      const call = (turn: string, message: string) => ({
        id: 'call_1',
        session_id: 'sess_b',
        turn_id: turn,
        message_id: message,
      });
      for (const [turn, message] of [
        ['turn_1', 'msg_1'],
        ['turn_2', 'msg_2'],
      ] as const) {
        store.saveToolCall({ ...call(turn, message), tool_name: 'shell', input: {}, status: 'pending' });
      }
      store.updateToolCall(call('turn_2', 'msg_2'), { status: 'completed', output: 'done' });
      expect(db.prepare('SELECT turn_id, status FROM tool_calls ORDER BY row_id').all()).toEqual([
        { turn_id: 'turn_1', status: 'pending' },
        { turn_id: 'turn_2', status: 'completed' },
      ]);
      expect(store.toolCall('call_1', 'sess_b')).toMatchObject({ turn_id: 'turn_2', output: 'done' });
      store.closeOpenToolCalls('sess_b', {
        status: 'failed',
        errorClass: 'execution_error',
        output: 'stopped',
      });
      expect(db.prepare('SELECT turn_id, status FROM tool_calls ORDER BY row_id').all()).toEqual([
        { turn_id: 'turn_1', status: 'failed' },
        { turn_id: 'turn_2', status: 'completed' },
      ]);
    } finally {
      db.close();
    }
  });
});
