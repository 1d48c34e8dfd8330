import { isCancel, log, select } from '@clack/prompts';
import { visibleText } from '../client/visible-text.js';
import { MetisError } from '../core/errors.js';
import { apiRequest, type ServerTarget } from './api-request.js';
import { describe, type Listed } from './confirm.js';

export type ApprovalAnswer = 'allow_once' | 'allow_session' | 'deny';

/**
 * Asks the user, in place, about a tool call waiting for approval: the whole input first (as
 * `metis confirm` prints it), then allow once / allow for the session / deny with the arrow keys. The
 * answer goes with the hash of the input shown, so a request that changed decides nothing. Returns
 * null when the request no longer waits (answered elsewhere, timed out) or the user dismissed the
 * prompt (Esc, Ctrl-C: the request keeps waiting; `metis confirm` can still answer it).
 */
export async function askApproval(
  target: ServerTarget,
  sessionId: string,
  requestId: string,
): Promise<ApprovalAnswer | null> {
  const listing = await apiRequest(target, 'GET', `/sessions/${encodeURIComponent(sessionId)}/confirmations`);
  const request = ((listing.confirmations ?? []) as Listed[]).find(
    (c) => c.confirmation_request_id === requestId,
  );
  if (request === undefined) return null;
  log.warn(describe(request, sessionId));
  const answer = await select<ApprovalAnswer>({
    message: `Let ${visibleText(request.tool_name)} run?`,
    options: [
      { value: 'allow_once', label: 'Allow once' },
      {
        value: 'allow_session',
        label: 'Allow for this session',
        hint: `every ${visibleText(request.tool_name)} call`,
      },
      { value: 'deny', label: 'Deny' },
    ],
  });
  if (isCancel(answer)) {
    log.info(`left waiting: metis confirm ${visibleText(sessionId)} ${visibleText(requestId)} allow|deny`);
    return null;
  }
  try {
    await apiRequest(
      target,
      'POST',
      `/sessions/${encodeURIComponent(sessionId)}/confirmations/${encodeURIComponent(requestId)}`,
      {
        decision: answer === 'deny' ? 'deny' : 'allow',
        scope: answer === 'allow_session' ? 'session' : 'once',
        input_hash: request.input_hash,
      },
    );
  } catch (error) {
    // Answered elsewhere in the meantime, or timed out: say so, the turn goes on either way.
    if (error instanceof MetisError) {
      log.error(visibleText(error.message));
      return null;
    }
    throw error;
  }
  return answer;
}
