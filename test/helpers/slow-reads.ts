import type { SessionReads } from '../../src/core/store/session-reads.js';
import type { StreamArchiveRows } from '../../src/core/store/stream-archive-rows.js';
import type { StreamReads } from '../../src/core/store/stream-reads.js';

/** Answers `answer()` after a delay of up to `maxDelayMs`, a new one per call. */
function delayer(maxDelayMs: number, random: () => number) {
  return async <T>(answer: () => Promise<T>): Promise<T> => {
    await new Promise((resolve) => setTimeout(resolve, Math.floor(random() * (maxDelayMs + 1))));
    return answer();
  };
}

/**
 * The store's stream reads, each answered after a delay of up to `maxDelayMs` (a new one per call, so
 * that reads complete out of the order they were asked in): a store over the network, as a
 * subscription meets it. Events keep being released while a read waits.
 */
export function slowReads(reads: StreamReads, maxDelayMs: number, random = Math.random): StreamReads {
  const later = delayer(maxDelayMs, random);
  return {
    replayJson: (query) => later(() => reads.replayJson(query)),
    eventBefore: (sessionIds, beforeId) => later(() => reads.eventBefore(sessionIds, beforeId)),
    sessionAsOf: (sessionId, atId, counted) => later(() => reads.sessionAsOf(sessionId, atId, counted)),
    messagesAsOf: (sessionId, atId, limit) => later(() => reads.messagesAsOf(sessionId, atId, limit)),
    unansweredConfirmations: (sessionIds) => later(() => reads.unansweredConfirmations(sessionIds)),
    confirmationEventsThrough: (sessionIds, throughId) =>
      later(() => reads.confirmationEventsThrough(sessionIds, throughId)),
    retention: (sessionId) => later(() => reads.retention(sessionId)),
    storedBudget: (sessionId) => later(() => reads.storedBudget(sessionId)),
    lineage: (sessionId) => later(() => reads.lineage(sessionId)),
  };
}

/**
 * What the runtime asks the store of a session it does not hold (whether it exists, how it stands),
 * answered after a delay of up to `maxDelayMs`: the existence check a subscribe makes before anything else.
 */
export function slowSessionReads(
  reads: SessionReads,
  maxDelayMs: number,
  random = Math.random,
): SessionReads {
  const later = delayer(maxDelayMs, random);
  return {
    session: (sessionId) => later(() => reads.session(sessionId)),
    summary: (sessionId) => later(() => reads.summary(sessionId)),
  };
}

/**
 * The stream archive's rows, each read waiting up to `maxDelayMs` before it is asked and as long again
 * before its answer is handed back (a new delay each): the store answers as of some moment inside the
 * wait, as one over the network does. A batch reaches the store up to `maxDelayMs` late too, so that
 * batches in flight commit on either side of a read. One that arrives after the store closed is refused.
 */
export function slowArchiveRows(
  rows: StreamArchiveRows,
  maxDelayMs: number,
  random = Math.random,
): StreamArchiveRows {
  const pause = () => new Promise((resolve) => setTimeout(resolve, Math.floor(random() * (maxDelayMs + 1))));
  const later = async <T>(answer: () => Promise<T>): Promise<T> => {
    await pause();
    const answered = await answer();
    await pause();
    return answered;
  };
  return {
    archivedSessions: () => later(() => rows.archivedSessions()),
    write: (batch, settled) => {
      void pause().then(() => {
        try {
          rows.write(batch, settled);
        } catch {
          settled(false);
        }
      });
    },
    after: (sessionId, afterId, limit) => later(() => rows.after(sessionId, afterId, limit)),
    horizon: (sessionId) => later(() => rows.horizon(sessionId)),
    prune: (sessionIds, cutoffUs, keep) => rows.prune(sessionIds, cutoffUs, keep),
  };
}
