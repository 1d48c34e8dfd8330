import { copyFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { onTestFinished } from 'vitest';
import type { EventBus } from '../../src/core/bus/event-bus.js';
import { loadConfig } from '../../src/core/config/load-config.js';
import type { MetisEvent } from '../../src/core/events/envelope.js';
import type { Logger } from '../../src/core/logger.js';
import { silentLogger } from '../../src/core/logger.js';
import type { TraceContext } from '../../src/core/store/trace-context.js';
import { loadPlugins } from '../../src/plugins/load-plugins.js';
import { type PluginHost, startPlugins } from '../../src/plugins/plugin-host.js';
import { sha256, turnStarted } from '../helpers/events.js';
import { tempDir } from '../helpers/tmp.js';

export const FIXTURES = join(import.meta.dirname, '../fixtures/plugins');

/**
 * A temp folder holding copies of the named fixtures and a `metis.config.json` with `config`, as a
 * user's project would: plugins are named by paths relative to the config file.
 */
export function pluginProject(
  fixtures: readonly string[],
  config: Record<string, unknown>,
): { dir: string; configPath: string } {
  const dir = tempDir('metis-plugins-');
  for (const name of fixtures) copyFileSync(join(FIXTURES, name), join(dir, name));
  const configPath = join(dir, 'metis.config.json');
  writeFileSync(configPath, JSON.stringify(config, null, 2));
  return { dir, configPath };
}

/** Loads the config file's plugins and starts them on a real bus and store; stopped when the test ends. */
export async function startProjectPlugins(
  configPath: string,
  context: TraceContext,
  logger: Logger = silentLogger(),
): Promise<PluginHost> {
  const { config, filepath } = await loadConfig({ explicitPath: configPath });
  const host = await startPlugins(await loadPlugins(config.plugins, { configPath: filepath }), {
    bus: context.bus,
    store: context.store,
    logger,
    dataDir: tempDir(),
  });
  onTestFinished(() => host.stop());
  return host;
}

/**
 * Emits one whole turn the way the agent loop does (bus spec §8.1): turn.started → llm call with one
 * tool call → tool → second llm call → turn.completed, each with its causal parent.
 */
export function emitTurn(bus: EventBus, sessionId: string, turnId = 'turn_1'): Record<string, MetisEvent> {
  const emit = (type: string, parent: MetisEvent | null, payload: Record<string, unknown>) =>
    bus.emitDynamic({
      type,
      session_id: sessionId,
      turn_id: turnId,
      parent_event_id: parent?.id ?? null,
      payload,
    })!;
  const turn = bus.emit(turnStarted(sessionId, null, turnId))!;
  const llmPayload = { model: 'anthropic:claude-test', provider: 'anthropic', is_worker: false };
  const call1 = emit('llm.call_started', turn, {
    ...llmPayload,
    estimated_input_tokens: 100,
    request_id: 'req_1',
  });
  const done1 = emit('llm.call_completed', call1, {
    ...usage(120, 30),
    model: llmPayload.model,
    provider: llmPayload.provider,
    stop_reason: 'tool_use',
    produced_tool_calls: 1,
  });
  const tool = emit('tool.called', done1, {
    tool_use_id: 'tu_1',
    tool_name: 'current_time',
    input_hash: sha256('{}'),
    input_size_bytes: 2,
    side_effects: 'none',
  });
  const toolDone = emit('tool.completed', tool, {
    tool_use_id: 'tu_1',
    success: true,
    output_size_bytes: 25,
    latency_ms: 3,
    files_modified: null,
    command_executed: null,
  });
  const call2 = emit('llm.call_started', toolDone, {
    ...llmPayload,
    estimated_input_tokens: 160,
    request_id: 'req_2',
  });
  const done2 = emit('llm.call_completed', call2, {
    ...usage(170, 12),
    model: llmPayload.model,
    provider: llmPayload.provider,
    stop_reason: 'end_turn',
    produced_tool_calls: 0,
  });
  const completed = emit('turn.completed', turn, {
    stop_reason: 'end_turn',
    llm_call_count: 2,
    tool_call_count: 1,
    total_input_tokens: 290,
    total_output_tokens: 42,
    total_cost_usd: 0.002,
    wall_time_seconds: 1.2,
  });
  return { turn, call1, done1, tool, toolDone, call2, done2, completed };
}

function usage(input: number, output: number): Record<string, unknown> {
  return {
    input_tokens: input,
    output_tokens: output,
    cached_input_tokens: 0,
    cache_creation_input_tokens: 0,
    cost_usd: 0.001,
    pricing_version: '2026-11-01',
    latency_ms: 40,
    produced_thinking_blocks: 0,
  };
}
