import { visibleJson, visibleText } from '../client/visible-text.js';
import { MetisError } from '../core/errors.js';
import { apiRequest, type ServerTarget } from './api-request.js';
import { serverTarget } from './server-target.js';

export interface ConfirmOptions {
  url?: string;
  token?: string;
  config?: string;
  json?: boolean;
  /** Allow (or deny) the tool for the rest of the session, not just this call. */
  session?: boolean;
  /** Only list what waits, even when a request and a decision are given. */
  show?: boolean;
}

/** A pending request as `GET /sessions/{id}/confirmations` lists it (docs/http-api.md). */
export interface Listed {
  readonly session_id: string;
  readonly confirmation_request_id: string;
  readonly tool_name: string;
  readonly side_effects: string;
  readonly input: unknown;
  readonly input_hash: string;
  readonly expires_at: string;
}

/**
 * `metis confirm <session> [request] [allow|deny]`. Before it answers it prints the whole input the
 * tool will get (control characters visible, nothing cut) and sends the decision with the hash of that
 * input, so the server decides nothing if the request is not what was shown. Without a request (or
 * with `--show`) it lists what waits in the session and in its workers.
 */
export async function confirmCommand(
  sessionId: string,
  requestId: string | undefined,
  decision: string | undefined,
  options: ConfirmOptions,
): Promise<void> {
  const showOnly = options.show === true || requestId === undefined;
  if (!showOnly && decision !== 'allow' && decision !== 'deny') {
    throw new MetisError(
      'METIS_ERR_INVALID_ARGUMENT',
      decision === undefined
        ? 'decision: give allow or deny (or --show to only list what waits)'
        : `decision: "${visibleText(decision)}" is not allow or deny`,
    );
  }
  const target: ServerTarget = await serverTarget(options);
  const listing = await apiRequest(target, 'GET', `/sessions/${encodeURIComponent(sessionId)}/confirmations`);
  const pending = (listing.confirmations ?? []) as Listed[];
  const shown =
    requestId === undefined ? pending : pending.filter((c) => c.confirmation_request_id === requestId);

  if (showOnly) {
    if (options.json) console.log(visibleJson(JSON.stringify(shown)));
    else if (shown.length === 0)
      console.log(`nothing waits for approval in session ${visibleText(sessionId)}`);
    else console.log(shown.map((c) => describe(c, sessionId)).join('\n'));
    if (requestId !== undefined && shown.length === 0) throw notPending(sessionId, requestId, pending);
    return;
  }
  const request = shown[0];
  if (request === undefined) throw notPending(sessionId, requestId!, pending);
  if (!options.json) console.log(describe(request, sessionId));
  let body: Record<string, unknown>;
  try {
    body = await apiRequest(
      target,
      'POST',
      `/sessions/${encodeURIComponent(sessionId)}/confirmations/${encodeURIComponent(requestId!)}`,
      { decision, scope: options.session ? 'session' : 'once', input_hash: request.input_hash },
    );
  } catch (error) {
    if (error instanceof MetisError && error.code === 'METIS_ERR_CONFIRMATION_MISMATCH') {
      throw new MetisError(
        'METIS_ERR_CONFIRMATION_MISMATCH',
        `the input of ${visibleText(requestId!)} changed since it was printed above: nothing was decided. Run \`metis confirm ${visibleText(sessionId)}\` to see it again. (METIS_ERR_CONFIRMATION_MISMATCH)`,
      );
    }
    throw error;
  }
  console.log(
    options.json
      ? visibleJson(JSON.stringify({ ...body, input_hash: request.input_hash, shown: request }))
      : `${visibleText(requestId!)}: ${decision}`,
  );
}

/** The request in full: who asks, for what, and the whole input, each line of it indented. */
export function describe(c: Listed, attached: string): string {
  const worker = c.session_id === attached ? '' : ` (worker session ${visibleText(c.session_id)})`;
  const input = inputText(c);
  return [
    `${visibleText(c.confirmation_request_id)}: ${visibleText(c.tool_name)} (${visibleText(c.side_effects)})${worker} waits for approval until ${visibleText(c.expires_at)}`,
    `  input (${Array.from(input).length} characters, sha256 ${c.input_hash}):`,
    ...visibleText(input)
      .split('\n')
      .map((line) => `    ${line}`),
  ].join('\n');
}

/** A shell command as it will run; any other input as indented JSON. */
function inputText(c: Listed): string {
  const input = c.input as Record<string, unknown> | null;
  const keys = input !== null && typeof input === 'object' ? Object.keys(input) : [];
  if (c.tool_name === 'shell' && keys.length === 1 && typeof input?.command === 'string')
    return input.command;
  return JSON.stringify(c.input, null, 2);
}

function notPending(sessionId: string, requestId: string, pending: readonly Listed[]): MetisError {
  const waiting = pending.map((c) => visibleText(c.confirmation_request_id)).join(', ');
  return new MetisError(
    'METIS_ERR_CONFIRMATION_NOT_FOUND',
    `no pending confirmation ${visibleText(requestId)} in session ${visibleText(sessionId)} (${waiting === '' ? 'nothing waits there now' : `waiting: ${waiting}`}) (METIS_ERR_CONFIRMATION_NOT_FOUND)`,
  );
}
