/**
 * What a client written from the streaming spec alone does with a snapshot and the events after it
 * (§3.4, §3.7): it renders `snapshot.messages` as they are and the session's turn as the snapshot
 * says, then applies each event. It knows nothing of fields the spec does not define
 * (`in_flight_events`, `pending_confirmations`). `problems` lists what it would render wrong, one line
 * each; none is right.
 */

const MESSAGE_EVENTS = new Set([
  'text.delta',
  'thinking.delta',
  'tool.use_start',
  'tool.use_input_delta',
  'tool.use_end',
  'message.complete',
]);
const TURN_ENDS = new Set(['turn.completed', 'turn.cancelled', 'turn.failed']);

export interface SpecOnlyRender {
  readonly problems: string[];
  /** The assistant messages on screen at the end: id → text. */
  readonly messages: Map<string, string>;
  readonly currentTurn: string | null;
  /** Questions to the user still shown as waiting, by confirmation_request_id. */
  readonly pendingQuestions: Set<string>;
}

function textOfBlocks(blocks: readonly any[] | undefined): string {
  return (blocks ?? [])
    .filter((b) => b?.type === 'text')
    .map((b) => b.text)
    .join('');
}

export function renderSpecOnly(snapshot: any, events: readonly any[]): SpecOnlyRender {
  const problems: string[] = [];
  const sessionId: string = snapshot.session?.id;
  const at: string | null = snapshot.snapshot_at_event_id ?? null;
  const messages = new Map<string, string>();
  for (const message of (snapshot.messages ?? []) as any[])
    if (message.role === 'assistant') messages.set(message.id, textOfBlocks(message.content));
  const rendered = new Set<string>(((snapshot.messages ?? []) as any[]).map((m) => m.id));
  const streaming = new Map<string, string>();
  const pendingQuestions = new Set<string>();
  let currentTurn: string | null = snapshot.session?.current_turn_id ?? null;
  for (const event of events) {
    if (at !== null && event.id <= at) {
      problems.push(`${event.type} ${event.id} is not after snapshot_at_event_id ${at}`);
      continue;
    }
    const requestId = event.payload?.confirmation_request_id;
    if (event.type === 'tool.confirmation_requested') pendingQuestions.add(requestId);
    else if (event.type === 'tool.confirmation_resolved' && !pendingQuestions.delete(requestId))
      problems.push(`tool.confirmation_resolved ${event.id} answers ${requestId}, a question never shown`);
    if (event.session_id !== sessionId) continue;
    applyMessageEvent(event, { problems, messages, rendered, streaming });
    if (event.turn_id === null || event.turn_id === undefined) continue;
    if (event.type === 'turn.started') currentTurn = event.turn_id;
    else if (event.turn_id !== currentTurn)
      problems.push(
        `${event.type} ${event.id} of turn ${event.turn_id}, which the client holds as ${currentTurn === null ? 'no turn in flight' : `not the turn in flight (${currentTurn})`}`,
      );
    if (TURN_ENDS.has(event.type) && event.turn_id === currentTurn) currentTurn = null;
  }
  return { problems, messages, currentTurn, pendingQuestions };
}

/** What a spec-only client renders wrong; empty when it renders everything right. */
export function specOnlyProblems(snapshot: any, events: readonly any[]): string[] {
  return renderSpecOnly(snapshot, events).problems;
}

function applyMessageEvent(
  event: any,
  state: {
    problems: string[];
    messages: Map<string, string>;
    rendered: Set<string>;
    streaming: Map<string, string>;
  },
): void {
  const { problems, messages, rendered, streaming } = state;
  const messageId = event.payload?.message_id;
  if (event.type === 'message.start') {
    if (rendered.has(messageId)) problems.push(`message ${messageId} is in the snapshot and starts again`);
    streaming.set(messageId, '');
    return;
  }
  if (!MESSAGE_EVENTS.has(event.type) || typeof messageId !== 'string') return;
  if (rendered.has(messageId)) {
    problems.push(`message ${messageId} is in the snapshot and gets ${event.type} again (rendered twice)`);
    return;
  }
  const sofar = streaming.get(messageId);
  if (sofar === undefined) {
    problems.push(`${event.type} ${event.id} for message ${messageId}, which never started`);
    return;
  }
  if (event.type === 'text.delta') streaming.set(messageId, sofar + event.payload.text);
  if (event.type !== 'message.complete') return;
  const final = textOfBlocks(event.payload.final_content);
  if (event.payload.stop_reason !== 'cancelled' && final !== sofar)
    problems.push(
      `message ${messageId}: the text assembled from its deltas (${sofar.length} characters) is not its final_content (${final.length})`,
    );
  streaming.delete(messageId);
  rendered.add(messageId);
  messages.set(messageId, final);
}
