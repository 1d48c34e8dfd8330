import type { PendingConfirmation } from '../api.js';

type Decide = (
  confirmation: PendingConfirmation,
  decision: 'allow' | 'deny',
  scope: 'once' | 'session',
) => void;

/** Tool calls waiting for the user: the whole input, then Allow / Deny / Allow for session. */
export function Approvals({ pending, decide }: { pending: readonly PendingConfirmation[]; decide: Decide }) {
  if (pending.length === 0) return null;
  return (
    <section class="approvals" aria-label="Waiting for your approval">
      {pending.map((confirmation) => (
        <article
          key={confirmation.confirmation_request_id}
          class="approval"
          data-confirmation={confirmation.confirmation_request_id}
        >
          <h2>
            <span class="tool-name">{confirmation.tool_name}</span> wants to run ({confirmation.side_effects})
          </h2>
          {confirmation.session_id && <p class="muted">in session {confirmation.session_id}</p>}
          {confirmation.command_summary && (
            <p>
              <code>{confirmation.command_summary}</code>
            </p>
          )}
          <h3 class="label">Full input</h3>
          <pre>{JSON.stringify(confirmation.input, null, 2)}</pre>
          <div class="actions">
            <button type="button" class="primary" onClick={() => decide(confirmation, 'allow', 'once')}>
              Allow
            </button>
            <button type="button" class="danger" onClick={() => decide(confirmation, 'deny', 'once')}>
              Deny
            </button>
            <button type="button" onClick={() => decide(confirmation, 'allow', 'session')}>
              Allow for session
            </button>
          </div>
        </article>
      ))}
    </section>
  );
}
