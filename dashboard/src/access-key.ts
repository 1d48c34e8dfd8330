/**
 * The dashboard's access key (docs/decisions.md "A cookie alone authorizes nothing"): traded once for a
 * sign-in link's code, kept in this origin's `localStorage` and sent as `Authorization: Bearer`. Storage
 * is per origin, port included, so a page on another port of this host cannot read it, where a cookie
 * would be sent to every port.
 */
const STORAGE_KEY = 'metis.access_key';

export function accessKey(): string | null {
  try {
    return localStorage.getItem(STORAGE_KEY);
  } catch {
    return null; // storage turned off: the page signs in on every load
  }
}

function keep(key: string | null): void {
  try {
    if (key === null) localStorage.removeItem(STORAGE_KEY);
    else localStorage.setItem(STORAGE_KEY, key);
  } catch {
    // Storage turned off: nothing kept.
  }
}

/** A key the server refused (its token changed): forgotten, so the page asks for a new sign-in. */
export function forgetAccessKey(): void {
  keep(null);
}

/**
 * Trades what the address carries (`?login=` from a sign-in link, or `?token=`) for the access key, and
 * takes it off the address bar and the history at once (spent, a code is worth nothing; a token would
 * be). Without either, the key kept from an earlier sign-in is used.
 */
export async function signInFromAddress(): Promise<void> {
  const url = new URL(location.href);
  const login = url.searchParams.get('login');
  const token = url.searchParams.get('token');
  if (login === null && token === null) return;
  url.searchParams.delete('login');
  url.searchParams.delete('token');
  history.replaceState(null, '', url.pathname + url.search + url.hash);
  try {
    const response = await fetch('/dashboard/sign-in', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(login !== null ? { login } : { token }),
    });
    if (!response.ok) return; // a used or expired link: the page's calls get the 401 and say how to get in
    const { access_key } = (await response.json()) as { access_key: string | null };
    keep(access_key);
  } catch {
    // The server cannot be reached: the page says so on its first call.
  }
}
