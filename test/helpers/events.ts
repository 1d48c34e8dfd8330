import { createHash } from 'node:crypto';
import type { EmitInput } from '../../src/core/bus/event-bus.js';

export function sha256(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}

/** A valid `turn.started` emit for a session, with an optional opt-in text. */
export function turnStarted(sessionId: string, redacted: string | null = null, turnId = 'turn_1'): EmitInput {
  return {
    type: 'turn.started',
    session_id: sessionId,
    turn_id: turnId,
    payload: {
      user_message_hash: sha256('hello'),
      user_message_text_redacted: redacted,
      estimated_input_tokens: 12,
      has_images: false,
      has_tool_calls_in_history: false,
    },
  };
}

export function turnCompleted(sessionId: string, parent: string | null, turnId = 'turn_1'): EmitInput {
  return {
    type: 'turn.completed',
    session_id: sessionId,
    turn_id: turnId,
    parent_event_id: parent,
    payload: {
      stop_reason: 'end_turn',
      llm_call_count: 1,
      tool_call_count: 0,
      total_input_tokens: 10,
      total_output_tokens: 20,
      total_cost_usd: 0.001,
      wall_time_seconds: 1.5,
    },
  };
}

export function sessionCreated(sessionId: string): EmitInput {
  return {
    type: 'session.created',
    session_id: sessionId,
    payload: {
      workspace_path: '/tmp/ws',
      workspace_hash: sha256('/tmp/ws'),
      initial_active_model: 'scripted:demo',
      routing_policy_version: sha256('routing'),
    },
  };
}
