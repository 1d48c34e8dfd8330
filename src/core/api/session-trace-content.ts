import type { z } from 'zod';
import { CATALOG, type PayloadOf } from '../events/catalog/index.js';
import { isoToMicros } from '../events/clock.js';
import { type MetisEvent, type Sensitivity, sensitivityRank } from '../events/envelope.js';
import { STREAMING } from '../events/streaming.js';
import type { ContentMessage, TraceContentReads, TurnRecords } from '../store/trace-content-rows.js';
import type { ScoreEntry, TraceContentEntry } from './response-schemas.js';

/** `server.dashboard_content`: what the trace's content shows of fields more private than pseudonymous. */
export type ContentMode = 'full' | 'redacted';

type Entry = z.output<typeof TraceContentEntry>;
type Score = z.output<typeof ScoreEntry>;
type Status = 'running' | 'completed' | 'failed' | 'cancelled';

/**
 * The catalog type each content field comes from: its sensitivity decides whether `redacted` hides it
 * (user text and model output are `private`; route verdicts and model errors `pseudonymous`).
 */
const FIELD_SOURCE = {
  user_message: 'turn.started',
  output_text: 'text.delta',
  thinking: 'thinking.delta',
  tool_input: 'tool.use_end',
  tool_output: 'tool.completed',
  tool_error: 'tool.failed',
  feedback_comment: 'feedback.explicit',
} as const;

const PSEUDONYMOUS = sensitivityRank('pseudonymous');

function sensitivityOf(type: string): Sensitivity {
  return CATALOG.get(type)?.sensitivity ?? STREAMING.get(type)?.sensitivity ?? 'private';
}

/** Shows or hides values by the catalog sensitivity of where they come from. */
export class ContentRedactor {
  constructor(readonly mode: ContentMode) {}

  private hides(field: keyof typeof FIELD_SOURCE): boolean {
    return this.mode === 'redacted' && sensitivityRank(sensitivityOf(FIELD_SOURCE[field])) < PSEUDONYMOUS;
  }

  text(field: keyof typeof FIELD_SOURCE, value: string): string | { redacted: true; chars: number } {
    return this.hides(field) ? { redacted: true, chars: [...value].length } : value;
  }

  json(field: keyof typeof FIELD_SOURCE, value: unknown): unknown {
    if (value === null || value === undefined || !this.hides(field)) return value ?? null;
    const text = typeof value === 'string' ? value : JSON.stringify(value);
    return { redacted: true, chars: [...text].length };
  }
}

const ulidOf = (id: string): string => id.slice(id.indexOf('_') + 1);

/** A stored payload's fields by type (catalog payloads are validated: another type means absent). */
function fieldsOf(payload: Record<string, unknown> | undefined) {
  const p = payload ?? {};
  return {
    num: (key: string): number | null => (typeof p[key] === 'number' ? (p[key] as number) : null),
    str: (key: string): string | null => (typeof p[key] === 'string' ? (p[key] as string) : null),
    failure: (): unknown => (p.signals_extra as { failure?: unknown } | null | undefined)?.failure,
  };
}

function joined(content: ContentMessage['content'], type: string): string | null {
  const parts = content
    .filter((block) => block.type === type)
    .map((block) => String(block.text ?? block.thinking ?? ''));
  return parts.length === 0 ? null : parts.join('');
}

function place(start: MetisEvent, end: MetisEvent | undefined, status: Status, parent: string | null) {
  const startedAt = isoToMicros(start.timestamp);
  const endedAt = end === undefined ? null : isoToMicros(end.timestamp);
  return {
    parent_span_id: parent,
    started_at_us: startedAt,
    ended_at_us: endedAt,
    end_event_id: end?.id ?? null,
    duration_ms: endedAt === null ? null : (endedAt - startedAt) / 1000,
    status,
  };
}

/**
 * The content of every span that opens in `events` (a page of a session's trace): the turn's user
 * message and totals, the route decision and its alternatives, each model call's output, retries and
 * cost, each tool call's input and output. Read per turn from the messages, the tool calls and the
 * turn's events, so each entry is whole even when the span ends on a later page.
 */
export async function traceContent(
  reads: TraceContentReads,
  events: readonly MetisEvent[],
  redactor: ContentRedactor,
): Promise<Record<string, Entry>> {
  const content: Record<string, Entry> = {};
  const turns = new Map<string, { sessionId: string; turnId: string }>();
  for (const event of events)
    if (event.turn_id !== null && OPENS_SPAN.has(event.type))
      turns.set(`${event.session_id}\u0000${event.turn_id}`, {
        sessionId: event.session_id,
        turnId: event.turn_id,
      });
  const wanted = new Set(events.map((event) => event.id));
  const workerParents = new Map<string, string | null>();
  for (const { sessionId, turnId } of turns.values()) {
    if (!workerParents.has(sessionId))
      workerParents.set(sessionId, await reads.delegatingToolCall(sessionId));
    const records = await reads.turnRecords(sessionId, turnId);
    const entries = await turnEntries(reads, records, workerParents.get(sessionId) ?? null, redactor);
    for (const [id, entry] of entries) if (wanted.has(id)) content[id] = entry;
  }
  return content;
}

