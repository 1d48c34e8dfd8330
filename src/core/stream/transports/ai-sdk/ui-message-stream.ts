import type { MetisEvent } from '../../../events/envelope.js';

/** One chunk of the AI SDK's UI message stream (ai 6, `UIMessageChunk`). */
export type UiChunk = { readonly type: string } & Record<string, unknown>;

/** The metis events the mapper reads (its switch below): a turn stream subscribes to these alone. */
export const UI_MESSAGE_EVENT_TYPES = [
  'llm.call_started',
  'text.delta',
  'thinking.delta',
  'message.complete',
  'tool.use_start',
  'tool.use_input_delta',
  'tool.use_end',
  'tool.confirmation_requested',
  'tool.confirmation_resolved',
  'tool.completed',
  'tool.failed',
  'llm.call_failed',
  'llm.call_completed',
  'turn.completed',
  'turn.cancelled',
] as const;

const FINISH_REASONS: Record<string, string> = {
  end_turn: 'stop',
  stop_sequence: 'stop',
  max_tokens: 'length',
  tool_use: 'tool-calls',
};

/**
 * Maps the events of one metis turn to the AI SDK's UI message stream (docs/ai-sdk.md): one assistant
 * UI message per turn (its id is the turn id), a step per model call, text and reasoning parts per
 * content block, tool parts from the tool-use stream and the tool's end, a confirmation as a
 * `tool-approval-request`, and `finish`, `abort` or `error` at the end. A confirmation still waiting
 * ends the stream (`finish`, then `[DONE]`) as the AI SDK's own approvals do, though the turn waits on:
 * `useChat` sends the UI's answer only once the request is over, and the next request goes on with it.
 */
export class UiMessageStreamMapper {
  /** Text and reasoning parts started and not ended, by part id. */
  private readonly open = new Map<string, 'text' | 'reasoning'>();
  private readonly toolNames = new Map<string, string>();
  /**
   * Tools that completed, told once their result is stored: the turn saves the results after the
   * tools ran, before the next model call or the turn's end.
   */
  private readonly completed: string[] = [];
  private failed: string | null = null;
  private stoppedForApproval = false;

  constructor(
    private readonly write: (chunk: UiChunk | '[DONE]') => void,
    /** The tool's result as the model got it, when it can be read. */
    private readonly toolOutput: (toolUseId: string) => unknown,
    /** Whether the confirmation still waits for an answer (not answered elsewhere, nor timed out). */
    private readonly awaitsAnswer: (confirmationRequestId: string) => boolean,
  ) {}

  /** The stream stops at an approval request still waiting: the answer comes with the next request. */
  get runOver(): boolean {
    return this.stoppedForApproval;
  }

  start(turnId: string): void {
    this.write({ type: 'start', messageId: turnId });
  }

  onEvent(event: MetisEvent): void {
    const p = event.payload as Record<string, any>;
    switch (event.type) {
      case 'llm.call_started':
        this.flushOutputs();
        this.write({ type: 'start-step' });
        return;
      case 'text.delta':
      case 'thinking.delta': {
        const kind = event.type === 'text.delta' ? 'text' : 'reasoning';
        const id = `${p.message_id}:${p.content_block_index}`;
        if (!this.open.has(id)) {
          this.open.set(id, kind);
          this.write({ type: `${kind}-start`, id });
        }
        if (p.text) this.write({ type: `${kind}-delta`, id, delta: p.text });
        return;
      }
      case 'message.complete':
        for (const [id, kind] of this.open) this.write({ type: `${kind}-end`, id });
        this.open.clear();
        return;
      case 'tool.use_start':
        this.toolNames.set(p.tool_use_id, p.tool_name);
        this.write({ type: 'tool-input-start', toolCallId: p.tool_use_id, toolName: p.tool_name });
        return;
      case 'tool.use_input_delta':
        this.write({ type: 'tool-input-delta', toolCallId: p.tool_use_id, inputTextDelta: p.partial_json });
        return;
      case 'tool.use_end':
        this.write({
          type: 'tool-input-available',
          toolCallId: p.tool_use_id,
          toolName: this.toolNames.get(p.tool_use_id) ?? 'unknown',
          input: p.final_input,
        });
        return;
      case 'tool.confirmation_requested':
        this.write({
          type: 'tool-approval-request',
          approvalId: p.confirmation_request_id,
          toolCallId: p.tool_use_id,
        });
        if (!this.awaitsAnswer(p.confirmation_request_id)) return;
        this.stoppedForApproval = true;
        this.flushOutputs();
        this.write({ type: 'finish', finishReason: 'tool-calls' });
        return;
      case 'tool.confirmation_resolved':
        if (p.decision === 'deny') this.write({ type: 'tool-output-denied', toolCallId: p.tool_use_id });
        return;
      case 'tool.completed':
        this.completed.push(p.tool_use_id);
        return;
      case 'tool.failed':
        if (p.error_class === 'user_denied') return; // told by tool-output-denied
        this.write({
          type: 'tool-output-error',
          toolCallId: p.tool_use_id,
          errorText: String(p.error_message),
        });
        return;
      case 'llm.call_failed':
        if (p.error_class !== 'cancelled') this.failed = `${p.error_class}: ${p.error_message_redacted}`;
        this.write({ type: 'finish-step' });
        return;
      case 'llm.call_completed':
        this.write({ type: 'finish-step' });
        return;
      case 'turn.completed':
        this.flushOutputs();
        if (this.failed !== null) {
          this.write({ type: 'error', errorText: this.failed });
          this.write({ type: 'finish', finishReason: 'error' });
        } else {
          this.write({ type: 'finish', finishReason: FINISH_REASONS[p.stop_reason] ?? 'other' });
        }
        return;
      case 'turn.cancelled':
        this.flushOutputs();
        this.write({ type: 'abort', reason: String(p.reason) });
        return;
    }
  }

  /** The stream ends before its turn (the server closed it: a reader too slow for the queue bound). */
  fail(code: string, message: string): void {
    this.write({ type: 'error', errorText: `${code}: ${message}` });
  }

  /** The stream ends with its turn. */
  end(): void {
    this.write('[DONE]');
  }

  private flushOutputs(): void {
    for (const toolCallId of this.completed.splice(0))
      this.write({ type: 'tool-output-available', toolCallId, output: this.toolOutput(toolCallId) });
  }
}
