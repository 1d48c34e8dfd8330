import { useState } from 'preact/hooks';
import { api, type SessionSummary } from '../api.js';
import { ago, usd } from '../format.js';
import { offline, usePolled } from '../hooks.js';
import type { Report } from '../report.js';
import { go, hrefOf } from '../router.js';

/** Polled this often: the list follows the sessions as their events arrive. */
const REFRESH_MS = 1500;

/** The live list of sessions, worker sessions nested under their planner; new session; search by id. */
export function SessionsView({ report }: { report: Report }) {
  const { data, error } = usePolled<{ sessions: SessionSummary[] }>('/sessions', REFRESH_MS, report);
  const [query, setQuery] = useState('');
  const [creating, setCreating] = useState<string | null>(null);
  const create = async () => {
    setCreating('creating…');
    try {
      const session = await api<{ session_id: string }>('POST', '/sessions', {});
      go({ view: 'session', sessionId: session.session_id, focus: null });
    } catch (failure) {
      report(failure);
      setCreating(`could not create a session: ${(failure as Error).message}`);
    }
  };
  const sessions = data?.sessions ?? [];
  const shown = query.trim() === '' ? sessions : sessions.filter((s) => s.id.includes(query.trim()));
  const rows = nest(shown);
  return (
    <section aria-labelledby="sessions-title">
      <div class="toolbar">
        <h1 id="sessions-title">Sessions</h1>
        <form
          class="search"
          onSubmit={(event) => {
            event.preventDefault();
            const id = query.trim();
            // An id that is not in the list still opens: the session view says "no such session".
            if (id !== '') go({ view: 'session', sessionId: id, focus: null });
          }}
        >
          <label for="session-search">Session id</label>
          <input
            id="session-search"
            value={query}
            placeholder="sess_…"
            onInput={(event) => setQuery(event.currentTarget.value)}
          />
          <button type="submit">Open</button>
        </form>
        <button type="button" class="primary" onClick={create} data-testid="new-session">
          New session
        </button>
      </div>
      {creating && <p role="status">{creating}</p>}
      {offline(error) && (
        <p class="banner warn" role="status">
          {offline(error)}
        </p>
      )}
      {data === null && error === null && <p>Loading…</p>}
      {data !== null && sessions.length === 0 && <p>No sessions yet: start one with “New session”.</p>}
      {rows.length > 0 && (
        <table class="sessions">
          <thead>
            <tr>
              <th scope="col">Session</th>
              <th scope="col">Status</th>
              <th scope="col">Model</th>
              <th scope="col" class="num">
                Turns
              </th>
              <th scope="col" class="num">
                Cost
              </th>
              <th scope="col">Last activity</th>
            </tr>
          </thead>
          <tbody>
            {rows.map(({ session, depth }) => (
              <tr key={session.id} data-session={session.id}>
                <td>
                  <span class={`indent-${Math.min(depth, 3)}`}>
                    {depth > 0 && <span title="a worker of the session above">↳ </span>}
                    <a href={hrefOf({ view: 'session', sessionId: session.id, focus: null })}>{session.id}</a>
                  </span>
                </td>
                <td>
                  <span class={`pill ${session.current_turn_id ? 'running' : session.status}`}>
                    {session.current_turn_id ? 'turn running' : session.status}
                  </span>
                </td>
                <td>{session.active_model ?? '–'}</td>
                <td class="num">{session.turn_count}</td>
                <td class="num">{usd(session.cost_usd)}</td>
                <td>{ago(session.last_activity_at)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}

/** Planners first (newest first), each followed by its workers, depth-first. */
function nest(sessions: readonly SessionSummary[]): { session: SessionSummary; depth: number }[] {
  const ids = new Set(sessions.map((s) => s.id));
  const children = new Map<string, SessionSummary[]>();
  for (const session of sessions) {
    const parent = session.parent_session_id;
    if (parent !== null && ids.has(parent)) children.set(parent, [...(children.get(parent) ?? []), session]);
  }
  const rows: { session: SessionSummary; depth: number }[] = [];
  const visit = (session: SessionSummary, depth: number) => {
    rows.push({ session, depth });
    for (const child of children.get(session.id) ?? []) visit(child, depth + 1);
  };
  for (const session of sessions)
    if (session.parent_session_id === null || !ids.has(session.parent_session_id)) visit(session, 0);
  return rows;
}
