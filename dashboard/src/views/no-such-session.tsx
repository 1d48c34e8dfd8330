import { hrefOf } from '../router.js';

/** What a session's pages show for an id this server does not know. */
export function NoSuchSession({ sessionId }: { sessionId: string }) {
  return (
    <section class="missing" data-testid="no-such-session">
      <h1>No such session</h1>
      <p>
        There is no session <code>{sessionId}</code> on this server.{' '}
        <a href={hrefOf({ view: 'sessions' })}>See the sessions</a>.
      </p>
    </section>
  );
}
