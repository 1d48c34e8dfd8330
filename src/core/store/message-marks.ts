/**
 * For the messages a session saved most recently, the id of the event with which each became part of
 * the conversation: the user's with `turn.started`, an assistant's with its `message.complete`, tool
 * results with the last event of their tool calls. A snapshot taken as of an event id leaves out the
 * messages marked with a newer one: it must reflect exactly the events up to its id (streaming §3.4).
 *
 * Only the newest few per session (and the newest sessions) are remembered. A snapshot point lies at
 * most a message or a pending question back from the newest released event, so every older message
 * is older than any point.
 */
export class MessageMarks {
  private readonly bySession = new Map<string, Map<string, string>>();

  constructor(
    private readonly perSession = 64,
    private readonly sessions = 4096,
  ) {}

  mark(sessionId: string, messageId: string, eventId: string): void {
    let marks = this.bySession.get(sessionId);
    if (marks === undefined) {
      marks = new Map();
      this.bySession.set(sessionId, marks);
      // The least recently started session's marks go first: its snapshots are long settled.
      if (this.bySession.size > this.sessions) this.bySession.delete(this.bySession.keys().next().value!);
    }
    marks.delete(messageId);
    marks.set(messageId, eventId);
    if (marks.size > this.perSession) marks.delete(marks.keys().next().value!);
  }

  /** Whether the message became part of the conversation after `atId` (false when unknown: older). */
  isAfter(sessionId: string, messageId: string, atId: string): boolean {
    const mark = this.bySession.get(sessionId)?.get(messageId);
    return mark !== undefined && mark > atId;
  }

  /** How many of the session's messages became part of the conversation after `atId`. */
  countAfter(sessionId: string, atId: string): number {
    let count = 0;
    for (const mark of this.bySession.get(sessionId)?.values() ?? []) if (mark > atId) count += 1;
    return count;
  }
}
