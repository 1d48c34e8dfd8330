import type { MetisEvent } from '../../../events/envelope.js';

/** One AG-UI event (`@ag-ui/core` 1.0), as sent on the wire. */
export type AgUiEvent = { readonly type: string } & Record<string, unknown>;

interface OpenBlock {
  readonly id: string;
  readonly kind: 'text' | 'reasoning';
}

/** The metis events the mapper reads (its switch below): a run's stream subscribes to these alone. */
export const AG_UI_EVENT_TYPES = [
  'route.decided',
  'llm.call_started',
  'llm.call_completed',
  'llm.call_failed',
  'text.delta',
  'thinking.delta',
  'message.complete',
  'tool.use_start',
  'tool.use_input_delta',
  'tool.use_end',
  'tool.completed',
  'tool.failed',
  'tool.confirmation_requested',
  'tool.confirmation_resolved',
  'delegate.started',
  'delegate.completed',
  'delegate.failed',
  'turn.completed',
  'turn.cancelled',
] as const;

/**
 * The AG-UI run that starts no turn (a `RunAgentInput` with no messages): it reports the thread as
 * stored, in the order the client's verifier expects of any run.
 */
export function threadReport(threadId: string, runId: string, messages: unknown[]): AgUiEvent[] {
  return [
    { type: 'RUN_STARTED', threadId, runId },
    { type: 'MESSAGES_SNAPSHOT', messages },
    { type: 'RUN_FINISHED', threadId, runId },
  ];
}

/**
 * Maps the events of one metis turn to an AG-UI run (docs/ag-ui.md). Each content block of a model's
 * message is its own AG-UI text or reasoning message (id `<message_id>:<block>`), ended before the next
 * block starts, so messages never interleave with each other or with tool calls; tool calls keep the
 * provider's tool-use id; model calls, the routing decision and delegations are steps; what AG-UI has no
 * type for (confirmations, the cost) is CUSTOM `metis.*`.
 */
export class AgUiMapper {
  private open: OpenBlock | null = null;
  private lastText: string | null = null;
  private readonly completed: string[] = [];
  private failure: { message: string; code: string } | null = null;

  constructor(
    private readonly write: (event: AgUiEvent) => void,
    private readonly threadId: string,
    private readonly runId: string,
    /** The tool's result as the model got it, once stored. */
    private readonly toolResult: (toolUseId: string) => string,
    /** The thread's messages as stored, for the closing MESSAGES_SNAPSHOT. */
    private readonly snapshot: () => unknown[],
  ) {}

  start(): void {
    this.write({ type: 'RUN_STARTED', threadId: this.threadId, runId: this.runId });
  }

  onEvent(event: MetisEvent): void {
    const p = event.payload as Record<string, any>;
    switch (event.type) {
      case 'route.decided':
        this.write({ type: 'STEP_STARTED', stepName: 'route' });
        this.custom('metis.route_decided', {
          chosen_model: p.chosen_model,
          policy: p.chain?.[p.winner_index]?.policy,
        });
        this.write({ type: 'STEP_FINISHED', stepName: 'route' });
        return;
      case 'llm.call_started':
        this.flushResults();
        this.write({ type: 'STEP_STARTED', stepName: `model:${p.model}` });
        return;
      case 'llm.call_completed':
      case 'llm.call_failed':
        this.closeBlock();
        if (event.type === 'llm.call_failed' && p.error_class !== 'cancelled')
          this.failure = { message: String(p.error_message_redacted), code: String(p.error_class) };
        this.write({ type: 'STEP_FINISHED', stepName: `model:${p.model}` });
        return;
      case 'text.delta':
      case 'thinking.delta':
        this.block(
          event.type === 'text.delta' ? 'text' : 'reasoning',
          `${p.message_id}:${p.content_block_index}`,
          p.text,
        );
        return;
      case 'message.complete':
        this.closeBlock();
        return;
      case 'tool.use_start':
        this.closeBlock();
        this.write({
          type: 'TOOL_CALL_START',
          toolCallId: p.tool_use_id,
          toolCallName: p.tool_name,
          ...(this.lastText === null ? {} : { parentMessageId: this.lastText }),
        });
        return;
      case 'tool.use_input_delta':
        if (p.partial_json)
          this.write({ type: 'TOOL_CALL_ARGS', toolCallId: p.tool_use_id, delta: p.partial_json });
        return;
      case 'tool.use_end':
        this.write({ type: 'TOOL_CALL_END', toolCallId: p.tool_use_id });
        return;
      case 'tool.completed':
      case 'tool.failed':
        this.completed.push(p.tool_use_id);
        return;
      case 'tool.confirmation_requested':
        this.custom('metis.confirmation_requested', {
          session_id: event.session_id,
          confirmation_request_id: p.confirmation_request_id,
          tool_use_id: p.tool_use_id,
          tool_name: p.tool_name,
          side_effects: p.side_effects,
          input_summary: p.input_summary,
          expires_at: p.expires_at,
          answer: `POST /sessions/${event.session_id}/confirmations/${p.confirmation_request_id}`,
        });
        return;
      case 'tool.confirmation_resolved':
        this.custom('metis.confirmation_resolved', {
          confirmation_request_id: p.confirmation_request_id,
          tool_use_id: p.tool_use_id,
          decision: p.decision,
        });
        return;
      case 'delegate.started':
        this.write({ type: 'STEP_STARTED', stepName: `delegate:${p.worker_session_id}` });
        return;
      case 'delegate.completed':
      case 'delegate.failed':
        if (p.worker_session_id)
          this.write({ type: 'STEP_FINISHED', stepName: `delegate:${p.worker_session_id}` });
        return;
      case 'turn.completed':
        this.finishRun({
          stop_reason: p.stop_reason,
          total_cost_usd: p.total_cost_usd,
          llm_call_count: p.llm_call_count,
        });
        return;
      case 'turn.cancelled':
        this.finishRun({ cancelled: p.reason });
        return;
    }
  }

