import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { onTestFinished } from 'vitest';
import { newId } from '../../src/core/events/ids.js';
import { openDatabase } from '../../src/core/store/database.js';
import { openTraceContext } from '../../src/core/store/trace-context.js';
import { sessionCreated, sha256, turnCompleted, turnStarted } from './events.js';
import { jsonRequest } from './http.js';
import { type CliResult, runCli } from './run-cli.js';

/**
 * The pieces of the catalog-coverage run (test/e2e/catalog-coverage.test.ts): the config that makes every
 * catalog type reachable from one `metis serve`, what is planted in its database before it starts, a
 * fake OpenAI-compatible provider (the LLM judge and an unsteady model), and a client that drives the
 * server over HTTP and its CLI as a user would.
 */

/** The routing rule pattern routing defers behind (bus §9.1 tests 12 and 13). */
export const POLICY_OK = 'rules:\n  - { name: slow-on-demo, match: "^slow:", model: "scripted:demo" }\n';
/** Two errors: a pattern the linear-time engine refuses, an empty name. */
export const POLICY_BAD =
  'rules:\n  - { name: ahead, match: "(?=ahead)", model: "scripted:x" }\n  - { name: "", match: a, model: nope }\n';

/** The model the gateway lane pays for: $1 an output token, so a cap of $5 is crossed by the second call. */
export const GATEWAY_MODEL = 'scripted:gw';

export function coverageConfig(options: {
  policyFile: string;
  providerUrl: string;
}): Record<string, unknown> {
  return {
    runtime: {
      routing_policy_file: options.policyFile,
      routing_policy_poll_ms: 20,
      provider_health: { degraded_failures: 2, consecutive_failures: 3, cooldown_seconds: 0.2 },
      patterns: { min_samples: 2 },
      // An LLM judge, so that a verdict can fail (eval.failed) as well as complete: with the heuristic
      // judge only a missing subject fails, which the feedback route refuses before it is recorded.
      evaluator: { judge_model: JUDGE_MODEL },
      providers: {
        fake: {
          kind: 'openai-compatible',
          base_url: `${options.providerUrl}/v1`,
          api_key: 'sk-fake',
          max_retries: 0,
        },
      },
      pricing: {
        'scripted:*': { input_per_mtok: 1, output_per_mtok: 2 },
        [GATEWAY_MODEL]: { input_per_mtok: 0, output_per_mtok: 1_000_000 },
      },
      // Long enough to cancel, override or dismiss mid-stream; the other turns stream at full speed.
      scripted: { token_delay_ms: 0, slow_token_delay_ms: 20, slow_tokens: 1500 },
    },
  };
}

/**
 * A session an earlier process wrote (so a turn on it is `session.resumed`) with a hole in its `seq`
 * (so the server's start-up scan reports `bus.gap_detected`): written through the product's own trace
 * writer with strict validation, then one row deleted, as a crash or a lost write would leave it.
 */
export async function plantResumableSessionWithGap(dbPath: string, workspace: string): Promise<string> {
  const context = openTraceContext({ dbPath, create: true, validation: 'strict' });
  const sessionId = newId('sess');
  try {
    context.port.sessions.createSession({
      id: sessionId,
      workspace_path: workspace,
      workspace_hash: sha256(workspace),
      active_model: 'scripted:demo',
    });
    const created = sessionCreated(sessionId);
    context.bus.emit({
      ...created,
      payload: { ...created.payload, workspace_path: workspace, workspace_hash: sha256(workspace) },
    });
    for (const turnId of [newId('turn'), newId('turn')]) {
      const started = context.bus.emit(turnStarted(sessionId, null, turnId))!;
      context.bus.emit(turnCompleted(sessionId, started.id, turnId));
    }
    await context.flush();
  } finally {
    await context.close();
  }
  const db = openDatabase(dbPath);
  try {
    db.prepare('DELETE FROM events WHERE session_id = ? AND seq = 2').run(sessionId);
  } finally {
    db.close();
  }
  return sessionId;
}

export interface FakeProvider {
  readonly url: string;
  /** Requests answered, by model. */
  readonly requests: Readonly<Record<string, number>>;
}

/** The models the fake provider serves (config: provider `fake`). */
export const JUDGE_MODEL = 'fake:grader';
export const UNSTEADY_MODEL = 'fake:unsteady';

function sseChunk(delta: object | null, usage: object | null = null, finish: string | null = null): string {
  return `data: ${JSON.stringify({
    id: 'chatcmpl-fake',
    object: 'chat.completion.chunk',
    created: 1767225600,
    model: 'fake',
    choices: delta === null ? [] : [{ index: 0, delta, finish_reason: finish }],
    usage,
  })}\n\n`;
}

function textStream(text: string): string {
  return (
    sseChunk({ role: 'assistant', content: '' }) +
    sseChunk({ content: text }) +
    sseChunk({}, null, 'stop') +
    sseChunk(null, { prompt_tokens: 40, completion_tokens: 8, total_tokens: 48 }) +
    'data: [DONE]\n\n'
  );
}

/** What the judge answers: the heuristic judge's score, or, for a turn rated thumbs-down, no JSON at all. */
function judgeAnswer(prompt: string): string {
  const evidence = JSON.parse(prompt.slice(prompt.indexOf('{', prompt.indexOf('\n\nThe ')))) as {
    rating?: string | null;
    heuristic_score?: number;
  };
  return evidence.rating === 'thumbs_down'
    ? 'I would rather not grade this one.'
    : JSON.stringify({ score: evidence.heuristic_score ?? 0.5, confidence: 0.9 });
}

