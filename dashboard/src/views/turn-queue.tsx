import type { Multitask, QueuedMessage } from '../api.js';

/** What the composer's choice does while a turn runs, in the words the page shows. */
export const WHILE_A_TURN_RUNS: readonly { value: Exclude<Multitask, 'reject'>; label: string }[] = [
  { value: 'enqueue', label: 'Queue it after this turn' },
  { value: 'steer', label: 'Add it to this turn' },
  { value: 'interrupt', label: 'Stop this turn and send it' },
];

/**
 * The messages waiting while a turn runs (`GET /sessions/{id}/queue`): steers the running turn has not
 * read yet, then the turns to come, each with Drop (`DELETE .../queue/{queued_id}`: it never runs).
 */
export function TurnQueue({
  queue,
  drop,
}: {
  queue: readonly QueuedMessage[];
  drop: (queued: QueuedMessage) => void;
}) {
  if (queue.length === 0) return null;
  return (
    <section class="queue" aria-label="Waiting to be sent" data-testid="queue">
      <h2 class="label">Waiting</h2>
      <ol>
        {queue.map((queued) => (
          <li key={queued.queued_id} data-queued={queued.queued_id} data-mode={queued.mode}>
            <span class="pill warn">
              {queued.position === 0
                ? 'for this turn'
                : `next ${queued.position === 1 ? '' : `#${queued.position}`}`.trim()}
            </span>
            <span class="queued-text">{queued.message}</span>
            <button type="button" onClick={() => drop(queued)}>
              Drop
            </button>
          </li>
        ))}
      </ol>
    </section>
  );
}
