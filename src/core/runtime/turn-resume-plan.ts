import type { MessageRecord, ToolCallRecord } from '../store/session-store.js';
import type { ContentBlock, StopReason } from './model-adapter.js';

type ToolUseBlock = Extract<ContentBlock, { type: 'tool_use' }>;
type ToolResultBlock = Extract<ContentBlock, { type: 'tool_result' }>;

/** One stored event of a turn, its payload parsed. */
export interface StoredTurnEvent {
  readonly id: string;
  readonly type: string;
  readonly parent_event_id: string | null;
  readonly timestamp_us: number;
  readonly payload: Record<string, any>;
}

/** A streaming-only event from the stream archive (the cut message's deltas), parsed. */
export interface ArchivedStreamEvent {
  readonly id: string;
  readonly type: string;
  readonly parent_event_id: string | null;
  readonly payload: Record<string, any>;
}

/** Where a tool use of the cut call stood when the process stopped (ToolDispatcher.resume). */
export type StoredToolUse =
  /** Its end is stored: the stored result is handed to the model again, the tool is not run. */
  | { readonly kind: 'ended'; readonly result: ToolResultBlock; readonly eventId: string }
  /** Its row says it finished, its end event was not stored: announced now from the row, not run. */
  | { readonly kind: 'finished_unannounced'; readonly calledId: string; readonly row: ToolCallRecord }
  /** Scheduled, never started (its confirmation was pending, say): it runs now, asking again. */
  | { readonly kind: 'not_started'; readonly calledId: string }
  /** It was running: run again only if its tool is safe to repeat, otherwise reported interrupted. */
  | { readonly kind: 'running'; readonly calledId: string };

/** What the resumed turn does first, once the cut call (if any) is closed. */
export type ResumeStep =
  /** Cut before routing: routed now, then as a new turn. */
  | { readonly kind: 'route' }
  /** A model call on the stored history; `parent` null: the cut call's `llm.call_failed`. */
  | { readonly kind: 'call'; readonly parent: string | null }
  /** The tool uses of the last completed call, some of them done, then a model call. */
  | {
      readonly kind: 'tools';
      readonly callCompletedId: string;
      readonly messageId: string;
      readonly uses: readonly ToolUseBlock[];
      readonly stored: ReadonlyMap<string, StoredToolUse>;
    }
  /** The loop had finished: only the turn's end is missing. */
  | { readonly kind: 'end'; readonly stopReason: StopReason; readonly status: 'completed' | 'failed' }
  /** A cancel was under way: the turn ends cancelled. */
  | { readonly kind: 'cancelled' };

/** A model call the stop cut mid-stream, and the message it was streaming (from the archive). */
export interface CutCall {
  readonly startedId: string;
  readonly model: string;
  readonly provider: string;
  readonly startedUs: number;
  /** The turn's last stored event: as far as the store knows, when the call was cut. */
  readonly cutUs: number;
  readonly message: {
    readonly messageId: string;
    readonly startId: string;
    readonly content: unknown[];
  } | null;
}

/** A turn the last run left open, and how it goes on (turn-resume.ts). */
export interface CutTurn {
  readonly sessionId: string;
  readonly turnId: string;
  readonly turnStartedId: string;
  readonly turnStartedUs: number;
  /** The turn's user message, for routing a turn cut before it was routed. */
  readonly userText: string;
  /** Which resumption this is (1 for the first restart), and the cap. */
  readonly resumption: number;
  readonly maxResumptions: number;
  /** The model serving it when cut; null before routing. */
  readonly model: string | null;
  readonly totals: {
    readonly llmCalls: number;
    readonly toolCalls: number;
    readonly inputTokens: number;
    readonly outputTokens: number;
    readonly costUsd: number;
  };
  readonly cutCall: CutCall | null;
  /**
   * Assistant messages stored since the cut call started (its message, if it completed before its call
   * was stored as ended): marked `error`, so the history the call is issued again on leaves them out.
   */
  readonly cutMessages: readonly MessageRecord[];
  readonly step: ResumeStep;
}

