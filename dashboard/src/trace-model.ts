import type { StoredEvent } from './api-types.js';

/** Start events and the types that end them (each end's `parent_event_id` is its start, bus §4). */
const SPAN_ENDS: Readonly<Record<string, readonly string[]>> = {
  'turn.started': ['turn.completed', 'turn.cancelled'],
  'llm.call_started': ['llm.call_completed', 'llm.call_failed'],
  'tool.called': ['tool.completed', 'tool.failed'],
  'delegate.started': ['delegate.completed', 'delegate.failed'],
  'tool.confirmation_requested': ['tool.confirmation_resolved'],
};

export interface Span {
  readonly start: StoredEvent;
  readonly end: StoredEvent | null;
  readonly startMs: number;
  readonly endMs: number | null;
  /** How many spans it sits in (turn 0, model call 1, tool 2, …). */
  readonly depth: number;
}

export interface TreeNode {
  readonly event: StoredEvent;
  readonly children: TreeNode[];
}

/**
 * The causal tree: each event under its `parent_event_id`. A worker session's own roots (its
 * `session.created`, say) hang under the `delegate.started` that named it (`worker_session_id`), so a
 * delegated turn reads as one tree; other events whose parent is not here are roots.
 */
export function causalTree(events: readonly StoredEvent[]): TreeNode[] {
  const nodes = new Map(events.map((event) => [event.id, { event, children: [] as TreeNode[] }]));
  const delegations = new Map<string, TreeNode>();
  for (const node of nodes.values()) {
    const worker = node.event.payload.worker_session_id;
    if (node.event.type === 'delegate.started' && typeof worker === 'string') delegations.set(worker, node);
  }
  const roots: TreeNode[] = [];
  for (const node of nodes.values()) {
    const parent =
      (node.event.parent_event_id === null ? undefined : nodes.get(node.event.parent_event_id)) ??
      delegations.get(node.event.session_id);
    if (parent) parent.children.push(node);
    else roots.push(node);
  }
  return roots;
}

/** Spans for the timeline: each start paired with the event that ended it, nested by causality. */
export function spans(events: readonly StoredEvent[]): Span[] {
  const byId = new Map(events.map((event) => [event.id, event]));
  const delegations = delegationsOf(events);
  const parentOf = (event: StoredEvent): StoredEvent | undefined =>
    (event.parent_event_id === null ? undefined : byId.get(event.parent_event_id)) ??
    delegations.get(event.session_id)?.event;
  const endOf = new Map<string, StoredEvent>();
  for (const event of events) {
    const parent = event.parent_event_id === null ? undefined : byId.get(event.parent_event_id);
    if (parent && SPAN_ENDS[parent.type]?.includes(event.type)) endOf.set(parent.id, event);
  }
  const depthOf = (event: StoredEvent): number => {
    let depth = 0;
    const seen = new Set<string>([event.id]);
    for (let cursor = parentOf(event); cursor && !seen.has(cursor.id); cursor = parentOf(cursor)) {
      seen.add(cursor.id);
      if (SPAN_ENDS[cursor.type]) depth += 1;
    }
    return depth;
  };
  return events
    .filter((event) => SPAN_ENDS[event.type] !== undefined)
    .map((start) => {
      const end = endOf.get(start.id) ?? null;
      return {
        start,
        end,
        startMs: Date.parse(start.timestamp),
        endMs: end === null ? null : Date.parse(end.timestamp),
        depth: depthOf(start),
      };
    });
}

/** What a span is called on the timeline: "turn", "model call", "tool shell", "delegate", "approval". */
export function spanLabel(span: Span): string {
  const payload = span.start.payload;
  switch (span.start.type) {
    case 'turn.started':
      return 'turn';
    case 'llm.call_started':
      return `model call${typeof payload.model === 'string' ? ` ${payload.model}` : ''}`;
    case 'tool.called':
      return `tool${typeof payload.tool_name === 'string' ? ` ${payload.tool_name}` : ''}`;
    case 'delegate.started':
      return 'delegate';
    default:
      return 'approval';
  }
}

/** Each worker session's `delegate.started` node, by the worker's session id. */
function delegationsOf(events: readonly StoredEvent[]): Map<string, { event: StoredEvent }> {
  const found = new Map<string, { event: StoredEvent }>();
  for (const event of events) {
    const worker = event.payload.worker_session_id;
    if (event.type === 'delegate.started' && typeof worker === 'string') found.set(worker, { event });
  }
  return found;
}

export function domainOf(type: string): string {
  return type.split('.')[0] ?? type;
}
