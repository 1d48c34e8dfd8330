import type { BlockState, ConversationState } from './reducer.js';

/**
 * The stable, language-neutral view of a client's conversation state that the streaming conformance
 * traces (`test/streaming-conformance/*.expected.json`) are compared against. Any client, in any
 * language, that feeds a trace's frames to its own reducer and prints this projection of its final
 * state must produce the expected file exactly (deep JSON equality). Version 1:
 *
 * - `messages`: every message in the order the client learned of it (snapshot order, then
 *   `message.start`, or `message.complete` for a message that started before the client attached),
 *   with `id`, `session_id`, `turn_id`, `role`, `status` (`streaming` | `complete` | `cancelled` |
 *   `error`) and `blocks` in canonical content form (§5.3 `final_content`): `{type:'text',text}`,
 *   `{type:'thinking',thinking,signature}`, `{type:'redacted_thinking',data}`,
 *   `{type:'tool_use',id,name,input}` (`input` is null until `tool.use_end`), and
 *   `{type:'tool_result',tool_use_id,content,is_error}`; a block index never written is null.
 * - `tools`: one entry per `tool_use_id`, sorted by id, with `session_id`, `turn_id`, `tool_name`,
 *   `status` (`requested` | `waiting_for_approval` | `running` | `completed` | `failed` |
 *   `cancelled`), `input` (the `final_input`, or null), `error_class` and `worker_session_id`.
 * - `turns`: one entry per turn id, sorted by id, with `session_id`, `status` (`in_flight` |
 *   `completed` | `cancelled`), `chosen_model`, `cancel_reason`, `llm_calls`, `tool_calls` and the
 *   `error_class` of each `llm.call_failed`.
 * - `confirmations`: sorted by request id, with `tool_use_id`, `tool_name` and `status`.
 * - `last_event_id`: the cursor (the newest event id applied, or the snapshot's
 *   `snapshot_at_event_id`).
 * - `mismatches`: messages whose streamed deltas did not add up to `message.complete.final_content`.
 * - `unknown_skipped`: events of a type the client does not know, skipped (streaming §9.2).
 *
 * Left out on purpose: the snapshot's session summary, usage, costs, latencies and error messages
 * (free text, timing-dependent, or not part of what a client must rebuild).
 */
export interface StateProjection {
  readonly projection: 1;
  readonly messages: readonly ProjectedMessage[];
  readonly tools: readonly ProjectedTool[];
  readonly turns: readonly ProjectedTurn[];
  readonly confirmations: readonly ProjectedConfirmation[];
  readonly last_event_id: string | null;
  readonly mismatches: number;
  readonly unknown_skipped: number;
}

export interface ProjectedMessage {
  readonly id: string;
  readonly session_id: string;
  readonly turn_id: string | null;
  readonly role: string;
  readonly status: string;
  readonly blocks: readonly (Record<string, unknown> | null)[];
}

export interface ProjectedTool {
  readonly tool_use_id: string;
  readonly session_id: string;
  readonly turn_id: string | null;
  readonly tool_name: string;
  readonly status: string;
  readonly input: Record<string, unknown> | null;
  readonly error_class: string | null;
  readonly worker_session_id: string | null;
}

export interface ProjectedTurn {
  readonly turn_id: string;
  readonly session_id: string;
  readonly status: string;
  readonly chosen_model: string | null;
  readonly cancel_reason: string | null;
  readonly llm_calls: number | null;
  readonly tool_calls: number | null;
  readonly errors: readonly string[];
}

export interface ProjectedConfirmation {
  readonly confirmation_request_id: string;
  readonly tool_use_id: string;
  readonly tool_name: string;
  readonly status: string;
}

/** A content block in canonical form; a hole (an index never written) is null. */
export function projectBlock(block: BlockState | undefined | null): Record<string, unknown> | null {
  if (block === undefined || block === null) return null;
  switch (block.type) {
    case 'text':
      return { type: 'text', text: block.text };
    case 'thinking':
      return { type: 'thinking', thinking: block.thinking, signature: block.signature };
    case 'redacted_thinking':
      return { type: 'redacted_thinking', data: block.data };
    case 'tool_use':
      return { type: 'tool_use', id: block.id, name: block.name, input: block.input };
    case 'tool_result':
      return {
        type: 'tool_result',
        tool_use_id: block.tool_use_id,
        content: block.content,
        is_error: block.is_error,
      };
  }
}

const byKey =
  <T>(key: (value: T) => string) =>
  (a: T, b: T) =>
    key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0;

/** Projects a reducer state (see {@link StateProjection} for the contract). */
export function projectState(state: ConversationState): StateProjection {
  return {
    projection: 1,
    messages: state.messages.map((m) => ({
      id: m.id,
      session_id: m.session_id,
      turn_id: m.turn_id,
      role: m.role,
      status: m.status,
      // Array.from visits holes too, so a sparse block list projects its holes as null.
      blocks: Array.from(m.blocks, projectBlock),
    })),
    tools: Object.values(state.tools)
      .sort(byKey((t) => t.tool_use_id))
      .map((t) => ({
        tool_use_id: t.tool_use_id,
        session_id: t.session_id,
        turn_id: t.turn_id,
        tool_name: t.tool_name,
        status: t.status,
        input: t.input,
        error_class: t.error_class,
        worker_session_id: t.worker_session_id,
      })),
    turns: Object.values(state.turns)
      .sort(byKey((t) => t.turn_id))
      .map((t) => ({
        turn_id: t.turn_id,
        session_id: t.session_id,
        status: t.status,
        chosen_model: t.chosen_model,
        cancel_reason: t.cancel_reason,
        llm_calls: t.llm_calls,
        tool_calls: t.tool_calls,
        errors: t.errors.map((e) => e.error_class),
      })),
    confirmations: Object.values(state.confirmations)
      .sort(byKey((c) => c.confirmation_request_id))
      .map((c) => ({
        confirmation_request_id: c.confirmation_request_id,
        tool_use_id: c.tool_use_id,
        tool_name: c.tool_name,
        status: c.status,
      })),
    last_event_id: state.lastEventId,
    mismatches: state.mismatches,
    unknown_skipped: state.unknownSkipped,
  };
}
