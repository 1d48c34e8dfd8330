import { render } from 'preact';
import { App } from './app.js';

// A sign-in link's code (or a token) was traded for a cookie when this page loaded: it leaves the
// address bar and the history at once (used, the code is worth nothing; a token would be).
const url = new URL(location.href);
if (url.searchParams.has('login') || url.searchParams.has('token')) {
  url.searchParams.delete('login');
  url.searchParams.delete('token');
  history.replaceState(null, '', url.pathname + url.search + url.hash);
}

render(<App />, document.getElementById('app')!);
