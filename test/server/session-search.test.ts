import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Rig, startRig } from './trace-api-rig.js';

/**
 * Issue 30 (find and compare): GET /sessions searches, filters and pages on the server, each item with
 * its title, tags, model, tokens, latency and last turn's status; PATCH /sessions/{id} sets the title.
 */
describe('GET /sessions: search, filters, pages', () => {
  let rig: Rig;
  let plain: string;
  let thinker: string;
  let failing: string;
  let conformance: string;
  let idle: string;

  beforeAll(async () => {
    rig = await startRig();
    idle = await rig.createSession();
    plain = await rig.createSession();
    await rig.runTurn(plain, 'Tell me about   the zebra migration in the Serengeti, with numbers');
    thinker = await rig.createSession();
    await rig.runTurn(thinker, 'think: time');
    failing = await rig.createSession();
    await rig.runTurn(failing, 'fail: server_error');
    conformance = await rig.createSession({ model: 'scripted:conformance' });
    await rig.runTurn(conformance, 'hello from the suite');
  }, 30_000);
  afterAll(async () => rig?.close());

  const list = async (query = '') => {
    const answer = await rig.request('GET', `/sessions${query}`);
    expect(answer.status, JSON.stringify(answer.body)).toBe(200);
    return answer.body as { sessions: any[]; next_cursor: string | null };
  };
  const ids = async (query: string) => (await list(query)).sessions.map((s) => s.id);

  it('gives each session its title, tags, model, tokens, latency and last turn status', async () => {
    const { sessions, next_cursor } = await list('?include_conformance=true');
    expect(next_cursor).toBeNull();
    const byId = new Map(sessions.map((s) => [s.id, s]));
    const first = byId.get(plain);
    expect(first).toMatchObject({
      title: 'Tell me about the zebra migration in the Serengeti, with numbers',
      title_source: 'first_message',
      tags: [],
      model: 'scripted:demo',
      last_turn_status: 'completed',
      turn_count: 1,
    });
    expect(first.tokens.input).toBeGreaterThan(0);
    expect(first.tokens.output).toBeGreaterThan(0);
    expect(first.latency_ms.p95).toBeGreaterThanOrEqual(first.latency_ms.p50);
    expect(byId.get(idle)).toMatchObject({
      title: null,
      title_source: null,
      latency_ms: null,
      last_turn_status: null,
    });
    expect(byId.get(failing)).toMatchObject({ last_turn_status: 'failed' });
    expect(byId.get(thinker)).toMatchObject({ last_turn_status: 'completed', title: 'think: time' });
    expect(byId.get(conformance)).toMatchObject({ tags: ['conformance'] });
    // The stored figures, as the trace has them.
    const calls = rig.context.store.sessionEvents(thinker).filter((e) => e.type === 'llm.call_completed');
    expect(byId.get(thinker).tokens).toEqual({
      input: calls.reduce((sum, e) => sum + (e.payload as any).input_tokens, 0),
      output: calls.reduce((sum, e) => sum + (e.payload as any).output_tokens, 0),
    });
  });

  it('cuts a long first message to 80 characters', async () => {
    const long = await rig.createSession();
    await rig.runTurn(long, `${'word '.repeat(40)}end`);
    const item = (await list()).sessions.find((s) => s.id === long);
    expect([...item.title].length).toBe(80);
    expect(item.title.endsWith('…')).toBe(true);
  });

  it('hides conformance sessions unless asked; with no parameter at all it lists every session as before', async () => {
    expect(await ids('?limit=50')).not.toContain(conformance);
    expect(await ids('?include_conformance=true')).toContain(conformance);
    expect(await ids('')).toContain(conformance);
  });

  it('finds sessions by the words of their messages, answers included, and by title', async () => {
    expect(await ids('?q=zebra')).toEqual([plain]);
    expect(await ids('?q=serenge')).toEqual([plain]);
    // The scripted answer repeats the question: "You said: ..."; the assistant's words are searched too.
    expect(await ids('?q=said%20zebra')).toEqual([plain]);
    expect(await ids('?q=nothing-like-this-anywhere')).toEqual([]);
    // Operators of the index are words here, not syntax.
    expect((await rig.request('GET', '/sessions?q=%22NEAR(*')).status).toBe(200);
  });

  it('filters by status, last turn status, model, cost and creation time', async () => {
    expect(await ids('?turn_status=failed')).toEqual([failing]);
    expect(await ids('?turn_status=completed')).toEqual(expect.arrayContaining([plain, thinker]));
    expect(await ids('?turn_status=completed')).not.toContain(failing);
    await rig.request('POST', `/sessions/${idle}/end`, {});
    expect(await ids('?status=ended')).toEqual([idle]);
    expect(await ids('?status=open')).not.toContain(idle);
    expect(await ids('?model=scripted:demo')).toContain(plain);
    expect(await ids('?model=scripted:other')).toEqual([]);
    expect(await ids('?min_cost_usd=1000')).toEqual([]);
    expect(await ids('?max_cost_usd=1000')).toContain(plain);
    expect(await ids('?from=2999-01-01')).toEqual([]);
    expect(await ids('?to=2000-01-01T00:00:00Z')).toEqual([]);
    expect(
      await ids(`?from=${encodeURIComponent(new Date(Date.now() - 3_600_000).toISOString())}`),
    ).toContain(plain);
    // Latency: the p95 the list shows is what the bounds compare; a session with no model call never matches.
    const listed = (await list('?include_conformance=true')).sessions.find((x) => x.id === plain);
    const p95 = listed.latency_ms.p95 as number;
    expect(await ids(`?min_latency_p95_ms=${p95}&include_conformance=true`)).toContain(plain);
    expect(await ids(`?max_latency_p95_ms=${p95}&include_conformance=true`)).toContain(plain);
    expect(await ids(`?min_latency_p95_ms=${p95 + 1}&max_latency_p95_ms=1e9`)).not.toContain(plain);
    expect(await ids('?min_latency_p95_ms=0')).not.toContain(idle);
    expect(await ids('?min_latency_p95_ms=100000')).toEqual([]);
  });

  it('pages with an opaque cursor, newest first, without a duplicate or a gap', async () => {
    const all = await ids('?include_conformance=true&limit=200');
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const page = await list(`?include_conformance=true&limit=2${cursor ? `&cursor=${cursor}` : ''}`);
      expect(page.sessions.length).toBeLessThanOrEqual(2);
      seen.push(...page.sessions.map((s) => s.id));
      cursor = page.next_cursor;
    } while (cursor !== null);
    expect(seen).toEqual(all);
    expect(all.length).toBeGreaterThanOrEqual(6);
    // A page that takes exactly what is left is the last one.
    expect((await list(`?include_conformance=true&limit=${all.length}`)).next_cursor).toBeNull();
    expect((await list(`?include_conformance=true&limit=${all.length - 1}`)).next_cursor).not.toBeNull();
  });

  it('answers 400 naming a bad parameter', async () => {
    for (const [query, name] of [
      ['status=closed', 'status'],
      ['turn_status=done', 'turn_status'],
      ['limit=0', 'limit'],
      ['limit=201', 'limit'],
      ['from=yesterday', 'from'],
      ['min_cost_usd=-1', 'min_cost_usd'],
      ['max_latency_p95_ms=fast', 'max_latency_p95_ms'],
      ['include_conformance=yes', 'include_conformance'],
      ['cursor=bm90IGEgY3Vyc29y', 'cursor'],
      ['colour=red', 'colour'],
    ]) {
      const answer = await rig.request('GET', `/sessions?${query}`);
      expect(answer.status, query).toBe(400);
      expect(answer.body.error.message, query).toContain(name);
    }
  });

  it('PATCH /sessions/{id} sets and clears the title, which the search finds', async () => {
    const set = await rig.request('PATCH', `/sessions/${thinker}`, { title: '  Quarterly penguin report ' });
    expect(set.status).toBe(200);
    expect(set.body).toMatchObject({ id: thinker, title: 'Quarterly penguin report', title_source: 'user' });
    expect(await ids('?q=penguin')).toEqual([thinker]);
    const cleared = await rig.request('PATCH', `/sessions/${thinker}`, { title: null });
    expect(cleared.body).toMatchObject({ title: 'think: time', title_source: 'first_message' });
    expect((await rig.request('PATCH', `/sessions/${thinker}`, { title: '' })).status).toBe(400);
    expect((await rig.request('PATCH', `/sessions/${thinker}`, { title: 'x'.repeat(201) })).status).toBe(400);
    expect((await rig.request('PATCH', '/sessions/sess_nope', { title: 'x' })).status).toBe(404);
  });

  it('gives the turn running here as current_turn_id, in the list and in the PATCH answer', async () => {
    const running = await rig.createSession();
    const submitted = await rig.request('POST', `/sessions/${running}/turns`, {
      message: 'slow: still going',
    });
    expect(submitted.status).toBe(202);
    const turnId = submitted.body.turn_id as string;
    const listed = (await list()).sessions.find((s) => s.id === running);
    expect(listed.current_turn_id).toBe(turnId);
    const titled = await rig.request('PATCH', `/sessions/${running}`, { title: 'Running' });
    expect(titled.body).toMatchObject({ title: 'Running', current_turn_id: turnId });
    await rig.runtime.currentTurn(running)?.done;
    expect((await list()).sessions.find((s) => s.id === running).current_turn_id).toBeNull();
  });
});
