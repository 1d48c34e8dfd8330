import type { ClientItem } from '../client/client.js';
import type { ConversationState } from '../client/reducer.js';
import type { ServerTarget } from './api-request.js';
import { askApproval } from './approval-prompt.js';

type Writer = (item: ClientItem, state: ConversationState) => void;

/**
 * Wraps a live-text writer so that a tool waiting for approval is asked about in place (approval-prompt
 * .ts) instead of printed with the `metis confirm` command to type elsewhere. While the question is
 * open, what arrives is held and written after the answer, so nothing draws over the prompt.
 */
export function answeringInPlace(write: Writer, target: ServerTarget, sessionId: string) {
  let asking: Promise<void> | null = null;
  const held: [ClientItem, ConversationState][] = [];
  const render: Writer = (item, state) => {
    const event = item.kind === 'frame' && item.frame.type === 'event' ? item.frame.event : null;
    if (event?.type === 'tool.confirmation_requested' && asking === null) {
      asking = askApproval(target, sessionId, String(event.payload.confirmation_request_id))
        .catch((error: unknown) => {
          process.stderr.write(`could not ask: ${(error as Error).message}\n`);
        })
        .then(() => {
          asking = null;
          for (const [heldItem, heldState] of held.splice(0)) write(heldItem, heldState);
        });
      return;
    }
    if (asking !== null) held.push([item, state]);
    else write(item, state);
  };
  return {
    render,
    /** Resolves once no question is open (and what was held is written). */
    settled: async () => {
      while (asking !== null) await asking;
    },
  };
}

/** Whether questions can be asked here: a terminal on both ends, and no `--json` output to keep clean. */
export function canAskInPlace(json: boolean | undefined): boolean {
  return !json && process.stdin.isTTY === true && process.stdout.isTTY === true;
}
