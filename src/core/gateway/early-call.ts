import {
  type AdapterChunk,
  AdapterError,
  type AdapterResult,
  type ModelAdapter,
  type ModelRequest,
} from '../runtime/model-adapter.js';

/**
 * A gateway request's provider call, sent as soon as the route is known, before metis has recorded the
 * session and the turn: the bookkeeping (a session row, four events and their commit) then waits for
 * the first chunk (at most a few ms, `firstChunkOr`) instead of adding to the client's time to first
 * token (bench/gateway.ts). The
 * request sent is the one the model call would send (the client's conversation, system prompt and
 * tools); the call (model-call.ts) then reads this stream through `adapter`, which hands each chunk to
 * the gateway's answer as it comes and keeps the provider's failure for the error the client gets.
 */
export class EarlyCall {
  private readonly generator: AsyncGenerator<AdapterChunk, AdapterResult, void>;
  private first: Promise<IteratorResult<AdapterChunk, AdapterResult>> | null;
  private readonly stop = new AbortController();
  private taken = false;
  private firstSent = false;
  private failed: AdapterError | null = null;
  readonly adapter: ModelAdapter;

  constructor(
    inner: ModelAdapter,
    request: ModelRequest,
    signal: AbortSignal,
    private readonly onChunk: ((chunk: AdapterChunk) => void) | undefined,
  ) {
    this.generator = inner.stream(request, AbortSignal.any([signal, this.stop.signal]));
    // The first chunk goes to the client the moment it comes, whatever metis is doing.
    this.first = this.generator.next().then((next) => {
      if (!next.done) {
        this.firstSent = true;
        this.onChunk?.(next.value);
      }
      return next;
    });
    // Read by `adapter` later; a failure before then is not an unhandled rejection meanwhile.
    this.first.catch(() => undefined);
    this.adapter = { provider: inner.provider, stream: () => this.read() };
  }

  /**
   * Resolves when the first chunk came (or the call failed), or after `ms`, whichever is first. metis
   * records the session and the turn after it: their commit (synchronous SQLite work on this thread)
   * then never stands between a fast provider's first token and the client, and a slow provider's
   * first token finds it done. The trace's `llm.call_started` is at most `ms` late for it.
   */
  async firstChunkOr(ms: number): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const first = this.first;
    if (first === null) return;
    await Promise.race([
      first.then(
        () => undefined,
        () => undefined,
      ),
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, ms);
      }),
    ]);
    clearTimeout(timer);
    // The chunk's write is corked until the next tick (node:http): let it out before the bookkeeping.
    await new Promise((resolve) => setImmediate(resolve));
  }

  /** The provider's failure, when the call failed. */
  failure(): AdapterError | null {
    return this.failed;
  }

  /** The turn ended before its model call read the stream (it failed first): the request is stopped. */
  abandon(): void {
    if (this.taken) return;
    this.taken = true;
    this.stop.abort();
    this.first?.catch(() => undefined);
    void this.generator.return(undefined as never).catch(() => undefined);
  }

  private async *read(): AsyncGenerator<AdapterChunk, AdapterResult, void> {
    if (this.taken) throw new AdapterError('other', 'the early call was read twice');
    this.taken = true;
    try {
      for (;;) {
        const early = this.first;
        this.first = null;
        const next = await (early ?? this.generator.next());
        if (next.done) return next.value;
        if (early === null || !this.firstSent) this.onChunk?.(next.value);
        yield next.value;
      }
    } catch (error) {
      this.failed = error instanceof AdapterError ? error : new AdapterError('other', String(error));
      throw error;
    } finally {
      // Left early (a cancel between chunks): the provider's stream is closed too.
      void this.generator.return(undefined as never).catch(() => undefined);
    }
  }
}
