import { describe, expect, it } from 'vitest';
import { DOCUMENTED_EVENT_TYPES, ServerFrameSchema } from '../../src/core/api/stream-schemas.js';
import { subscribe, waitForType } from '../helpers/protocol.js';
import { startTestServer } from '../helpers/server.js';

/**
 * Issue 29, point 3: the SSE frames, the AG-UI and the UI-message streams had no schema in the OpenAPI
 * document, and the event catalog was not in it. Now the streams' answers name the component each
 * event's data is, the components hold the envelope with every type's payload and the frames, and the
 * frames a real subscription gets are the ones the document describes.
 */

/** Every `$ref` in the document, as the component names they point at. */
function refsOf(value: unknown, found: string[] = []): string[] {
  if (Array.isArray(value)) for (const item of value) refsOf(item, found);
  else if (value !== null && typeof value === 'object')
    for (const [key, inner] of Object.entries(value)) {
      if (key === '$ref' && typeof inner === 'string') found.push(inner);
      else refsOf(inner, found);
    }
  return found;
}

describe('the streams in the OpenAPI document', () => {
  it('names the component of each stream and holds the catalog and the frames, every $ref resolving', async () => {
    const t = await startTestServer();
    const response = await fetch(`${t.url}/openapi.json`);
    expect(response.status).toBe(200);
    const document = (await response.json()) as any;
    const schemas = document.components.schemas as Record<string, any>;
    const streamOf = (path: string, method: string) =>
      document.paths[path][method].responses['200'].content['text/event-stream'].schema;
    expect(streamOf('/sessions/{session_id}/events', 'get').contentSchema).toEqual({
      $ref: '#/components/schemas/ServerFrame',
    });
    expect(streamOf('/ag-ui', 'post').contentSchema).toEqual({ $ref: '#/components/schemas/AgUiEvent' });
    expect(streamOf('/api/chat', 'post').contentSchema).toEqual({
      $ref: '#/components/schemas/UiMessageChunk',
    });
    // One member per catalog and streaming type, each with its own payload.
    const members = schemas.MetisEvent.oneOf as any[];
    expect(members.map((member) => member.title)).toEqual(DOCUMENTED_EVENT_TYPES);
    const started = members.find((member) => member.title === 'turn.started');
    expect(started.properties.type).toEqual({ const: 'turn.started' });
    expect(Object.keys(started.properties.payload.properties)).toContain('user_message_hash');
    expect(schemas.ClientFrame.oneOf ?? schemas.ClientFrame.anyOf).toBeDefined();
    for (const ref of refsOf(document)) {
      expect(ref.startsWith('#/components/schemas/'), ref).toBe(true);
      expect(schemas[ref.slice('#/components/schemas/'.length)], ref).toBeDefined();
    }
    // No cookie authenticates (issue 34): the document does not offer one.
    expect(Object.keys(document.components.securitySchemes)).not.toContain('cookie');
  });

  it('describes every frame a real subscription gets, and every event type it carries', async () => {
    const t = await startTestServer({ tool_confirmation: { execute: 'allow' } });
    const sessionId = await t.createSession();
    const { client } = await subscribe(t, sessionId, { filter: 'preset:full', snapshot: true });
    await t.submit(sessionId, 'run: echo described');
    await waitForType(client, 'turn.completed');
    client.send({ type: 'ping', nonce: 'n1' });
    await client.waitFor((frame) => frame.type === 'pong');
    expect(client.frames.length).toBeGreaterThan(10);
    for (const frame of client.frames) {
      const parsed = ServerFrameSchema.safeParse(frame);
      expect(parsed.success, `${JSON.stringify(frame).slice(0, 300)}: ${parsed.error?.message}`).toBe(true);
      if (frame.type === 'event') expect(DOCUMENTED_EVENT_TYPES).toContain(frame.event.type);
    }
    const types = new Set(client.frames.map((frame) => frame.type));
    expect([...types].sort()).toEqual(['event', 'pong', 'snapshot', 'subscribe_ack']);
  });
});
