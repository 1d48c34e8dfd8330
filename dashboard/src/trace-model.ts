import type { StoredEvent } from './api-types.js';

/** Start events and the types that end them (each end's `parent_event_id` is its start, bus §4). */
const SPAN_ENDS: Readonly<Record<string, readonly string[]>> = {
  'turn.started': ['turn.completed', 'turn.cancelled'],
  'llm.call_started': ['llm.call_completed', 'llm.call_failed'],
  'tool.called': ['tool.completed', 'tool.failed', 'tool.input_invalid'],
  'delegate.started': ['delegate.completed', 'delegate.failed'],
  'tool.confirmation_requested': ['tool.confirmation_resolved'],
};

export type SpanKind = 'turn' | 'model' | 'tool' | 'delegate' | 'approval';
export type SpanStatus = 'running' | 'completed' | 'failed' | 'cancelled';

const KIND_OF: Readonly<Record<string, SpanKind>> = {
  'turn.started': 'turn',
  'llm.call_started': 'model',
  'tool.called': 'tool',
  'delegate.started': 'delegate',
  'tool.confirmation_requested': 'approval',
};

/**
 * One span of a turn: a turn, a model call, a tool call, a delegation or an approval, with what
 * happened inside it. `marks` are the events that are not spans but belong to this one (the route
 * decision, a skill load, a memory change, a score), shown beside it.
 */
export interface SpanNode {
  readonly kind: SpanKind;
  readonly start: StoredEvent;
  end: StoredEvent | null;
  readonly startMs: number;
  endMs: number | null;
  status: SpanStatus;
  readonly children: SpanNode[];
  readonly marks: StoredEvent[];
}

/**
 * The span tree of a session: one root per turn of the session asked for (a worker session's turns
 * hang under the delegation that started them), each with its model calls, each model call with the
 * tools it asked for, a delegating tool with its delegation and the worker's turns. The tree follows
 * what the events mean, not the raw `parent_event_id` chain (where the second model call's parent is
 * the first tool's end).
 */
export function spanForest(events: readonly StoredEvent[]): SpanNode[] {
  const byId = new Map(events.map((event) => [event.id, event]));
  const nodes = new Map<string, SpanNode>();
  for (const event of events) {
    const kind = KIND_OF[event.type];
    if (kind === undefined) continue;
    const ms = Date.parse(event.timestamp);
    nodes.set(event.id, {
      kind,
      start: event,
      end: null,
      startMs: ms,
      endMs: null,
      status: 'running',
      children: [],
      marks: [],
    });
  }
  const ends = new Set<string>();
  for (const event of events) {
    const node = event.parent_event_id === null ? undefined : nodes.get(event.parent_event_id);
    if (node === undefined || !SPAN_ENDS[node.start.type]?.includes(event.type)) continue;
    node.end = event;
    node.endMs = Date.parse(event.timestamp);
    ends.add(event.id);
  }
  const turnOf = new Map<string, SpanNode>();
  const toolOf = new Map<string, SpanNode>();
  const delegationOf = new Map<string, SpanNode>();
  for (const node of nodes.values()) {
    const payload = node.start.payload;
    if (node.kind === 'turn' && node.start.turn_id !== null)
      turnOf.set(`${node.start.session_id}/${node.start.turn_id}`, node);
    if (node.kind === 'tool' && typeof payload.tool_use_id === 'string')
      toolOf.set(payload.tool_use_id, node);
    if (node.kind === 'delegate' && typeof payload.worker_session_id === 'string')
      delegationOf.set(payload.worker_session_id, node);
  }
  const turnNode = (event: StoredEvent) =>
    event.turn_id === null ? undefined : turnOf.get(`${event.session_id}/${event.turn_id}`);
  // The span whose end an event hangs from: a model call's tools belong to that call; anything after
  // a tool's end (the next model call) belongs to the span around the tool.
  const spanEndedBy = (event: StoredEvent) =>
    ends.has(event.id) && event.parent_event_id !== null ? nodes.get(event.parent_event_id) : undefined;
  const ownerByChain = (event: StoredEvent): SpanNode | undefined => {
    const seen = new Set<string>();
    for (
      let cursor = event.parent_event_id === null ? undefined : byId.get(event.parent_event_id);
      cursor !== undefined && !seen.has(cursor.id);
      cursor = cursor.parent_event_id === null ? undefined : byId.get(cursor.parent_event_id)
    ) {
      seen.add(cursor.id);
      const started = nodes.get(cursor.id);
      if (started) return started;
      const ended = spanEndedBy(cursor);
      if (ended?.kind === 'model') return ended;
      if (ended) return parentOf.get(ended) ?? turnNode(ended.start);
    }
    return turnNode(event);
  };
  const parentOf = new Map<SpanNode, SpanNode>();
  const roots: SpanNode[] = [];
  // Events come in id order, so a parent span is placed before its children.
  for (const event of events) {
    const node = nodes.get(event.id);
    if (node === undefined) continue;
    const useId = node.start.payload.tool_use_id;
    let parent: SpanNode | undefined;
    if (node.kind === 'turn') parent = delegationOf.get(event.session_id);
    else if (node.kind === 'model') parent = turnNode(event) ?? ownerByChain(event);
    else if (node.kind === 'delegate' || node.kind === 'approval')
      parent = (typeof useId === 'string' ? toolOf.get(useId) : undefined) ?? ownerByChain(event);
    else parent = ownerByChain(event);
    if (parent === node) parent = undefined;
    if (parent) {
      parent.children.push(node);
      parentOf.set(node, parent);
    } else roots.push(node);
  }
  for (const event of events) {
    if (nodes.has(event.id) || ends.has(event.id)) continue;
    let owner = ownerByChain(event);
    // A memory change or skill load made by a tool hangs from the model call that asked for the tool:
    // the tool running when it happened is where a person looks for it.
    if (owner?.kind === 'model') owner = owner.children.find((tool) => runsAt(tool, event.id)) ?? owner;
    owner?.marks.push(event);
  }
  for (const node of nodes.values()) node.status = statusOf(node);
  return roots.filter((node) => node.kind === 'turn');
}

