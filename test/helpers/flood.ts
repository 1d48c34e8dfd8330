import { setTimeout as sleep } from 'node:timers/promises';
import type { TestServer } from './server.js';

/** A 32 KiB pad: a few hundred such frames fill the kernel's socket buffers of a client that stopped reading. */
const PAD = 'x'.repeat(32 * 1024);

/** Emits `count` large stored events into a session and waits until they are committed and handed to clients. */
export async function emitPadded(t: TestServer, sessionId: string, count: number): Promise<void> {
  for (let i = 0; i < count; i += 1) {
    t.context.bus.emit({
      type: 'feedback.implicit',
      session_id: sessionId,
      payload: { type: 'accept', confidence: 0.5, subject_turn_id: null, context: { pad: PAD } },
    });
  }
  await t.context.flush();
  // The connections' flushes run in the next immediate; let them, and the socket, take what they can.
  await sleep(5);
}
