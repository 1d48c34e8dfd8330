import type { StoredEvent, TraceContent, TraceContentEntry } from '../api-types.js';
import { duration } from '../format.js';
import { hrefOf } from '../router.js';
import { type SpanNode, spanLabel, spanMs } from '../trace-model.js';
import { contentOf, Field, markSummary, readableFields } from './content.js';
import { alternatives } from './span-tree.js';

/** The panel beside the tree: a span's words and figures, or one event's payload. */
export function Detail({
  event,
  span,
  content,
}: {
  event: StoredEvent;
  span: SpanNode | null;
  content: TraceContent | undefined;
}) {
  if (span === null) return <EventDetail event={event} entry={content?.[event.id]} />;
  const took = spanMs(span);
  const fields = readableFields(contentOf(content, span));
  const route = span.marks.find((mark) => mark.type === 'route.decided');
  return (
    <div data-testid="span-detail">
      <h2>
        {spanLabel(span)} <span class={`pill ${span.status}`}>{span.status}</span>
      </h2>
      <p class="muted">
        {took === null ? 'running' : duration(took)} · {span.start.timestamp.slice(11, 23)}
        {span.start.turn_id && (
          <>
            {' · '}
            <a
              href={hrefOf({ view: 'session', sessionId: span.start.session_id, focus: span.start.turn_id })}
            >
              See it in the conversation
            </a>
          </>
        )}
      </p>
      {fields.length === 0 && (
        <p class="muted">No content stored for this span (the server sends hashes and sizes only).</p>
      )}
      {fields.map(([label, value]) => (
        <Field key={label} label={label} value={value} />
      ))}
      {route && (
        <div class="field" data-field="route">
          <h4>Route</h4>
          <p>
            {markSummary(route)} {alternatives(route)}
          </p>
        </div>
      )}
      {span.marks.length > 0 && (
        <div class="field">
          <h4>Inside this span</h4>
          <ul class="plain">
            {span.marks.map((mark) => (
              <li key={mark.id}>{markSummary(mark)}</li>
            ))}
          </ul>
        </div>
      )}
      <details>
        <summary>Events</summary>
        <EventDetail event={span.start} entry={undefined} />
        {span.end && <EventDetail event={span.end} entry={undefined} />}
      </details>
    </div>
  );
}

export function EventDetail({ event, entry }: { event: StoredEvent; entry: TraceContentEntry | undefined }) {
  return (
    <div data-testid="event-detail">
      <h3>{event.type}</h3>
      <dl>
        <dt>id</dt>
        <dd>{event.id}</dd>
        <dt>time</dt>
        <dd>{event.timestamp}</dd>
        <dt>session</dt>
        <dd>{event.session_id}</dd>
        <dt>turn</dt>
        <dd>{event.turn_id ?? '–'}</dd>
        <dt>parent</dt>
        <dd>{event.parent_event_id ?? '–'}</dd>
        <dt>actor · sensitivity</dt>
        <dd>
          {event.actor} · {event.sensitivity}
        </dd>
      </dl>
      {event.turn_id && (
        <p>
          <a href={hrefOf({ view: 'session', sessionId: event.session_id, focus: event.turn_id })}>
            See it in the conversation
          </a>
        </p>
      )}
      {readableFields(entry).map(([label, value]) => (
        <Field key={label} label={label} value={value} />
      ))}
      <pre>{JSON.stringify(event.payload, null, 2)}</pre>
    </div>
  );
}
