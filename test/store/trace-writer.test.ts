import { describe, expect, it } from 'vitest';
import type { EmitInput } from '../../src/core/bus/event-bus.js';
import type { PayloadOf } from '../../src/core/events/catalog/index.js';
import { ROUTING_POLICIES } from '../../src/core/events/catalog/route.js';
import type { MetisEvent } from '../../src/core/events/envelope.js';
import { openDatabase } from '../../src/core/store/database.js';
import { rowToEvent } from '../../src/core/store/event-rows.js';
import { sessionCreated, turnCompleted, turnStarted } from '../helpers/events.js';
import { captureLogs, LEVEL, settleLogs } from '../helpers/log-capture.js';
import { tempTraceContext } from '../helpers/tmp.js';

describe('trace writer', () => {
  it('commits every event of one dispatch tick in one transaction and publishes after commit', async () => {
    const context = tempTraceContext();
    await context.flush();
    const committedBatches: (readonly MetisEvent[])[] = [];
    context.writer.onCommit((batch) => {
      // Persist before publish: every published event is already readable from another connection.
      const reader = openDatabase(context.dbPath);
      const stored = reader.prepare('SELECT count(*) FROM events WHERE id = ?').pluck();
      for (const event of batch) expect(stored.get(event.id)).toBe(1);
      reader.close();
      committedBatches.push(batch);
    });
    const before = context.writer.stats.committedBatches;
    const emitted = Array.from({ length: 250 }, () => context.bus.emit(turnStarted('s1'))!);
    await context.flush();
    expect(context.writer.stats.committedBatches - before).toBe(1);
    expect(committedBatches).toHaveLength(1);
    expect(committedBatches[0]!.map((e) => e.id)).toEqual(emitted.map((e) => e.id));
  });

  it('stores the envelope exactly: replay returns what was emitted (§9.1 test 7)', async () => {
    const context = tempTraceContext();
    const live: MetisEvent[] = [];
    context.bus.subscribe({
      name: 'live',
      fastPath: true,
      filter: { session_ids: ['sess_a'] },
      handler: (e) => void live.push(e),
    });
    const created = context.bus.emit(sessionCreated('sess_a'))!;
    const started = context.bus.emit(turnStarted('sess_a', 'opted in'))!;
    context.bus.emit(turnStarted('sess_b'));
    context.bus.emit(turnCompleted('sess_a', started.id));
    await context.flush();
    const { rows, tooLarge } = context.store.replay({ sessionIds: ['sess_a'], afterId: null, limit: 100 });
    expect(tooLarge).toBe(false);
    expect(rows.map(rowToEvent)).toEqual(live);
    expect(live[0]!.id).toBe(created.id);
    expect(context.store.sessionEvents('sess_a')).toEqual(live);
  });

  it('replays after a cursor with type and actor filters and reports when the cap is exceeded', async () => {
    const context = tempTraceContext();
    const ids: string[] = [];
    for (let i = 0; i < 20; i += 1) {
      const started = context.bus.emit(turnStarted('s'))!;
      ids.push(started.id, context.bus.emit(turnCompleted('s', started.id))!.id);
    }
    await context.flush();
    const after = ids[9]!;
    const all = context.store.replay({ sessionIds: ['s'], afterId: after, limit: 1000 });
    expect(all.rows.map((r) => r[0])).toEqual(ids.slice(10));
    const completed = context.store.replay({
      sessionIds: ['s'],
      afterId: after,
      eventTypes: ['turn.completed'],
      limit: 1000,
    });
    expect(completed.rows.every((r) => r[5] === 'turn.completed')).toBe(true);
    expect(completed.rows).toHaveLength(15);
    const users = context.store.replay({ sessionIds: ['s'], afterId: null, actors: ['user'], limit: 1000 });
    expect(users.rows).toHaveLength(20);
    const capped = context.store.replay({ sessionIds: ['s'], afterId: null, limit: 39 });
    expect(capped.tooLarge).toBe(true);
    expect(capped.rows).toHaveLength(39);
    expect(context.store.replay({ sessionIds: ['s'], afterId: null, limit: 40 }).tooLarge).toBe(false);
  });

  it('walks a causal chain back to its root (§9.1 test 2)', async () => {
    const context = tempTraceContext();
    const { bus } = context;
    const turn = bus.emit(turnStarted('s'))!;
    const route = bus.emit(routeDecided('s', turn.id))!;
    const call1 = bus.emit(llmStarted('s', turn.id))!;
    const done1 = bus.emit(llmCompleted('s', call1.id, 'tool_use', 1))!;
    const tool = bus.emit(toolCalled('s', done1.id))!;
    const toolDone = bus.emit(toolCompleted('s', tool.id))!;
    const call2 = bus.emit(llmStarted('s', toolDone.id))!;
    const done2 = bus.emit(llmCompleted('s', call2.id, 'end_turn', 0))!;
    const completed = bus.emit(turnCompleted('s', turn.id))!;
    await context.flush();
    const chain = context.store.causalChain(done2.id).map((e) => e.type);
    expect(chain).toEqual([
      'llm.call_completed',
      'llm.call_started',
      'tool.completed',
      'tool.called',
      'llm.call_completed',
      'llm.call_started',
      'turn.started',
    ]);
    expect(context.store.causalChain(completed.id).map((e) => e.id)).toEqual([completed.id, turn.id]);
    expect(context.store.causalChain(route.id).at(-1)!.id).toBe(turn.id);
  });

  it('drops only the row a constraint refuses, logs it, and commits the rest of its batch', async () => {
    const { logger, at } = captureLogs();
    const context = tempTraceContext({ logger });
    context.bus.emit(turnStarted('s'));
    await context.flush();
    context.db.exec(`CREATE TRIGGER refuse BEFORE INSERT ON events WHEN NEW.type = 'turn.completed'
                     BEGIN SELECT RAISE(ABORT, 'simulated write failure'); END`);
    const dropped: string[] = [];
    context.writer.onDrop((batch) => dropped.push(...batch.map((e) => e.type)));
    // One dispatch tick, one transaction: the good event beside the refused one must survive.
    context.bus.emit(turnStarted('s'));
    context.bus.emit(turnCompleted('s', null));
    await context.flush();
    context.db.exec('DROP TRIGGER refuse');
    context.bus.emit(turnStarted('s'));
    await context.flush();
    await settleLogs();
    expect(context.writer.stats.droppedEvents).toBe(1);
    expect(context.writer.stats.rejectedRows).toBe(1);
    expect(dropped).toEqual(['turn.completed']);
    expect(at(LEVEL.error).some((r) => r.msg.includes('refused one row'))).toBe(true);
    expect(context.store.sessionEvents('s').map((e) => e.seq)).toEqual([1, 2, 4]);
  });
});

