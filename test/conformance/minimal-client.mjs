#!/usr/bin/env node
/**
 * A minimal metis streaming client, written from test/streaming-conformance/README.md alone: no metis
 * code, no dependency. It reads server frames as JSONL on stdin and prints the projection of its final
 * state as JSON, which is what `metis conformance client --cmd` checks.
 *
 * MINIMAL_CLIENT_BUG breaks one rule on purpose, so a test can show the suite catches it:
 *   no-dedupe        applies an event whose id it has already seen
 *   trust-deltas     keeps the blocks rebuilt from deltas instead of final_content
 *   fail-on-unknown  exits with an error on an event type it does not know
 */
import { readFileSync } from 'node:fs';

const BUG = process.env.MINIMAL_CLIENT_BUG ?? '';

// The types of the catalog and streaming family this client was built against.
const KNOWN = new Set(
  `session.created session.resumed session.ended turn.started turn.completed turn.cancelled
  llm.call_started llm.call_completed llm.call_failed tool.called tool.completed tool.failed
  tool.input_invalid tool.confirmation_requested tool.confirmation_resolved route.decided
  routing.policy_invalid routing.provider_unavailable routing.provider_recovered route.overridden
  pattern.override_dismissed pattern.recorded pattern.matched pattern.evicted skill.loaded skill.created
  skill.modified skill.search memory.updated memory.eviction delegate.started delegate.completed
  delegate.failed feedback.explicit feedback.implicit bus.subscriber_registered
  bus.subscriber_unregistered bus.gap_detected provider.degraded eval.started eval.completed eval.failed
  gateway.key_issued gateway.key_revoked gateway.key_rotated gateway.quota_exceeded gateway.auth_failed
  trace.swept quota.alert analytics.user_exported analytics.user_forgotten message.start text.delta
  thinking.delta tool.use_start tool.use_input_delta tool.use_end message.complete`.split(/\s+/),
);

const state = {
  messages: [],
  tools: {},
  turns: {},
  confirmations: {},
  last: null,
  mismatches: 0,
  unknown: 0,
};

function canonicalBlock(block) {
  switch (block.type) {
    case 'text':
      return { type: 'text', text: block.text };
    case 'thinking':
      return { type: 'thinking', thinking: block.thinking, signature: block.signature ?? null };
    case 'redacted_thinking':
      return { type: 'redacted_thinking', data: block.data };
    case 'tool_use':
      return { type: 'tool_use', id: block.id, name: block.name, input: block.input };
    default:
      return {
        type: 'tool_result',
        tool_use_id: block.tool_use_id,
        content: block.content,
        is_error: block.is_error,
      };
  }
}

