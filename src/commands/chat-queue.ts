import { visibleText } from '../client/visible-text.js';
import { MetisError } from '../core/errors.js';
import { apiRequest, type ServerTarget } from './api-request.js';

/** A line typed during a turn that starts with this steers the running turn instead of queueing. */
export const STEER_PREFIX = '>';

/**
 * What the user types while a turn runs in `metis chat` (issue 31): each line is sent at once, queued
 * after the running turn (`multitask: enqueue`), or, after `>`, added to the running turn at its next
 * model call (`multitask: steer`). The terminal echoes the typing (the turn's output goes on around it);
 * each line sent is confirmed on a line of its own. Reading stops while a question is asked in place.
 */
export class TypeAhead {
  private buffer = '';
  private paused = false;
  private sending: Promise<void> = Promise.resolve();
  private readonly onData = (chunk: Buffer | string) => {
    if (this.paused) return;
    this.buffer += chunk.toString();
    for (let at = this.buffer.indexOf('\n'); at >= 0; at = this.buffer.indexOf('\n')) {
      const line = this.buffer.slice(0, at).replace(/\r$/, '').trim();
      this.buffer = this.buffer.slice(at + 1);
      if (line !== '') this.sending = this.sending.then(() => this.send(line));
    }
  };

  constructor(
    private readonly target: ServerTarget,
    private readonly sessionId: string,
  ) {}

  start(): void {
    process.stdin.on('data', this.onData);
    process.stdin.resume();
  }

  /** Stops reading and waits for the lines already typed to be sent. */
  async stop(): Promise<void> {
    process.stdin.off('data', this.onData);
    process.stdin.pause();
    await this.sending;
  }

  /** While an approval is asked in place, its prompt reads the keys. */
  pauseWhile(asking: Promise<unknown>): void {
    this.paused = true;
    void asking.finally(() => {
      this.paused = false;
    });
  }

  private async send(line: string): Promise<void> {
    const steer = line.startsWith(STEER_PREFIX);
    const message = steer ? line.slice(STEER_PREFIX.length).trim() : line;
    if (message === '') return;
    try {
      const answer = await apiRequest(
        this.target,
        'POST',
        `/sessions/${encodeURIComponent(this.sessionId)}/turns`,
        { message, multitask: steer ? 'steer' : 'enqueue' },
      );
      process.stdout.write(`\n${confirmation(answer, message)}\n`);
    } catch (error) {
      if (!(error instanceof MetisError)) throw error;
      process.stdout.write(`\ncould not send: ${visibleText(error.message)}\n`);
    }
  }
}

function confirmation(answer: Record<string, unknown>, message: string): string {
  const said = visibleText(message.length > 60 ? `${message.slice(0, 59)}…` : message);
  if (answer.status === 'queued') return `↳ queued #${answer.position}: ${said}`;
  if (answer.status === 'steered') return `↳ steering the running turn: ${said}`;
  return `↳ sent: ${said}`;
}

/** How many turns the session has had (started ones included): `GET /sessions/{id}`. */
export async function turnCount(target: ServerTarget, sessionId: string): Promise<number> {
  const { session } = await apiRequest(target, 'GET', `/sessions/${encodeURIComponent(sessionId)}`);
  return Number(session.turn_count);
}

/**
 * Whether the server started a turn the chat has not shown yet (a queued message's: the session has
 * more turns than `shown`, even one that already ended), or a message of the session still waits.
 */
export async function moreQueued(target: ServerTarget, sessionId: string, shown: number): Promise<boolean> {
  const path = `/sessions/${encodeURIComponent(sessionId)}`;
  const [{ session }, { queue }] = await Promise.all([
    apiRequest(target, 'GET', path),
    apiRequest(target, 'GET', `${path}/queue`),
  ]);
  return Number(session.turn_count) > shown || (queue as unknown[]).length > 0;
}
