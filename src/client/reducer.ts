/**
 * The message reducer: a pure function from (state, frame) to state that rebuilds the conversation
 * from a snapshot plus events. It never guesses from timing: blocks are keyed by `message_id` and
 * `content_block_index`, tool input is replaced by `tool.use_end.final_input`, and the rebuilt message
 * is checked against `message.complete.final_content`, which wins on a mismatch (counted).
 */

import { CATALOG } from '../core/events/catalog/index.js';
import { STREAMING } from '../core/events/streaming.js';

export type BlockState =
  | { type: 'text'; text: string }
  | { type: 'thinking'; thinking: string; signature: string | null }
  | { type: 'redacted_thinking'; data: string }
  | {
      type: 'tool_use';
      id: string;
      name: string;
      partial_json: string;
      input: Record<string, unknown> | null;
    }
  | { type: 'tool_result'; tool_use_id: string; content: string; is_error: boolean };

export interface MessageState {
  id: string;
  session_id: string;
  turn_id: string | null;
  role: 'user' | 'assistant' | 'tool';
  model: string | null;
  status: 'streaming' | 'complete' | 'cancelled' | 'error';
  stop_reason: string | null;
  blocks: BlockState[];
  usage: Record<string, unknown> | null;
}

export interface ToolState {
  tool_use_id: string;
  tool_name: string;
  session_id: string;
  turn_id: string | null;
  /** `waiting_for_approval`: paused on a `tool.confirmation_requested` until the user decides. */
  status: 'requested' | 'waiting_for_approval' | 'running' | 'completed' | 'failed' | 'cancelled';
  input: Record<string, unknown> | null;
  error_class: string | null;
  error_message: string | null;
  latency_ms: number | null;
  worker_session_id: string | null;
}

export interface TurnState {
  turn_id: string;
  session_id: string;
  status: 'in_flight' | 'completed' | 'cancelled';
  chosen_model: string | null;
  route_reason: string | null;
  cancel_reason: string | null;
  cost_usd: number | null;
  llm_calls: number | null;
  tool_calls: number | null;
  errors: { error_class: string; message: string; retry_count: number }[];
  /** Whether the turn's last model call failed (a failed turn ends with `turn.completed` all the same). */
  last_call_failed: boolean;
}

export interface ConfirmationState {
  confirmation_request_id: string;
  /** The session whose tool waits: the attached one, or one of its workers. */
  session_id: string;
  tool_use_id: string;
  tool_name: string;
  summary: string;
  status: 'pending' | 'allow' | 'deny' | 'timeout';
}

/**
 * An entry of the snapshot's additive `pending_confirmations` (docs/http-api.md): a tool call waiting
 * for the user's decision when the snapshot was taken. Only the fields the client uses are listed.
 */
export interface SnapshotConfirmation {
  confirmation_request_id: string;
  /** The waiting session (a worker's, for a planner's snapshot); absent from older servers. */
  session_id?: string;
  tool_use_id: string;
  tool_name: string;
  summary: string;
}

export interface ConversationState {
  session: Record<string, unknown> | null;
  messages: MessageState[];
  tools: Record<string, ToolState>;
  turns: Record<string, TurnState>;
  confirmations: Record<string, ConfirmationState>;
  lastEventId: string | null;
  /** Messages whose deltas did not add up to `final_content` (final_content won). */
  mismatches: number;
  /** Events of types this client does not know, skipped (streaming §9.2). */
  unknownSkipped: number;
}

export const initialState: ConversationState = Object.freeze({
  session: null,
  messages: [],
  tools: {},
  turns: {},
  confirmations: {},
  lastEventId: null,
  mismatches: 0,
  unknownSkipped: 0,
}) as ConversationState;

export interface WireEvent {
  id: string;
  type: string;
  session_id: string;
  turn_id: string | null;
  payload: Record<string, any>;
  seq?: number | null;
}

/** Any server frame; only `snapshot` and `event` change the conversation. */
export type Frame = { type: string; [key: string]: any };

