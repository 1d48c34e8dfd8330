import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'vitest';
import type { RuntimeConfigInput } from '../../src/core/config/runtime-schema.js';
import type { MetisEvent } from '../../src/core/events/envelope.js';
import { byType, type RuntimeHarness, startRuntime } from './runtime.js';
import { type ReplayResponse, type ReplayServer, startReplayServer } from './sse-server.js';

/** A runtime whose provider points at a replay server of recorded SSE, with one session open. */
export interface ProviderContext {
  readonly server: ReplayServer;
  readonly h: RuntimeHarness;
  readonly sessionId: string;
}

/** Starts the replay server, then a runtime configured for it (`config` gets the server's URL). */
export async function startProviderContext(
  responses: ReplayResponse[],
  config: (url: string) => RuntimeConfigInput,
): Promise<ProviderContext> {
  const server = await startReplayServer(responses);
  const h = startRuntime(config(server.url));
  writeFileSync(join(h.workspace, 'notes.txt'), 'hello from the notes\n');
  const session = h.runtime.createSession({ workspacePath: h.workspace });
  return { server, h, sessionId: session.id };
}

/** Runs one turn to its end; returns its outcome and the session's committed and streamed events. */
export async function turn(ctx: ProviderContext, text: string) {
  const { done } = ctx.h.runtime.submitTurn(ctx.sessionId, text);
  const outcome = await done;
  await ctx.h.context.flush();
  return { outcome, events: ctx.h.framesOf(ctx.sessionId) };
}

export const one = (events: MetisEvent[], type: string, n = 0) => byType(events, type)[n]!.payload;
export const texts = (events: MetisEvent[], type: string) => byType(events, type).map((e) => e.payload.text);

export const HEAD = ['session.created', 'turn.started', 'route.decided', 'llm.call_started', 'message.start'];
export const FAILED_TAIL = ['message.complete', 'llm.call_failed', 'turn.completed'];
export const TEXT_TURN = [...HEAD, 'text.delta*', 'message.complete', 'llm.call_completed', 'turn.completed'];

/** Every streaming event of the call belongs to the one message its single message.start opened. */
export function expectOneMessage(events: MetisEvent[]): void {
  const starts = byType(events, 'message.start');
  expect(starts).toHaveLength(1);
  expect(byType(events, 'message.complete')).toHaveLength(1);
  const streamed = events.filter((e) => /^(message|text|thinking|tool\.use_)/.test(e.type));
  expect(new Set(streamed.map((e) => e.payload.message_id))).toEqual(
    new Set([starts[0]!.payload.message_id]),
  );
}
