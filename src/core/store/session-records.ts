/** The rows of sessions, messages and tool calls as both stores hold them, and their records. */

export type MessageRole = 'user' | 'assistant' | 'tool';
export type MessageStatus = 'complete' | 'cancelled' | 'error';
export type ToolCallStatus = 'pending' | 'running' | 'completed' | 'failed' | 'cancelled';

/**
 * The events that carry a session's spend: its own model calls (`cost_usd`) and its workers' totals
 * (`worker_total_cost_usd`), on success and on failure (a failed worker spent too, bus §6.8).
 */
export const COST_EVENT_TYPES = ['llm.call_completed', 'delegate.completed', 'delegate.failed'] as const;

export interface SessionRecord {
  readonly id: string;
  readonly parent_session_id: string | null;
  readonly workspace_path: string | null;
  readonly workspace_hash: string | null;
  readonly active_model: string | null;
  /** The model the user pinned (the `manual_sticky` routing policy), if any. */
  readonly sticky_model: string | null;
  readonly status: 'active' | 'ended';
  readonly disposition: string | null;
  readonly created_at_us: number;
  readonly updated_at_us: number;
}

/** A canonical message (DESIGN.md "Sessions, messages, tool calls"); `content` is a ContentBlock list. */
export interface MessageRecord {
  readonly id: string;
  readonly session_id: string;
  readonly turn_id: string | null;
  readonly role: MessageRole;
  readonly content: unknown[];
  readonly status: MessageStatus;
  readonly model: string | null;
  readonly usage: Record<string, unknown> | null;
  readonly created_at_us: number;
}

export interface ToolCallRecord {
  readonly id: string;
  readonly session_id: string;
  readonly turn_id: string | null;
  readonly message_id: string | null;
  readonly tool_name: string;
  readonly input: unknown;
  readonly status: ToolCallStatus;
  readonly output: unknown;
  readonly error_class: string | null;
}

/** A `tool_calls` row as both stores return it. */
export interface ToolCallRow {
  readonly id: string;
  readonly session_id: string;
  readonly turn_id: string | null;
  readonly message_id: string | null;
  readonly tool_name: string;
  readonly input_json: string;
  readonly status: ToolCallStatus;
  readonly output_json: string | null;
  readonly error_class: string | null;
}

export function toToolCallRecord(row: ToolCallRow): ToolCallRecord {
  return {
    id: row.id,
    session_id: row.session_id,
    turn_id: row.turn_id,
    message_id: row.message_id,
    tool_name: row.tool_name,
    input: JSON.parse(row.input_json),
    status: row.status,
    output: row.output_json === null ? null : JSON.parse(row.output_json),
    error_class: row.error_class,
  };
}

/**
 * Which row a tool call is: a provider's tool_use id is unique only within its message (an
 * OpenAI-compatible server may answer `call_1` in every turn), so the row is keyed by the message too
 * (schema version 3).
 */
export interface ToolCallKey {
  readonly id: string;
  readonly session_id: string;
  readonly turn_id: string | null;
  readonly message_id: string | null;
}

export interface MessageRow {
  id: string;
  session_id: string;
  turn_id: string | null;
  role: MessageRole;
  content_json: string;
  status: MessageStatus;
  model: string | null;
  usage_json: string | null;
  created_at_us: number;
}

export function toMessage(row: MessageRow): MessageRecord {
  return {
    id: row.id,
    session_id: row.session_id,
    turn_id: row.turn_id,
    role: row.role,
    content: JSON.parse(row.content_json) as unknown[],
    status: row.status,
    model: row.model,
    usage: row.usage_json === null ? null : (JSON.parse(row.usage_json) as Record<string, unknown>),
    created_at_us: row.created_at_us,
  };
}