function runsAt(span: SpanNode, eventId: string): boolean {
  return span.kind === 'tool' && span.start.id < eventId && (span.end === null || eventId < span.end.id);
}

function statusOf(node: SpanNode): SpanStatus {
  const end = node.end;
  if (end === null) return 'running';
  const payload = end.payload;
  switch (end.type) {
    case 'turn.cancelled':
      return 'cancelled';
    case 'turn.completed': {
      // The wire has no failed turn: one whose last model call failed, or that no model served
      // (client/follow-turn.ts draws the same line).
      const models = node.children.filter((child) => child.kind === 'model');
      const failure = (payload.signals_extra as { failure?: unknown } | null)?.failure;
      const lastFailed = models.at(-1)?.end?.type === 'llm.call_failed';
      return lastFailed || payload.llm_call_count === 0 || typeof failure === 'string'
        ? 'failed'
        : 'completed';
    }
    case 'llm.call_failed':
      return payload.error_class === 'cancelled' ? 'cancelled' : 'failed';
    case 'tool.failed':
    case 'tool.input_invalid':
      return payload.error_class === 'cancelled' ? 'cancelled' : 'failed';
    case 'delegate.failed':
      return 'failed';
    case 'tool.confirmation_resolved':
      return payload.decision === 'allow' ? 'completed' : 'failed';
    default:
      return payload.success === false ? 'failed' : 'completed';
  }
}

/** What a span is called: "turn", "model call scripted:demo", "tool shell", "delegate", "approval". */
export function spanLabel(span: Pick<SpanNode, 'kind' | 'start'>): string {
  const payload = span.start.payload;
  switch (span.kind) {
    case 'turn':
      return 'turn';
    case 'model':
      return `model call${typeof payload.model === 'string' ? ` ${payload.model}` : ''}`;
    case 'tool':
      return `tool${typeof payload.tool_name === 'string' ? ` ${payload.tool_name}` : ''}`;
    case 'delegate':
      return `delegate${typeof payload.resolved_model === 'string' ? ` to ${payload.resolved_model}` : ''}`;
    default:
      return 'approval';
  }
}

/** How long a span took, in ms; null while it runs. */
export function spanMs(span: SpanNode): number | null {
  return span.endMs === null ? null : span.endMs - span.startMs;
}

/** A span and the ones below it, depth-first, with their depth below `root` (for the waterfall). */
export function flatten(root: SpanNode, depth = 0): { span: SpanNode; depth: number }[] {
  return [{ span: root, depth }, ...root.children.flatMap((child) => flatten(child, depth + 1))];
}

export function domainOf(type: string): string {
  return type.split('.')[0] ?? type;
}
