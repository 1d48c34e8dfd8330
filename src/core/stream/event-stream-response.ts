import type { ServerResponse } from 'node:http';
import type { TransportHandlers } from './stream-transport.js';

/** An SSE comment: ignored by every parser (WHATWG HTML §9.2.6), it keeps proxies and idle timeouts off. */
export const KEEP_ALIVE = Buffer.from(': ping\n\n');

/**
 * What every transport written as a `text/event-stream` HTTP response shares (SSE, the AI SDK's and
 * AG-UI's turn streams): writes, backpressure and close come from the response; the keep-alive is an
 * SSE comment; the client cannot answer pings and reads one subscription.
 */
export abstract class EventStreamResponse {
  readonly answersPings = false;
  readonly singleSubscription = true;

  constructor(readonly response: ServerResponse) {}

  get writableHighWaterMark(): number {
    return this.response.writableHighWaterMark;
  }

  isOpen(): boolean {
    return !this.response.writableEnded && !this.response.destroyed;
  }

  bufferedAmount(): number {
    return this.response.writableLength;
  }

  write(data: Buffer): void {
    if (data.length > 0 && this.isOpen()) this.response.write(data);
  }

  cork(): void {
    this.response.cork();
  }

  uncork(): void {
    this.response.uncork();
  }

  ping(): void {
    this.write(KEEP_ALIVE);
  }

  listen(handlers: TransportHandlers): void {
    // 'close' fires when the response ended or the client went away, whichever comes first.
    this.response.on('close', () => handlers.close());
    this.response.on('error', (error) => handlers.error(error));
    this.response.on('drain', () => handlers.drain());
  }
}
