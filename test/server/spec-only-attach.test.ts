import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { renderSpecOnly } from '../../src/client/conformance/spec-render.js';
import { subscribe, subscribeOn, waitForEvents } from '../helpers/protocol.js';
import { openClient, startTestServer, type TestClient } from '../helpers/server.js';
import { serverOnFile } from '../helpers/server-on-file.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * Issue 14: a client written from the spec alone (src/client/conformance/spec-render.ts: snapshot
 * messages and turn as given, then the events; no `in_flight_events`, no `pending_confirmations`)
 * renders every attach point right: idle, mid-thinking, mid-answer, mid-tool, waiting for an
 * approval, after a turn ended, after a restart. Its final screen is the server's own messages.
 */

/** Turns of each attach point kind; `read:` of a file outside the workspace waits for an approval. */
const TURN_KINDS = [
  'think: tell me about tides',
  'slow: rivers',
  'run: sleep 0.4',
  'read: /etc/hostname',
  'hello',
  'time',
] as const;
const APPROVAL_WAIT_MS = 400;
const LATE_CLIENTS = 10;
const SLICE_MS = 160;

const ended = (turnId: string) => (e: any) =>
  e.turn_id === turnId && ['turn.completed', 'turn.cancelled', 'turn.failed'].includes(e.type);

async function serverMessages(url: string, sessionId: string): Promise<Map<string, string>> {
  const response = await fetch(`${url}/sessions/${sessionId}/messages?limit=50`);
  const body = (await response.json()) as { messages: any[] };
  return new Map(
    body.messages
      .filter((m) => m.role === 'assistant')
      .map((m) => [
        m.id,
        (m.content as any[])
          .filter((b) => b.type === 'text')
          .map((b) => b.text)
          .join(''),
      ]),
  );
}

describe('a spec-only client attached at any point renders right (issue 14)', () => {
  it('late snapshot clients at random moments of a session of thinking, answers, tools and an approval', async () => {
    // One attach in each slice of the session's ~1.6 s, at a random moment of it.
    const seed = Number(process.env.METIS_ATTACH_SEED ?? Date.now() % 100_000);
    const [[script, jitter]] = fc.sample(
      fc.tuple(
        fc.array(fc.constantFrom(...TURN_KINDS), { minLength: 4, maxLength: 7 }),
        fc.array(fc.integer({ min: 0, max: SLICE_MS - 1 }), {
          minLength: LATE_CLIENTS,
          maxLength: LATE_CLIENTS,
        }),
      ),
      { numRuns: 1, seed },
    ) as [[string[], number[]]];
    const delays = jitter.map((ms, i) => i * SLICE_MS + ms);
    console.log(
      `turns: ${script.join(' | ')}; attach delays (ms): ${delays.join(', ')}; METIS_ATTACH_SEED=${seed} reproduces them`,
    );
    const t = await startTestServer({
      tool_confirmation: { write: 'allow', execute: 'allow', network: 'allow' },
      scripted: { token_delay_ms: 3, slow_token_delay_ms: 3, slow_tokens: 100 },
    });
    const sessionId = await t.createSession();
    const { client: observer } = await subscribe(t, sessionId, { snapshot: false });

    const started = Date.now();
    const lates: { client: TestClient; snapshot: Promise<any> }[] = [];
    const attaching = delays.map(async (delay) => {
      await new Promise((resolve) => setTimeout(resolve, delay));
      const client = await t.attach(sessionId);
      const snapshot = subscribeOn(client, { filter: 'preset:full', snapshot: true }).then((s) => s.snapshot);
      lates.push({ client, snapshot });
    });
    let last = '';
    for (const message of script) {
      last = await t.submit(sessionId, message);
      if (message.startsWith('read:')) {
        await waitForEvents(observer, (e) => e.type === 'tool.confirmation_requested' && e.turn_id === last);
        await new Promise((resolve) => setTimeout(resolve, APPROVAL_WAIT_MS));
        const asked = observer.events().findLast((e) => e.type === 'tool.confirmation_requested');
        const id = asked.payload.confirmation_request_id;
        const answer = await t.request('POST', `/sessions/${sessionId}/confirmations/${id}`, {
          decision: 'allow',
        });
        expect(answer.status).toBe(200);
      }
      await waitForEvents(observer, ended(last));
    }
    await Promise.all(attaching);
    expect(Date.now() - started).toBeGreaterThan(0);
    const truth = await serverMessages(t.url, sessionId);
    expect(truth.size).toBeGreaterThanOrEqual(script.length);
    for (const late of [...lates, { client: await t.attach(sessionId), snapshot: null as any }]) {
      if (late.snapshot === null)
        late.snapshot = subscribeOn(late.client, { snapshot: true }).then((s) => s.snapshot);
      const snapshot = await late.snapshot;
      if (
        snapshot.session.current_turn_id !== null ||
        snapshot.snapshot_at_event_id < observer.events().at(-1).id
      )
        await waitForEvents(late.client, ended(last));
      const render = renderSpecOnly(snapshot, late.client.events());
      expect({ at: snapshot.snapshot_at_event_id, problems: render.problems }).toEqual({
        at: snapshot.snapshot_at_event_id,
        problems: [],
      });
      expect(render.messages).toEqual(truth);
      expect(render.currentTurn).toBeNull();
      expect([...render.pendingQuestions]).toEqual([]);
    }
  }, 60_000);

  it('after a restart: the snapshot alone is the whole screen', async () => {
    const dbPath = join(tempDir(), 'metis.db');
    const workspace = tempDir('metis-ws-');
    const open = () => serverOnFile(dbPath);
    const before = await open();
    const session = before.runtime.createSession({ workspacePath: workspace });
    for (const message of ['think: tides', 'time', 'hello'])
      await before.runtime.submitTurn(session.id, message).done;
    await before.stop();

    const after = await open();
    const handshake = await fetch(`${after.server.url}/sessions/${session.id}`);
    const client = await openClient(((await handshake.json()) as any).ws_url);
    const { snapshot } = await subscribeOn(client, { snapshot: true });
    await new Promise((resolve) => setTimeout(resolve, 200));
    const render = renderSpecOnly(snapshot, client.events());
    expect(render.problems).toEqual([]);
    expect(render.messages).toEqual(await serverMessages(after.server.url, session.id));
    expect(render.messages.size).toBe(4); // `time` answers twice: before and after its tool
    expect(render.currentTurn).toBeNull();
  });
});