const H = 'a'.repeat(64);
function routeDecided(session: string, parent: string): EmitInput {
  return {
    type: 'route.decided',
    session_id: session,
    parent_event_id: parent,
    payload: {
      chosen_model: 'scripted:demo',
      winner_index: 6,
      elapsed_ms: 0.2,
      chain: ROUTING_POLICIES.map((policy) => ({
        policy,
        verdict: policy === 'global_default' ? 'chose' : 'not_applicable',
        candidate_model: policy === 'global_default' ? 'scripted:demo' : null,
        reason: 'test',
        rule_name: null,
        confidence: null,
        pattern_alternatives: null,
        validation_failure: null,
      })),
    },
  };
}
function llmStarted(session: string, parent: string): EmitInput {
  return {
    type: 'llm.call_started',
    session_id: session,
    parent_event_id: parent,
    payload: {
      model: 'scripted:demo',
      provider: 'scripted',
      estimated_input_tokens: 10,
      request_id: 'r1',
      is_worker: false,
    },
  };
}
function llmCompleted(
  session: string,
  parent: string,
  stop: PayloadOf<'llm.call_completed'>['stop_reason'],
  tools: number,
): EmitInput {
  return {
    type: 'llm.call_completed',
    session_id: session,
    parent_event_id: parent,
    payload: {
      model: 'scripted:demo',
      provider: 'scripted',
      input_tokens: 10,
      output_tokens: 5,
      cached_input_tokens: 0,
      cache_creation_input_tokens: 0,
      cost_usd: 0,
      pricing_version: 'test',
      latency_ms: 3,
      stop_reason: stop,
      produced_tool_calls: tools,
      produced_thinking_blocks: 0,
    },
  };
}
function toolCalled(session: string, parent: string): EmitInput {
  return {
    type: 'tool.called',
    session_id: session,
    parent_event_id: parent,
    payload: {
      tool_use_id: 'tu_1',
      tool_name: 'current_time',
      input_hash: H,
      input_size_bytes: 2,
      side_effects: 'none',
    },
  };
}
function toolCompleted(session: string, parent: string): EmitInput {
  return {
    type: 'tool.completed',
    session_id: session,
    parent_event_id: parent,
    payload: {
      tool_use_id: 'tu_1',
      success: true,
      output_size_bytes: 20,
      latency_ms: 1,
      files_modified: null,
      command_executed: null,
    },
  };
}