  /** The stream ends before its turn (the server closed it: a reader too slow for the queue bound). */
  fail(code: string, message: string): void {
    // Nothing is closed first: what the dropped queue held never reached the client, so the blocks
    // this mapper has open may not be open there.
    this.write({ type: 'RUN_ERROR', message, code });
  }

  /** The stream ends with its turn: RUN_FINISHED or RUN_ERROR went out already. */
  end(): void {}

  private finishRun(summary: Record<string, unknown>): void {
    this.closeBlock();
    this.flushResults();
    this.custom('metis.cost', summary);
    if (this.failure !== null && !('cancelled' in summary)) {
      this.write({ type: 'RUN_ERROR', ...this.failure });
      return;
    }
    this.write({ type: 'MESSAGES_SNAPSHOT', messages: this.snapshot() });
    this.write({
      type: 'RUN_FINISHED',
      threadId: this.threadId,
      runId: this.runId,
      result: summary,
      ...('cancelled' in summary ? { outcome: { type: 'cancelled' } } : {}),
    });
  }

  private block(kind: OpenBlock['kind'], id: string, delta: string): void {
    if (this.open?.id !== id) {
      this.closeBlock();
      this.open = { id, kind };
      if (kind === 'text') {
        this.write({ type: 'TEXT_MESSAGE_START', messageId: id, role: 'assistant' });
        this.lastText = id;
      } else {
        this.write({ type: 'REASONING_START', messageId: id });
        this.write({ type: 'REASONING_MESSAGE_START', messageId: id, role: 'reasoning' });
      }
    }
    if (!delta) return;
    this.write({
      type: kind === 'text' ? 'TEXT_MESSAGE_CONTENT' : 'REASONING_MESSAGE_CONTENT',
      messageId: id,
      delta,
    });
  }

  private closeBlock(): void {
    const open = this.open;
    if (open === null) return;
    this.open = null;
    if (open.kind === 'text') this.write({ type: 'TEXT_MESSAGE_END', messageId: open.id });
    else {
      this.write({ type: 'REASONING_MESSAGE_END', messageId: open.id });
      this.write({ type: 'REASONING_END', messageId: open.id });
    }
  }

  /** Tool results go out once stored: before the next model call, or at the end of the turn. */
  private flushResults(): void {
    for (const toolCallId of this.completed.splice(0))
      this.write({
        type: 'TOOL_CALL_RESULT',
        messageId: `${toolCallId}:result`,
        toolCallId,
        content: this.toolResult(toolCallId),
        role: 'tool',
      });
  }

  private custom(name: string, value: unknown): void {
    this.write({ type: 'CUSTOM', name, value });
  }
}