/** JSON with sorted keys: key order never decides equality. */
function sortedJson(value) {
  if (Array.isArray(value)) return `[${value.map(sortedJson).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const keys = Object.keys(value)
      .filter((k) => value[k] !== undefined)
      .sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${sortedJson(value[k])}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

function sameAsFinal(blocks, finalContent) {
  const rebuilt = blocks.filter((b) => b != null);
  if (rebuilt.length !== finalContent.length) return false;
  return rebuilt.every((block, i) => {
    const final = finalContent[i];
    // Redacted thinking streams as one empty thinking.delta: a placeholder, not a lost delta.
    if (
      final.type === 'redacted_thinking' &&
      block.type === 'thinking' &&
      block.thinking === '' &&
      !block.signature
    )
      return true;
    const mine = block.type === 'tool_use' ? { ...block, input: block.input ?? {} } : block;
    return sortedJson(mine) === sortedJson(final);
  });
}

const message = (id) => state.messages.find((m) => m.id === id);

function turn(event) {
  if (!event.turn_id) return null;
  state.turns[event.turn_id] ??= {
    turn_id: event.turn_id,
    session_id: event.session_id,
    status: 'in_flight',
    chosen_model: null,
    cancel_reason: null,
    llm_calls: null,
    tool_calls: null,
    errors: [],
  };
  return state.turns[event.turn_id];
}

function newTool(event, id, name, status) {
  return {
    tool_use_id: id,
    session_id: event.session_id,
    turn_id: event.turn_id,
    tool_name: name,
    status,
    input: null,
    error_class: null,
    worker_session_id: null,
  };
}

/** Applies one event; false for a type this client does not know. */
function apply(event) {
  const p = event.payload;
  const m = p.message_id === undefined ? undefined : message(p.message_id);
  switch (event.type) {
    case 'message.start':
      if (!m) {
        const { session_id, turn_id } = event;
        state.messages.push({
          id: p.message_id,
          session_id,
          turn_id,
          role: p.role,
          status: 'streaming',
          blocks: [],
        });
      }
      return true;
    case 'text.delta':
      if (m) {
        const old = m.blocks[p.content_block_index];
        m.blocks[p.content_block_index] = {
          type: 'text',
          text: (old?.type === 'text' ? old.text : '') + p.text,
        };
      }
      return true;
    case 'thinking.delta':
      if (m) {
        const old =
          m.blocks[p.content_block_index]?.type === 'thinking' ? m.blocks[p.content_block_index] : null;
        m.blocks[p.content_block_index] = {
          type: 'thinking',
          thinking: (old?.thinking ?? '') + p.text,
          signature: p.signature ?? old?.signature ?? null,
        };
      }
      return true;
    case 'tool.use_start':
      if (m)
        m.blocks[p.content_block_index] = {
          type: 'tool_use',
          id: p.tool_use_id,
          name: p.tool_name,
          input: null,
        };
      state.tools[p.tool_use_id] ??= newTool(event, p.tool_use_id, p.tool_name, 'requested');
      return true;
    case 'tool.use_end':
      if (m) {
        const old = m.blocks[p.content_block_index];
        m.blocks[p.content_block_index] =
          old?.type === 'tool_use'
            ? { ...old, input: p.final_input }
            : { type: 'tool_use', id: p.tool_use_id, name: '', input: p.final_input };
      }
      if (state.tools[p.tool_use_id]) state.tools[p.tool_use_id].input = p.final_input;
      return true;
    case 'message.complete': {
      const blocks = p.final_content.map(canonicalBlock);
      // A failed call's cut message: `cancelled` plus the call's error_class (docs/decisions.md).
      const failed =
        p.stop_reason === 'error' || (p.error_class !== undefined && p.error_class !== 'cancelled');
      const status = failed ? 'error' : p.stop_reason === 'cancelled' ? 'cancelled' : 'complete';
      if (!m) {
        const { session_id, turn_id } = event;
        state.messages.push({ id: p.message_id, session_id, turn_id, role: 'assistant', status, blocks });
        return true;
      }
      if (!sameAsFinal(m.blocks, p.final_content)) state.mismatches += 1;
      m.status = status;
      if (BUG !== 'trust-deltas') m.blocks = blocks;
      return true;
    }
    case 'tool.called': {
      state.tools[p.tool_use_id] ??= newTool(event, p.tool_use_id, p.tool_name, 'running');
      const tool = state.tools[p.tool_use_id];
      tool.status = 'running';
      tool.tool_name = p.tool_name;
      return true;
    }
    case 'tool.completed':
      if (state.tools[p.tool_use_id]) state.tools[p.tool_use_id].status = 'completed';
      return true;
    case 'tool.failed': {
      const tool = state.tools[p.tool_use_id];
      if (tool) {
        tool.status = p.error_class === 'cancelled' ? 'cancelled' : 'failed';
        tool.error_class = p.error_class;
      }
      return true;
    }
    case 'tool.confirmation_requested':
      state.confirmations[p.confirmation_request_id] = {
        confirmation_request_id: p.confirmation_request_id,
        tool_use_id: p.tool_use_id,
        tool_name: p.tool_name,
        status: 'pending',
      };
      return true;
    case 'tool.confirmation_resolved':
      if (state.confirmations[p.confirmation_request_id])
        state.confirmations[p.confirmation_request_id].status = p.decision;
      return true;
    case 'delegate.started':
      if (state.tools[p.tool_use_id]) state.tools[p.tool_use_id].worker_session_id = p.worker_session_id;
      return true;
    case 'turn.started':
      if (turn(event)) turn(event).status = 'in_flight';
      return true;
    case 'route.decided':
      if (turn(event)) turn(event).chosen_model = p.chosen_model;
      return true;
    case 'turn.completed':
      if (turn(event))
        Object.assign(turn(event), {
          status: 'completed',
          llm_calls: p.llm_call_count,
          tool_calls: p.tool_call_count,
        });
      return true;
    case 'turn.cancelled':
      if (turn(event)) Object.assign(turn(event), { status: 'cancelled', cancel_reason: p.reason });
      return true;
    case 'llm.call_failed':
      turn(event)?.errors.push(p.error_class);
      return true;
    default:
      return KNOWN.has(event.type);
  }
}

for (const line of readFileSync(0, 'utf8').split('\n')) {
  if (line.trim() === '') continue;
  const frame = JSON.parse(line);
  if (frame.type === 'snapshot') {
    state.messages = frame.messages.map((m) => ({
      id: m.id,
      session_id: m.session_id,
      turn_id: m.turn_id ?? null,
      role: m.role,
      status: m.status,
      blocks: m.content.map(canonicalBlock),
    }));
    for (const event of frame.in_flight_events ?? []) apply(event);
    state.last = frame.snapshot_at_event_id ?? state.last;
  } else if (frame.type === 'event') {
    const { event } = frame;
    if (BUG !== 'no-dedupe' && state.last !== null && event.id <= state.last) continue;
    if (!apply(event)) {
      if (BUG === 'fail-on-unknown') throw new Error(`unknown event type ${event.type}`);
      state.unknown += 1;
    }
    state.last = event.id;
  }
}

const byId = (key) => (a, b) => (a[key] < b[key] ? -1 : a[key] > b[key] ? 1 : 0);
const projection = {
  projection: 1,
  messages: state.messages.map((m) => ({ ...m, blocks: Array.from(m.blocks, (b) => b ?? null) })),
  tools: Object.values(state.tools).sort(byId('tool_use_id')),
  turns: Object.values(state.turns).sort(byId('turn_id')),
  confirmations: Object.values(state.confirmations).sort(byId('confirmation_request_id')),
  last_event_id: state.last,
  mismatches: state.mismatches,
  unknown_skipped: state.unknown,
};
process.stdout.write(`${JSON.stringify(projection)}\n`);
