import { onTestFinished } from 'vitest';
import type { RuntimeConfigInput } from '../../src/core/config/runtime-schema.js';
import type { MetisEvent } from '../../src/core/events/envelope.js';
import { createRuntime, type Runtime } from '../../src/core/runtime/runtime.js';
import type { TraceContext } from '../../src/core/store/trace-context.js';
import { testRuntimeConfig } from './runtime-config.js';
import { tempDir, tempTraceContext } from './tmp.js';

export interface RuntimeHarness {
  readonly runtime: Runtime;
  readonly context: TraceContext;
  readonly workspace: string;
  /** Every committed bus event and every streaming event, merged in id order. */
  readonly frames: MetisEvent[];
  /** Frames of one session without the bus's own subscriber announcements. */
  framesOf(sessionId: string): MetisEvent[];
  /** Waits until the turn is over and every event is committed. */
  settle(done: Promise<unknown>): Promise<void>;
}

/** A runtime on a real trace store in a temp folder, with the scripted model at full speed. */
export function startRuntime(
  config: RuntimeConfigInput = {},
  options: { beforeToolExecute?: () => Promise<void> } = {},
): RuntimeHarness {
  const context = tempTraceContext();
  const workspace = tempDir('metis-ws-');
  const frames: MetisEvent[] = [];
  const runtime = createRuntime({
    bus: context.bus,
    store: context.port,
    config: testRuntimeConfig(config),
    beforeToolExecute: options.beforeToolExecute,
  });
  runtime.streaming.subscribe((event) => frames.push(event));
  context.writer.onCommit((batch) => frames.push(...batch));
  onTestFinished(() => runtime.close());
  return {
    runtime,
    context,
    workspace,
    frames,
    framesOf: (sessionId) =>
      frames
        .filter((e) => e.session_id === sessionId && !e.type.startsWith('bus.subscriber'))
        .sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0)),
    settle: async (done) => {
      await done;
      await context.flush();
    },
  };
}

/** Event types in order, with runs of deltas collapsed to one `type*` entry, for readable sequence asserts. */
export function shape(events: readonly MetisEvent[]): string[] {
  const out: string[] = [];
  for (const event of events) {
    const isDelta = event.type.endsWith('.delta') || event.type === 'tool.use_input_delta';
    const label = isDelta ? `${event.type}*` : event.type;
    if (isDelta && out[out.length - 1] === label) continue;
    out.push(label);
  }
  return out;
}

export function byType(events: readonly MetisEvent[], type: string): MetisEvent[] {
  return events.filter((e) => e.type === type);
}
