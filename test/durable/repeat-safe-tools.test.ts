import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { z } from 'zod';
import { silentLogger } from '../../src/core/logger.js';
import { recoverCrashedTurns } from '../../src/core/runtime/crash-recovery.js';
import { createRuntime } from '../../src/core/runtime/runtime.js';
import { defineTool, type Tool } from '../../src/core/runtime/tools/tool.js';
import { crashAndReopen, openStrict } from '../helpers/crash-reopen.js';
import { eventually } from '../helpers/protocol.js';
import { testRuntimeConfig } from '../helpers/runtime-config.js';
import { tempDir } from '../helpers/tmp.js';

/*
 * A tool call cut while it ran (docs/runtime.md "Durable turns"): run again at the next start only when
 * its tool says it is safe to repeat. Two runtimes on one real SQLite file; the first "crashes" with
 * its tool still running (its database closed under it, as a SIGKILL leaves it), the second resumes.
 * In-process so the tools can count their runs; the shell cases run a real server (durable-turns.test.ts).
 */

/** A tool whose first run never ends (the crash lands in it), counting its runs across both runtimes. */
function blockingTool(name: string, repeatSafe: boolean, runs: { count: number }): Tool {
  return defineTool({
    name,
    description: `test tool ${name}`,
    inputSchema: z.strictObject({}),
    sideEffects: 'none',
    repeatSafe,
    async execute() {
      runs.count += 1;
      if (runs.count === 1) await new Promise(() => {});
      return { content: `${name} ran` };
    },
  });
}

async function cutThenResume(toolName: string, repeatSafe: boolean) {
  const dbPath = join(tempDir(), 'metis.db');
  const runs = { count: 0 };
  const tools = [blockingTool(toolName, repeatSafe, runs)];
  const config = testRuntimeConfig();
  const first = openStrict(dbPath);
  const before = createRuntime({ bus: first.bus, store: first.port, config, tools });
  const session = before.createSession({ workspacePath: tempDir() });
  const { turnId } = before.submitTurn(session.id, `client: ${toolName}`);
  const running = () =>
    first.db.prepare("SELECT 1 FROM tool_calls WHERE status = 'running'").all().length === 1;
  expect(await eventually(running, 10_000)).toBe(true);
  await first.flush();
  const second = crashAndReopen(first);
  const recovery = await recoverCrashedTurns(second.db, second.bus, {
    pricingVersion: config.pricing_version ?? '2026-11-01',
    logger: silentLogger(),
    onRestart: 'resume',
  });
  expect(recovery.resumable.map((t) => t.turnId)).toEqual([turnId]);
  const after = createRuntime({ bus: second.bus, store: second.port, config, tools });
  onTestFinished(() => after.close());
  const outcome = await after.resumeTurn(recovery.resumable[0]!);
  await second.flush();
  const events = (
    second.db
      .prepare('SELECT id, type, parent_event_id, payload_json FROM events WHERE turn_id = ? ORDER BY id')
      .all(turnId) as { id: string; type: string; parent_event_id: string; payload_json: string }[]
  ).map((e) => ({ ...e, payload: JSON.parse(e.payload_json) }));
  const seqs = (
    second.db.prepare('SELECT seq FROM events WHERE session_id = ? ORDER BY seq').all(session.id) as {
      seq: number;
    }[]
  ).map((r) => r.seq);
  return { outcome, runs, events, seqs };
}

describe('a tool call cut while it ran', () => {
  it('runs again when its tool is safe to repeat, under its own tool.called', async () => {
    const { outcome, runs, events, seqs } = await cutThenResume('probe_status', true);
    expect(outcome.status).toBe('completed');
    expect(runs.count).toBe(2);
    const called = events.filter((e) => e.type === 'tool.called');
    expect(called).toHaveLength(1);
    const completed = events.filter((e) => e.type === 'tool.completed');
    expect(completed.map((e) => e.parent_event_id)).toEqual([called[0]!.id]);
    expect(events.filter((e) => e.type === 'tool.failed')).toEqual([]);
    expect(events.at(-1)).toMatchObject({ type: 'turn.completed', payload: { tool_call_count: 1 } });
    expect(seqs).toEqual(seqs.map((_, i) => i + 1));
  });

  it('is not run again when its tool is not safe to repeat: tool.failed, interrupted, and the turn goes on', async () => {
    const { outcome, runs, events, seqs } = await cutThenResume('probe_charge', false);
    expect(outcome.status).toBe('completed');
    expect(runs.count).toBe(1);
    const [called] = events.filter((e) => e.type === 'tool.called');
    const failed = events.filter((e) => e.type === 'tool.failed');
    expect(failed).toHaveLength(1);
    expect(failed[0]).toMatchObject({
      parent_event_id: called!.id,
      payload: { error_class: 'execution_error' },
    });
    expect(failed[0]!.payload.error_message).toMatch(/^interrupted/);
    // The model was told, and answered.
    expect(events.filter((e) => e.type === 'llm.call_completed')).toHaveLength(2);
    expect(seqs).toEqual(seqs.map((_, i) => i + 1));
  });
});