export function reduce(state: ConversationState, frame: Frame): ConversationState {
  if (frame.type === 'snapshot') return applySnapshot(state, frame);
  if (frame.type !== 'event') return state;
  const event = frame.event as WireEvent;
  // Ids strictly increase on a connection; an id seen before is a duplicate from a reconnect.
  if (state.lastEventId !== null && event.id <= state.lastEventId) return state;
  const next = applyEvent(state, event);
  return next === null
    ? { ...state, unknownSkipped: state.unknownSkipped + 1, lastEventId: event.id }
    : { ...next, lastEventId: event.id };
}

function applySnapshot(state: ConversationState, frame: Frame): ConversationState {
  const messages: MessageState[] = (frame.messages as any[]).map((m) => ({
    id: m.id,
    session_id: m.session_id,
    turn_id: m.turn_id ?? null,
    role: m.role,
    model: m.model ?? null,
    status: m.status,
    stop_reason: null,
    blocks: (m.content as any[]).map(blockFromContent),
    usage: m.usage ?? null,
  }));
  let next: ConversationState = { ...state, session: frame.session, messages };
  for (const event of (frame.in_flight_events ?? []) as WireEvent[]) next = applyEvent(next, event) ?? next;
  // Additive: tool calls waiting for a decision as of the snapshot (absent when there are none, so a
  // snapshot without the field leaves the confirmations as they were).
  const pending = (frame.pending_confirmations ?? []) as SnapshotConfirmation[];
  if (pending.length > 0) {
    const confirmations = { ...next.confirmations };
    const sessionId = String((frame.session as { id?: unknown } | null)?.id ?? '');
    for (const c of pending) {
      next = updateTool(next, c.tool_use_id, { status: 'waiting_for_approval' });
      confirmations[c.confirmation_request_id] = {
        confirmation_request_id: c.confirmation_request_id,
        session_id: c.session_id ?? sessionId,
        tool_use_id: c.tool_use_id,
        tool_name: c.tool_name,
        summary: c.summary,
        status: 'pending',
      };
    }
    next = { ...next, confirmations };
  }
  return { ...next, lastEventId: frame.snapshot_at_event_id ?? state.lastEventId };
}

function blockFromContent(block: any): BlockState {
  switch (block.type) {
    case 'text':
      return { type: 'text', text: block.text };
    case 'thinking':
      return { type: 'thinking', thinking: block.thinking, signature: block.signature ?? null };
    case 'redacted_thinking':
      return { type: 'redacted_thinking', data: block.data };
    case 'tool_use':
      return {
        type: 'tool_use',
        id: block.id,
        name: block.name,
        partial_json: JSON.stringify(block.input),
        input: block.input,
      };
    default:
      return {
        type: 'tool_result',
        tool_use_id: block.tool_use_id,
        content: block.content,
        is_error: block.is_error,
      };
  }
}

/** The canonical content list of rebuilt blocks, to compare with `final_content`. */
export function contentOf(blocks: readonly BlockState[]): unknown[] {
  return blocks.map((b) =>
    b.type === 'tool_use' ? { type: 'tool_use', id: b.id, name: b.name, input: b.input ?? {} } : { ...b },
  );
}

function updateMessage(
  state: ConversationState,
  id: string,
  update: (m: MessageState) => MessageState,
): ConversationState {
  const index = state.messages.findIndex((m) => m.id === id);
  if (index < 0) return state;
  const messages = state.messages.slice();
  messages[index] = update(messages[index]!);
  return { ...state, messages };
}

function setBlock(
  message: MessageState,
  index: number,
  update: (b: BlockState | undefined) => BlockState,
): MessageState {
  const blocks = message.blocks.slice();
  blocks[index] = update(blocks[index]);
  return { ...message, blocks };
}

function updateTool(
  state: ConversationState,
  id: string,
  patch: Partial<ToolState>,
  base?: ToolState,
): ConversationState {
  const current = state.tools[id] ?? base;
  if (!current) return state;
  return { ...state, tools: { ...state.tools, [id]: { ...current, ...patch } } };
}

function updateTurn(
  state: ConversationState,
  event: WireEvent,
  patch: Partial<TurnState>,
): ConversationState {
  const id = event.turn_id;
  if (!id) return state;
  const current: TurnState = state.turns[id] ?? {
    turn_id: id,
    session_id: event.session_id,
    status: 'in_flight',
    chosen_model: null,
    route_reason: null,
    cancel_reason: null,
    cost_usd: null,
    llm_calls: null,
    tool_calls: null,
    errors: [],
    last_call_failed: false,
  };
  return { ...state, turns: { ...state.turns, [id]: { ...current, ...patch } } };
}

