/**
 * Checks every stream a conformance check records against the invariants of DESIGN.md and the
 * canonical order of streaming spec §5.3. Each returns a list of problems (empty when it holds).
 */

/** Ids strictly increase on a connection (invariant 1) and no id comes twice (invariant 5). */
export function idOrderProblems(events: readonly any[]): string[] {
  const problems: string[] = [];
  for (let i = 1; i < events.length; i += 1) {
    if (events[i].id <= events[i - 1].id)
      problems.push(`event ${events[i].id} (${events[i].type}) does not follow ${events[i - 1].id}`);
  }
  return problems;
}

/** Consecutive persisted events of a session seen by a full subscription have consecutive seq. */
export function seqProblems(events: readonly any[]): string[] {
  const last = new Map<string, number>();
  const problems: string[] = [];
  for (const event of events) {
    if (event.seq === null || event.seq === undefined || event.session_id === 'system') continue;
    const previous = last.get(event.session_id);
    if (previous !== undefined && event.seq !== previous + 1) {
      problems.push(`session ${event.session_id}: seq ${previous} then ${event.seq}`);
    }
    last.set(event.session_id, event.seq);
  }
  return problems;
}

/**
 * Per message: llm.call_started → message.start → deltas → message.complete → llm.call_completed or
 * llm.call_failed; and the deltas add up to final_content.
 */
export function canonicalOrderProblems(events: readonly any[]): string[] {
  const problems: string[] = [];
  const open = new Map<
    string,
    { text: Map<number, string>; thinking: Map<number, string>; completed: boolean }
  >();
  let callOpen = new Map<string, boolean>();
  for (const event of events) {
    const p = event.payload ?? {};
    switch (event.type) {
      case 'llm.call_started':
        callOpen.set(event.session_id, true);
        break;
      case 'message.start':
        if (!callOpen.get(event.session_id))
          problems.push(`message.start ${p.message_id} without llm.call_started before it`);
        open.set(p.message_id, { text: new Map(), thinking: new Map(), completed: false });
        break;
      case 'text.delta':
      case 'thinking.delta': {
        const message = open.get(p.message_id);
        if (!message) break; // started before this connection's first event (a replay mid-message)
        if (message.completed) {
          problems.push(`${event.type} for message ${p.message_id} after its message.complete`);
          break;
        }
        const blocks = event.type === 'text.delta' ? message.text : message.thinking;
        blocks.set(p.content_block_index, (blocks.get(p.content_block_index) ?? '') + p.text);
        break;
      }
      case 'message.complete': {
        const message = open.get(p.message_id);
        if (!message) break; // started before this client attached
        message.completed = true;
        (p.final_content as any[]).forEach((block, index) => {
          if (block.type === 'text' && message.text.has(index) && message.text.get(index) !== block.text) {
            problems.push(
              `message ${p.message_id} block ${index}: deltas ${JSON.stringify(message.text.get(index))} ≠ final_content ${JSON.stringify(block.text)}`,
            );
          }
          if (
            block.type === 'thinking' &&
            message.thinking.has(index) &&
            message.thinking.get(index) !== block.thinking
          ) {
            problems.push(
              `message ${p.message_id} block ${index}: thinking deltas differ from final_content`,
            );
          }
        });
        break;
      }
      case 'llm.call_completed':
      case 'llm.call_failed':
        for (const [id, message] of open) {
          if (!message.completed) problems.push(`${event.type} before message.complete of ${id}`);
        }
        callOpen = new Map(callOpen).set(event.session_id, false);
        open.clear();
        break;
    }
  }
  return problems;
}

export function allInvariantProblems(events: readonly any[], fullFilter: boolean): string[] {
  return [
    ...idOrderProblems(events),
    ...(fullFilter ? seqProblems(events) : []),
    ...canonicalOrderProblems(events),
  ];
}
