import type { ComponentChildren } from 'preact';
import { useState } from 'preact/hooks';
import { api, type SessionSummary } from '../api.js';
import type { Report } from '../report.js';
import { hrefOf } from '../router.js';

/**
 * One session in the list: its title (the user's, else its first message, else its id), renamed in
 * place (PATCH /sessions/{id}; an empty title gives the first message back), its tags and statuses.
 */
export function SessionRow({
  session,
  depth,
  report,
  saved,
  children,
}: {
  session: SessionSummary;
  depth: number;
  report: Report;
  saved: () => void;
  children: ComponentChildren;
}) {
  const [editing, setEditing] = useState<string | null>(null);
  const [failure, setFailure] = useState<string | null>(null);
  const title = session.title ?? null;
  const save = async (text: string) => {
    try {
      await api('PATCH', `/sessions/${encodeURIComponent(session.id)}`, {
        title: text.trim() === '' ? null : text.trim(),
      });
      setEditing(null);
      setFailure(null);
      saved();
    } catch (caught) {
      report(caught);
      setFailure(`not saved: ${(caught as Error).message}`);
    }
  };
  const href = hrefOf({ view: 'session', sessionId: session.id, focus: null });
  const turnStatus = session.current_turn_id ? 'running' : (session.last_turn_status ?? null);
  return (
    <tr data-session={session.id}>
      <td class="session-cell">
        <span class={`indent-${Math.min(depth, 3)}`}>
          {depth > 0 && <span title="a worker of the session above">↳ </span>}
          {editing === null ? (
            <>
              <a href={href} class={`title ${session.title_source ?? 'none'}`} data-testid="session-title">
                {title ?? session.id}
              </a>
              <button
                type="button"
                class="rename"
                aria-label={`Rename ${title ?? session.id}`}
                title="Rename"
                onClick={() => setEditing(session.title_source === 'user' ? (title ?? '') : '')}
              >
                ✎
              </button>
            </>
          ) : (
            <form
              class="rename-form"
              onSubmit={(event) => {
                event.preventDefault();
                void save(editing);
              }}
            >
              <input
                aria-label="Title"
                value={editing}
                maxLength={200}
                placeholder={title ?? 'a title'}
                ref={(input) => input?.focus()}
                onInput={(event) => setEditing(event.currentTarget.value)}
                onKeyDown={(event) => {
                  if (event.key === 'Escape') setEditing(null);
                }}
              />
              <button type="submit">Save</button>
              <button type="button" onClick={() => setEditing(null)}>
                Cancel
              </button>
            </form>
          )}
        </span>
        <div class="session-meta">
          {title !== null && <code class="muted">{session.id}</code>}
          {(session.tags ?? []).map((tag) => (
            <span key={tag} class="pill tag" data-tag={tag}>
              {tag}
            </span>
          ))}
          {failure && <span class="error">{failure}</span>}
        </div>
      </td>
      <td>
        <span class={`pill ${session.status}`}>{session.status === 'active' ? 'open' : session.status}</span>{' '}
        {turnStatus && (
          <span class={`pill ${turnStatus}`} data-turn-state={turnStatus}>
            {turnStatus === 'running' ? 'turn running' : `last turn ${turnStatus}`}
          </span>
        )}
      </td>
      {children}
    </tr>
  );
}
