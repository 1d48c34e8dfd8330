import type { RowChange, RowChangeKind } from '../row-change.js';
import { callKeyOf, PG_ROW_RENDERINGS } from './pg-row-statements.js';

/**
 * The order PostgreSQL applies a batch's changes in, as groups that one statement each may apply.
 *
 * A writer's queue holds each turn's changes in the order the turn made them (a message, a tool call,
 * its update, a spend, then the next session's), so kinds alternate and merging only consecutive
 * changes of a kind would leave nearly a statement per change (measured: 1,000 changes of 50 sessions,
 * 1,000 round trips). So a change joins the nearest earlier group of its kind when it commutes with
 * every change queued between them: none of those writes a row it reads or writes, and it writes none
 * they read (`footprintOf`). Changes of one kind never pass each other, so keys the store chooses are
 * handed out in queue order; within a group, a key's changes go to successive statements (`layersOf`).
 */
export function scheduleRowChanges(changes: readonly RowChange[]): RowChange[][] {
  const groups: Group[] = [];
  for (const change of changes) {
    const footprint = footprintOf(change);
    const group = groupToJoin(groups, change, footprint) ?? newGroup(groups, change.kind);
    group.changes.push(change);
    for (const name of footprint.reads) group.reads.add(name);
    for (const name of footprint.writes) group.writes.add(name);
  }
  return groups.flatMap((group) => layersOf(group.changes));
}

/** How far back a change looks for its group: bounds the work of a large batch of many kinds. */
const LOOK_BACK_GROUPS = 64;

interface Group {
  readonly kind: RowChangeKind;
  readonly changes: RowChange[];
  readonly reads: Set<string>;
  readonly writes: Set<string>;
}

/** Names of the rows a change reads (`exists:` a session's row is there, for a foreign key) and writes. */
interface Footprint {
  readonly reads: readonly string[];
  readonly writes: readonly string[];
}

function renderingOf(kind: RowChangeKind) {
  return PG_ROW_RENDERINGS[kind as Exclude<RowChangeKind, 'handoff.settle'>];
}

function groupToJoin(groups: readonly Group[], change: RowChange, footprint: Footprint): Group | null {
  if (renderingOf(change.kind).alone === true) return null;
  const oldest = Math.max(0, groups.length - LOOK_BACK_GROUPS);
  for (let at = groups.length - 1; at >= oldest; at -= 1) {
    const group = groups[at]!;
    if (group.kind === change.kind && renderingOf(group.kind).alone !== true) return group;
    if (conflicts(group, footprint)) return null;
  }
  return null;
}

function newGroup(groups: Group[], kind: RowChangeKind): Group {
  const group: Group = { kind, changes: [], reads: new Set(), writes: new Set() };
  groups.push(group);
  return group;
}

function conflicts(group: Group, footprint: Footprint): boolean {
  return (
    footprint.writes.some((name) => group.writes.has(name) || group.reads.has(name)) ||
    footprint.reads.some((name) => group.writes.has(name))
  );
}

/**
 * Only `session.create` makes a session's row exist; the other session changes update columns of it
 * (and do nothing while it is missing, hence their read). A tool call's insert and updates name its
 * row; a close takes every open call of its session, so it writes what each of them reads. Patterns, the stream archive and gap records are named whole:
 * their changes are few and some of them (trims, prunes, first-recorded-wins) span the table.
 */
function footprintOf(change: RowChange): Footprint {
  switch (change.kind) {
    case 'session.create':
      return {
        reads: change.parentSessionId === null ? [] : [`exists:${change.parentSessionId}`],
        writes: [`exists:${change.sessionId}`, `session:${change.sessionId}`],
      };
    case 'session.sticky':
    case 'session.end':
    case 'budget.caps':
    case 'budget.spend':
    case 'queue.save':
      return { reads: [`exists:${change.sessionId}`], writes: [`session:${change.sessionId}`] };
    case 'message.upsert':
      return { reads: [`exists:${change.sessionId}`], writes: [`message:${change.id}`] };
    case 'toolCall.insert':
      return {
        reads: [`exists:${change.sessionId}`, `calls:${change.sessionId}`],
        writes: [`call:${callKeyOf(change)}`],
      };
    case 'toolCall.update':
      return { reads: [`calls:${change.sessionId}`], writes: [`call:${callKeyOf(change)}`] };
    case 'toolCall.closeOpen':
      return { reads: [], writes: [`calls:${change.sessionId}`] };
    case 'pattern.insert':
    case 'pattern.deleteRecordedBefore':
    case 'pattern.deleteOldest':
    case 'pattern.deleteAll':
      return { reads: [], writes: ['patterns'] };
    case 'archive.insert':
    case 'archive.prune':
      return { reads: [], writes: ['archive'] };
    case 'gap.reported':
      return { reads: [], writes: ['gaps'] };
    case 'title.set':
      return { reads: [], writes: [`title:${change.sessionId}`] };
    case 'handoff.settle':
      return { reads: [], writes: ['handoffs'] };
  }
}

/**
 * A group as statements: `alone` kinds one change each; keyed kinds in layers, the n-th change of each
 * key in the n-th statement (one statement cannot write a row twice, and a key's changes stay in order:
 * the later one's values are the ones kept); other kinds whole.
 */
function layersOf(changes: readonly RowChange[]): RowChange[][] {
  const rendering = renderingOf(changes[0]!.kind);
  if (rendering.alone === true) return changes.map((change) => [change]);
  const keyOf = rendering.keyOf as ((change: RowChange) => string) | undefined;
  if (keyOf === undefined) return [[...changes]];
  const layers: RowChange[][] = [];
  const seen = new Map<string, number>();
  for (const change of changes) {
    const key = keyOf(change);
    const layer = seen.get(key) ?? 0;
    seen.set(key, layer + 1);
    if (layer === layers.length) layers.push([]);
    layers[layer]!.push(change);
  }
  return layers;
}
