import { apiRequest } from './api-request.js';
import { serverTarget } from './server-target.js';

export interface FeedbackOptions {
  turn?: string;
  comment?: string;
  url?: string;
  token?: string;
  config?: string;
  json?: boolean;
}

const RATINGS = { up: 'thumbs_up', down: 'thumbs_down' } as const;

/** `metis feedback <session> up|down [--turn T] [--comment C]`: the user's rating, as feedback.explicit. */
export async function feedbackCommand(
  sessionId: string,
  rating: keyof typeof RATINGS,
  options: FeedbackOptions,
): Promise<void> {
  const body = await apiRequest(await serverTarget(options), 'POST', `/sessions/${sessionId}/feedback`, {
    rating: RATINGS[rating],
    ...(options.turn ? { turn_id: options.turn } : {}),
    ...(options.comment ? { comment: options.comment } : {}),
  });
  if (options.json) console.log(JSON.stringify(body));
  else
    console.log(
      `${rating === 'up' ? '👍' : '👎'} recorded for ${options.turn ? `turn ${options.turn}` : `session ${sessionId}`} (${body.event_id})`,
    );
}
