import type { ServerResponse } from 'node:http';
import type { MetisEvent } from '../events/envelope.js';
import { writeEventStreamHead } from '../http/http-util.js';
import { CLOSE } from './client-frames.js';
import type { EventFrames } from './event-frames.js';
import { EventStreamResponse } from './event-stream-response.js';
import { isQuestionToUser } from './stream-hub.js';
import type { FrameType, StreamTransport } from './stream-transport.js';

/** A protocol's mapper of one turn's events to its own (ui-message-stream.ts, ag-ui-events.ts). */
export interface TurnMapper {
  onEvent(event: MetisEvent): void;
  /** The protocol's error: the server ends the stream before its turn ended. */
  fail(code: string, message: string): void;
  /** What follows the turn's last event (`[DONE]`; nothing in AG-UI). */
  end(): void;
  /**
   * Set when the protocol's run ended before the turn did (an AG-UI run ends where the turn waits for
   * the client: an interrupt, a frontend tool): the stream ends there and leaves the turn running.
   */
  readonly runOver?: boolean;
}

export interface TurnProtocol {
  readonly kind: 'ai-sdk' | 'ag-ui';
  /** The metis events the mapper reads: the stream's subscription filter. */
  readonly eventTypes: readonly string[];
  /** Headers beside the event stream's own (`x-vercel-ai-ui-message-stream: v1`). */
  readonly headers?: Readonly<Record<string, string>>;
}

const NOTHING = Buffer.alloc(0);
const TURN_ENDS = new Set(['turn.completed', 'turn.cancelled']);

/**
 * The `data:` lines a mapper writes for one metis event, gathered into one queue entry: a client's
 * queue counts events, as on every transport, however many chunks each maps to.
 */
export class SseData {
  private text = '';

  /** One `data:` line: the JSON of a chunk, or a string as it is (`[DONE]`). */
  readonly write = (data: unknown): void => {
    this.text += `data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`;
  };

  take(): Buffer {
    if (this.text === '') return NOTHING;
    const data = Buffer.from(this.text);
    this.text = '';
    return data;
  }
}

/**
 * A turn's own stream in another protocol (the AI SDK's UI message stream, AG-UI), as a transport of
 * the one subscription core (client-connection.ts): the connection subscribes to the events the mapper
 * reads, and this transport hands the turn's own (and its workers' questions to the user) to the mapper
 * and encodes what it writes; the core's control frames have no equivalent and encode to nothing. So
 * the queue bound, the heartbeat (an SSE comment, which both protocols' parsers skip) and the close of
 * a reader too slow are those of every stream. A close by the server is the protocol's error event
 * (`error`, `RUN_ERROR`) with the code the WebSocket close would carry, and leaves the turn running.
 */
export class TurnTransport extends EventStreamResponse implements StreamTransport {
  /** Set when the server ended the stream (the turn ended, a reader too slow): not the client's doing. */
  closedByServer = false;
  /** Set once the turn's last event (or the run's, `TurnMapper.runOver`) went to the mapper. */
  turnOver = false;
  private turnId: string | null = null;
  private started = false;
  private failed = false;
  private readonly over: Promise<void>;
  private settleOver!: () => void;

  constructor(
    response: ServerResponse,
    private readonly protocol: TurnProtocol,
    private readonly mapper: TurnMapper,
    /** Where the mapper writes. */
    private readonly data: SseData,
    private readonly sessionId: string,
  ) {
    super(response);
    this.over = new Promise((resolve) => (this.settleOver = resolve));
  }

  get kind(): TurnProtocol['kind'] {
    return this.protocol.kind;
  }

  get eventTypes(): readonly string[] {
    return this.protocol.eventTypes;
  }

  /** Resolves once the turn's last event (`turn.completed`, `turn.cancelled`) went to the mapper. */
  get ended(): Promise<void> {
    return this.over;
  }

  /** Starts the answer: the head, then what the mapper wrote to open it (`start`, `RUN_STARTED`). */
  begin(turnId: string): void {
    this.turnId = turnId;
    writeEventStreamHead(this.response, this.protocol.headers);
    this.started = true;
    this.write(this.data.take());
  }

  override isOpen(): boolean {
    return this.started && super.isOpen();
  }

  encodeEvent(frames: EventFrames): Buffer {
    return this.map(frames.event);
  }

  encode(text: string, type: FrameType): Buffer {
    // Replayed and seam events come as frame text (a resume's replay from the store).
    if (type === 'event') return this.map((JSON.parse(text) as { event: MetisEvent }).event);
    if (type === 'error' || type === 'subscribe_error') {
      const { code, message } = JSON.parse(text) as { code: string; message: string };
      this.failed = true;
      this.mapper.fail(code, message);
      return this.data.take();
    }
    // No ack, snapshot, lag warning or pong in these protocols.
    return NOTHING;
  }

  close(code: number, reason: string): void {
    if (!this.isOpen()) return;
    this.closedByServer = true;
    if (code === CLOSE.normal) this.mapper.end();
    else if (!this.failed) {
      const why = reasonOf(code, reason);
      this.mapper.fail(why.code, why.message);
    }
    this.response.end(this.data.take());
  }

  /** The mapper's events for one of the turn's, once: what follows the turn's end is not this stream's. */
  private map(event: MetisEvent): Buffer {
    if (this.turnOver) return NOTHING;
    const ours =
      event.turn_id === this.turnId || (event.session_id !== this.sessionId && isQuestionToUser(event));
    if (!ours) return NOTHING;
    this.mapper.onEvent(event);
    if (this.mapper.runOver === true || (event.session_id === this.sessionId && TURN_ENDS.has(event.type))) {
      this.turnOver = true;
      this.settleOver();
    }
    return this.data.take();
  }
}

/** The code and message of a close reason: `{code, message}` JSON, or a plain text (a shutdown). */
function reasonOf(code: number, reason: string): { code: string; message: string } {
  try {
    const parsed = JSON.parse(reason) as { code?: unknown; message?: unknown };
    if (typeof parsed.code === 'string')
      return {
        code: parsed.code,
        message: typeof parsed.message === 'string' ? parsed.message : parsed.code,
      };
  } catch {
    // not JSON: the reason is the message
  }
  return { code: code === CLOSE.serverShutdown ? 'shutdown' : 'stream_closed', message: reason };
}
