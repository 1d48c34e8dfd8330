import { apiRequest } from './api-request.js';
import { serverTarget } from './server-target.js';

export interface EndOptions {
  abandoned?: boolean;
  url?: string;
  token?: string;
  config?: string;
  json?: boolean;
}

/**
 * `metis end <session>`: ends a session (`session.ended`). Its turns and the session are then scored and
 * what they teach goes to the pattern store.
 */
export async function endCommand(sessionId: string, options: EndOptions): Promise<void> {
  const body = await apiRequest(await serverTarget(options), 'POST', `/sessions/${sessionId}/end`, {
    disposition: options.abandoned ? 'abandoned' : 'completed',
  });
  if (options.json) console.log(JSON.stringify(body));
  else console.log(`session ${sessionId} ended (${body.disposition})`);
}