export interface PlanInput {
  readonly sessionId: string;
  readonly turnId: string;
  readonly turnStartedId: string;
  readonly events: readonly StoredTurnEvent[];
  /** The turn's stored messages, oldest first. */
  readonly messages: readonly MessageRecord[];
  readonly toolRow: (toolUseId: string) => ToolCallRecord | null;
  /** Streaming events archived after the cut call's `llm.call_started` (empty: none, or no cut call). */
  readonly streamed: readonly ArchivedStreamEvent[];
  readonly resumption: number;
  readonly maxResumptions: number;
}

const ENDS = new Set(['llm.call_completed', 'llm.call_failed']);
const TOOL_ENDS = new Set(['tool.completed', 'tool.failed']);

/** Reads off a cut turn's stored events where it stood and what it does next. */
export function planResume(input: PlanInput): CutTurn {
  const { events } = input;
  const started = events.find((e) => e.id === input.turnStartedId);
  const ends = new Map(events.filter((e) => ENDS.has(e.type)).map((e) => [e.parent_event_id, e]));
  const calls = events.filter((e) => e.type === 'llm.call_started');
  const completed = events.filter((e) => e.type === 'llm.call_completed');
  const last = calls.at(-1);
  const routed = events.find((e) => e.type === 'route.decided');
  const lastEnd = last === undefined ? undefined : ends.get(last.id);
  const cutUs = Math.max(0, ...events.map((e) => e.timestamp_us));
  const cutCall = last !== undefined && lastEnd === undefined ? cutCallOf(last, input.streamed, cutUs) : null;
  const userText = textOf(input.messages.find((m) => m.role === 'user')?.content ?? []);
  const cutMessages =
    cutCall === null
      ? []
      : input.messages.filter((m) => m.role === 'assistant' && m.created_at_us >= cutCall.startedUs);
  return {
    sessionId: input.sessionId,
    turnId: input.turnId,
    turnStartedId: input.turnStartedId,
    turnStartedUs: started?.timestamp_us ?? events[0]?.timestamp_us ?? 0,
    userText,
    resumption: input.resumption,
    maxResumptions: input.maxResumptions,
    model: last?.payload.model ?? routed?.payload.chosen_model ?? null,
    totals: {
      llmCalls: calls.length,
      toolCalls: events.filter((e) => e.type === 'tool.called').length,
      inputTokens: sum(completed, 'input_tokens'),
      outputTokens: sum(completed, 'output_tokens'),
      costUsd: sum(completed, 'cost_usd'),
    },
    cutCall,
    cutMessages,
    step: stepOf(input, last, lastEnd, routed !== undefined),
  };
}

function stepOf(
  input: PlanInput,
  last: StoredTurnEvent | undefined,
  lastEnd: StoredTurnEvent | undefined,
  routed: boolean,
): ResumeStep {
  if (last === undefined) return routed ? { kind: 'call', parent: input.turnStartedId } : { kind: 'route' };
  if (lastEnd === undefined) return { kind: 'call', parent: null };
  const after = input.events.filter((e) => e.id > lastEnd.id);
  if (lastEnd.type === 'llm.call_failed') {
    if (lastEnd.payload.error_class !== 'cancelled')
      return { kind: 'end', stopReason: 'end_turn', status: 'failed' };
    // A call an override cut: the turn goes on with the new model. Any other cut call was a cancel.
    const overridden = after.find((e) => e.type === 'route.overridden');
    return overridden === undefined ? { kind: 'cancelled' } : { kind: 'call', parent: overridden.id };
  }
  const stopReason = (lastEnd.payload.stop_reason ?? 'end_turn') as StopReason;
  const assistant = input.messages.filter((m) => m.role === 'assistant' && m.status === 'complete').at(-1);
  const uses = (assistant?.content ?? []).filter(
    (b): b is ToolUseBlock => (b as { type?: string }).type === 'tool_use',
  );
  if (stopReason !== 'tool_use' || uses.length === 0 || assistant === undefined) {
    return { kind: 'end', stopReason, status: 'completed' };
  }
  // The tool message is stored once every tool of the call ended: only the next model call is missing.
  const toolMessage = input.messages.find((m) => m.role === 'tool' && m.id > assistant.id);
  if (toolMessage !== undefined) {
    const lastToolEvent = after
      .filter((e) => TOOL_ENDS.has(e.type) || e.type === 'tool.input_invalid')
      .at(-1);
    return { kind: 'call', parent: lastToolEvent?.id ?? lastEnd.id };
  }
  const stored = new Map<string, StoredToolUse>();
  for (const use of uses) {
    const called = after.find(
      (e) => e.type === 'tool.called' && e.payload.tool_use_id === use.id && e.parent_event_id === lastEnd.id,
    );
    if (called === undefined) continue;
    const end = after.find((e) => TOOL_ENDS.has(e.type) && e.parent_event_id === called.id);
    const row = input.toolRow(use.id);
    if (end !== undefined)
      stored.set(use.id, { kind: 'ended', result: resultOf(use.id, end, row), eventId: end.id });
    else if (row?.status === 'completed' || row?.status === 'failed')
      stored.set(use.id, { kind: 'finished_unannounced', calledId: called.id, row });
    else if (row?.status === 'running') stored.set(use.id, { kind: 'running', calledId: called.id });
    else stored.set(use.id, { kind: 'not_started', calledId: called.id });
  }
  return { kind: 'tools', callCompletedId: lastEnd.id, messageId: assistant.id, uses, stored };
}

