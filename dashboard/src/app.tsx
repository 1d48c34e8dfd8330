import { useCallback, useState } from 'preact/hooks';
import { ApiError } from './api.js';
import type { Report } from './report.js';
import { hrefOf, usePlace } from './router.js';
import { SessionView } from './views/session.js';
import { SessionsView } from './views/sessions.js';
import { SignIn } from './views/sign-in.js';
import { StoreView } from './views/store.js';
import { TraceView } from './views/trace.js';

export function App() {
  const place = usePlace();
  const [signedOut, setSignedOut] = useState(false);
  const report = useCallback<Report>((error) => {
    if (error instanceof ApiError && error.status === 401) setSignedOut(true);
  }, []);
  if (signedOut) return <SignIn />;
  return (
    <>
      <header class="top">
        <a class="brand" href={hrefOf({ view: 'sessions' })}>
          metis
        </a>
        <nav aria-label="Views">
          <a
            href={hrefOf({ view: 'sessions' })}
            aria-current={place.view === 'sessions' ? 'page' : undefined}
          >
            Sessions
          </a>
          <a href={hrefOf({ view: 'store' })} aria-current={place.view === 'store' ? 'page' : undefined}>
            Usage
          </a>
        </nav>
      </header>
      <main class={`view-${place.view}`}>
        {place.view === 'sessions' && (
          <SessionsView key={place.query} report={report} query={place.query ?? ''} />
        )}
        {place.view === 'session' && <SessionView key={place.sessionId} place={place} report={report} />}
        {place.view === 'trace' && <TraceView key={place.sessionId} place={place} report={report} />}
        {place.view === 'store' && <StoreView report={report} />}
      </main>
    </>
  );
}