/** Applies one event; null for a type this reducer does not know. */
function applyEvent(state: ConversationState, event: WireEvent): ConversationState | null {
  const p = event.payload;
  switch (event.type) {
    case 'message.start':
      if (state.messages.some((m) => m.id === p.message_id)) return state;
      return {
        ...state,
        messages: [
          ...state.messages,
          {
            id: p.message_id,
            session_id: event.session_id,
            turn_id: event.turn_id,
            role: p.role,
            model: p.model ?? null,
            status: 'streaming',
            stop_reason: null,
            blocks: [],
            usage: null,
          },
        ],
      };
    case 'text.delta':
      return updateMessage(state, p.message_id, (m) =>
        setBlock(m, p.content_block_index, (b) => ({
          type: 'text',
          text: (b?.type === 'text' ? b.text : '') + p.text,
        })),
      );
    case 'thinking.delta':
      return updateMessage(state, p.message_id, (m) =>
        setBlock(m, p.content_block_index, (b) => ({
          type: 'thinking',
          thinking: (b?.type === 'thinking' ? b.thinking : '') + p.text,
          signature: p.signature ?? (b?.type === 'thinking' ? b.signature : null),
        })),
      );
    case 'tool.use_start': {
      const next = updateMessage(state, p.message_id, (m) =>
        setBlock(m, p.content_block_index, () => ({
          type: 'tool_use',
          id: p.tool_use_id,
          name: p.tool_name,
          partial_json: '',
          input: null,
        })),
      );
      return updateTool(next, p.tool_use_id, {}, newTool(event, p.tool_use_id, p.tool_name));
    }
    case 'tool.use_input_delta':
      return updateMessage(state, p.message_id, (m) =>
        setBlock(m, p.content_block_index, (b) =>
          b?.type === 'tool_use' ? { ...b, partial_json: b.partial_json + p.partial_json } : b!,
        ),
      );
    case 'tool.use_end': {
      const next = updateMessage(state, p.message_id, (m) =>
        setBlock(m, p.content_block_index, (b) =>
          b?.type === 'tool_use'
            ? { ...b, input: p.final_input }
            : { type: 'tool_use', id: p.tool_use_id, name: '', partial_json: '', input: p.final_input },
        ),
      );
      return updateTool(next, p.tool_use_id, { input: p.final_input });
    }
    case 'message.complete':
      return completeMessage(state, event);
    case 'tool.called':
      return updateTool(
        state,
        p.tool_use_id,
        { status: 'running', tool_name: p.tool_name },
        newTool(event, p.tool_use_id, p.tool_name),
      );
    case 'tool.completed':
      return updateTool(state, p.tool_use_id, { status: 'completed', latency_ms: p.latency_ms });
    case 'tool.failed':
      return updateTool(state, p.tool_use_id, {
        status: p.error_class === 'cancelled' ? 'cancelled' : 'failed',
        error_class: p.error_class,
        error_message: p.error_message,
        latency_ms: p.latency_ms,
      });
    case 'tool.input_invalid':
      return state;
    case 'tool.confirmation_requested':
      return {
        ...updateTool(state, p.tool_use_id, { status: 'waiting_for_approval' }),
        confirmations: {
          ...state.confirmations,
          [p.confirmation_request_id]: {
            confirmation_request_id: p.confirmation_request_id,
            session_id: event.session_id,
            tool_use_id: p.tool_use_id,
            tool_name: p.tool_name,
            summary: p.command_summary ?? p.input_summary,
            status: 'pending',
          },
        },
      };
    case 'tool.confirmation_resolved': {
      const current = state.confirmations[p.confirmation_request_id];
      if (!current) return state;
      // Allowed, the call runs now; denied or timed out, its tool.failed follows.
      const tools = p.decision === 'allow' ? updateTool(state, p.tool_use_id, { status: 'running' }) : state;
      return {
        ...tools,
        confirmations: {
          ...state.confirmations,
          [p.confirmation_request_id]: { ...current, status: p.decision },
        },
      };
    }
    case 'delegate.started':
      return updateTool(state, p.tool_use_id, { worker_session_id: p.worker_session_id });
    case 'delegate.completed':
    case 'delegate.failed':
      return state;
    case 'turn.started':
      return updateTurn(state, event, { status: 'in_flight' });
    case 'route.decided': {
      const winner = (p.chain as any[])[p.winner_index];
      return updateTurn(state, event, {
        chosen_model: p.chosen_model,
        route_reason: winner ? `${winner.policy}: ${winner.reason}` : null,
      });
    }
    case 'turn.completed':
      return updateTurn(state, event, {
        status: 'completed',
        cost_usd: p.total_cost_usd,
        llm_calls: p.llm_call_count,
        tool_calls: p.tool_call_count,
      });
    case 'turn.cancelled':
      return updateTurn(state, event, { status: 'cancelled', cancel_reason: p.reason });
    case 'llm.call_failed': {
      const turn = event.turn_id ? state.turns[event.turn_id] : undefined;
      const errors = [
        ...(turn?.errors ?? []),
        {
          error_class: p.error_class,
          message: p.error_message_redacted,
          retry_count: Number(p.retry_count) || 0,
        },
      ];
      return updateTurn(state, event, { errors, last_call_failed: p.error_class !== 'cancelled' });
    }
    case 'llm.call_completed':
      return updateTurn(state, event, { last_call_failed: false });
    default:
      // Known means: in the catalog or the streaming family this client was built with. A type of a
      // known domain that this build does not list (a newer server's `turn.paused`) is unknown too.
      return CATALOG.has(event.type) || STREAMING.has(event.type) ? state : null;
  }
}