/** The tool_result the model was (or would have been) given for a stored end. */
function resultOf(toolUseId: string, end: StoredTurnEvent, row: ToolCallRecord | null): ToolResultBlock {
  if (end.type === 'tool.failed') {
    return {
      type: 'tool_result',
      tool_use_id: toolUseId,
      content: String(end.payload.error_message),
      is_error: true,
    };
  }
  const output = row?.status === 'completed' && typeof row.output === 'string' ? row.output : null;
  return {
    type: 'tool_result',
    tool_use_id: toolUseId,
    // Stored with its event but not its row (they are written apart): the tool ran, it is not run again.
    content: output ?? 'this tool ran, but its output was lost when the server stopped',
    is_error: output === null || end.payload.success === false,
  };
}

/** The cut call, and what its message had streamed, rebuilt from the archived deltas. */
function cutCallOf(
  started: StoredTurnEvent,
  streamed: readonly ArchivedStreamEvent[],
  cutUs: number,
): CutCall {
  const start = streamed.find((e) => e.type === 'message.start' && e.parent_event_id === started.id);
  const messageId = start === undefined ? null : String(start.payload.message_id);
  const closed = streamed.some((e) => e.type === 'message.complete' && e.payload.message_id === messageId);
  return {
    startedId: started.id,
    model: String(started.payload.model),
    provider: String(started.payload.provider),
    startedUs: started.timestamp_us,
    cutUs,
    message:
      start === undefined || messageId === null || closed
        ? null
        : {
            messageId,
            startId: start.id,
            content: contentOf(streamed.filter((e) => e.payload.message_id === messageId)),
          },
  };
}

/** The blocks a message's deltas built, as `message.complete.final_content` carries them. */
function contentOf(deltas: readonly ArchivedStreamEvent[]): unknown[] {
  const blocks: { type: string; [field: string]: unknown }[] = [];
  for (const { type, payload } of deltas) {
    const index = Number(payload.content_block_index);
    if (!Number.isInteger(index) || index < 0) continue;
    const block = blocks[index];
    if (type === 'text.delta') {
      blocks[index] = { type: 'text', text: (block?.type === 'text' ? block.text : '') + payload.text };
    } else if (type === 'thinking.delta') {
      blocks[index] = {
        type: 'thinking',
        thinking: (block?.type === 'thinking' ? block.thinking : '') + payload.text,
        signature: payload.signature ?? block?.signature ?? null,
      };
    } else if (type === 'tool.use_start') {
      blocks[index] = { type: 'tool_use', id: payload.tool_use_id, name: payload.tool_name, input: {} };
    } else if (type === 'tool.use_end' && block?.type === 'tool_use') {
      blocks[index] = { ...block, input: payload.final_input ?? {} };
    }
  }
  return blocks.filter((block) => block !== undefined);
}

function textOf(content: readonly unknown[]): string {
  return content
    .map((b) => ((b as { type?: string }).type === 'text' ? String((b as { text?: string }).text ?? '') : ''))
    .join('');
}

function sum(events: readonly StoredTurnEvent[], field: string): number {
  return events.reduce((total, e) => total + (Number(e.payload[field]) || 0), 0);
}
