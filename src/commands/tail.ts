import { type ClientFailure, MetisClient } from '../client/client.js';
import { liveTextWriter, wantsColor } from '../client/live-text.js';
import { type ConversationState, initialState, reduce } from '../client/reducer.js';
import { visibleJson, visibleText } from '../client/visible-text.js';
import { MetisError } from '../core/errors.js';
import { CATALOG } from '../core/events/catalog/index.js';
import { PRESETS } from '../core/events/presets.js';
import { STREAMING } from '../core/events/streaming.js';
import { apiRequest, type ServerTarget, unauthorized } from './api-request.js';
import { parseFollowTimeout } from './follow-timeout.js';
import { answeringInPlace, canAskInPlace } from './in-place-approvals.js';
import { serverTarget } from './server-target.js';

export interface TailOptions {
  preset?: string;
  types?: string;
  since?: string;
  snapshot?: boolean;
  workers?: boolean;
  json?: boolean;
  url?: string;
  token?: string;
  config?: string;
  timeout?: string;
}

export function filterFrom(options: TailOptions) {
  if (options.types !== undefined && options.preset !== undefined) {
    throw new MetisError('METIS_ERR_INVALID_ARGUMENT', '--types and --preset: give one or the other');
  }
  if (options.types !== undefined) {
    const types = options.types
      .split(',')
      .map((t) => t.trim())
      .filter(Boolean);
    if (types.length === 0) {
      throw new MetisError(
        'METIS_ERR_INVALID_ARGUMENT',
        '--types: no event types given (a comma-separated list)',
      );
    }
    const unknown = types.filter((t) => !CATALOG.has(t) && !STREAMING.has(t));
    if (unknown.length)
      throw new MetisError(
        'METIS_ERR_INVALID_ARGUMENT',
        `--types: unknown event types: ${unknown.join(', ')}`,
      );
    return { event_types: types, actors: null, include_worker_sessions: options.workers ?? false };
  }
  const preset = options.preset ?? 'chat';
  if (preset !== 'chat' && preset !== 'full') {
    throw new MetisError('METIS_ERR_INVALID_ARGUMENT', `--preset: "${preset}" is not one of chat, full`);
  }
  if (options.workers) {
    // A preset cannot carry include_worker_sessions: spell its types out (--preset still applies).
    return { event_types: [...PRESETS[`preset:${preset}`]], actors: null, include_worker_sessions: true };
  }
  return `preset:${preset}` as const;
}

/** Follows a session live; survives server restarts; Ctrl-C only stops the tail, never a turn. */
export async function tailCommand(sessionId: string, options: TailOptions): Promise<void> {
  const { url, token } = await serverTarget(options);
  const client = new MetisClient({
    url,
    token,
    sessionId,
    filter: filterFrom(options),
    snapshot: options.snapshot !== false && !options.since,
    since: options.since ?? null,
    failFast: true,
  });
  process.once('SIGINT', () => client.close());
  const timeoutMs = parseFollowTimeout(options.timeout);
  let timedOut = false;
  const deadline =
    timeoutMs === undefined
      ? null
      : setTimeout(() => {
          timedOut = true;
          client.close();
        }, timeoutMs).unref();
  // `--types` asks for particular events: show whatever of them arrives.
  const detailed = options.preset === 'full' || options.types !== undefined;
  const liveText = liveTextWriter(sessionId, { serverUrl: url, detailed });
  // On a terminal a question is asked in place; in a pipe the `metis confirm` line is printed.
  const approvals = canAskInPlace(options.json)
    ? answeringInPlace(liveText, { url, token }, sessionId)
    : null;
  const writeText = approvals?.render ?? liveText;
  const color = wantsColor(process.stdout, process.env);
  let state: ConversationState = initialState;
  for await (const item of client) {
    if (item.kind === 'frame') state = reduce(state, item.frame);
    if (options.json) {
      if (item.kind === 'frame') process.stdout.write(`${visibleJson(JSON.stringify(item.frame))}\n`);
      else process.stderr.write(`${visibleJson(JSON.stringify(item))}\n`);
      continue;
    }
    writeText(item, state);
    const event = item.kind === 'frame' && item.frame.type === 'event' ? item.frame.event : null;
    if (event?.type === 'turn.started' && event.session_id === sessionId && event.turn_id) {
      // The event carries only a hash of the message (bus §6.2): the text is in the session's messages.
      const said = await userMessageOf({ url, token }, sessionId, event.turn_id);
      if (said !== null) process.stdout.write(`${paint('you', color)}: ${visibleText(said)}\n`);
    }
  }
  if (deadline !== null) clearTimeout(deadline);
  if (timedOut && !options.json) process.stderr.write(`stopped after ${timeoutMs! / 1000} s (--timeout)\n`);
  if (!timedOut) throwIfFailed(client, url, token);
}

/** The text of the user's message that started `turnId`, or null when it cannot be read. */
async function userMessageOf(
  target: ServerTarget,
  sessionId: string,
  turnId: string,
): Promise<string | null> {
  try {
    const { messages } = await apiRequest(
      target,
      'GET',
      `/sessions/${encodeURIComponent(sessionId)}/messages?limit=5`,
    );
    const message = (
      messages as { role: string; turn_id: string | null; content: { type: string; text?: string }[] }[]
    ).find((m) => m.role === 'user' && m.turn_id === turnId);
    if (message === undefined) return null;
    return message.content
      .filter((b) => b.type === 'text')
      .map((b) => b.text ?? '')
      .join('');
  } catch {
    return null;
  }
}

function paint(text: string, color: boolean): string {
  return color ? `\u001b[1m${text}\u001b[22m` : text;
}

/** A client that stopped on its own (refused handshake, fatal subscribe error) fails the command. */
export function throwIfFailed(client: MetisClient, url: string, token: string | undefined): void {
  if (client.failure !== null) throw failureError(client.failure, url, token);
}

/** The CLI error for a client the server refused. */
export function failureError(failure: ClientFailure, url: string, token: string | undefined): MetisError {
  if (failure.status === 401) return unauthorized(url, token, failure.message);
  if (failure.code === 'unreachable') return new MetisError('METIS_ERR_SERVER_UNREACHABLE', failure.message);
  if (failure.status === 404)
    return new MetisError(
      'METIS_ERR_SESSION_NOT_FOUND',
      `${failure.message} (${failure.code ?? 'HTTP 404'})`,
    );
  return new MetisError(
    'METIS_ERR_REQUEST_FAILED',
    `${failure.message} (${failure.code ?? (failure.status === null ? 'subscribe_error' : `HTTP ${failure.status}`)})`,
  );
}
