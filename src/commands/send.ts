import { FollowTimeoutError, FollowTurnError, followTurn } from '../client/follow-turn.js';
import { liveTextWriter } from '../client/live-text.js';
import { initialState } from '../client/reducer.js';
import { visibleJson } from '../client/visible-text.js';
import { MetisError } from '../core/errors.js';
import { apiRequest, type ServerTarget } from './api-request.js';
import { parseFollowTimeout } from './follow-timeout.js';
import { answeringInPlace, canAskInPlace } from './in-place-approvals.js';
import { serverTarget } from './server-target.js';
import { failureError } from './tail.js';

export interface SendOptions {
  model?: string;
  follow?: boolean;
  new?: boolean;
  url?: string;
  token?: string;
  config?: string;
  json?: boolean;
  detach?: boolean;
  timeout?: string;
}

/** `metis send <session> "message"`, or `metis send --new "message"` to start a session. */
export async function sendCommand(
  first: string | undefined,
  second: string | undefined,
  options: SendOptions,
): Promise<void> {
  const timeoutMs = parseFollowTimeout(options.timeout);
  const target: ServerTarget = await serverTarget(options);
  const message = options.new ? first : second;
  if (!message)
    throw new MetisError('METIS_ERR_INVALID_ARGUMENT', 'message: give the message to send (in quotes)');
  let sessionId = options.new ? undefined : first;
  if (!sessionId) {
    if (!options.new)
      throw new MetisError('METIS_ERR_INVALID_ARGUMENT', 'session: give a session id, or --new');
    const created = await apiRequest(target, 'POST', '/sessions', {});
    sessionId = created.session_id as string;
    if (!options.json) console.error(`created session ${sessionId}`);
  }
  if (!options.follow) {
    const body = await apiRequest(target, 'POST', `/sessions/${sessionId}/turns`, {
      message,
      ...(options.model ? { model: options.model } : {}),
    });
    console.log(
      options.json
        ? JSON.stringify({ session_id: sessionId, turn_id: body.turn_id })
        : `${sessionId} ${body.turn_id}`,
    );
    return;
  }
  const id = sessionId;
  const liveText = liveTextWriter(id, { serverUrl: target.url });
  // On a terminal a question is asked in place; in a pipe the `metis confirm` line is printed.
  const approvals = canAskInPlace(options.json) ? answeringInPlace(liveText, target, id) : null;
  const writeText = approvals?.render ?? liveText;
  const interrupts = new InterruptHandler(target, id, options.detach === true);
  const result = await followTurn({
    ...target,
    sessionId: id,
    message,
    model: options.model,
    timeoutMs,
    onSubmitted: (turnId) => interrupts.following(turnId),
    render: (item, state) => {
      if (options.json) {
        if (item.kind === 'frame') process.stdout.write(`${visibleJson(JSON.stringify(item.frame))}\n`);
        return;
      }
      writeText(item, state ?? initialState);
    },
  })
    .catch((error: unknown) => {
      throw followError(error, target, id);
    })
    .finally(async () => {
      interrupts.stop();
      await approvals?.settled();
    });
  if (result.status === 'cancelled') process.exitCode = 3;
  if (result.status === 'failed') process.exitCode = 1;
}

/** The CLI error for a follow that failed: the server refused the client, or refused the turn. */
function followError(error: unknown, target: ServerTarget, sessionId: string): unknown {
  if (error instanceof FollowTimeoutError) {
    const turn = error.turnId === null ? 'the message was not sent' : `turn ${error.turnId} goes on`;
    return new MetisError(
      'METIS_ERR_FOLLOW_TIMEOUT',
      `stopped following after ${error.timeoutMs / 1000} s (--timeout); ${turn}`,
      error.turnId === null
        ? {}
        : { hint: `Follow it: metis tail ${sessionId}   Stop it: metis cancel ${sessionId}` },
    );
  }
  if (error instanceof FollowTurnError) {
    return error.failure === null
      ? new MetisError('METIS_ERR_REQUEST_FAILED', error.message)
      : failureError(error.failure, target.url, target.token);
  }
  const { code, status } = error as { code?: string; status?: number };
  if (code === undefined && status === undefined) return error;
  return new MetisError(
    'METIS_ERR_REQUEST_FAILED',
    `${(error as Error).message} (${code ?? `HTTP ${status}`})`,
  );
}

/**
 * Ctrl-C while following a turn: the first cancels the turn and keeps following until it ends (so its
 * end is shown). A second stops following: the turn is being cancelled, so it exits 3 as a cancelled
 * turn does (`metis send --help`), unless the server refused the cancel and the turn goes on (130). The
 * first with `--detach` stops following and leaves the turn running: it says so and how to stop it, and
 * exits 130, as a shell reports an interrupted command.
 */
class InterruptHandler {
  private turnId: string | null = null;
  /** The cancel asked for by the first Ctrl-C: resolves to whether the server accepted it. */
  private cancel: Promise<boolean> | null = null;
  private stoppingFollow = false;
  private readonly onInterrupt = () => this.interrupt();

  constructor(
    private readonly target: ServerTarget,
    private readonly sessionId: string,
    private readonly detach: boolean,
  ) {
    process.on('SIGINT', this.onInterrupt);
  }

  following(turnId: string): void {
    this.turnId = turnId;
  }

  stop(): void {
    process.off('SIGINT', this.onInterrupt);
  }

  private interrupt(): void {
    // Nothing to cancel yet, or a third Ctrl-C while the server is slow to answer the cancel: go now.
    if (this.turnId === null || this.stoppingFollow) process.exit(130);
    if (this.cancel !== null) {
      this.stoppingFollow = true;
      void this.stopFollowingWhileCancelling(this.turnId, this.cancel);
      return;
    }
    if (this.detach) {
      this.stopFollowing(this.turnId, 'goes on', 130);
      return;
    }
    process.stderr.write(`\ncancelling turn ${this.turnId} (Ctrl-C again to stop following)…\n`);
    this.cancel = apiRequest(this.target, 'POST', `/sessions/${this.sessionId}/turns/${this.turnId}/cancel`, {
      reason: 'user_cancel',
    }).then(
      () => true,
      (error: unknown) => {
        process.stderr.write(`could not cancel: ${(error as Error).message}\n`);
        return false;
      },
    );
  }

  /** Waits for the server's answer to the cancel: exiting first could lose the request on its way. */
  private async stopFollowingWhileCancelling(turnId: string, cancel: Promise<boolean>): Promise<void> {
    const accepted = await cancel;
    if (accepted) this.stopFollowing(turnId, 'is being cancelled', 3);
    else this.stopFollowing(turnId, 'goes on', 130);
  }

  private stopFollowing(turnId: string, how: 'goes on' | 'is being cancelled', exitCode: number): never {
    process.stderr.write(
      `\nstopped following; turn ${turnId} ${how} on the server.\n` +
        `  follow it:  metis tail ${this.sessionId}\n` +
        (how === 'goes on' ? `  stop it:    metis cancel ${this.sessionId}\n` : ''),
    );
    process.exit(exitCode);
  }
}
