import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { EventBus } from '../../src/core/bus/event-bus.js';
import { SYSTEM_SESSION_ID } from '../../src/core/events/envelope.js';
import { silentLogger } from '../../src/core/logger.js';
import { recoverCrashedTurns } from '../../src/core/runtime/crash-recovery.js';
import { createRuntime } from '../../src/core/runtime/runtime.js';
import { crashAndReopen, hangs, openStrict } from '../helpers/crash-reopen.js';
import { eventually } from '../helpers/protocol.js';
import { testRuntimeConfig } from '../helpers/runtime-config.js';
import { tempDir } from '../helpers/tmp.js';

/*
 * Recovery reads everything it reports before it writes anything (runtime/open-work-plan.ts, store-port
 * plan step 5): what a cut worker cost must still reach the planner's `delegate.failed` and the
 * worker's `session.ended`. Two runtimes on one real SQLite file; the first "crashes" while its worker's
 * tool runs, after the worker's first model call was billed.
 */

describe('recovery reads what it reports before closing', () => {
  it("a cut worker's cost reaches the planner's delegate.failed and the worker's session.ended, seq whole", async () => {
    const dbPath = join(tempDir(), 'metis.db');
    const config = testRuntimeConfig();
    const first = openStrict(dbPath);
    const before = createRuntime({ bus: first.bus, store: first.port, config, tools: [hangs] });
    const planner = before.createSession({ workspacePath: tempDir() });
    before.submitTurn(planner.id, 'delegate: client: hang');
    const workerCost = () =>
      first.db
        .prepare(
          `SELECT session_id, json_extract(payload_json, '$.cost_usd') AS cost FROM events
            WHERE type = 'llm.call_completed' AND session_id != ?`,
        )
        .all(planner.id) as { session_id: string; cost: number }[];
    const running = () =>
      first.db
        .prepare("SELECT 1 FROM tool_calls WHERE status = 'running' AND session_id != ?")
        .all(planner.id).length === 1;
    expect(await eventually(() => workerCost().length === 1 && running(), 10_000)).toBe(true);
    await first.flush();
    const [{ session_id: worker, cost }] = workerCost() as [{ session_id: string; cost: number }];
    expect(cost).toBeGreaterThan(0);
    const second = crashAndReopen(first);
    // Numbering what it emits needs no synchronous read of the store either: the plan read each
    // session's last seq (a store shared by many numbers `system` itself).
    const asked: string[] = [];
    const bus = new EventBus({
      validation: 'strict',
      lastSeq: (sessionId) => {
        if (sessionId === SYSTEM_SESSION_ID) return second.store.lastSeq(sessionId);
        asked.push(sessionId);
        throw new Error(`read from the store: lastSeq(${sessionId})`);
      },
    });
    second.writer.attach(bus);
    const recovery = await recoverCrashedTurns(second.db, bus, {
      pricingVersion: config.pricing_version ?? '2026-11-01',
      logger: silentLogger(),
    });
    expect(recovery).toMatchObject({ turns: 2, delegations: 1, workerSessions: 1 });
    await bus.flush();
    await second.flush();
    expect(asked).toEqual([]);
    for (const sessionId of [planner.id, worker]) {
      const seqs = second.db
        .prepare('SELECT seq FROM events WHERE session_id = ? ORDER BY seq')
        .pluck()
        .all(sessionId) as number[];
      expect(seqs, sessionId).toEqual(seqs.map((_, i) => i + 1));
    }
    const payloadOf = (type: string, sessionId: string) =>
      JSON.parse(
        second.db
          .prepare('SELECT payload_json FROM events WHERE type = ? AND session_id = ?')
          .pluck()
          .get(type, sessionId) as string,
      );
    expect(payloadOf('delegate.failed', planner.id)).toMatchObject({
      worker_session_id: worker,
      worker_total_cost_usd: String(cost),
    });
    expect(payloadOf('session.ended', worker)).toMatchObject({
      disposition: 'error',
      total_cost_usd: cost,
      turn_count: 1,
    });
  });
});
