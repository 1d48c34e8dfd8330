import { expect } from 'vitest';
import { CATALOG } from '../../src/core/events/catalog/index.js';
import { eventually } from './protocol.js';
import type { TestServer } from './server.js';

/**
 * Runs one turn through the server's HTTP API and returns its stored events, every stored event of the
 * session, and the text of its last assistant message.
 */
export async function storedTurn(t: TestServer, sessionId: string, message: string) {
  const turnId = await t.submit(sessionId, message);
  let events: any[] = [];
  const ended = await eventually(() => {
    void t.request('GET', `/sessions/${sessionId}/trace`).then((r) => {
      events = r.body.events;
    });
    return events.some((e) => e.turn_id === turnId && e.type === 'turn.completed');
  }, 15_000);
  expect(ended).toBe(true);
  const mine = events.filter((e) => e.turn_id === turnId);
  const messages = (await t.request('GET', `/sessions/${sessionId}/messages`)).body.messages as any[];
  const last = messages.filter((m) => m.turn_id === turnId && m.role === 'assistant').at(-1);
  const text = (last?.content ?? []).map((b: any) => (b.type === 'text' ? b.text : '')).join('');
  return { events: mine, all: events, text };
}

/**
 * The catalog's rules, checked on a stored event: its payload parses and has exactly the catalog's
 * keys, its sensitivity and actor are allowed; returns its parent among `events` (the caller checks
 * the parent's type against the rule that applies).
 */
export function expectCatalogShape(event: any, events: readonly any[]): any {
  const entry = CATALOG.get(event.type)!;
  expect(entry.schema.safeParse(event.payload).success).toBe(true);
  expect(Object.keys(event.payload).sort()).toEqual(Object.keys((entry.schema as any).shape).sort());
  expect(event.sensitivity).toBe(entry.sensitivity);
  expect(entry.actors).toContain(event.actor);
  return events.find((e) => e.id === event.parent_event_id);
}
