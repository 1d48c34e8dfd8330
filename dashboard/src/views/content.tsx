import type { Redacted, StoredEvent, TraceContent, TraceContentEntry } from '../api-types.js';
import type { SpanNode } from '../trace-model.js';

export function isRedacted(value: unknown): value is Redacted {
  return typeof value === 'object' && value !== null && (value as Redacted).redacted === true;
}

/** The words the server sent for a span (keyed by the event that opens it), if any. */
export function contentOf(content: TraceContent | undefined, span: SpanNode): TraceContentEntry | undefined {
  return content?.[span.start.id];
}

/** What a person reads a span for, in reading order: what came in, what it thought, what it said. */
export function readableFields(entry: TraceContentEntry | undefined): [string, unknown][] {
  if (entry === undefined) return [];
  const fields: [string, unknown][] = [];
  const add = (label: string, value: unknown) => {
    if (value !== null && value !== undefined && value !== '') fields.push([label, value]);
  };
  switch (entry.kind) {
    case 'turn':
      add('User message', entry.user_message);
      add('Stopped', entry.cancel_reason ? `cancelled: ${entry.cancel_reason}` : entry.stop_reason);
      break;
    case 'model_call':
      add('Messages sent', entry.input_message_count);
      add('Thinking', entry.output.thinking);
      add('Assistant text', entry.output.text);
      if (entry.output.tool_uses.length > 0)
        add('Tools asked for', entry.output.tool_uses.map((use) => use.tool_name).join(', '));
      add('Retries', entry.retries > 0 ? entry.retries : null);
      add('Error', entry.error_class ? `${entry.error_class}: ${entry.error_message ?? ''}` : null);
      break;
    case 'tool_call':
      add('Input', entry.input);
      add('Output', entry.output);
      add('Error', entry.error_message);
      break;
    case 'route':
      add('Route', `${entry.chosen_model} (${entry.policy ?? '?'}: ${entry.reason ?? ''})`);
      break;
  }
  return fields;
}

/** A field in one line, for the row beside a span: text cut short, a redaction as its length. */
export function preview(value: unknown, max = 120): string | null {
  if (value === null || value === undefined) return null;
  if (isRedacted(value)) return `redacted (${value.chars} chars)`;
  const text = typeof value === 'string' ? value : JSON.stringify(value);
  if (text === undefined || text === '' || text === '{}' || text === '[]') return null;
  const line = text.replace(/\s+/g, ' ').trim();
  return line.length > max ? `${line.slice(0, max - 1)}…` : line;
}

/** A field in full, for the detail panel: text as written, JSON indented, a redaction as its length. */
export function Field({ label, value }: { label: string; value: unknown }) {
  if (value === null || value === undefined) return null;
  if (isRedacted(value))
    return (
      <div class="field" data-field={label}>
        <h4>{label}</h4>
        <p class="redacted">redacted ({value.chars} chars)</p>
      </div>
    );
  return (
    <div class="field" data-field={label}>
      <h4>{label}</h4>
      <pre>{typeof value === 'string' ? value : JSON.stringify(value, null, 2)}</pre>
    </div>
  );
}

/** A mark (an event inside a span that is not a span) in a few words. */
export function markSummary(event: StoredEvent): string {
  const p = event.payload;
  const text = (value: unknown) => (typeof value === 'string' ? value : '');
  switch (event.type) {
    case 'route.decided':
      return `routed to ${text(p.chosen_model)}`;
    case 'memory.updated':
      return `memory ${text(p.operation)} ${text(p.file)} (${String(p.before_size_bytes)} → ${String(p.after_size_bytes)} B)`;
    case 'memory.eviction':
      return `memory: ${String(p.entries_evicted ?? 0)} entries evicted from ${text(p.file)}`;
    case 'skill.loaded':
      return `skill loaded: ${text(p.skill_id)} (${text(p.load_reason)})`;
    case 'skill.search':
      return `skill search “${text(p.query)}”: ${String(p.results_count ?? 0)} found`;
    case 'skill.created':
    case 'skill.modified':
      return `${event.type.replace('.', ' ')}: ${text(p.skill_id)}`;
    case 'feedback.explicit':
      return `rated ${p.rating === 'thumbs_up' ? 'good' : 'bad'}${p.comment ? `: “${text(p.comment)}”` : ''}`;
    case 'eval.completed':
      return `eval ${typeof p.score === 'number' ? p.score.toFixed(2) : '?'} (${text(p.rubric_id)})`;
    case 'eval.failed':
      return `eval failed (${text(p.failure_mode)})`;
    default:
      return event.type;
  }
}

/** Marks worth a line beside their span (the rest stay in the events list). */
export function shownMark(event: StoredEvent): boolean {
  return /^(route\.decided|route\.overridden|skill\.|memory\.|feedback\.|eval\.completed|eval\.failed|pattern\.override_dismissed)/.test(
    event.type,
  );
}
