import { CONFORMANCE_MODEL } from '../client/conformance/context.js';
import { MetisError } from '../core/errors.js';
import { apiRequest, type ServerTarget } from './api-request.js';
import { serverTarget } from './server-target.js';
import { table } from './text-table.js';

interface UrlOptions {
  url?: string;
  token?: string;
  config?: string;
  json?: boolean;
}

const base = (options: UrlOptions): Promise<ServerTarget> => serverTarget(options);

interface ListedSession {
  readonly id: string;
  readonly parent_session_id?: string | null;
  readonly active_model?: string | null;
}

/**
 * The sessions `metis conformance run` made (created with its model, CONFORMANCE_MODEL) and the
 * workers they delegated to: not the user's conversations.
 */
function conformanceSessions(sessions: readonly ListedSession[]): Set<string> {
  const byId = new Map(sessions.map((s) => [s.id, s]));
  const hidden = new Set<string>();
  for (const session of sessions) {
    let at: ListedSession | undefined = session;
    const seen = new Set<string>();
    while (at !== undefined && !seen.has(at.id)) {
      seen.add(at.id);
      if (at.active_model === CONFORMANCE_MODEL) {
        hidden.add(session.id);
        break;
      }
      at = at.parent_session_id ? byId.get(at.parent_session_id) : undefined;
    }
  }
  return hidden;
}

export async function sessionsCommand(options: UrlOptions & { all?: boolean }): Promise<void> {
  const { sessions: listed } = await apiRequest(await base(options), 'GET', '/sessions');
  const hidden = options.all ? new Set<string>() : conformanceSessions(listed as ListedSession[]);
  const sessions = (listed as ListedSession[]).filter((s) => !hidden.has(s.id));
  if (options.json) {
    console.log(JSON.stringify(sessions));
    return;
  }
  const note =
    hidden.size === 0
      ? ''
      : `(${hidden.size} session${hidden.size === 1 ? '' : 's'} of metis conformance run not shown: --all shows them)`;
  if (sessions.length === 0) {
    console.log(note === '' ? 'no sessions yet: metis send --new "hello"' : note);
    return;
  }
  // Turns, cost and last activity are GET /sessions's summary of each session's events; a server
  // older than that summary leaves them out, shown as "-".
  const rows = (sessions as any[]).map((s) => [
    s.id,
    s.status,
    s.active_model ?? '',
    typeof s.turn_count === 'number' ? String(s.turn_count) : '-',
    typeof s.cost_usd === 'number' ? `$${s.cost_usd.toFixed(6)}` : '-',
    s.last_activity_at ?? '-',
    new Date(Math.floor(s.created_at_us / 1000)).toISOString(),
    s.workspace_path ?? '',
  ]);
  const header = ['session', 'status', 'model', 'turns', 'cost', 'last activity', 'created', 'workspace'];
  console.log(table([header, ...rows]));
  if (note !== '') console.log(note);
}

/** Cancels the given turn, or the session's turn in flight. */
export async function cancelCommand(
  sessionId: string,
  turnId: string | undefined,
  options: UrlOptions,
): Promise<void> {
  const target = await base(options);
  let turn = turnId;
  if (!turn) {
    const handshake = await apiRequest(target, 'GET', `/sessions/${sessionId}`);
    turn = handshake.session?.current_turn_id ?? undefined;
    if (!turn) throw new MetisError('METIS_ERR_TURN_NOT_FOUND', `session ${sessionId} has no turn in flight`);
  }
  const body = await apiRequest(target, 'POST', `/sessions/${sessionId}/turns/${turn}/cancel`, {
    reason: 'user_cancel',
  });
  console.log(options.json ? JSON.stringify(body) : `${turn}: ${body.status}`);
}