const OPENS_SPAN = new Set(['turn.started', 'route.decided', 'llm.call_started', 'tool.called']);

async function turnEntries(
  reads: TraceContentReads,
  records: TurnRecords,
  workerParent: string | null,
  redactor: ContentRedactor,
): Promise<[string, Entry][]> {
  const { events, messages, toolCalls, sessionId, turnId } = records;
  const byParent = new Map<string, MetisEvent[]>();
  for (const event of events)
    if (event.parent_event_id !== null)
      byParent.set(event.parent_event_id, [...(byParent.get(event.parent_event_id) ?? []), event]);
  const childOf = (id: string, types: readonly string[]) =>
    byParent.get(id)?.find((e) => types.includes(e.type));
  const entries: [string, Entry][] = [];
  const started = events.find((e) => e.type === 'turn.started');
  const route = events.find((e) => e.type === 'route.decided');
  const calls = events.filter((e) => e.type === 'llm.call_started');
  const ends = new Map(
    calls.map((call) => [call.id, childOf(call.id, ['llm.call_completed', 'llm.call_failed'])]),
  );

  for (const [index, call] of calls.entries()) {
    const end = ends.get(call.id);
    const nextStart = calls[index + 1]?.id ?? '\uffff';
    const from = ulidOf(call.id);
    const to = end === undefined ? ulidOf(nextStart) : ulidOf(end.id);
    const message = messages.find((m) => m.role === 'assistant' && ulidOf(m.id) > from && ulidOf(m.id) < to);
    const p = fieldsOf(end?.payload);
    const failed = end?.type === 'llm.call_failed';
    const status: Status =
      end === undefined
        ? 'running'
        : !failed
          ? 'completed'
          : p.str('error_class') === 'cancelled'
            ? 'cancelled'
            : 'failed';
    const text = message ? (joined(message.content, 'text') ?? '') : '';
    const thinking = message ? joined(message.content, 'thinking') : null;
    entries.push([
      call.id,
      {
        kind: 'model_call',
        turn_id: turnId,
        ...place(call, end, status, started?.id ?? null),
        model: String(call.payload.model),
        provider: String(call.payload.provider),
        message_id: message?.id ?? null,
        input_message_count: await reads.messagesBefore(sessionId, from),
        output: {
          text: redactor.text('output_text', text),
          thinking: thinking === null ? null : redactor.text('thinking', thinking),
          tool_uses: (message?.content ?? [])
            .filter((block) => block.type === 'tool_use')
            .map((block) => ({ tool_use_id: String(block.id), tool_name: String(block.name) })),
        },
        stop_reason: failed ? null : p.str('stop_reason'),
        input_tokens: p.num('input_tokens') ?? 0,
        output_tokens: p.num('output_tokens') ?? 0,
        cached_input_tokens: p.num('cached_input_tokens') ?? 0,
        cost_usd: p.num('cost_usd') ?? 0,
        latency_ms: p.num('latency_ms'),
        retries: p.num('retry_count') ?? 0,
        error_class: failed ? p.str('error_class') : null,
        error_message: failed ? p.str('error_message_redacted') : null,
      },
    ]);
  }

  const delegated = new Map(
    events
      .filter((e) => e.type === 'delegate.started')
      .map((e) => [String(e.payload.tool_use_id), String(e.payload.worker_session_id)]),
  );
  for (const called of events.filter((e) => e.type === 'tool.called')) {
    const toolUseId = String(called.payload.tool_use_id);
    const end = childOf(called.id, ['tool.completed', 'tool.failed']);
    const row = toolCalls.get(toolUseId);
    const p = fieldsOf(end?.payload);
    const status: Status =
      end === undefined
        ? 'running'
        : end.type === 'tool.completed'
          ? end.payload.success === false
            ? 'failed'
            : 'completed'
          : p.str('error_class') === 'cancelled'
            ? 'cancelled'
            : 'failed';
    // tool.called's parent is the llm.call_completed of the call that asked for it; that one's, the call.
    const completedCall = events.find((e) => e.id === called.parent_event_id);
    entries.push([
      called.id,
      {
        kind: 'tool_call',
        turn_id: turnId,
        ...place(called, end, status, completedCall?.parent_event_id ?? null),
        tool_use_id: toolUseId,
        tool_name: String(called.payload.tool_name),
        side_effects: (called.payload.side_effects as string | undefined) ?? null,
        input: redactor.json('tool_input', row?.input ?? null),
        output: redactor.json('tool_output', row?.output ?? null),
        error_class: end?.type === 'tool.failed' ? p.str('error_class') : (row?.error_class ?? null),
        error_message:
          end?.type === 'tool.failed' ? redactor.text('tool_error', p.str('error_message') ?? '') : null,
        latency_ms: p.num('latency_ms'),
        worker_session_id: delegated.get(toolUseId) ?? null,
      },
    ]);
  }

  if (route !== undefined) entries.push([route.id, routeEntry(route, turnId, started?.id ?? null)]);
  if (started !== undefined) {
    const end = events.find((e) => e.type === 'turn.completed' || e.type === 'turn.cancelled');
    const p = fieldsOf(end?.payload);
    const lastCallEnd = calls.length === 0 ? undefined : ends.get(calls.at(-1)!.id);
    const status: Status =
      end === undefined
        ? 'running'
        : end.type === 'turn.cancelled'
          ? 'cancelled'
          : typeof p.failure() === 'string' ||
              p.num('llm_call_count') === 0 ||
              lastCallEnd?.type === 'llm.call_failed'
            ? 'failed'
            : 'completed';
    const completed = calls
      .map((c) => ends.get(c.id))
      .filter((e) => e?.type === 'llm.call_completed') as MetisEvent[];
    const sum = (key: string) => completed.reduce((total, e) => total + Number(e.payload[key] ?? 0), 0);
    const user = messages.find((m) => m.role === 'user');
    const userText = user ? joined(user.content, 'text') : null;
    entries.push([
      started.id,
      {
        kind: 'turn',
        turn_id: turnId,
        session_id: sessionId,
        ...place(started, end, status, workerParent),
        user_message: userText === null ? null : redactor.text('user_message', userText),
        model:
          route === undefined
            ? ((calls.at(-1)?.payload.model as string | undefined) ?? null)
            : String(route.payload.chosen_model),
        cost_usd:
          end?.type === 'turn.completed' ? (p.num('total_cost_usd') ?? sum('cost_usd')) : sum('cost_usd'),
        input_tokens: sum('input_tokens'),
        output_tokens: sum('output_tokens'),
        model_call_count: calls.length,
        tool_call_count: events.filter((e) => e.type === 'tool.called').length,
        stop_reason: end?.type === 'turn.completed' ? p.str('stop_reason') : null,
        cancel_reason: end?.type === 'turn.cancelled' ? p.str('reason') : null,
        route_event_id: route?.id ?? null,
      },
    ]);
  }
  return entries;
}