function newTool(event: WireEvent, id: string, name: string): ToolState {
  return {
    tool_use_id: id,
    tool_name: name,
    session_id: event.session_id,
    turn_id: event.turn_id,
    status: 'requested',
    input: null,
    error_class: null,
    error_message: null,
    latency_ms: null,
    worker_session_id: null,
  };
}

function completeMessage(state: ConversationState, event: WireEvent): ConversationState {
  const p = event.payload;
  const existing = state.messages.find((m) => m.id === p.message_id);
  const finalBlocks = (p.final_content as any[]).map(blockFromContent);
  // A message a failed call cut short ends `cancelled` with the call's `error_class` (an older server
  // sent `stop_reason: error`): it is an error, not a user's cancel.
  const failed = p.stop_reason === 'error' || (p.error_class !== undefined && p.error_class !== 'cancelled');
  const status = failed ? 'error' : p.stop_reason === 'cancelled' ? 'cancelled' : 'complete';
  if (!existing) {
    // Started before we attached: final_content is all we have, and it is authoritative.
    const message: MessageState = {
      id: p.message_id,
      session_id: event.session_id,
      turn_id: event.turn_id,
      role: 'assistant',
      model: null,
      status,
      stop_reason: p.stop_reason,
      blocks: finalBlocks,
      usage: p.usage ?? null,
    };
    return { ...state, messages: [...state.messages, message] };
  }
  const matches = sameContent(existing.blocks, p.final_content as unknown[]);
  return {
    ...updateMessage(state, p.message_id, (m) => ({
      ...m,
      status,
      stop_reason: p.stop_reason,
      usage: p.usage ?? null,
      blocks: finalBlocks,
    })),
    mismatches: state.mismatches + (matches ? 0 : 1),
  };
}

/** JSON with object keys sorted, so that key order never decides equality. */
function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}

/**
 * Whether the blocks rebuilt from deltas add up to `final_content`. Redacted thinking streams as one
 * empty `thinking.delta` (it has no readable text) and arrives whole only in `final_content`: that
 * placeholder is not a lost delta.
 */
function sameContent(rebuilt: readonly BlockState[], finalContent: readonly unknown[]): boolean {
  const mine = contentOf(Array.from(rebuilt, (b) => b ?? null).filter((b): b is BlockState => b !== null));
  if (mine.length !== finalContent.length) return false;
  return mine.every((block, i) => {
    const final = finalContent[i] as { type?: string };
    const b = block as { type: string; thinking?: string; signature?: string | null };
    if (final?.type === 'redacted_thinking' && b.type === 'thinking' && b.thinking === '' && !b.signature)
      return true;
    return canonicalJson(block) === canonicalJson(final);
  });
}
