import type { MetisEvent } from '../events/envelope.js';
import type { FollowReads } from '../store/follow-reads.js';

/** How many events of each session one read brings at most. */
export const FOLLOW_PAGE = 1_000;

/**
 * Every stored event of the sessions given after each one's seq, in id order, read a page at a time.
 * A session that filled its page may have more, with ids below other sessions' rows of the page: the
 * page is cut at the lowest last id among the full ones, and the next one starts from there, so the
 * events come in id order across the sessions and no session's history is read in one answer.
 */
export async function storedAfter(
  reads: FollowReads,
  afterSeqBySession: ReadonlyMap<string, number>,
  limit = FOLLOW_PAGE,
): Promise<MetisEvent[]> {
  const after = new Map(afterSeqBySession);
  const events: MetisEvent[] = [];
  for (;;) {
    const page = await reads.eventsAfter(after, limit);
    const counts = new Map<string, number>();
    const lastIds = new Map<string, string>();
    for (const event of page) {
      counts.set(event.session_id, (counts.get(event.session_id) ?? 0) + 1);
      lastIds.set(event.session_id, event.id);
    }
    let cut: string | null = null;
    for (const [sessionId, count] of counts) {
      const last = lastIds.get(sessionId)!;
      if (count >= limit && (cut === null || last < cut)) cut = last;
    }
    for (const event of page) {
      if (cut !== null && event.id > cut) break;
      events.push(event);
      after.set(event.session_id, event.seq!);
    }
    if (cut === null) return events;
  }
}

/** A session's stored events after seq `after` up to seq `through`, in order (a gap a message showed). */
export async function storedThrough(
  reads: FollowReads,
  sessionId: string,
  after: number,
  through: number,
  limit = FOLLOW_PAGE,
): Promise<MetisEvent[]> {
  const events: MetisEvent[] = [];
  let from = after;
  while (from < through) {
    const page = await reads.eventsAfter(new Map([[sessionId, from]]), limit);
    for (const event of page) if (event.seq! <= through) events.push(event);
    const last = page.at(-1);
    if (last === undefined || page.length < limit) break;
    from = last.seq!;
  }
  return events;
}