function routeEntry(route: MetisEvent, turnId: string, parent: string | null): Entry {
  const p = route.payload as {
    chosen_model: string;
    winner_index: number;
    elapsed_ms: number;
    chain: {
      policy: string;
      verdict: 'not_applicable' | 'deferred' | 'rejected' | 'chose';
      candidate_model: string | null;
      reason: string;
      confidence: number | null;
      pattern_alternatives: { model: string; score: number; sample_size: number }[] | null;
    }[];
  };
  const winner = p.chain[p.winner_index];
  const alternatives = p.chain.flatMap((link) => [
    {
      policy: link.policy,
      verdict: link.verdict,
      model: link.candidate_model,
      reason: link.reason,
      score: link.confidence,
      sample_size: null,
    },
    ...(link.pattern_alternatives ?? []).map((alt) => ({
      policy: link.policy,
      verdict: 'deferred' as const,
      model: alt.model,
      reason: 'pattern alternative',
      score: alt.score,
      sample_size: alt.sample_size,
    })),
  ]);
  return {
    kind: 'route',
    turn_id: turnId,
    parent_span_id: parent,
    chosen_model: p.chosen_model,
    policy: winner?.policy ?? null,
    reason: winner?.reason ?? null,
    elapsed_ms: p.elapsed_ms,
    alternatives,
  };
}

/** A session's feedback and eval verdicts as scores (`GET /sessions/{id}/scores`, the trace's first page). */
export async function sessionScores(
  reads: Pick<TraceContentReads, 'scoreEvents'>,
  sessionId: string,
  redactor: ContentRedactor,
): Promise<Score[]> {
  return (await reads.scoreEvents(sessionId)).map((event): Score => {
    if (event.type === 'feedback.explicit') {
      const p = event.payload as PayloadOf<'feedback.explicit'>;
      return {
        event_id: event.id,
        source: 'feedback',
        scope: p.scope,
        turn_id: p.subject_turn_id ?? event.turn_id,
        value: p.rating === 'thumbs_up' ? 1 : 0,
        label: p.rating,
        comment: p.comment === null ? null : redactor.text('feedback_comment', p.comment),
        judge: null,
        timestamp: event.timestamp,
      };
    }
    const p = event.payload as PayloadOf<'eval.completed'>;
    return {
      event_id: event.id,
      source: 'eval',
      scope: p.subject_kind,
      turn_id: p.subject_kind === 'turn' ? p.subject_id : null,
      value: p.score,
      label: p.rubric_id,
      comment: null,
      judge: p.judge_model ? `${p.judge_kind} ${p.judge_model}` : p.judge_kind,
      timestamp: event.timestamp,
    };
  });
}

export function scoreSummary(scores: readonly Score[]) {
  const evals = scores.filter((s) => s.source === 'eval');
  return {
    thumbs_up: scores.filter((s) => s.label === 'thumbs_up').length,
    thumbs_down: scores.filter((s) => s.label === 'thumbs_down').length,
    eval_count: evals.length,
    eval_mean: evals.length === 0 ? null : evals.reduce((sum, s) => sum + s.value, 0) / evals.length,
  };
}
