import { render } from 'preact';
import { signInFromAddress } from './access-key.js';
import { App } from './app.js';

// Signed in first, so the page's first calls already carry the key.
void signInFromAddress().then(() => render(<App />, document.getElementById('app')!));