/**
 * A local stand-in for an OpenAI-compatible provider (the only thing mocked: a provider's HTTP API),
 * with two models. `grader` is the LLM judge: it grades as the heuristic judge did (the evidence
 * carries `heuristic_score`), so pattern routing learns as it would, and answers a turn rated
 * thumbs-down with text that is not the JSON asked for (`eval.failed`, judge_output_invalid).
 * `unsteady` answers 500 to a message starting with "fail" and text otherwise: a provider of its own,
 * so its health is not reset by the scripted model's successes in the other lanes.
 */
export async function startFakeProvider(): Promise<FakeProvider> {
  const requests: Record<string, number> = {};
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as {
        model: string;
        messages: { role: string; content: string | { text?: string }[] }[];
      };
      requests[body.model] = (requests[body.model] ?? 0) + 1;
      const content = body.messages.filter((m) => m.role === 'user').at(-1)?.content ?? '';
      const prompt = typeof content === 'string' ? content : content.map((c) => c.text ?? '').join('');
      if (body.model !== 'grader' && prompt.startsWith('fail')) {
        res.writeHead(500, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error: { message: 'upstream is down', type: 'server_error' } }));
        return;
      }
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.end(textStream(body.model === 'grader' ? judgeAnswer(prompt) : 'Steady again.'));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  onTestFinished(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}`, requests };
}

/** An event envelope as the API and `metis export` give it: parsed JSON. */
export type WireEvent = Record<string, any>;

/** Drives one running `metis serve`: its HTTP API, its CLI, and a read of each session's stored events. */
export class Drive {
  private readonly seen = new Map<string, { events: WireEvent[]; last: string | null }>();

  constructor(
    readonly url: string,
    readonly home: string,
    private readonly config: string,
  ) {}

  /** `metis <args>` against this server; fails the run, with its stderr, unless it exits 0. */
  async cli(args: readonly string[], options: { config?: boolean } = {}): Promise<CliResult> {
    const withConfig = options.config ? ['--config', this.config] : [];
    const result = await runCli([...args, ...withConfig], this.home, { METIS_URL: this.url });
    if (result.exitCode !== 0)
      throw new Error(`metis ${args.join(' ')} exited ${result.exitCode}:\n${result.stderr}${result.stdout}`);
    return result;
  }

  async request(method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
    return jsonRequest(this.url, method, path, body);
  }

  async session(workspace: string, model?: string): Promise<string> {
    const answer = await this.request('POST', '/sessions', {
      workspace_path: workspace,
      ...(model ? { model } : {}),
    });
    if (answer.status !== 201)
      throw new Error(`POST /sessions: ${answer.status} ${JSON.stringify(answer.body)}`);
    return answer.body.session_id as string;
  }

  async submit(sessionId: string, message: string): Promise<string> {
    const answer = await this.request('POST', `/sessions/${sessionId}/turns`, { message });
    if (answer.status !== 202)
      throw new Error(`turn "${message}": ${answer.status} ${JSON.stringify(answer.body)}`);
    return answer.body.turn_id as string;
  }

  /** Submits a message and waits for its turn to end (completed, failed or cancelled). */
  async turn(sessionId: string, message: string): Promise<string> {
    const turnId = await this.submit(sessionId, message);
    await this.ended(sessionId, turnId, message);
    return turnId;
  }

  async ended(sessionId: string, turnId: string, what = turnId): Promise<WireEvent> {
    return this.until(
      sessionId,
      (e) => (e.type === 'turn.completed' || e.type === 'turn.cancelled') && e.turn_id === turnId,
      `turn "${what}" to end`,
    );
  }

  /**
   * The session's stored events so far, read a page at a time after the last one read. The HTTP API
   * serves no trace of `system` (sweeps, policy files, providers, gateway keys): its rows are read from
   * the database file, read-only, as an operator's SQL would.
   */
  async events(sessionId: string): Promise<readonly WireEvent[]> {
    if (sessionId === 'system') return this.systemEvents();
    const state = this.seen.get(sessionId) ?? { events: [], last: null };
    this.seen.set(sessionId, state);
    for (;;) {
      const after = state.last === null ? '' : `&after=${state.last}`;
      const page = await this.request('GET', `/sessions/${sessionId}/trace?limit=5000${after}`);
      if (page.status !== 200)
        throw new Error(`trace of ${sessionId}: ${page.status} ${JSON.stringify(page.body)}`);
      const events = page.body.events as WireEvent[];
      state.events.push(...events);
      if (events.length > 0) state.last = events.at(-1)!.id as string;
      if (!page.body.has_more) return state.events;
    }
  }

  /** Resolves with the first stored event of the session that matches; fails naming `what` after `ms`. */
  async until(
    sessionId: string,
    match: (event: WireEvent) => boolean,
    what: string,
    ms = 20_000,
  ): Promise<WireEvent> {
    const deadline = Date.now() + ms;
    for (;;) {
      const found = (await this.events(sessionId)).find(match);
      if (found) return found;
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what} in ${sessionId}`);
      await new Promise((resolve) => setTimeout(resolve, 40));
    }
  }

  private systemEvents(): WireEvent[] {
    const db = openDatabase(join(this.home, 'metis.db'), { readonly: true });
    try {
      return (
        db
          .prepare(
            "SELECT id, type, turn_id, payload_json FROM events WHERE session_id = 'system' ORDER BY id",
          )
          .all() as { id: string; type: string; turn_id: string | null; payload_json: string }[]
      ).map((row) => ({
        id: row.id,
        type: row.type,
        turn_id: row.turn_id,
        payload: JSON.parse(row.payload_json),
      }));
    } finally {
      db.close();
    }
  }

  untilType(sessionId: string, type: string, ms?: number): Promise<WireEvent> {
    return this.until(sessionId, (e) => e.type === type, type, ms);
  }
}

export function configPath(home: string): string {
  return join(home, 'metis.config.json');
}
