import { MetisClient } from '../client/client.js';
import { type ConversationState, initialState, reduce } from '../client/reducer.js';
import { renderItem } from '../client/render-text.js';
import { MetisError } from '../core/errors.js';
import { CATALOG } from '../core/events/catalog/index.js';
import { PRESETS } from '../core/events/presets.js';
import { STREAMING } from '../core/events/streaming.js';

export interface TailOptions {
  preset?: string;
  types?: string;
  since?: string;
  snapshot?: boolean;
  workers?: boolean;
  json?: boolean;
  url?: string;
}

export const DEFAULT_URL = 'http://127.0.0.1:8421';

export function filterFrom(options: TailOptions) {
  if (options.types) {
    const types = options.types
      .split(',')
      .map((t) => t.trim())
      .filter(Boolean);
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
  const client = new MetisClient({
    url: options.url ?? process.env.METIS_URL ?? DEFAULT_URL,
    sessionId,
    filter: filterFrom(options),
    snapshot: options.snapshot !== false && !options.since,
    since: options.since ?? null,
  });
  process.once('SIGINT', () => client.close());
  const color = process.stdout.isTTY === true && !process.env.NO_COLOR;
  let state: ConversationState = initialState;
  for await (const item of client) {
    if (item.kind === 'frame') state = reduce(state, item.frame);
    if (options.json) {
      if (item.kind === 'frame') process.stdout.write(`${JSON.stringify(item.frame)}\n`);
      else process.stderr.write(`${JSON.stringify(item)}\n`);
      continue;
    }
    const text = renderItem(item, state, sessionId, { color });
    if (text) process.stdout.write(text);
  }
}
