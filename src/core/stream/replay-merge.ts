import type { MetisEvent } from '../events/envelope.js';
import type { EventJsonRow } from '../store/event-rows.js';

/** One replayed event: its id (for the seam) and its encoded `event` frame. */
export interface ReplayFrame {
  readonly id: string;
  readonly frame: string;
}

/** Two id-ordered event lists as one, in id order, each id once. */
export function unionById(a: readonly MetisEvent[], b: readonly MetisEvent[]): MetisEvent[] {
  if (b.length === 0) return a as MetisEvent[];
  const out: MetisEvent[] = [];
  let i = 0;
  let j = 0;
  while (i < a.length || j < b.length) {
    const left = a[i];
    const right = b[j];
    if (right === undefined || (left !== undefined && left.id <= right.id)) {
      out.push(left!);
      i += 1;
      if (right !== undefined && right.id === left!.id) j += 1;
    } else {
      out.push(right);
      j += 1;
    }
  }
  return out;
}

/**
 * Stored rows and in-memory events after the cursor, merged in id order, as event frames. A bus event
 * the connection was handed before subscribe is also a stored row: it is sent once, as stored.
 */
export function mergeReplay(rows: readonly EventJsonRow[], live: readonly MetisEvent[]): ReplayFrame[] {
  const out: ReplayFrame[] = [];
  let i = 0;
  let j = 0;
  while (i < rows.length || j < live.length) {
    const row = rows[i];
    const event = live[j];
    if (row !== undefined && (event === undefined || row[0] <= event.id)) {
      out.push({ id: row[0], frame: `{"type":"event","event":${row[1]}}` });
      i += 1;
      if (event !== undefined && event.id === row[0]) j += 1;
    } else {
      out.push({ id: event!.id, frame: `{"type":"event","event":${JSON.stringify(event)}}` });
      j += 1;
    }
  }
  return out;
}

/** Two id-ordered lists of stored rows as one, in id order (a replay's own rows and its workers' questions). */
export function mergeRows(a: readonly EventJsonRow[], b: readonly EventJsonRow[]): EventJsonRow[] {
  if (b.length === 0) return a as EventJsonRow[];
  return [...a, ...b].sort((x, y) => (x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : 0));
}
