import type { StreamOptions } from './connection-deps.js';
import type { StreamTransport } from './stream-transport.js';

/** What the queue tells its connection; each is a rare transition, never a per-event call. */
export interface QueueEvents {
  /** A bound was passed: the client stopped reading (streaming §8.2). The queue is already empty. */
  overflowed(queued: number): void;
  /** Half a bound was passed; true when the client was told (a `lag_warning` went out). */
  lagging(queued: number, bytes: number): boolean;
  /** A scheduled flush threw; the other connections' flushes go on. */
  flushFailed(error: Error): void;
}

type Limits = Pick<StreamOptions, 'maxQueueEvents' | 'maxQueueBytes' | 'socketHighWaterMark'>;

const NO_FRAME = Buffer.alloc(0);

/**
 * Queues with frames waiting, flushed together in one immediate: an event that reaches 100 clients
 * schedules one callback, not 100.
 */
let due: OutboundQueue[] = [];

function flushDue(): void {
  const queues = due;
  due = [];
  for (const queue of queues) queue.scheduledFlush();
}

/**
 * One client's bounded outbound queue (streaming §8.1), the same under every transport: encoded frames
 * (an event's frame shared with every client of the transport that gets it), written while the socket
 * takes them and held past its high-water mark until 'drain'. A client that lets it pass either bound
 * (`max_queue_events`, `max_queue_bytes`) is closed by its connection and nobody else waits (§8.2, §8.3).
 */
export class OutboundQueue {
  private readonly frames: Buffer[] = [];
  private head = 0;
  private bytes = 0;
  private scheduled = false;
  private closed = false;
  /**
   * Set when the client was told it lags; cleared once the queue drains below a quarter of both bounds,
   * so a client that hovers around half gets one warning per episode, not one per frame.
   */
  private lagWarned = false;
  /** Called once, the next time the queue is empty after a flush (a stream that ends by itself). */
  private whenEmpty: (() => void) | null = null;

  constructor(
    private readonly transport: StreamTransport,
    private readonly limits: Limits,
    private readonly events: QueueEvents,
  ) {}

  /** Frames waiting, for the metrics' queue depth gauges. */
  depth(): { events: number; bytes: number } {
    return { events: this.frames.length - this.head, bytes: this.bytes };
  }

  /** Queues a frame and schedules a flush; passing a bound empties the queue and tells the connection. */
  push(frame: Buffer): void {
    if (this.closed) return;
    this.frames.push(frame);
    this.bytes += frame.length;
    const { maxQueueEvents, maxQueueBytes } = this.limits;
    let queued = this.frames.length - this.head;
    // A burst (one large committed batch, or one frame near the byte cap) writes through at once while
    // the socket takes it, so only a client that really stopped reading reaches either bound.
    if (queued > maxQueueEvents / 2 || this.bytes > maxQueueBytes / 2) {
      this.flush();
      queued = this.frames.length - this.head;
    }
    if (queued > maxQueueEvents || this.bytes > maxQueueBytes) {
      this.clear();
      this.events.overflowed(queued);
      return;
    }
    if (!this.lagWarned && (queued > maxQueueEvents / 2 || this.bytes > maxQueueBytes / 2))
      this.lagWarned = this.events.lagging(queued, this.bytes);
    if (!this.scheduled) {
      this.scheduled = true;
      if (due.length === 0) setImmediate(flushDue);
      due.push(this);
    }
  }

  /** The flush scheduled by `push`; a failure to write to one client must not skip the others. */
  scheduledFlush(): void {
    this.scheduled = false;
    try {
      this.flush();
    } catch (error) {
      this.events.flushFailed(error as Error);
    }
  }

  /** Writes queued frames while the socket takes them; the rest waits for 'drain'. */
  flush(): void {
    if (this.closed || !this.transport.isOpen()) return;
    if (this.head < this.frames.length) {
      // 'drain' only follows a write that took the socket past its own highWaterMark: a smaller limit
      // would stop here with no 'drain' to come, and the queued frames would wait for the next send.
      const limit = Math.max(this.limits.socketHighWaterMark, this.transport.writableHighWaterMark);
      // Corking coalesces the frames of one flush into one socket write; they stay separate frames. The
      // frames are already encoded (event-frames.ts), so they go to the socket as they are.
      this.transport.cork();
      while (this.head < this.frames.length && this.transport.bufferedAmount() < limit) {
        const frame = this.frames[this.head]!;
        this.frames[this.head] = NO_FRAME;
        this.head += 1;
        this.bytes -= frame.length;
        this.transport.write(frame);
      }
      this.transport.uncork();
      if (this.head === this.frames.length) {
        this.frames.length = 0;
        this.head = 0;
      }
      if (
        this.lagWarned &&
        this.frames.length - this.head <= this.limits.maxQueueEvents / 4 &&
        this.bytes <= this.limits.maxQueueBytes / 4
      )
        this.lagWarned = false;
    }
    if (this.whenEmpty !== null && this.head === this.frames.length) {
      const then = this.whenEmpty;
      this.whenEmpty = null;
      then();
    }
  }

  /** Calls `then` once everything queued now (and later) has been written. */
  onceEmpty(then: () => void): void {
    this.whenEmpty = then;
    this.flush();
  }

  /**
   * Writes everything queued at once, past the socket's mark: what a close sends before its last frame.
   * The queue is bounded, so writing it past the high-water mark once is fine.
   */
  writeAll(): void {
    if (this.transport.isOpen())
      for (let i = this.head; i < this.frames.length; i += 1) this.transport.write(this.frames[i]!);
    this.clear();
  }

  /** Nothing more is written: the connection closed. */
  close(): void {
    this.closed = true;
    this.whenEmpty = null;
    this.clear();
  }

  private clear(): void {
    this.frames.length = 0;
    this.head = 0;
    this.bytes = 0;
  }
}
