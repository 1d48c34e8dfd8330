import { setTimeout as delay } from 'node:timers/promises';
import type { TurnEvents } from './turn-events.js';
import type { TurnState } from './turn-state.js';

/** Each running turn's events, so a drain can freeze them (registered as the turn starts). */
const eventsOfTurn = new WeakMap<TurnState, TurnEvents>();
const handedOver = new WeakSet<TurnState>();

export function trackTurnEvents(state: TurnState, events: TurnEvents): void {
  eventsOfTurn.set(state, events);
}

/** Whether a drain handed this turn over to the next start: it is neither cancelled nor awaited. */
export function isHandedOver(state: TurnState): boolean {
  return handedOver.has(state);
}

/**
 * What a frozen turn's loop waits on before its next step: nothing, ever. The process is stopping, and
 * the turn is to go on at the next start from the store as it stands, not here.
 */
export function haltIfFrozen(events: TurnEvents): Promise<void> | null {
  return events.frozen ? new Promise<void>(() => {}) : null;
}

/** What a drain needs of a live session (live-sessions.ts). */
interface DrainedSession {
  readonly isWorker: boolean;
  readonly turn: {
    readonly state: TurnState;
    readonly done: Promise<unknown>;
    readonly timer: NodeJS.Timeout;
  } | null;
}

/**
 * A stop that keeps turns (SIGTERM with `runtime.on_restart: resume`, docs/runtime.md "Durable turns"):
 * waits up to `waitMs` for the turns in flight to end; those still running are then frozen: nothing more
 * of them is emitted or stored (TurnEvents.frozen), no cancel reaches them, and their loop stops at its
 * next step, so the store keeps each exactly as it stood for the next start to resume. Workers are frozen
 * with their planner. Returns how many turns (workers not counted) were handed over.
 */
export async function drainTurns(sessions: () => Iterable<DrainedSession>, waitMs: number): Promise<number> {
  const running = () => [...sessions()].filter((s) => s.turn !== null);
  const ends = running().map((s) => s.turn!.done.catch(() => undefined));
  if (ends.length > 0) {
    const timeout = new AbortController();
    await Promise.race([
      Promise.all(ends),
      delay(waitMs, undefined, { signal: timeout.signal }).catch(() => {}),
    ]);
    timeout.abort();
  }
  let count = 0;
  for (const session of running()) {
    const turn = session.turn!;
    const events = eventsOfTurn.get(turn.state);
    if (events !== undefined) events.frozen = true;
    // Every cancel goes through cancelTurnState, which leaves a turn with a reason alone.
    turn.state.cancelReason ??= 'client_disconnect';
    clearTimeout(turn.timer);
    handedOver.add(turn.state);
    if (!session.isWorker) count += 1;
  }
  return count;
}
