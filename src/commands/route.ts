import { apiRequest } from './api-request.js';
import { serverTarget } from './server-target.js';

export interface RouteOptions {
  url?: string;
  token?: string;
  config?: string;
  json?: boolean;
}

/**
 * `metis route override|dismiss <session>`: applies the pattern recommendation deferred in the session's
 * running turn (`route.overridden`, the turn goes on with the recommended model), or dismisses it
 * (`pattern.override_dismissed`).
 */
export async function routeCommand(
  action: 'override' | 'dismiss',
  sessionId: string,
  options: RouteOptions,
): Promise<void> {
  const body = await apiRequest(
    await serverTarget(options),
    'POST',
    `/sessions/${sessionId}/route/${action}`,
  );
  if (options.json) console.log(JSON.stringify(body));
  else if (action === 'override')
    console.log(
      `turn ${body.turn_id} goes on with ${body.new_chosen_model} (was ${body.original_chosen_model})`,
    );
  else
    console.log(
      `turn ${body.turn_id} keeps ${body.chosen_model}; the recommendation of ${body.dismissed_pattern_model} is dismissed`,
    );
}

/** `metis patterns clear`: forgets every learned outcome (`pattern.evicted`, manual_clear). */
export async function patternsClearCommand(options: RouteOptions): Promise<void> {
  const body = await apiRequest(await serverTarget(options), 'POST', '/patterns/clear');
  if (options.json) console.log(JSON.stringify(body));
  else console.log(`pattern store cleared: ${body.entries_evicted} outcomes removed`);
}
