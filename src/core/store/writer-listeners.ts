import type { Logger } from 'pino';
import type { MetisEvent } from '../events/envelope.js';
import type { BatchListener, BatchReport, CommitListener } from './store-writer.js';

/**
 * The listeners of a store writer (`onCommit`, `onDrop`, `onBatch`) and their fan-out. A listener that
 * throws is logged and the others still hear: one observer's bug never stops the write path.
 */
export class WriterListeners {
  private readonly committed: CommitListener[] = [];
  private readonly droppedListeners: CommitListener[] = [];
  private readonly batches: BatchListener[] = [];

  constructor(private readonly logger: Logger) {}

  onCommit(listener: CommitListener): () => void {
    return subscribe(this.committed, listener);
  }

  onDrop(listener: CommitListener): void {
    this.droppedListeners.push(listener);
  }

  onBatch(listener: BatchListener): () => void {
    return subscribe(this.batches, listener);
  }

  /** Tells of a committed batch: commit listeners, then batch observers. */
  commit(events: readonly MetisEvent[], durationMs: number): void {
    this.publish(this.committed, events);
    this.report(events, durationMs, 'committed');
  }

  /** Tells of events given up (refused, past the buffer's bound, fenced). */
  drop(events: readonly MetisEvent[], durationMs: number): void {
    this.publish(this.droppedListeners, events);
    this.report(events, durationMs, 'dropped');
  }

  private report(events: readonly MetisEvent[], durationMs: number, outcome: BatchReport['outcome']): void {
    if (this.batches.length === 0) return;
    const report: BatchReport = { events, durationMs, outcome };
    for (const listener of this.batches) {
      try {
        listener(report);
      } catch (error) {
        this.logger.warn({ err: (error as Error).message }, 'batch observer failed');
      }
    }
  }

  private publish(listeners: readonly CommitListener[], batch: readonly MetisEvent[]): void {
    for (const listener of listeners) {
      try {
        listener(batch);
      } catch (error) {
        this.logger.warn({ err: (error as Error).message }, 'commit listener failed');
      }
    }
  }
}

function subscribe<T>(list: T[], listener: T): () => void {
  list.push(listener);
  return () => {
    const index = list.indexOf(listener);
    if (index >= 0) list.splice(index, 1);
  };
}
